// nvJPEG handles per device and a pool of decode states, with memory from PyTorch's allocators.
//
// Per device (created on first use, never destroyed: their destruction at process exit would race
// the CUDA runtime's own teardown):
//   - a handle on the hardware backend (the JPEG engines; absent on GPUs without them) for the
//     batched ROI decode, and a handle on the default backend whose GPU-hybrid and hybrid decoders
//     take what the hardware declines;
//   - a "tag" stream that never runs work: device memory for nvJPEG and for our staging buffers is
//     taken from the caching allocator's pool of that stream, so no block that another stream's
//     queued kernels still use is ever handed to the hardware decoder, which writes at call time.
// Per call, one DecodeState is leased from the device's pool (so concurrent threads never share one),
// and one of its two slots is used: a slot's staging buffer is reused only after the copy-out that
// read it has finished (a host wait on its event, which in steady state has long passed). The slot's
// nvJPEG states wait the same way, which they must: batched hardware calls on one state, each made
// without waiting for the previous call's stream work, hung nvJPEG 13.0.1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <nvjpeg.h>

namespace custom_op {
namespace gpu {

const char* status_name(nvjpegStatus_t status);

[[noreturn]] void fail_nvjpeg(const char* call, nvjpegStatus_t status);

#define CUSTOM_OP_NVJPEG_CHECK(call)                                                                         \
  do {                                                                                                       \
    const nvjpegStatus_t custom_op_status_ = (call);                                                         \
    if (custom_op_status_ != NVJPEG_STATUS_SUCCESS) ::custom_op::gpu::fail_nvjpeg(#call, custom_op_status_); \
  } while (0)

// Device memory from the caching allocator's pool of the device's tag stream. Released (and
// resized) only after every use has been waited for on the host.
class DeviceBuffer {
 public:
  void reserve(size_t bytes, cudaStream_t tag);
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// Our own CUDA decoder decodes a batch in at most this many parts side by side (segment_executor.cpp).
constexpr int kDecoderParts = 4;

struct Slot {
  // The hardware decoder's batched calls: one per output format group in use (RGB or Y; planar
  // YCbCr), each with its own nvJPEG state, made on first use.
  static constexpr int kFormatGroups = 2;
  nvjpegJpegState_t hw_states[kFormatGroups] = {};
  // What each state was last initialized for, batch size * 64 + output format
  // (nvjpegDecodeBatchedInitialize is needed again only when that changes, or after a failed call); 0:
  // not initialized.
  int hw_initialized[kFormatGroups] = {};
  std::vector<nvjpegJpegStream_t> hw_streams;   // one parsed header per hardware candidate
  std::vector<nvjpegDecodeParams_t> hw_params;  // one ROI per hardware item
  DeviceBuffer staging;                         // nvJPEG's output, read by the copy-out kernel
  DeviceBuffer descriptors;                     // the copy-out kernel's WindowCopy array
  at::Tensor pinned_descriptors;                // host side of the same, pinned for the async copy
  std::vector<at::Tensor> inputs;               // the encoded bytes stay alive while nvJPEG may read them
  // Our own CUDA decoder's (segment_executor.cpp): its device buffer, the pinned host side of what it
  // uploads and of the status words it reads back, and the event after each part's read-back.
  DeviceBuffer segments;
  at::Tensor pinned_segments;
  cudaEvent_t statuses_read[kDecoderParts] = {};
  cudaEvent_t done = nullptr;  // recorded on the caller's stream after the copy-out
  bool in_flight = false;

  void wait();  // host wait until the previous call through this slot has finished with it
};

// One stage of the single-image (hybrid) path: its pinned buffer is refilled by the next image's host
// phase only once the transfer that read it has completed.
struct HybridStage {
  nvjpegJpegState_t gpu_state = nullptr;  // on the GPU-hybrid decoder
  nvjpegJpegState_t cpu_state = nullptr;  // on the hybrid decoder
  nvjpegBufferPinned_t pinned = nullptr;
  cudaEvent_t transferred = nullptr;
  bool in_flight = false;
};

struct DeviceContext;

struct DecodeState {
  DeviceContext* context = nullptr;
  cudaStream_t decode_stream = nullptr;  // nvJPEG's stream; the caller's stream waits on `decoded`
  cudaEvent_t decoded = nullptr;
  // Our own CUDA decoder's streams, one per part of a batch (segment_executor.cpp), with an event after
  // each part's work, which the caller's stream waits on, and `caller_point`, after the caller's
  // earlier work, which each part's window kernel waits for.
  cudaStream_t part_streams[kDecoderParts] = {};
  cudaEvent_t part_done[kDecoderParts] = {};
  cudaEvent_t caller_point = nullptr;
  Slot slots[2];
  int next_slot = 0;
  nvjpegJpegStream_t hybrid_stream = nullptr;
  nvjpegDecodeParams_t hybrid_params = nullptr;
  nvjpegBufferDevice_t hybrid_device_buffer = nullptr;
  HybridStage stages[2];
  int next_stage = 0;
};

struct DeviceContext {
  int device = 0;
  cudaStream_t tag_stream = nullptr;
  bool torch_allocators = true;  // false when nvJPEG refused them and uses cudaMalloc/cudaHostAlloc
  nvjpegDevAllocatorV2_t device_allocator{};
  nvjpegPinnedAllocatorV2_t pinned_allocator{};
  nvjpegHandle_t hybrid = nullptr;
  nvjpegJpegDecoder_t gpu_hybrid_decoder = nullptr;
  nvjpegJpegDecoder_t cpu_hybrid_decoder = nullptr;
  nvjpegHandle_t hardware = nullptr;  // null: no JPEG engine (hardware_note says why)
  unsigned hardware_engines = 0;
  unsigned hardware_cores = 0;
  std::string hardware_note;
  int nvjpeg_version[3] = {0, 0, 0};

  std::mutex pool_mutex;
  std::vector<DecodeState*> free_states;
};

// The device's context, created on first use (thread-safe). Throws when nvJPEG cannot start.
DeviceContext& device_context(int device);

// Exclusive use of one DecodeState for the duration of a call.
class StateLease {
 public:
  explicit StateLease(DeviceContext& context);
  ~StateLease();
  StateLease(const StateLease&) = delete;
  StateLease& operator=(const StateLease&) = delete;
  DecodeState& operator*() const { return *state_; }
  DecodeState* operator->() const { return state_; }

 private:
  DeviceContext& context_;
  DecodeState* state_;
};

// Grows a slot's per-item nvJPEG objects to at least n.
void reserve_hardware_items(DeviceContext& context, Slot& slot, size_t n);

// The slot's hardware decoder state for output-format group `group`, created on first use.
nvjpegJpegState_t hardware_state(DeviceContext& context, Slot& slot, int group);

}  // namespace gpu
}  // namespace custom_op
