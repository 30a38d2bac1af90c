// The one switch that lets the JPEG decoding core be compiled for the GPU and for the CPU from the
// same text.
//
// Why one source: the GPU decoder must be bit-exact with libjpeg-turbo, and the only place where that
// can be checked on every change is CI, which has no GPU. So the arithmetic (Huffman decoding, IDCT,
// upsampling, colour conversion) lives in headers whose functions are all `CUSTOM_OP_HD inline`:
// nvcc compiles them into the kernels, a plain C++17 compiler into the CPU test harness
// (tests/jpeg_core_harness.cpp), and what the tests prove about one holds for the other.
//
// Rules for everything under jpeg_core/ (they keep the same text valid device code):
//   - no exceptions, no RTTI, no std containers or <algorithm> in functions (device code cannot
//     call them), no jpeglib.h and no torch (the kernels see neither);
//   - no undefined behaviour on any input: signed arithmetic is bounded by construction or done in
//     unsigned/64-bit, and every read and write is checked against the sizes the caller passed;
//   - right shifts of negative values are assumed arithmetic (implementation-defined before C++20,
//     arithmetic in gcc, clang, MSVC and nvcc; libjpeg-turbo itself assumes the same), which the
//     static_assert below checks at compile time.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CUSTOM_OP_HD __host__ __device__
#else
#define CUSTOM_OP_HD
#endif

// Unrolls the loop it precedes in device code, where arrays indexed only by unrolled loop counters
// live in registers instead of a thread's (slow) local memory.
#if defined(__CUDA_ARCH__)
#define CUSTOM_OP_UNROLL _Pragma("unroll")
#else
#define CUSTOM_OP_UNROLL
#endif

namespace custom_op {
namespace jpeg_core {

static_assert((-7 >> 1) == -4, "jpeg_core needs arithmetic right shifts of negative values");

// A load of memory that stays unchanged while a kernel runs (the tables, the file's bytes): through the
// GPU's read-only data cache in device code, a plain load elsewhere.
template <class T>
CUSTOM_OP_HD inline T load_readonly(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

CUSTOM_OP_HD inline int min_int(int a, int b) { return a < b ? a : b; }
CUSTOM_OP_HD inline int max_int(int a, int b) { return a > b ? a : b; }
CUSTOM_OP_HD inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Two's-complement narrowing, spelled so that it is well defined: the unsigned conversions are
// modular by the standard, and the final unsigned -> signed conversion of an out-of-range value is
// modular on every compiler we build with (and by the standard since C++20).
CUSTOM_OP_HD inline int16_t wrap_int16(int64_t v) {
  return static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint64_t>(v)));
}
CUSTOM_OP_HD inline int32_t wrap_int32(int64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
}

}  // namespace jpeg_core
}  // namespace custom_op
