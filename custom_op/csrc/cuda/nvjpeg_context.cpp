#include "nvjpeg_context.h"

#include <algorithm>
#include <unordered_map>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

namespace custom_op {
namespace gpu {
namespace {

// nvJPEG grows its buffers to the largest image seen; padding rounds each growth up so that a
// stream of slightly larger images does not reallocate every time.
constexpr size_t kDevicePadding = size_t(1) << 20;
constexpr size_t kPinnedPadding = size_t(1) << 20;
constexpr size_t kBufferGranule = size_t(1) << 20;

// ---- allocators handed to nvJPEG: PyTorch's, so its memory shows in torch.cuda statistics and is
// reused across calls rather than cudaMalloc'ed.

int device_malloc(void* ctx, void** ptr, size_t size, cudaStream_t /*stream*/) {
  try {
    auto* context = static_cast<DeviceContext*>(ctx);
    *ptr = size == 0 ? nullptr : c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, context->tag_stream);
    return 0;
  } catch (...) {
    return 1;
  }
}

int device_free(void* /*ctx*/, void* ptr, size_t /*size*/, cudaStream_t /*stream*/) {
  if (ptr == nullptr) return 0;
  // nvJPEG frees a buffer when it outgrows it, expecting cudaFree's implicit synchronization: work
  // it queued may still read the old buffer, and the caching allocator would hand it out again at
  // once. Rare (growth only), so a full synchronization is affordable.
  cudaDeviceSynchronize();
  try {
    c10::cuda::CUDACachingAllocator::raw_delete(ptr);
    return 0;
  } catch (...) {
    return 1;
  }
}

struct PinnedBlocks {
  std::mutex mutex;
  std::unordered_map<void*, at::Tensor> blocks;  // pinned tensors from PyTorch's caching host allocator
};

PinnedBlocks& pinned_blocks() {
  static auto* blocks = new PinnedBlocks();  // never destroyed: nvJPEG may free after static teardown
  return *blocks;
}

int pinned_malloc(void* /*ctx*/, void** ptr, size_t size, cudaStream_t /*stream*/) {
  try {
    if (size == 0) {
      *ptr = nullptr;
      return 0;
    }
    at::Tensor block =
        at::empty({static_cast<int64_t>(size)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    *ptr = block.data_ptr();
    PinnedBlocks& registry = pinned_blocks();
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.blocks.emplace(*ptr, std::move(block));
    return 0;
  } catch (...) {
    return 1;
  }
}

int pinned_free(void* /*ctx*/, void* ptr, size_t /*size*/, cudaStream_t /*stream*/) {
  if (ptr == nullptr) return 0;
  cudaDeviceSynchronize();  // as for device memory: a queued copy may still read it
  PinnedBlocks& registry = pinned_blocks();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return registry.blocks.erase(ptr) == 1 ? 0 : 1;
}

nvjpegStatus_t create_handle(DeviceContext& c, nvjpegBackend_t backend, unsigned flags, nvjpegHandle_t* handle) {
  if (c.torch_allocators) return nvjpegCreateExV2(backend, &c.device_allocator, &c.pinned_allocator, flags, handle);
  return nvjpegCreateEx(backend, nullptr, nullptr, flags, handle);
}

DeviceContext* create_context(int device) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto* c = new DeviceContext();
  c->device = device;
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&c->tag_stream, cudaStreamNonBlocking));
  c->device_allocator = {&device_malloc, &device_free, c};
  c->pinned_allocator = {&pinned_malloc, &pinned_free, c};
  nvjpegGetProperty(MAJOR_VERSION, &c->nvjpeg_version[0]);
  nvjpegGetProperty(MINOR_VERSION, &c->nvjpeg_version[1]);
  nvjpegGetProperty(PATCH_LEVEL, &c->nvjpeg_version[2]);

  // libjpeg's "fancy" (interpolating) chroma upsampling, which the CPU path uses too. Older nvJPEG
  // releases do not know the flag; they are tried without it.
  unsigned flags = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
  nvjpegStatus_t s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  if (s != NVJPEG_STATUS_SUCCESS && c->torch_allocators) {
    c->torch_allocators = false;  // then nvJPEG's own cudaMalloc / cudaHostAlloc
    s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  }
  if (s != NVJPEG_STATUS_SUCCESS) {
    flags = 0;
    s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  }
  if (s != NVJPEG_STATUS_SUCCESS) fail_nvjpeg("nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT)", s);
  nvjpegSetDeviceMemoryPadding(kDevicePadding, c->hybrid);
  nvjpegSetPinnedMemoryPadding(kPinnedPadding, c->hybrid);
  CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderCreate(c->hybrid, NVJPEG_BACKEND_GPU_HYBRID, &c->gpu_hybrid_decoder));
  CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderCreate(c->hybrid, NVJPEG_BACKEND_HYBRID, &c->cpu_hybrid_decoder));

  // The hardware decoder is not asked to interpolate: subsampled files come back from it as YCbCr
  // planes, which the copy-out upsamples exactly (hardware_format in nvjpeg_hardware.cpp).
  flags &= ~unsigned(NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION);
  s = create_handle(*c, NVJPEG_BACKEND_HARDWARE, flags, &c->hardware);
  if (s != NVJPEG_STATUS_SUCCESS) {
    c->hardware = nullptr;
    c->hardware_note = std::string("no hardware JPEG decoder on this GPU (nvjpegCreateEx: ") + status_name(s) + ")";
  } else {
    nvjpegSetDeviceMemoryPadding(kDevicePadding, c->hardware);
    nvjpegSetPinnedMemoryPadding(kPinnedPadding, c->hardware);
    if (nvjpegGetHardwareDecoderInfo(c->hardware, &c->hardware_engines, &c->hardware_cores) != NVJPEG_STATUS_SUCCESS) {
      c->hardware_engines = c->hardware_cores = 0;
    }
  }
  return c;
}

DecodeState* create_state(DeviceContext& c) {
  auto* s = new DecodeState();
  s->context = &c;
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s->decode_stream, cudaStreamNonBlocking));
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->decoded, cudaEventDisableTiming));
  for (int i = 0; i < kDecoderParts; ++i) {
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s->part_streams[i], cudaStreamNonBlocking));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->part_done[i], cudaEventDisableTiming));
  }
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->caller_point, cudaEventDisableTiming));
  // A call waits on its slot's previous use (Slot::wait) only when the GPU is behind; a blocking wait
  // then leaves the core to the caller's other threads (DataLoader workers, decode_ahead's producer)
  // instead of spinning on it.
  for (Slot& slot : s->slots)
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming | cudaEventBlockingSync));
  CUSTOM_OP_NVJPEG_CHECK(nvjpegJpegStreamCreate(c.hybrid, &s->hybrid_stream));
  CUSTOM_OP_NVJPEG_CHECK(nvjpegDecodeParamsCreate(c.hybrid, &s->hybrid_params));
  if (c.torch_allocators) {
    CUSTOM_OP_NVJPEG_CHECK(nvjpegBufferDeviceCreateV2(c.hybrid, &c.device_allocator, &s->hybrid_device_buffer));
  } else {
    CUSTOM_OP_NVJPEG_CHECK(nvjpegBufferDeviceCreate(c.hybrid, nullptr, &s->hybrid_device_buffer));
  }
  for (HybridStage& stage : s->stages) {
    CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderStateCreate(c.hybrid, c.gpu_hybrid_decoder, &stage.gpu_state));
    CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderStateCreate(c.hybrid, c.cpu_hybrid_decoder, &stage.cpu_state));
    if (c.torch_allocators) {
      CUSTOM_OP_NVJPEG_CHECK(nvjpegBufferPinnedCreateV2(c.hybrid, &c.pinned_allocator, &stage.pinned));
    } else {
      CUSTOM_OP_NVJPEG_CHECK(nvjpegBufferPinnedCreate(c.hybrid, nullptr, &stage.pinned));
    }
    for (nvjpegJpegState_t state : {stage.gpu_state, stage.cpu_state}) {
      CUSTOM_OP_NVJPEG_CHECK(nvjpegStateAttachPinnedBuffer(state, stage.pinned));
      CUSTOM_OP_NVJPEG_CHECK(nvjpegStateAttachDeviceBuffer(state, s->hybrid_device_buffer));
    }
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&stage.transferred, cudaEventDisableTiming));
  }
  return s;
}

}  // namespace

const char* status_name(nvjpegStatus_t status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    default: return "an unknown nvJPEG status";
  }
}

void fail_nvjpeg(const char* call, nvjpegStatus_t status) {
  TORCH_CHECK(false, "custom_op: nvJPEG call ", call, " failed with ", status_name(status), " (", int(status), ")");
  __builtin_unreachable();
}

void DeviceBuffer::reserve(size_t bytes, cudaStream_t tag) {
  if (bytes <= size_) return;
  const size_t grown = std::max(bytes, size_ + size_ / 2);
  const size_t capacity = (grown + kBufferGranule - 1) / kBufferGranule * kBufferGranule;
  if (ptr_ != nullptr) {
    c10::cuda::CUDACachingAllocator::raw_delete(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }
  ptr_ = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(capacity, tag);
  size_ = capacity;
}

void Slot::wait() {
  if (in_flight) {
    C10_CUDA_CHECK(cudaEventSynchronize(done));
    in_flight = false;
  }
  inputs.clear();
}

DeviceContext& device_context(int device) {
  static std::mutex mutex;
  static auto* contexts = new std::vector<DeviceContext*>();  // never destroyed, see the header
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts->size() <= static_cast<size_t>(device)) contexts->resize(device + 1, nullptr);
  DeviceContext*& c = (*contexts)[device];
  if (c == nullptr) c = create_context(device);
  return *c;
}

StateLease::StateLease(DeviceContext& context) : context_(context), state_(nullptr) {
  {
    std::lock_guard<std::mutex> lock(context.pool_mutex);
    if (!context.free_states.empty()) {
      state_ = context.free_states.back();
      context.free_states.pop_back();
      return;
    }
  }
  state_ = create_state(context);
}

StateLease::~StateLease() {
  std::lock_guard<std::mutex> lock(context_.pool_mutex);
  context_.free_states.push_back(state_);
}

nvjpegJpegState_t hardware_state(DeviceContext& context, Slot& slot, int group) {
  nvjpegJpegState_t& state = slot.hw_states[group];
  if (state == nullptr) CUSTOM_OP_NVJPEG_CHECK(nvjpegJpegStateCreate(context.hardware, &state));
  return state;
}

void reserve_hardware_items(DeviceContext& context, Slot& slot, size_t n) {
  while (slot.hw_streams.size() < n) {
    nvjpegJpegStream_t stream = nullptr;
    CUSTOM_OP_NVJPEG_CHECK(nvjpegJpegStreamCreate(context.hardware, &stream));
    slot.hw_streams.push_back(stream);
  }
  while (slot.hw_params.size() < n) {
    nvjpegDecodeParams_t params = nullptr;
    CUSTOM_OP_NVJPEG_CHECK(nvjpegDecodeParamsCreate(context.hardware, &params));
    slot.hw_params.push_back(params);
  }
}

}  // namespace gpu
}  // namespace custom_op
