// The resized crop's last step: a uint8 sample to the output's dtype, normalised per channel. The
// CPU batched call and the GPU kernels run this one definition, so their float outputs are equal.
//
// What it computes is torchvision's ToTensor + Normalize on a uint8 image, in float32 and in the same
// order: x / 255, then (that - mean) / std, then rounded to the output's dtype (float16 and bfloat16:
// to nearest, ties to even, as torch's conversions).
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

// Output dtypes, as the ops' `dtype` codes.
enum OutputDtype : int32_t { kOutUint8 = 0, kOutFloat32 = 1, kOutFloat16 = 2, kOutBfloat16 = 3 };

CUSTOM_OP_HD inline int output_dtype_bytes(int32_t dtype) {
  return dtype == kOutUint8 ? 1 : (dtype == kOutFloat32 ? 4 : 2);
}

// (x / 255 - mean) / std in float32. Division rather than a multiplication by reciprocals: that is
// what torch does, and a reciprocal would change the last bit of some values.
CUSTOM_OP_HD inline float normalize_sample(uint8_t x, float mean, float std) {
  const float v = static_cast<float>(x) / 255.0f;
  return (v - mean) / std;
}

CUSTOM_OP_HD inline uint32_t float_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v;
  v.f = f;
  return v.u;
}

// float32 -> bfloat16 bits, to nearest, ties to even (finite inputs: normalize_sample's are).
CUSTOM_OP_HD inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = float_bits(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// float32 -> IEEE half bits, to nearest, ties to even, overflow to infinity (finite inputs).
CUSTOM_OP_HD inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // |f| >= 65536: infinity
  if (a >= 0x38800000u) {                                              // a normal half
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits; a carry out of the
    // mantissa correctly bumps the exponent, up to infinity.
    const uint32_t rebased = a - 0x38000000u;
    return static_cast<uint16_t>(sign | ((rebased + 0x0FFFu + ((rebased >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal: zero
  // A subnormal half: the mantissa with its implicit bit, shifted right and rounded to even.
  const uint32_t exponent = a >> 23;
  const uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  const uint32_t half_ulp = 1u << (shift - 1);
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  uint32_t h = mantissa >> shift;
  if (rest > half_ulp || (rest == half_ulp && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace jpeg_core
}  // namespace custom_op
