// The resampler's per-pixel arithmetic: one output sample as a weighted sum of input samples, in
// Pillow's fixed point (ImagingResample), and the two separable passes of one item as the GPU's resized
// crop runs them (one output sample per call, in any order). The CPU resize (cpu/resize_cpu.cpp, whose
// SIMD kernels do the same sums sixteen at a time) and the GPU kernels run these definitions, so CI
// checks on the CPU the sums the GPU computes (tests/resample_check.cpp). The weights come from
// common/resample_taps.h, on the host.
#pragma once

#include "hd.h"
#include "normalize.h"

namespace custom_op {
namespace jpeg_core {

// Fractional bits of a weight: 32 bits - 8 for the sample - 2 for the negative lobes of some filters.
constexpr int kResamplePrecisionBits = 22;
constexpr int32_t kResampleHalf = int32_t{1} << (kResamplePrecisionBits - 1);

// A sum's sample: floor(acc / 2^22) (an arithmetic shift, as Pillow's), clamped to 0..255.
CUSTOM_OP_HD inline uint8_t resample_clip8(int32_t acc) {
  const int32_t v = acc >> kResamplePrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One output sample from n taps: in[t * stride] weighted by k[t], rounded half up. The weights of
// one output sum to 2^22 and their positive part stays below 2^23 for every filter, so the sum stays
// within 32 bits.
CUSTOM_OP_HD inline uint8_t resample_sample(const uint8_t* in, ptrdiff_t stride, const int32_t* k, int n) {
  int32_t acc = kResampleHalf;
  for (int t = 0; t < n; ++t) acc += static_cast<int32_t>(in[t * stride]) * k[t];
  return resample_clip8(acc);
}

// One axis's taps (common/resample_taps.h's AxisTaps, flattened): output i reads count[i] inputs from
// first[i], with weights[i * ksize ...]; every output reads inside [lo, hi).
struct ResampleTaps {
  const int32_t* first;
  const int32_t* count;
  const int32_t* weights;
  int32_t ksize;
  int32_t outputs;
  int32_t lo, hi;
};

// One item of a batched resample: C planes of `source` (rows x columns as the taps index them) to C
// planes of `out` (rows.outputs x cols.outputs), through `mid`, the first pass's uint8 result. Pillow's
// pass order decides which axis goes first (common/resample_taps.h, vertical_pass_first): the uint8
// intermediate depends on it.
struct ResampleItem {
  const uint8_t* source;
  int64_t source_plane;
  int32_t source_pitch;
  uint8_t* mid;
  int32_t channels;
  int32_t vertical_first;
  ResampleTaps rows, cols;
  void* out;              // the item's [C, rows.outputs, cols.outputs] slot of the batch, of `dtype`
  int32_t dtype;          // OutputDtype
  float mean[4], std[4];  // per channel; mean 0 and std 1 for plain x / 255 (float dtypes)
};

// The intermediate's size: the first pass's outputs along its axis, and the span the second pass
// reads along the other.
CUSTOM_OP_HD inline int32_t resample_mid_rows(const ResampleItem& it) {
  return it.vertical_first ? it.rows.outputs : it.rows.hi - it.rows.lo;
}
CUSTOM_OP_HD inline int32_t resample_mid_cols(const ResampleItem& it) {
  return it.vertical_first ? it.cols.hi - it.cols.lo : it.cols.outputs;
}

// The first pass's sample (c, y, x) of the intermediate (y < resample_mid_rows, x < resample_mid_cols).
CUSTOM_OP_HD inline uint8_t resample_first_pass(const ResampleItem& it, int c, int y, int x) {
  const uint8_t* plane = it.source + c * it.source_plane;
  if (it.vertical_first) {
    const ResampleTaps& t = it.rows;
    return resample_sample(plane + static_cast<ptrdiff_t>(t.first[y]) * it.source_pitch + it.cols.lo + x,
                           it.source_pitch, t.weights + static_cast<ptrdiff_t>(y) * t.ksize, t.count[y]);
  }
  const ResampleTaps& t = it.cols;
  return resample_sample(plane + static_cast<ptrdiff_t>(it.rows.lo + y) * it.source_pitch + t.first[x], 1,
                         t.weights + static_cast<ptrdiff_t>(x) * t.ksize, t.count[x]);
}

// The second pass's sample (c, y, x) of the output, read from the finished intermediate.
CUSTOM_OP_HD inline uint8_t resample_second_pass(const ResampleItem& it, int c, int y, int x) {
  const int32_t mid_rows = resample_mid_rows(it), mid_cols = resample_mid_cols(it);
  const uint8_t* plane = it.mid + static_cast<ptrdiff_t>(c) * mid_rows * mid_cols;
  if (it.vertical_first) {
    const ResampleTaps& t = it.cols;
    return resample_sample(plane + static_cast<ptrdiff_t>(y) * mid_cols + (t.first[x] - t.lo), 1,
                           t.weights + static_cast<ptrdiff_t>(x) * t.ksize, t.count[x]);
  }
  const ResampleTaps& t = it.rows;
  return resample_sample(plane + static_cast<ptrdiff_t>(t.first[y] - t.lo) * mid_cols + x, mid_cols,
                         t.weights + static_cast<ptrdiff_t>(y) * t.ksize, t.count[y]);
}

// Output sample value v of channel c in the item's dtype, as the bits stored (uint8, float32, or
// float16 / bfloat16 bits). Every uint8 maps to one value, so the GPU tabulates these per item.
CUSTOM_OP_HD inline uint32_t resample_output_bits(const ResampleItem& it, int c, uint8_t v) {
  switch (it.dtype) {
    case kOutUint8: return v;
    case kOutFloat32: return float_bits(normalize_sample(v, it.mean[c], it.std[c]));
    case kOutFloat16: return float_to_half_bits(normalize_sample(v, it.mean[c], it.std[c]));
    default: return float_to_bfloat16_bits(normalize_sample(v, it.mean[c], it.std[c]));
  }
}

// Stores output bits (resample_output_bits) as sample `index` (c * rows * cols + y * cols + x) of the
// item's slot.
CUSTOM_OP_HD inline void resample_store_bits(const ResampleItem& it, int64_t index, uint32_t bits) {
  switch (output_dtype_bytes(it.dtype)) {
    case 1: static_cast<uint8_t*>(it.out)[index] = static_cast<uint8_t>(bits); break;
    case 4: static_cast<uint32_t*>(it.out)[index] = bits; break;
    default: static_cast<uint16_t*>(it.out)[index] = static_cast<uint16_t>(bits); break;
  }
}

// Writes output sample `index` of channel c, value v, in the item's dtype.
CUSTOM_OP_HD inline void resample_store(const ResampleItem& it, int c, int64_t index, uint8_t v) {
  resample_store_bits(it, index, resample_output_bits(it, c, v));
}

}  // namespace jpeg_core
}  // namespace custom_op
