// The reduced IDCTs of custom_op/csrc/jpeg_core/idct_reduced.h against libjpeg-turbo's own functions,
// block by block: jidctred.c's jpeg_idct_4x4, jpeg_idct_2x2 and jpeg_idct_1x1, and the SSE2 versions
// libjpeg-turbo runs instead on x86-64 (jsimd_idct_4x4_sse2, jsimd_idct_2x2_sse2).
//
// Why beside the harness's file-level comparisons: the files a test can write hold coefficients up to
// libjpeg's encoder limits (+-1023), while a decoder accepts up to +-32767 (AC categories up to 15)
// and quantisers up to 65535; calling the functions directly reaches every input. Those functions are
// internal to libjpeg (the shared library does not export them), so this links the static library;
// tests/test_jpeg_core.py skips when it cannot.
//
// Requires, over random blocks from realistic to hostile: the core's samples equal the C code's on
// every block; wherever the core flags a block exact, they equal the SSE2 code's too. Prints one JSON
// line of counts (the SSE2 and C code differ on many hostile blocks: the flag is needed); exit status
// 0 when both requirements hold, 1 otherwise.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include <jpeglib.h>

#include "custom_op/csrc/jpeg_core/jpeg_core.h"

namespace jc = custom_op::jpeg_core;

extern "C" {
void jpeg_idct_4x4(j_decompress_ptr, jpeg_component_info*, JCOEFPTR, JSAMPARRAY, JDIMENSION);
void jpeg_idct_2x2(j_decompress_ptr, jpeg_component_info*, JCOEFPTR, JSAMPARRAY, JDIMENSION);
void jpeg_idct_1x1(j_decompress_ptr, jpeg_component_info*, JCOEFPTR, JSAMPARRAY, JDIMENSION);
void jsimd_idct_4x4_sse2(void* dct_table, JCOEFPTR, JSAMPARRAY, JDIMENSION);
void jsimd_idct_2x2_sse2(void* dct_table, JCOEFPTR, JSAMPARRAY, JDIMENSION);
}

namespace {

// jdmaster.c's prepare_range_limit_table: 256 zeros, 0..255, then the post-IDCT part read at
// (x & 1023) from sample_range_limit + 128: 384 x 255, 384 x 0, 0..127.
JSAMPLE g_table[5 * 256 + 128];

void build_range_limit() {
  JSAMPLE* t = g_table;
  std::memset(t, 0, 256);
  t += 256;
  for (int i = 0; i < 256; ++i) t[i] = static_cast<JSAMPLE>(i);
  t += 256;
  std::memset(t, 255, 384);
  std::memset(t + 384, 0, 384);
  for (int i = 0; i < 128; ++i) t[768 + i] = static_cast<JSAMPLE>(i);
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 200000;
  build_range_limit();
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.sample_range_limit = g_table + 256;  // what IDCT_range_limit reads (+ CENTERJSAMPLE)
  jpeg_component_info comp;
  std::memset(&comp, 0, sizeof(comp));
  alignas(16) short dct_table[64];  // ISLOW_MULT_TYPE, as jddctmgr.c fills it
  comp.dct_table = dct_table;
  std::mt19937 rng(20250611);
  long blocks = 0, c_differs = 0, exact_simd_differs = 0, simd_c_differ = 0, flagged = 0, flagged_simd_same = 0;
  for (int size : {4, 2, 1}) {
    for (long iter = 0; iter < iterations; ++iter) {
      // Quantisers: baseline-sized, 16-bit, or tiny; coefficients: realistic, encoder-limited, or any int16.
      const int kind = static_cast<int>(iter % 6);
      const int qmax = kind == 0 || kind == 3 ? 8 : (kind == 1 || kind == 4 ? 255 : 65535);
      const int cmax = kind < 3 ? 1023 : (kind == 3 ? 64 : 32767);
      alignas(16) JCOEF coef[64];
      jc::QuantTable quant;
      for (int k = 0; k < 64; ++k) {
        int q = 1 + static_cast<int>(rng() % static_cast<uint32_t>(qmax));
        if (qmax > 255 && rng() % 8 == 0) q = rng() % 2 ? 32768 : 32767;
        quant.value[k] = static_cast<uint16_t>(q);
        dct_table[k] = static_cast<short>(static_cast<uint16_t>(q));
        int c = static_cast<int>(rng() % static_cast<uint32_t>(2 * cmax + 1)) - cmax;
        if (rng() % 16 == 0) c = rng() % 2 ? cmax : -cmax;
        if (k > 0 && rng() % 3 == 0) c = 0;
        coef[k] = static_cast<JCOEF>(c);
      }
      // Columns, rows or all of the AC terms zero: the C code's shortcuts and the SSE2 code's.
      if (iter % 10 == 1)
        for (int k = 8; k < 64; ++k) coef[k] = 0;
      if (iter % 10 == 2)
        for (int k = 1; k < 64; ++k)
          if (k % 8 != 0) coef[k] = 0;
      if (iter % 10 == 3)
        for (int k = 1; k < 64; ++k) coef[k] = 0;
      uint8_t core[8 * 8];
      alignas(16) JSAMPLE c_out[8][16], simd_out[8][16];
      JSAMPROW c_rows[8], simd_rows[8];
      for (int r = 0; r < 8; ++r) {
        c_rows[r] = c_out[r];
        simd_rows[r] = simd_out[r];
      }
      std::memset(c_out, 0, sizeof(c_out));
      std::memset(simd_out, 0, sizeof(simd_out));
      const bool exact = jc::idct_scaled(size, coef, quant, core, 8);
      if (size == 4) {
        jpeg_idct_4x4(&cinfo, &comp, coef, c_rows, 0);
        jsimd_idct_4x4_sse2(dct_table, coef, simd_rows, 0);
      } else if (size == 2) {
        jpeg_idct_2x2(&cinfo, &comp, coef, c_rows, 0);
        jsimd_idct_2x2_sse2(dct_table, coef, simd_rows, 0);
      } else {
        jpeg_idct_1x1(&cinfo, &comp, coef, c_rows, 0);
        std::memcpy(simd_out, c_out, sizeof(c_out));  // no SIMD 1x1: every build runs the C code
      }
      bool same_c = true, same_simd = true, simd_is_c = true;
      for (int r = 0; r < size; ++r) {
        for (int c = 0; c < size; ++c) {
          same_c = same_c && core[r * 8 + c] == c_out[r][c];
          same_simd = same_simd && core[r * 8 + c] == simd_out[r][c];
          simd_is_c = simd_is_c && c_out[r][c] == simd_out[r][c];
        }
      }
      ++blocks;
      c_differs += !same_c;
      exact_simd_differs += exact && !same_simd;
      simd_c_differ += !simd_is_c;
      flagged += !exact;
      flagged_simd_same += !exact && simd_is_c;
    }
  }
  std::printf(
      "{\"blocks\": %ld, \"core_differs_from_c\": %ld, \"exact_but_differs_from_sse2\": %ld, "
      "\"sse2_differs_from_c\": %ld, \"flagged\": %ld, \"flagged_where_sse2_equals_c\": %ld}\n",
      blocks, c_differs, exact_simd_differs, simd_c_differ, flagged, flagged_simd_same);
  return c_differs == 0 && exact_simd_differs == 0 ? 0 : 1;
}
