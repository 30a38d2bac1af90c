// libjpeg-turbo's reduced-size inverse DCTs (jidctred.c): 4x4, 2x2 and 1x1 samples from one 8x8
// coefficient block, what a decode scaled to 4/8, 2/8 or 1/8 (scale_num/scale_denom) runs for each
// component whose block scaling.h sets to that size; idct_scaled picks one by size (8: idct_islow).
//
// What libjpeg computes. jidctred.c's transforms are jidctint.c's LL&M IDCT with each 8-point step
// replaced by one that gives the averages of 2 (4x4) or 4 (2x2) adjacent outputs, which never reads
// input 4 (4x4) or inputs 2, 4 and 6 (2x2): pass 1 transforms the columns it will need (all but
// column 4, or columns 0, 1, 3, 5 and 7), pass 2 the rows, with CONST_BITS 13 and PASS1_BITS 2 as in
// islow and one (4x4) or two (2x2) more bits of descaling in each pass. The dequantisation, the int workspace,
// the 64-bit (JLONG) products and the output's range limit (idct_range_limit) are islow's. Its
// shortcuts for columns and rows whose AC terms are zero give what the full formulas give, so the
// formulas alone are used here. 1x1 is the DC coefficient dequantised and divided by 8, rounded.
//
// Why an exactness flag, as idct_islow has. libjpeg-turbo has SSE2 versions of the 4x4 and 2x2
// transforms (jidctred-sse2.asm, chosen by jddctmgr.c whenever the CPU has SSE2; there is no AVX2
// one and no SIMD 1x1). They agree with the C code on every block a real encoder produces, not on
// hostile ones: they dequantise with a 16-bit multiply (pmullw keeps the low 16 bits), sum in 32 bits
// (wrapping), saturate pass-1 results to 16 bits (packssdw; the 2x2's column 0 keeps 32 bits, then
// shifts them left by 15 in 32 bits) and clamp the output instead of wrapping it. So the functions
// return whether the block lies where the two provably agree: every dequantised coefficient that is
// read, and every pass-1 result, inside int16, and every output inside [-512, 511] before the range
// limit. The values written are always the C code's (what the CPU path computes with SIMD off).
//
// How it stays 32-bit on valid blocks (a GPU thread's 64-bit multiplies cost several instructions).
// With inputs inside int16 the SIMD code's 32-bit sums can wrap (a 4x4 output reaches 2.55e9), so
// each 1-D step here first runs in 32-bit modular arithmetic, as the SIMD code does, and keeps the
// result when the inputs fit int16 and every descaled result lies in the range the flag requires
// (int16 after pass 1, [-512, 511] after pass 2). Such a result is the exact one: the true sum is
// congruent to it modulo 2^32 and at most kMaxSum4/kMaxSum2 in magnitude, while any other value
// congruent to it is more than 2^32 - 2^29 away from zero (static_asserts below). Otherwise the step
// is recomputed in 64 bits (the C code's value) and the block is not exact; only hostile blocks take
// that path (the tests count none on every valid file).
#pragma once

#include "hd.h"
#include "idct_islow.h"
#include "tables.h"

namespace custom_op {
namespace jpeg_core {

namespace reduced {

// jidctred.c's fixed point is jidctint.c's: 13 fraction bits in the constants, 2 kept after pass 1.
using islow::fix13;
using islow::kConstBits;
using islow::kPass1Bits;
constexpr int32_t F0211 = fix13(0.211164243), F0509 = fix13(0.509795579), F0601 = fix13(0.601344887),
                  F0720 = fix13(0.720959822), F0765 = fix13(0.765366865), F0850 = fix13(0.850430095),
                  F0899 = fix13(0.899976223), F1061 = fix13(1.061594337), F1272 = fix13(1.272758580),
                  F1451 = fix13(1.451774981), F1847 = fix13(1.847759065), F2172 = fix13(2.172734803),
                  F2562 = fix13(2.562915447), F3624 = fix13(3.624509785);
static_assert(F0211 == 1730 && F0509 == 4176 && F0601 == 4926 && F0720 == 5906 && F0765 == 6270 && F0850 == 6967 &&
                  F0899 == 7373 && F1061 == 8697 && F1272 == 10426 && F1451 == 11893 && F1847 == 15137 &&
                  F2172 == 17799 && F2562 == 20995 && F3624 == 29692,
              "jidctred.c's constants");

// Descaling shifts: pass 1 keeps PASS1_BITS, pass 2 removes them and the 3 bits of the 2-D scale; the
// 4x4 steps carry one more bit, the 2x2 steps two.
constexpr int kPass1Shift4 = kConstBits - kPass1Bits + 1, kPass2Shift4 = kConstBits + kPass1Bits + 3 + 1;
constexpr int kPass1Shift2 = kConstBits - kPass1Bits + 2, kPass2Shift2 = kConstBits + kPass1Bits + 3 + 2;

// The largest magnitude of a step's sum before descaling when every input lies in int16 (|x| <= 2^15):
// the DC term, the even term and the larger odd term, plus the larger rounding constant.
constexpr int64_t kInt16Max = 32768;
constexpr int64_t kOdd0Sum4 = F0211 + F1451 + F2172 + F1061, kOdd2Sum4 = F0509 + F0601 + F0899 + F2562;
constexpr int64_t kMaxSum4 =
    kInt16Max * ((int64_t{1} << (kConstBits + 1)) + F1847 + F0765 + (kOdd0Sum4 > kOdd2Sum4 ? kOdd0Sum4 : kOdd2Sum4)) +
    (int64_t{1} << (kPass2Shift4 - 1));
constexpr int64_t kMaxSum2 =
    kInt16Max * ((int64_t{1} << (kConstBits + 2)) + F0720 + F0850 + F1272 + F3624) + (int64_t{1} << (kPass2Shift2 - 1));
// A kept 32-bit result descales into int16 (pass 1) or [-512, 511] (pass 2), so its sum is below
// 2^(shift + 15) or 2^(shift + 9) in magnitude, at most 2^29 for all four shifts.
static_assert(kPass1Shift4 + 15 <= 29 && kPass1Shift2 + 15 <= 29 && kPass2Shift4 + 9 <= 29 && kPass2Shift2 + 9 <= 29,
              "kept sums lie within 2^29");
static_assert(kMaxSum4 < (int64_t{1} << 32) - (int64_t{1} << 29) && kMaxSum2 < (int64_t{1} << 32) - (int64_t{1} << 29),
              "a 32-bit sum that descales into range is the true sum");

// One 8-to-4 step: the 4 outputs before descaling. in[4] is not read. T is uint32_t (modular 32-bit
// arithmetic, the SIMD code's) or int64_t (exact, the C code's for any int32 inputs).
template <class T>
CUSTOM_OP_HD inline void transform4(const T* in, T* out) {
  const T tmp0 = in[0] * T(int64_t{1} << (kConstBits + 1));
  const T tmp2 = in[2] * T(F1847) + in[6] * T(-F0765);
  const T tmp10 = tmp0 + tmp2, tmp12 = tmp0 - tmp2;
  const T odd0 = in[7] * T(-F0211) + in[5] * T(F1451) + in[3] * T(-F2172) + in[1] * T(F1061);
  const T odd2 = in[7] * T(-F0509) + in[5] * T(-F0601) + in[3] * T(F0899) + in[1] * T(F2562);
  out[0] = tmp10 + odd2;
  out[3] = tmp10 - odd2;
  out[1] = tmp12 + odd0;
  out[2] = tmp12 - odd0;
}

// One 8-to-2 step: the 2 outputs before descaling. in[2], in[4] and in[6] are not read.
template <class T>
CUSTOM_OP_HD inline void transform2(const T* in, T* out) {
  const T tmp10 = in[0] * T(int64_t{1} << (kConstBits + 2));
  const T odd = in[7] * T(-F0720) + in[5] * T(F0850) + in[3] * T(-F1272) + in[1] * T(F3624);
  out[0] = tmp10 + odd;
  out[1] = tmp10 - odd;
}

template <int N, class T>
CUSTOM_OP_HD inline void transform(const T* in, T* out) {
  if constexpr (N == 4) transform4<T>(in, out);
  else transform2<T>(in, out);
}

// One step on 8 inputs (the unread ones must be 0), descaled by `shift` bits with rounding: the 32-bit
// result when the inputs fit int16 and every result lies in [lo, hi] (then it is exact, see the note
// at the top), else the 64-bit one. Returns whether the 32-bit result was kept.
template <int N>
CUSTOM_OP_HD inline bool step_descaled(const int64_t* in, int shift, int32_t lo, int32_t hi, int64_t* out) {
  bool narrow = true;
  CUSTOM_OP_UNROLL
  for (int i = 0; i < 8; ++i) narrow = narrow && islow::fits_int16(in[i]);
  if (narrow) {
    uint32_t in32[8], res[4];
    CUSTOM_OP_UNROLL
    for (int i = 0; i < 8; ++i) in32[i] = static_cast<uint32_t>(static_cast<uint64_t>(in[i]));
    transform<N, uint32_t>(in32, res);
    const uint32_t round = uint32_t{1} << (shift - 1);
    CUSTOM_OP_UNROLL
    for (int i = 0; i < N; ++i) {
      const int32_t v = wrap_int32(static_cast<int64_t>(res[i] + round)) >> shift;
      narrow = narrow && v >= lo && v <= hi;
      out[i] = v;
    }
    if (narrow) return true;
  }
  int64_t res[4];
  transform<N, int64_t>(in, res);
  const int64_t round = int64_t{1} << (shift - 1);
  CUSTOM_OP_UNROLL
  for (int i = 0; i < N; ++i) out[i] = (res[i] + round) >> shift;
  return false;
}

// Whether row or column i of a block is read by the N x N transform (4: all but 4; 2: 0, 1, 3, 5, 7).
CUSTOM_OP_HD constexpr bool reads(int n, int i) { return n == 4 ? i != 4 : (i == 0 || (i & 1) != 0); }

// The N x N transform of one block (N = 4 or 2); see idct_4x4.
template <int N>
CUSTOM_OP_HD inline bool idct(const int16_t* coef, const QuantTable& quant, uint8_t* out, ptrdiff_t stride) {
  constexpr int pass1_shift = N == 4 ? kPass1Shift4 : kPass1Shift2;
  constexpr int pass2_shift = N == 4 ? kPass2Shift4 : kPass2Shift2;
  // Pass-1 results (rows 0 .. N-1), wrapped to int32 as jidctred.c's int workspace holds them; columns
  // not read are 0. Arrays are sized for N = 4.
  int32_t workspace[4 * 8];
  bool exact = true;
  CUSTOM_OP_UNROLL
  for (int col = 0; col < 8; ++col) {
    if (!reads(N, col)) {
      CUSTOM_OP_UNROLL
      for (int row = 0; row < N; ++row) workspace[row * 8 + col] = 0;
      continue;
    }
    int64_t in[8], res[4];
    CUSTOM_OP_UNROLL
    for (int row = 0; row < 8; ++row) {
      // ISLOW_MULT_TYPE is short; the product fits in int32 (|coef|, |q| <= 32768).
      const int32_t q = wrap_int16(quant.value[row * 8 + col]);
      in[row] = reads(N, row) ? static_cast<int64_t>(static_cast<int32_t>(coef[row * 8 + col]) * q) : 0;
    }
    exact = step_descaled<N>(in, pass1_shift, -32768, 32767, res) && exact;
    CUSTOM_OP_UNROLL
    for (int row = 0; row < N; ++row) workspace[row * 8 + col] = wrap_int32(res[row]);
  }
  CUSTOM_OP_UNROLL
  for (int row = 0; row < N; ++row) {
    int64_t in[8], res[4];
    CUSTOM_OP_UNROLL
    for (int col = 0; col < 8; ++col) in[col] = workspace[row * 8 + col];
    exact = step_descaled<N>(in, pass2_shift, -512, 511, res) && exact;
    CUSTOM_OP_UNROLL
    for (int col = 0; col < N; ++col) out[row * stride + col] = idct_range_limit(res[col]);
  }
  return exact;
}

}  // namespace reduced

// Dequantises `coef` (64 values, natural order) with `quant` (natural order) and writes jpeg_idct_4x4's
// 4x4 samples to out[row * stride + col]. Returns true when libjpeg-turbo's SIMD version provably
// gives the same samples as its C code (and so as this function); see the note at the top.
CUSTOM_OP_HD inline bool idct_4x4(const int16_t* coef, const QuantTable& quant, uint8_t* out, ptrdiff_t stride) {
  return reduced::idct<4>(coef, quant, out, stride);
}

// The same for jpeg_idct_2x2's 2x2 samples.
CUSTOM_OP_HD inline bool idct_2x2(const int16_t* coef, const QuantTable& quant, uint8_t* out, ptrdiff_t stride) {
  return reduced::idct<2>(coef, quant, out, stride);
}

// jpeg_idct_1x1's one sample: (DC * q + 4) >> 3 through the range limit. Always true: libjpeg has
// no SIMD version, so every build computes this.
CUSTOM_OP_HD inline bool idct_1x1(const int16_t* coef, const QuantTable& quant, uint8_t* out, ptrdiff_t stride) {
  (void)stride;
  const int32_t dc = static_cast<int32_t>(coef[0]) * wrap_int16(quant.value[0]);
  out[0] = idct_range_limit((static_cast<int64_t>(dc) + 4) >> 3);
  return true;
}

// The inverse DCT jddctmgr.c runs for a component whose blocks are scaled to size x size samples
// (Scaling::idct_size: 8, 4, 2 or 1), with idct_islow's conventions. Any other size writes nothing
// and returns false.
CUSTOM_OP_HD inline bool idct_scaled(int size, const int16_t* coef, const QuantTable& quant, uint8_t* out,
                                     ptrdiff_t stride) {
  switch (size) {
    case 8: return idct_islow(coef, quant, out, stride);
    case 4: return idct_4x4(coef, quant, out, stride);
    case 2: return idct_2x2(coef, quant, out, stride);
    case 1: return idct_1x1(coef, quant, out, stride);
    default: return false;
  }
}

}  // namespace jpeg_core
}  // namespace custom_op
