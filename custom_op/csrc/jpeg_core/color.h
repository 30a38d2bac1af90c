// libjpeg-turbo's YCbCr -> RGB conversion (jdcolor.c, ycc_rgb_convert) and the pass-through cases.
//
// Why formulas instead of jdcolor.c's four 256-entry tables: on the GPU a table costs shared memory
// or uncached global loads, while the formula is two multiply-adds per channel. Each table entry is
// by definition one of these expressions (build_ycc_rgb_table: R and B offsets are rounded once,
// the G offset keeps both products unrounded and rounds their sum), so the values are the same;
// the tests compare with libjpeg with and without its SIMD colour conversion, which is exact too.
// The final clamp is libjpeg's sample_range_limit, which is a plain clamp for these sums (they lie
// in [-227, 482]).
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

namespace color {
constexpr int kScaleBits = 16;
constexpr int32_t kOneHalf = int32_t{1} << (kScaleBits - 1);
// jdcolor.c's FIX(x): round(x * 2^16).
constexpr int32_t fix16(double x) { return static_cast<int32_t>(x * (1 << kScaleBits) + 0.5); }
constexpr int32_t kCrR = fix16(1.40200), kCbB = fix16(1.77200), kCrG = fix16(0.71414), kCbG = fix16(0.34414);
static_assert(kCrR == 91881 && kCbB == 116130 && kCrG == 46802 && kCbG == 22554, "jdcolor.c's constants");
}  // namespace color

CUSTOM_OP_HD inline uint8_t clamp_sample(int v) { return static_cast<uint8_t>(clamp_int(v, 0, 255)); }

// One pixel: y, cb, cr in 0..255 -> rgb[0..2]. The products fit in int32 (|x| <= 128).
CUSTOM_OP_HD inline void ycc_to_rgb(int y, int cb, int cr, uint8_t* rgb) {
  const int32_t x_cb = cb - 128, x_cr = cr - 128;
  const int32_t r_offset = (color::kCrR * x_cr + color::kOneHalf) >> color::kScaleBits;
  const int32_t b_offset = (color::kCbB * x_cb + color::kOneHalf) >> color::kScaleBits;
  const int32_t g_offset = (-color::kCbG * x_cb + color::kOneHalf - color::kCrG * x_cr) >> color::kScaleBits;
  rgb[0] = clamp_sample(y + r_offset);
  rgb[1] = clamp_sample(y + g_offset);
  rgb[2] = clamp_sample(y + b_offset);
}

}  // namespace jpeg_core
}  // namespace custom_op
