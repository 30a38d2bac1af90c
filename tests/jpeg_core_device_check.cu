// Compile-only check that every jpeg_core function is valid CUDA device code: each stage is called
// from a __global__ kernel, so nvcc must generate device code for all of it (a host-only call, a
// std:: algorithm, an exception or a host-only constant in device code fails the build).
// tests/test_jpeg_core.py compiles this with `nvcc -c` when nvcc is installed; it needs no GPU.
#include "custom_op/csrc/jpeg_core/jpeg_core.h"

namespace jc = custom_op::jpeg_core;

__global__ void check_tables(const uint8_t* counts, const uint8_t* symbols, jc::HuffTable* out, jc::CoefOrder* order,
                             jc::Frame* frame) {
  jc::build_huffman_table(counts, symbols, 256, threadIdx.x == 0, out);
  jc::make_natural_order(order);
  jc::make_zigzag_order(order + 1);
  const int h[3] = {2, 1, 1}, v[3] = {2, 1, 1};
  jc::make_frame(640, 480, 3, h, v, nullptr, frame);
}

__global__ void check_segments(const uint8_t* data, size_t size, size_t start, int64_t n, size_t* begin, size_t* end,
                               int* error) {
  *error = jc::find_segments(data, size, start, n, begin, end).error;
}

__global__ void check_huffman(const uint8_t* data, const size_t* begin, const size_t* end, const jc::Frame* frame,
                              const jc::HuffTable* tables, const jc::CoefOrder* order, int64_t per_segment,
                              int64_t segments, int16_t* plane0, int16_t* plane1, int16_t* plane2, uint32_t* flags) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= segments) return;
  __shared__ jc::HuffTable shared[2];
  if (threadIdx.x < 2) shared[threadIdx.x] = tables[threadIdx.x];
  __syncthreads();
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = &shared[0];
    t.ac[c] = &shared[1];
  }
  t.order = order;
  int16_t* planes[jc::kMaxComponents] = {plane0, plane1, plane2, nullptr};
  const int64_t total = jc::frame_total_mcus(*frame);
  const int64_t first = s * per_segment;
  const int64_t count = total - first < per_segment ? total - first : per_segment;
  flags[s] = jc::decode_segment(data + begin[s], data + end[s], *frame, t, first, count, planes);
}

__global__ void check_idct(const int16_t* coef, const jc::QuantTable* quant, uint8_t* out, int pitch, uint8_t* exact) {
  const int b = blockIdx.x;
  exact[b] = jc::idct_islow(coef + b * 64, *quant, out + b * 8, pitch) ? 1 : 0;
}

__global__ void check_color(jc::SamplePlane y, jc::SamplePlane cb, jc::SamplePlane cr, int width, int height,
                            uint8_t* rgb) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (x >= width || row >= height) return;
  cb.method = jc::choose_upsample(cb.h_ratio, cb.v_ratio, cb.width);
  jc::ycc_to_rgb(jc::upsampled_sample(y, row, x), jc::upsampled_sample(cb, row, x), jc::upsampled_sample(cr, row, x),
                 rgb + (static_cast<int64_t>(row) * width + x) * 3);
}

__global__ void check_scaled_idct(const int16_t* coef, const jc::QuantTable* quant, uint8_t* out, int pitch,
                                  uint8_t* exact) {
  const int b = blockIdx.x;
  const int size = 8 >> (threadIdx.x & 3);  // 8, 4, 2, 1
  exact[b * 4 + (threadIdx.x & 3)] = jc::idct_scaled(size, coef + b * 64, *quant, out + b * 8, pitch) ? 1 : 0;
  if (threadIdx.x == 0) {
    exact[b * 4] &= jc::idct_4x4(coef + b * 64, *quant, out, pitch) ? 1 : 0;
    exact[b * 4] &= jc::idct_2x2(coef + b * 64, *quant, out, pitch) ? 1 : 0;
    exact[b * 4] &= jc::idct_1x1(coef + b * 64, *quant, out, pitch) ? 1 : 0;
  }
}

__global__ void check_scaling(const jc::Frame* frame, int scale, const uint8_t* samples, int pitch, int width,
                              uint8_t* gray, jc::Scaling* out) {
  jc::Scaling s;
  if (!jc::make_scaling(*frame, scale, &s)) return;
  const jc::SamplePlane p = jc::scaled_plane(s, 0, samples, pitch);
  const int x = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (x < s.width && row < s.height) gray[static_cast<int64_t>(row) * width + x] = jc::upsampled_sample(p, row, x);
  if (x == 0 && row == 0) {
    s.upsample[0] = jc::choose_upsample(s.h_ratio[0], s.v_ratio[0], s.sample_width[0], scale > 1);
    s.idct_size[0] = jc::component_idct_size(scale, frame->max_h, frame->max_v, frame->h[0], frame->v[0]);
    *out = s;
  }
}

// The chunked decoder's stages (sync_decode.h), each as its own kernel would run it: one thread per chunk for
// stages 1, 2 and 4, one thread for stage 3.
__global__ void check_sync_decode(const uint8_t* data, int64_t size, int64_t scan_start, int64_t chunk_bytes,
                                  int64_t restart_interval, const jc::Frame* frame, const jc::HuffTable* tables,
                                  jc::ChunkRecord* records, jc::ChunkRecord* next_round, jc::ChunkStart* starts,
                                  int16_t* plane0, int16_t* plane1, int16_t* plane2, uint32_t* flags) {
  jc::ChunkedScan s;
  if (!jc::make_chunked_scan(data, size, scan_start, chunk_bytes, restart_interval, &s)) return;
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = &tables[0];
    t.ac[c] = &tables[1];
  }
  t.order = nullptr;
  if (j >= s.num_chunks) return;
  flags[j] = jc::decode_chunk(s, *frame, t, j, jc::chunk_guess(s, j), &records[j]);
  if (j > 0) flags[j] |= jc::sync_chunk(s, *frame, t, j, records[j - 1], records[j], &next_round[j]) ? 1u : 0u;
  if (j == 0) flags[j] |= jc::chunk_starts(s, *frame, next_round, starts);
  int16_t* planes[jc::kMaxComponents] = {plane0, plane1, plane2, nullptr};
  flags[j] |= jc::decode_chunk_blocks(s, *frame, t, j, starts[j], starts[j + 1], planes);
  // A window's band of rows: the stages through its last block.
  int64_t needed = 0;
  if (j == 0) flags[j] |= jc::chunk_starts_through(s, *frame, next_round, frame->blocks_in_mcu - 1, starts, &needed);
  flags[j] |= jc::decode_chunk_rect(s, *frame, t, j, starts[j], starts[j + 1], planes, 0, 1, 0, 1);
}
