// The resampler's per-pixel arithmetic: one output sample as a weighted sum of input samples, in
// Pillow's fixed point (ImagingResample). The CPU resize (cpu/resize_cpu.cpp, whose SIMD kernels do
// the same sums eight or sixteen at a time) and the GPU's resized crop run this one definition, so CI
// checks on the CPU the sums the GPU computes. The weights come from common/resample_taps.h, on the
// host.
#pragma once

#include "hd.h"

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

}  // namespace jpeg_core
}  // namespace custom_op
