// Runs the jpeg_core stages in CUDA kernels and compares every output, bit for bit, with the same
// stages run on the CPU by tests/jpeg_core_harness.cpp (which is included here, without its main).
//
// Why: the CPU tests prove the core equals libjpeg-turbo when a host compiler builds it; this proves
// that nvcc's device build of the same text computes the same thing (integer widths, shifts, the
// int64 IDCT path, table reads from global and shared memory), so the CPU proof carries over to the
// GPU. It is not the production kernel layout: one thread per segment (Huffman), per block (IDCT)
// and per pixel (upsampling + colour), nothing tuned. Each file is decoded at 8/8, 4/8, 2/8 and 1/8
// (the reduced IDCTs and scaling.h's planes and upsampling), and its scan also by the chunked decoder
// (sync_decode.h) in chunks of 1, 7, 256 and 4096 bytes.
//
// Input: the harness's records on stdin. Output: one JSON line per file that differs, then a
// summary line {"files": N, "compared": M, "decodes": D, "unequal": U, ...} (compared: files the
// core decodes; decodes: those files times the 4 scales; chunked_decodes: those files times the 4
// chunk sizes; unequal: files with any difference). Exit
// status 0 when U is 0, 1 otherwise, 3 when no GPU is usable. Built by tests/test_jpeg_core.py (when
// nvcc and a GPU are present) or by hand:
//   nvcc -std=c++17 -O2 -arch=sm_90 -I. tests/jpeg_core_gpu_check.cu -o jpeg_core_gpu_check -ljpeg
#define JPEG_CORE_HARNESS_NO_MAIN
#include "tests/jpeg_core_harness.cpp"

#include <cuda_runtime.h>

namespace {

struct DeviceJob {
  jc::Frame frame;
  jc::HuffTable dc[jc::kMaxComponents], ac[jc::kMaxComponents];
  jc::QuantTable quant[jc::kMaxComponents];
  jc::CoefOrder order;
  int64_t mcus_per_segment, found;
  int color;
};

struct Planes {
  int16_t* coef[jc::kMaxComponents];
};

__global__ void decode_segments(const DeviceJob* job, const uint8_t* data, const size_t* begins, const size_t* ends,
                                Planes planes, uint32_t* flags) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= job->found) return;
  // The tables in global memory, read through the read-only data cache (jpeg_core's load_readonly), as
  // the production kernel reads them (an __ldg of shared memory is not allowed).
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = &job->dc[c];
    t.ac[c] = &job->ac[c];
  }
  t.order = &job->order;
  const int64_t total = jc::frame_total_mcus(job->frame);
  const int64_t first = s * job->mcus_per_segment;
  const int64_t count = total - first < job->mcus_per_segment ? total - first : job->mcus_per_segment;
  flags[s] = jc::decode_segment(data + begins[s], data + ends[s], job->frame, t, first, count, planes.coef);
}

// Component c's blocks into size x size samples each (Scaling::idct_size).
__global__ void inverse_dct(const DeviceJob* job, int c, int size, const int16_t* coef, uint8_t* samples, int pitch,
                            uint8_t* exact) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int per_row = job->frame.blocks_per_row[c];
  if (b >= static_cast<int64_t>(per_row) * job->frame.block_rows[c]) return;
  const int64_t row = b / per_row, col = b % per_row;
  uint8_t* out = samples + row * size * pitch + col * size;
  exact[b] = jc::idct_scaled(size, coef + b * 64, job->quant[c], out, pitch) ? 1 : 0;
}

struct SamplePlanes {
  jc::SamplePlane p[jc::kMaxComponents];
};

// The output pixels, width x height at the decode's scale.
__global__ void to_pixels(const DeviceJob* job, SamplePlanes sp, int width, int height, uint8_t* pixels,
                          int components) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(width) * height) return;
  const int y = static_cast<int>(i / width), x = static_cast<int>(i % width);
  convert_pixel(job->color, sp.p, y, x, pixels + i * components);
}

bool cuda_ok(cudaError_t e, std::string* why) {
  if (e == cudaSuccess) return true;
  if (why->empty()) *why = cudaGetErrorString(e);
  return false;
}

template <class T>
T* device_copy(const T* host, size_t count, std::string* why) {
  T* d = nullptr;
  if (!cuda_ok(cudaMalloc(&d, count * sizeof(T) + 1), why)) return nullptr;
  if (count) cuda_ok(cudaMemcpy(d, host, count * sizeof(T), cudaMemcpyHostToDevice), why);
  return d;
}

template <class T>
bool same(const std::vector<T>& host, const T* device, const char* what, std::string* diff) {
  std::vector<T> back(host.size());
  std::string why;
  if (!host.empty() &&
      !cuda_ok(cudaMemcpy(back.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost), &why)) {
    *diff = std::string(what) + ": " + why;
    return false;
  }
  for (size_t i = 0; i < host.size(); ++i) {
    if (back[i] != host[i]) {
      *diff = std::string(what) + " differs at " + std::to_string(i) + ": cpu " + std::to_string(host[i]) + " gpu " +
              std::to_string(back[i]);
      return false;
    }
  }
  return true;
}

// Decodes `file` on the GPU and compares with the CPU decode. Empty string when equal.
std::string gpu_versus_cpu(const std::vector<uint8_t>& file, const Prepared& p, const CoreDecode& cpu) {
  std::string why, diff;
  const jc::Frame& f = p.frame;
  DeviceJob job;
  job.frame = f;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    job.dc[c] = p.info.dc[c < f.num_components ? c : 0];
    job.ac[c] = p.info.ac[c < f.num_components ? c : 0];
    job.quant[c] = p.info.quant[c < f.num_components ? c : 0];
  }
  job.order = p.order;
  job.mcus_per_segment = p.mcus_per_segment;
  job.found = p.scan.found;
  job.color = p.info.color;
  std::vector<void*> owned;
  auto keep = [&owned](void* ptr) { owned.push_back(ptr); };
  DeviceJob* d_job = device_copy(&job, 1, &why);
  keep(d_job);
  uint8_t* d_data = device_copy(file.data(), file.size(), &why);
  keep(d_data);
  size_t* d_begins = device_copy(p.begins.data(), p.begins.size(), &why);
  keep(d_begins);
  size_t* d_ends = device_copy(p.ends.data(), p.ends.size(), &why);
  keep(d_ends);
  std::vector<uint32_t> flags_init(static_cast<size_t>(p.segments), kSegmentNotFound);
  uint32_t* d_flags = device_copy(flags_init.data(), flags_init.size(), &why);
  keep(d_flags);
  Planes planes{};
  uint8_t* d_samples[jc::kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
  uint8_t* d_exact[jc::kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
  for (int c = 0; c < f.num_components; ++c) {
    const size_t coefs = static_cast<size_t>(jc::plane_coefficients(f, c));
    cuda_ok(cudaMalloc(&planes.coef[c], coefs * 2), &why);
    keep(planes.coef[c]);
    cuda_ok(cudaMemset(planes.coef[c], 0, coefs * 2), &why);
    cuda_ok(cudaMalloc(&d_samples[c], cpu.samples[c].size()), &why);
    keep(d_samples[c]);
    cuda_ok(cudaMemset(d_samples[c], 0, cpu.samples[c].size()), &why);
    cuda_ok(cudaMalloc(&d_exact[c], cpu.block_exact[c].size()), &why);
    keep(d_exact[c]);
  }
  uint8_t* d_pixels = nullptr;
  if (!cpu.pixels.empty()) {
    cuda_ok(cudaMalloc(&d_pixels, cpu.pixels.size()), &why);
    keep(d_pixels);
  }
  const int threads = 128;
  if (why.empty() && p.scan.found > 0) {
    decode_segments<<<static_cast<unsigned>((p.scan.found + threads - 1) / threads), threads>>>(
        d_job, d_data, d_begins, d_ends, planes, d_flags);
    cuda_ok(cudaGetLastError(), &why);
  }
  for (int c = 0; c < f.num_components && why.empty(); ++c) {
    const int64_t blocks = static_cast<int64_t>(f.blocks_per_row[c]) * f.block_rows[c];
    inverse_dct<<<static_cast<unsigned>((blocks + threads - 1) / threads), threads>>>(
        d_job, c, cpu.scaling.idct_size[c], planes.coef[c], d_samples[c], cpu.pitch[c], d_exact[c]);
    cuda_ok(cudaGetLastError(), &why);
  }
  if (why.empty() && d_pixels != nullptr) {
    SamplePlanes sp{};
    for (int c = 0; c < f.num_components; ++c) sp.p[c] = jc::scaled_plane(cpu.scaling, c, d_samples[c], cpu.pitch[c]);
    const int64_t pixels = static_cast<int64_t>(cpu.scaling.width) * cpu.scaling.height;
    to_pixels<<<static_cast<unsigned>((pixels + threads - 1) / threads), threads>>>(
        d_job, sp, cpu.scaling.width, cpu.scaling.height, d_pixels, cpu.out_components);
    cuda_ok(cudaGetLastError(), &why);
  }
  cuda_ok(cudaDeviceSynchronize(), &why);
  if (!why.empty()) {
    diff = "CUDA error: " + why;
  } else if (same(cpu.seg_flags, d_flags, "segment flags", &diff)) {
    bool equal = true;
    for (int c = 0; c < f.num_components && equal; ++c) {
      equal = same(cpu.coef[c], planes.coef[c], "coefficients", &diff) &&
              same(cpu.block_exact[c], d_exact[c], "exact flags", &diff) &&
              same(cpu.samples[c], d_samples[c], "samples", &diff);
    }
    if (equal && d_pixels != nullptr) same(cpu.pixels, d_pixels, "pixels", &diff);
  }
  for (void* ptr : owned) cudaFree(ptr);
  return diff;
}

// The chunked decoder (sync_decode.h), its stages as the GPU would run them: stage 1 and each round of
// stage 2 with a thread per chunk (a round reads the last round's records), the sweep and stage 3 on one
// thread, stage 4 with a thread per chunk.
struct ChunkJob {
  jc::ChunkedScan scan;
  jc::Frame frame;
  jc::HuffTable dc[jc::kMaxComponents], ac[jc::kMaxComponents];
  jc::CoefOrder order;
};

__device__ jc::SegmentTables chunk_tables(const ChunkJob* job) {
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = &job->dc[c];
    t.ac[c] = &job->ac[c];
  }
  t.order = &job->order;
  return t;
}

__global__ void chunk_first_pass(const ChunkJob* job, jc::ChunkRecord* records, uint32_t* flags) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= job->scan.num_chunks) return;
  atomicOr(flags,
           jc::decode_chunk(job->scan, job->frame, chunk_tables(job), j, jc::chunk_guess(job->scan, j), &records[j]));
}

__global__ void chunk_round(const ChunkJob* job, const jc::ChunkRecord* last, jc::ChunkRecord* next,
                            unsigned* changed) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= job->scan.num_chunks) return;
  if (jc::sync_chunk(job->scan, job->frame, chunk_tables(job), j, last[j > 0 ? j - 1 : 0], last[j], &next[j]))
    atomicAdd(changed, 1u);
}

__global__ void chunk_sweep_and_starts(const ChunkJob* job, jc::ChunkRecord* records, jc::ChunkStart* starts,
                                       uint32_t* flags) {
  for (int64_t j = 1; j < job->scan.num_chunks; ++j)
    jc::sync_chunk(job->scan, job->frame, chunk_tables(job), j, records[j - 1], records[j], &records[j]);
  *flags |= jc::chunk_starts(job->scan, job->frame, records, starts);
}

__global__ void chunk_write_pass(const ChunkJob* job, const jc::ChunkStart* starts, Planes planes, uint32_t* flags,
                                 uint32_t* stage4_flags) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= job->scan.num_chunks) return;
  const uint32_t f =
      jc::decode_chunk_blocks(job->scan, job->frame, chunk_tables(job), j, starts[j], starts[j + 1], planes.coef);
  atomicOr(flags, f);
  atomicOr(stage4_flags, f);
}

// The chunked decode of `file` in chunks of chunk_bytes on the GPU against the CPU's (chunked_decode, with
// the same two rounds and sweep): the same flags, and where stage 4 flagged nothing the same coefficients
// (elsewhere chunks may write a block twice, in any order). Empty string when equal.
std::string chunked_gpu_versus_cpu(const std::vector<uint8_t>& file, const Prepared& p, int64_t chunk_bytes) {
  ChunkedRun cpu;
  const ChunkedOptions options;
  chunked_decode(file.data(), file.size(), p, chunk_bytes, options, &cpu);
  ChunkJob job;
  if (!jc::make_chunked_scan(file.data(), static_cast<int64_t>(file.size()), static_cast<int64_t>(p.info.scan_start),
                             chunk_bytes, p.info.restart_interval, &job.scan))
    return cpu.flags == jc::kBadArguments ? "" : "make_chunked_scan refused what the CPU run took";
  const jc::Frame& f = p.frame;
  job.frame = f;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    job.dc[c] = p.info.dc[c < f.num_components ? c : 0];
    job.ac[c] = p.info.ac[c < f.num_components ? c : 0];
  }
  job.order = p.order;
  std::string why, diff;
  std::vector<void*> owned;
  auto keep = [&owned](void* ptr) { owned.push_back(ptr); };
  uint8_t* d_data = device_copy(file.data(), file.size(), &why);
  keep(d_data);
  job.scan.data = d_data;
  ChunkJob* d_job = device_copy(&job, 1, &why);
  keep(d_job);
  const size_t n = static_cast<size_t>(job.scan.num_chunks);
  jc::ChunkRecord *d_records = nullptr, *d_next = nullptr;
  jc::ChunkStart* d_starts = nullptr;
  uint32_t* d_flags = nullptr;  // all stages', then stage 4's alone
  unsigned* d_changed = nullptr;
  cuda_ok(cudaMalloc(&d_records, n * sizeof(jc::ChunkRecord)), &why);
  keep(d_records);
  cuda_ok(cudaMalloc(&d_next, n * sizeof(jc::ChunkRecord)), &why);
  keep(d_next);
  cuda_ok(cudaMalloc(&d_starts, (n + 1) * sizeof(jc::ChunkStart)), &why);
  keep(d_starts);
  cuda_ok(cudaMalloc(&d_flags, 2 * sizeof(uint32_t)), &why);
  keep(d_flags);
  cuda_ok(cudaMemset(d_flags, 0, 2 * sizeof(uint32_t)), &why);
  cuda_ok(cudaMalloc(&d_changed, sizeof(unsigned)), &why);
  keep(d_changed);
  Planes planes{};
  for (int c = 0; c < f.num_components; ++c) {
    const size_t coefs = static_cast<size_t>(jc::plane_coefficients(f, c));
    cuda_ok(cudaMalloc(&planes.coef[c], coefs * 2), &why);
    keep(planes.coef[c]);
    cuda_ok(cudaMemset(planes.coef[c], 0, coefs * 2), &why);
  }
  const int threads = 128;
  const unsigned grid = static_cast<unsigned>((n + threads - 1) / threads);
  if (why.empty()) {
    chunk_first_pass<<<grid, threads>>>(d_job, d_records, d_flags);
    for (int64_t round = 0; round < options.rounds && why.empty(); ++round) {
      cuda_ok(cudaMemset(d_changed, 0, sizeof(unsigned)), &why);
      chunk_round<<<grid, threads>>>(d_job, d_records, d_next, d_changed);
      std::swap(d_records, d_next);
      unsigned changed = 0;
      cuda_ok(cudaMemcpy(&changed, d_changed, sizeof(unsigned), cudaMemcpyDeviceToHost), &why);
      if (changed == 0) break;
    }
    chunk_sweep_and_starts<<<1, 1>>>(d_job, d_records, d_starts, d_flags);
    chunk_write_pass<<<grid, threads>>>(d_job, d_starts, planes, d_flags, d_flags + 1);
    cuda_ok(cudaGetLastError(), &why);
  }
  cuda_ok(cudaDeviceSynchronize(), &why);
  uint32_t flags[2] = {0, 0};
  if (why.empty()) cuda_ok(cudaMemcpy(flags, d_flags, sizeof(flags), cudaMemcpyDeviceToHost), &why);
  if (!why.empty()) {
    diff = "CUDA error: " + why;
  } else if (flags[0] != cpu.flags || flags[1] != cpu.stage4_flags) {
    diff = "flags: cpu " + std::to_string(cpu.flags) + "/" + std::to_string(cpu.stage4_flags) + " gpu " +
           std::to_string(flags[0]) + "/" + std::to_string(flags[1]);
  } else {
    for (int c = 0; c < f.num_components && cpu.stage4_flags == 0; ++c)
      if (!same(cpu.coef[c], planes.coef[c], "coefficients", &diff)) break;
  }
  for (void* ptr : owned) cudaFree(ptr);
  return diff.empty() ? diff : "chunks of " + std::to_string(chunk_bytes) + " bytes: " + diff;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("{\"error\": \"no usable CUDA device\"}\n");
    return 3;
  }
  std::vector<uint8_t> file;
  int64_t files = 0, compared = 0, decodes = 0, skipped = 0, unequal = 0, segments = 0, pixels = 0, inexact = 0,
          flagged = 0, chunked = 0;
  std::string first;
  while (read_record(&file)) {
    ++files;
    Prepared p;
    prepare(file.data(), file.size(), &p);
    std::string diff;
    bool decoded = false;
    for (int scale : {8, 4, 2, 1}) {
      CoreDecode cpu;
      core_decode(file.data(), file.size(), &cpu, false, scale);
      if (!p.error.empty() || !cpu.error.empty()) break;
      decoded = true;
      ++decodes;
      const std::string scale_diff = gpu_versus_cpu(file, p, cpu);
      if (diff.empty() && !scale_diff.empty()) diff = "at " + std::to_string(scale) + "/8: " + scale_diff;
      pixels += static_cast<int64_t>(cpu.pixels.size());
      inexact += cpu.inexact_blocks;
      if (scale != 8) continue;
      segments += p.scan.found;
      for (uint32_t fl : cpu.seg_flags) flagged += fl != 0;
    }
    if (!decoded) {
      ++skipped;
      continue;
    }
    for (int64_t chunk_bytes : {1, 7, 256, 4096}) {
      const std::string chunk_diff = chunked_gpu_versus_cpu(file, p, chunk_bytes);
      ++chunked;
      if (diff.empty() && !chunk_diff.empty()) diff = chunk_diff;
    }
    ++compared;
    if (!diff.empty()) {
      if (unequal++ == 0) first = "file " + std::to_string(files - 1) + ": " + diff;
      std::printf("{\"file\": %lld, \"diff\": \"%s\"}\n", static_cast<long long>(files - 1), json_escape(diff).c_str());
    }
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf(
      "{\"device\": \"%s\", \"files\": %lld, \"compared\": %lld, \"decodes\": %lld, \"skipped\": %lld, "
      "\"segments\": %lld, \"flagged_segments\": %lld, \"inexact_blocks\": %lld, \"pixel_values\": %lld, "
      "\"chunked_decodes\": %lld, \"unequal\": %lld, \"first_unequal\": \"%s\"}\n",
      json_escape(prop.name).c_str(), static_cast<long long>(files), static_cast<long long>(compared),
      static_cast<long long>(decodes), static_cast<long long>(skipped), static_cast<long long>(segments),
      static_cast<long long>(flagged), static_cast<long long>(inexact), static_cast<long long>(pixels),
      static_cast<long long>(chunked), static_cast<long long>(unequal), json_escape(first).c_str());
  return unequal == 0 ? 0 : 1;
}
