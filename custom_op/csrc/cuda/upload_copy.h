// The host's copy of a file in ordinary memory into the pinned upload buffer of our CUDA decoder
// (segment_executor.cpp), the largest part of its host work for such files.
//
// Why not memcpy: the buffer is next read by the GPU's copy engine, not by this core. Streaming stores
// write around the cache, where ordinary stores would first read each line of the buffer into it, so
// the copy costs less CPU time. bench/bench_upload_copy.py times each way beside memcpy (bench/results/).
// The upload buffer places files at multiples of kUploadAlignment so that they need no unaligned head.
#pragma once

#include <cstddef>
#include <cstdint>

namespace custom_op {
namespace gpu {

constexpr size_t kUploadAlignment = 64;

// The ways this host can copy: kPlain is memcpy; kStreaming16 stores 16 bytes at a time around the
// cache (SSE2: any x86-64 CPU), kStreaming32 32 bytes (AVX2).
enum class UploadCopy { kPlain, kStreaming16, kStreaming32 };

// Every way, narrowest first.
constexpr UploadCopy kUploadCopies[] = {UploadCopy::kPlain, UploadCopy::kStreaming16, UploadCopy::kStreaming32};

// The way's name, as the copy's test prints it: "plain", "streaming16" or "streaming32".
const char* upload_copy_name(UploadCopy kind);

// Whether this CPU (and this build) can copy that way.
bool upload_copy_available(UploadCopy kind);

// The way copy_to_upload uses here: the widest streaming stores this CPU has, else memcpy.
UploadCopy upload_copy_kind();

// Copies `size` bytes from src to dst with `kind` (one available here). A dst not at a multiple of
// kUploadAlignment is copied with memcpy. The copy is visible to other threads and to the device once
// the call returns.
void copy_with(UploadCopy kind, uint8_t* dst, const uint8_t* src, size_t size);

inline void copy_to_upload(uint8_t* dst, const uint8_t* src, size_t size) {
  copy_with(upload_copy_kind(), dst, src, size);
}

}  // namespace gpu
}  // namespace custom_op
