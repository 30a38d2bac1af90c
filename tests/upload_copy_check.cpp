// Drives custom_op/csrc/cuda/upload_copy.cpp for tests/test_upload_copy.py: copies every size from 0
// to 1,000 bytes, and a few larger ones, at every destination offset from an aligned place (0 .. 64)
// with every way this host offers, and checks each copy byte for byte, and that no byte around the
// destination changed. Prints the ways it checked, or what went wrong.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/upload_copy.h"

using custom_op::gpu::copy_with;
using custom_op::gpu::kUploadAlignment;
using custom_op::gpu::kUploadCopies;
using custom_op::gpu::upload_copy_available;
using custom_op::gpu::upload_copy_kind;
using custom_op::gpu::upload_copy_name;
using custom_op::gpu::UploadCopy;

namespace {

// Copies into buffer at kUploadAlignment + offset, and checks the copy and the kUploadAlignment bytes
// on either side of it (the buffer holds 0xA5 elsewhere, before and after).
bool check(UploadCopy kind, size_t size, size_t offset, const std::vector<uint8_t>& src, uint8_t* buffer) {
  uint8_t* dst = buffer + kUploadAlignment + offset;
  const uint8_t* from = src.data() + (size % 13);  // sources at any alignment
  copy_with(kind, dst, from, size);
  bool ok = true;
  for (uint8_t* p = dst - kUploadAlignment; p < dst + size + kUploadAlignment && ok; ++p) {
    const bool inside = p >= dst && p < dst + size;
    const uint8_t want = inside ? from[p - dst] : 0xA5;
    if (*p != want) {
      std::printf("%s: size %zu, offset %zu: byte %td is %u, not %u\n", upload_copy_name(kind), size, offset, p - dst,
                  *p, want);
      ok = false;
    }
  }
  std::memset(dst, 0xA5, size);
  return ok;
}

}  // namespace

int main() {
  const size_t largest = 300000;
  std::vector<uint8_t> src(largest + 16);
  uint32_t state = 12345;
  for (uint8_t& b : src) b = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  const size_t buffer_size = (largest / kUploadAlignment + 4) * kUploadAlignment;  // (aligned_alloc: a multiple)
  uint8_t* buffer = static_cast<uint8_t*>(std::aligned_alloc(kUploadAlignment, buffer_size));
  std::memset(buffer, 0xA5, buffer_size);
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 1000; ++s) sizes.push_back(s);
  for (size_t s : {4095, 4096, 4097, 65536 + 17, 131072, 299999, 300000}) sizes.push_back(s);
  bool ok = true;
  for (const UploadCopy kind : kUploadCopies) {
    if (!upload_copy_available(kind)) continue;
    for (size_t size : sizes)
      for (size_t offset = 0; offset <= kUploadAlignment && ok; offset += (size > 1000 ? 16 : 1))
        ok = check(kind, size, offset, src, buffer);
    if (!ok) break;
    std::printf("%s ", upload_copy_name(kind));
  }
  std::printf("\nused: %s\n", upload_copy_name(upload_copy_kind()));
  std::free(buffer);
  return ok ? 0 : 1;
}
