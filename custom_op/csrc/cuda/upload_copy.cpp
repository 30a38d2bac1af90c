#include "cuda/upload_copy.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CUSTOM_OP_STREAMING_STORES 1
#endif

namespace custom_op {
namespace gpu {
namespace {

#if CUSTOM_OP_STREAMING_STORES
// Each loads and stores four registers per iteration (a 64- or 128-byte stretch); the tail is memcpy.
// Each also prefetches the source kPrefetchAhead bytes on: the files are seldom in the cache, and the
// hardware's own prefetch stops at each 4 KB page, so that every page began with a wait for memory. A
// prefetch never faults, so one past the file's end is harmless; its address is made as an integer, since
// a pointer that far past the end is not a valid one.
constexpr size_t kPrefetchAhead = 2048;

inline void prefetch(const uint8_t* base, size_t at) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + at), _MM_HINT_T0);
}

void stream_16(uint8_t* dst, const uint8_t* src, size_t size) {
  size_t i = 0;
  for (; i + 64 <= size; i += 64) {
    prefetch(src, i + kPrefetchAhead);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, size - i);
}

__attribute__((target("avx2"))) void stream_32(uint8_t* dst, const uint8_t* src, size_t size) {
  size_t i = 0;
  for (; i + 128 <= size; i += 128) {
    prefetch(src, i + kPrefetchAhead);
    prefetch(src, i + kPrefetchAhead + 64);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, size - i);
}
#endif

}  // namespace

bool upload_copy_available(UploadCopy kind) {
  switch (kind) {
    case UploadCopy::kPlain: return true;
#if CUSTOM_OP_STREAMING_STORES
    case UploadCopy::kStreaming16: return true;
    case UploadCopy::kStreaming32: return __builtin_cpu_supports("avx2");
#endif
    default: return false;
  }
}

const char* upload_copy_name(UploadCopy kind) {
  switch (kind) {
    case UploadCopy::kPlain: return "plain";
    case UploadCopy::kStreaming16: return "streaming16";
    case UploadCopy::kStreaming32: return "streaming32";
  }
  return "?";
}

UploadCopy upload_copy_kind() {
  static const UploadCopy kind = [] {
    UploadCopy widest = UploadCopy::kPlain;
    for (const UploadCopy k : kUploadCopies)
      if (upload_copy_available(k)) widest = k;
    return widest;
  }();
  return kind;
}

void copy_with(UploadCopy kind, uint8_t* dst, const uint8_t* src, size_t size) {
#if CUSTOM_OP_STREAMING_STORES
  if (kind != UploadCopy::kPlain && (reinterpret_cast<uintptr_t>(dst) & (kUploadAlignment - 1)) == 0) {
    if (kind == UploadCopy::kStreaming32) stream_32(dst, src, size);
    else stream_16(dst, src, size);
    _mm_sfence();  // streaming stores are weakly ordered: make them visible before the caller says so
    return;
  }
#endif
  (void)kind;
  std::memcpy(dst, src, size);
}

}  // namespace gpu
}  // namespace custom_op
