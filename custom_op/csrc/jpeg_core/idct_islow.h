// Dequantisation and libjpeg-turbo's "islow" inverse DCT (jidctint.c, JDCT_ISLOW), for one block.
//
// Why two arithmetic widths and an exactness flag. libjpeg-turbo 2.1.5 has two implementations of
// this transform that agree on every block a real encoder produces but NOT on hostile ones:
//   - the C code (jidctint.c: builds without SIMD, or JSIMD_FORCENONE=1) multiplies in
//     JLONG (64-bit on LP64 Linux), keeps pass-1 results in `int` (a larger value wraps), and limits
//     the output through a 1024-entry table indexed by (value & 1023), so values beyond [-512, 511]
//     wrap around;
//   - the x86-64 SSE2/AVX2 code (what the CPU path gets on any x86-64 machine; ARM's NEON code was
//     not examined) dequantises with a 16-bit
//     multiply (pmullw keeps the low 16 bits), forms in0 +- in4, in7 + in3 and in5 + in1 with 16-bit
//     adds (wrapping), saturates pass-1 results to 16 bits (packssdw) and clamps the output.
// The values below are the C code's for EVERY input (what the CPU path computes with SIMD off). The
// function also returns whether the block lies where both implementations provably agree: every
// dequantised coefficient, every pass-1 result and every 16-bit sum above inside int16, and every
// output inside [-512, 511] before the range limit. Then the result is also the SIMD code's. On such
// blocks the arithmetic runs in 32 bits, in the SIMD code's factorisation (pairs of products, as
// pmaddwd forms them), which provably cannot overflow: the largest intermediate is
// 32768 * 64570 + 2^17 < 2^31. Other blocks (which only corrupt or hostile files contain: the
// tests count zero on every valid file) take a 64-bit path; the caller treats a false return like a
// damaged segment and decodes on the CPU path, so GPU and CPU paths agree whichever libjpeg build
// the CPU path runs. Both factorisations compute the same integer linear combination, so without
// overflow they give the same value.
//
// The quantisation table is read as libjpeg reads it into its ISLOW_MULT_TYPE, a `short` in SIMD
// builds: a 16-bit DQT value above 32767 counts as negative.
#pragma once

#include "hd.h"
#include "tables.h"

namespace custom_op {
namespace jpeg_core {

namespace islow {

constexpr int kConstBits = 13;
constexpr int kPass1Bits = 2;
// FIX(x) = round(x * 2^13), as jidctint.c defines them.
constexpr int32_t fix13(double x) { return static_cast<int32_t>(x * (1 << kConstBits) + 0.5); }
constexpr int32_t F0298 = fix13(0.298631336), F0390 = fix13(0.390180644), F0541 = fix13(0.541196100),
                  F0765 = fix13(0.765366865), F0899 = fix13(0.899976223), F1175 = fix13(1.175875602),
                  F1501 = fix13(1.501321110), F1847 = fix13(1.847759065), F1961 = fix13(1.961570560),
                  F2053 = fix13(2.053119869), F2562 = fix13(2.562915447), F3072 = fix13(3.072711026);
static_assert(F0298 == 2446 && F0390 == 3196 && F0541 == 4433 && F0765 == 6270 && F0899 == 7373 && F1175 == 9633 &&
                  F1501 == 12299 && F1847 == 15137 && F1961 == 16069 && F2053 == 16819 && F2562 == 20995 &&
                  F3072 == 25172,
              "jidctint.c's constants");

// One 8-point transform: out[i] before descaling. T is int32_t (inputs and the 16-bit sums checked
// to fit in int16 by the caller) or int64_t (any int32 inputs).
template <class T>
CUSTOM_OP_HD inline void transform(const T* in, T* out) {
  // Even part: tmp3 = z2 * (F0541 + F0765) + z3 * F0541, tmp2 = z2 * F0541 + z3 * (F0541 - F1847).
  const T tmp3 = in[2] * T(F0541 + F0765) + in[6] * T(F0541);
  const T tmp2 = in[2] * T(F0541) + in[6] * T(F0541 - F1847);
  const T tmp0 = (in[0] + in[4]) * T(1 << kConstBits);
  const T tmp1 = (in[0] - in[4]) * T(1 << kConstBits);
  const T tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3, tmp11 = tmp1 + tmp2, tmp12 = tmp1 - tmp2;
  // Odd part, with z5 = (z3 + z4) * F1175 folded into z3 and z4.
  const T z3 = in[7] + in[3], z4 = in[5] + in[1];
  const T z3f = z3 * T(F1175 - F1961) + z4 * T(F1175);
  const T z4f = z3 * T(F1175) + z4 * T(F1175 - F0390);
  const T o0 = in[7] * T(F0298 - F0899) + in[1] * T(-F0899) + z3f;
  const T o1 = in[5] * T(F2053 - F2562) + in[3] * T(-F2562) + z4f;
  const T o2 = in[5] * T(-F2562) + in[3] * T(F3072 - F2562) + z3f;
  const T o3 = in[7] * T(-F0899) + in[1] * T(F1501 - F0899) + z4f;
  out[0] = tmp10 + o3;
  out[7] = tmp10 - o3;
  out[1] = tmp11 + o2;
  out[6] = tmp11 - o2;
  out[2] = tmp12 + o1;
  out[5] = tmp12 - o1;
  out[3] = tmp13 + o0;
  out[4] = tmp13 - o0;
}

CUSTOM_OP_HD inline bool fits_int16(int64_t v) { return v >= -32768 && v <= 32767; }

// Whether the SIMD code's 16-bit view of these 8 inputs is exact: the inputs and its 16-bit sums.
CUSTOM_OP_HD inline bool narrow_ok(const int64_t* in) {
  for (int i = 0; i < 8; ++i)
    if (!fits_int16(in[i])) return false;
  return fits_int16(in[0] + in[4]) && fits_int16(in[0] - in[4]) && fits_int16(in[7] + in[3]) &&
         fits_int16(in[5] + in[1]);
}

// Transforms 8 inputs and descales by `shift` bits (with rounding): 32-bit when narrow_ok, else
// 64-bit. Returns whether the narrow path was taken.
CUSTOM_OP_HD inline bool transform_descaled(const int64_t* in, int shift, int64_t* out) {
  const int64_t round = int64_t{1} << (shift - 1);
  if (narrow_ok(in)) {
    int32_t in32[8], out32[8];
    for (int i = 0; i < 8; ++i) in32[i] = static_cast<int32_t>(in[i]);
    transform<int32_t>(in32, out32);
    for (int i = 0; i < 8; ++i) out[i] = (out32[i] + static_cast<int32_t>(round)) >> shift;
    return true;
  }
  int64_t tmp[8];
  transform<int64_t>(in, tmp);
  for (int i = 0; i < 8; ++i) out[i] = (tmp[i] + round) >> shift;
  return false;
}

}  // namespace islow

// libjpeg's post-IDCT range limit (jdmaster.c prepare_range_limit_table, read at x & 1023):
// [-128, 127] -> x + 128, [128, 511] -> 255, [512, 895] -> 0, [896, 1023] -> x - 896, which in
// two's complement is: clamp to [0, 255] inside [-512, 511], wrap around outside.
CUSTOM_OP_HD inline uint8_t idct_range_limit(int64_t x) {
  const uint32_t u = (static_cast<uint32_t>(static_cast<uint64_t>(x)) + 128u) & 1023u;
  return static_cast<uint8_t>(u < 256u ? u : (u < 640u ? 255u : 0u));
}

// Dequantises `coef` (64 values, natural order) with `quant` (natural order) and writes the 8x8
// samples to out[row * stride + col]. Returns true when libjpeg-turbo's SIMD islow provably gives
// the same samples as its C code (and so as this function); see the note at the top.
CUSTOM_OP_HD inline bool idct_islow(const int16_t* coef, const QuantTable& quant, uint8_t* out, ptrdiff_t stride) {
  // Pass-1 results are wrapped to int32 as jidctint.c's int workspace holds them: 32-bit entries keep
  // a GPU thread's workspace in registers.
  int32_t workspace[kBlockSize];
  bool exact = true;
  // Pass 1: columns. The products fit in int32 (|coef|, |q| <= 32768).
  CUSTOM_OP_UNROLL
  for (int col = 0; col < 8; ++col) {
    int64_t in[8], res[8];
    CUSTOM_OP_UNROLL
    for (int row = 0; row < 8; ++row) {
      const int32_t q = wrap_int16(quant.value[row * 8 + col]);  // ISLOW_MULT_TYPE is short
      in[row] = static_cast<int64_t>(static_cast<int32_t>(coef[row * 8 + col]) * q);
    }
    exact = islow::transform_descaled(in, islow::kConstBits - islow::kPass1Bits, res) && exact;
    CUSTOM_OP_UNROLL
    for (int row = 0; row < 8; ++row) {
      // jidctint.c stores pass-1 results in an int workspace; SIMD saturates them to int16.
      exact = exact && islow::fits_int16(res[row]);
      workspace[row * 8 + col] = wrap_int32(res[row]);
    }
  }
  // Pass 2: rows.
  CUSTOM_OP_UNROLL
  for (int row = 0; row < 8; ++row) {
    int64_t in[8], res[8];
    CUSTOM_OP_UNROLL
    for (int col = 0; col < 8; ++col) in[col] = workspace[row * 8 + col];
    exact = islow::transform_descaled(in, islow::kConstBits + islow::kPass1Bits + 3, res) && exact;
    uint8_t samples[8];
    CUSTOM_OP_UNROLL
    for (int col = 0; col < 8; ++col) {
      exact = exact && res[col] >= -512 && res[col] <= 511;
      samples[col] = idct_range_limit(res[col]);
    }
    uint8_t* dst = out + row * stride;
#if defined(__CUDA_ARCH__)
    // One 8-byte store per row where the row is aligned (the GPU decoder's sample planes are).
    if ((reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
      uint2 packed;
      packed.x = samples[0] | (samples[1] << 8) | (samples[2] << 16) | (uint32_t{samples[3]} << 24);
      packed.y = samples[4] | (samples[5] << 8) | (samples[6] << 16) | (uint32_t{samples[7]} << 24);
      *reinterpret_cast<uint2*>(dst) = packed;
      continue;
    }
#endif
    for (int col = 0; col < 8; ++col) dst[col] = samples[col];
  }
  return exact;
}

}  // namespace jpeg_core
}  // namespace custom_op
