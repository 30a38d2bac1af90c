#include "nvjpeg_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Tuning defaults (see Tuning in the header), chosen on the H100 (bench/results/gpu_h100.md, session 3):
// the header-only parse won (batch 64: 15,800 against 14,100 images/s, 0.079 against 0.106 ms of host
// CPU per image, side by side); several hardware calls at once, the GPU-hybrid batched decoder's share
// and one YCbCr format for every file all lost, and stay as settings for measurement only.
constexpr int kDefaultParseMode = 1;
constexpr int kDefaultHardwareJobs = 1;
constexpr int kDefaultGpuPercent = 0;
constexpr int kDefaultGpuMinItems = 0;
constexpr int kDefaultOneFormat = 0;

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) return fallback;
  return std::max(lo, std::min(hi, std::atoi(v)));
}

bool env_flag_off(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}

// ---- allocators handed to nvJPEG: PyTorch's, so its memory shows in torch.cuda statistics and is
// reused across calls rather than cudaMalloc'ed.

int device_malloc(void* ctx, void** ptr, size_t size, cudaStream_t /*stream*/) {
  trace("device_malloc");
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
  trace("pinned_malloc");
  try {
    if (size == 0) {
      *ptr = nullptr;
      return 0;
    }
    at::Tensor block = at::empty({static_cast<int64_t>(size)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
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
  trace("create context");
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&c->tag_stream, cudaStreamNonBlocking));
  c->device_allocator = {&device_malloc, &device_free, c};
  c->pinned_allocator = {&pinned_malloc, &pinned_free, c};
  c->torch_allocators = !env_flag_off("CUSTOM_OP_NVJPEG_TORCH_ALLOCATORS");
  nvjpegGetProperty(MAJOR_VERSION, &c->nvjpeg_version[0]);
  nvjpegGetProperty(MINOR_VERSION, &c->nvjpeg_version[1]);
  nvjpegGetProperty(PATCH_LEVEL, &c->nvjpeg_version[2]);

  // libjpeg's "fancy" (interpolating) chroma upsampling, which the CPU path uses too. Older nvJPEG
  // releases do not know the flag; they are tried without it, and backend_info says so.
  unsigned flags = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
  trace(c->torch_allocators ? "default backend handle, torch allocators" : "default backend handle");
  nvjpegStatus_t s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  if (s != NVJPEG_STATUS_SUCCESS && c->torch_allocators) {
    c->torch_allocators = false;  // then nvJPEG's own cudaMalloc / cudaHostAlloc
    s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  }
  if (s != NVJPEG_STATUS_SUCCESS) {
    flags = 0;
    c->interpolation = false;
    s = create_handle(*c, NVJPEG_BACKEND_DEFAULT, flags, &c->hybrid);
  }
  if (s != NVJPEG_STATUS_SUCCESS) fail_nvjpeg("nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT)", s);
  nvjpegSetDeviceMemoryPadding(kDevicePadding, c->hybrid);
  nvjpegSetPinnedMemoryPadding(kPinnedPadding, c->hybrid);
  trace("decoders");
  CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderCreate(c->hybrid, NVJPEG_BACKEND_GPU_HYBRID, &c->gpu_hybrid_decoder));
  CUSTOM_OP_NVJPEG_CHECK(nvjpegDecoderCreate(c->hybrid, NVJPEG_BACKEND_HYBRID, &c->cpu_hybrid_decoder));

  // Batched whole-image decode with Huffman decoding on the GPU (CUDA cores): takes a share of a batch
  // alongside the JPEG engines (decode_cuda.cpp). Optional: without it every item stays on the engines.
  trace("gpu-hybrid batched handle");
  if (create_handle(*c, NVJPEG_BACKEND_GPU_HYBRID, flags, &c->gpu_batched) == NVJPEG_STATUS_SUCCESS) {
    nvjpegSetDeviceMemoryPadding(kDevicePadding, c->gpu_batched);
    nvjpegSetPinnedMemoryPadding(kPinnedPadding, c->gpu_batched);
  } else {
    c->gpu_batched = nullptr;
  }

  // The hardware decoder upsamples chroma by replication unless asked to interpolate. With the flag,
  // nvJPEG 13.0.1 matched libjpeg-turbo within 1 level on the ImageNet sample but decoded 3x slower
  // (about 4,000 against 12,000 images/s at batch 64 on an H100, the host busy in the batched call).
  // Replication is the default; CUSTOM_OP_NVJPEG_HW_INTERPOLATION=1 asks for interpolation.
  const char* hw_interp = std::getenv("CUSTOM_OP_NVJPEG_HW_INTERPOLATION");
  if (hw_interp != nullptr && hw_interp[0] == '1' && c->interpolation) {
    c->hardware_interpolation = true;
  } else {
    flags &= ~unsigned(NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION);
    c->hardware_interpolation = false;
  }
  if (env_flag_off("CUSTOM_OP_NVJPEG_HARDWARE")) {
    c->hardware_note = "disabled by CUSTOM_OP_NVJPEG_HARDWARE=0";
  } else {
    trace("hardware backend handle");
    // CUSTOM_OP_NVJPEG_HW_NO_PIPELINE=1: nvJPEG's batched hardware decode without its buffering of
    // further images (a diagnostic; see bench/results/gpu_h100.md).
    if (env_int("CUSTOM_OP_NVJPEG_HW_NO_PIPELINE", 0, 0, 1) == 1) flags |= NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE;
    s = create_handle(*c, NVJPEG_BACKEND_HARDWARE, flags, &c->hardware);
    if (s != NVJPEG_STATUS_SUCCESS) {
      c->hardware = nullptr;
      c->hardware_note = std::string("no hardware JPEG decoder on this GPU (nvjpegCreateEx: ") + status_name(s) + ")";
    } else {
      trace("hardware decoder info");
      nvjpegSetDeviceMemoryPadding(kDevicePadding, c->hardware);
      nvjpegSetPinnedMemoryPadding(kPinnedPadding, c->hardware);
      if (nvjpegGetHardwareDecoderInfo(c->hardware, &c->hardware_engines, &c->hardware_cores) != NVJPEG_STATUS_SUCCESS) {
        c->hardware_engines = c->hardware_cores = 0;
      }
    }
  }
  trace("context ready");
  return c;
}

DecodeState* create_state(DeviceContext& c) {
  trace("create decode state");
  auto* s = new DecodeState();
  s->context = &c;
  C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s->decode_stream, cudaStreamNonBlocking));
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&s->decoded, cudaEventDisableTiming));
  for (Slot& slot : s->slots) C10_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  trace("hybrid objects");
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
  trace("decode state ready");
  return s;
}

}  // namespace

Tuning& tuning() {
  static Tuning* t = [] {
    auto* t = new Tuning();  // never destroyed: read by threads that may outlive static teardown
    t->parse_mode.store(env_int("CUSTOM_OP_NVJPEG_PARSE", kDefaultParseMode, 0, 2));
    t->hardware_jobs.store(env_int("CUSTOM_OP_NVJPEG_HW_JOBS", kDefaultHardwareJobs, 1, Slot::kMaxHardwareJobs));
    t->gpu_percent.store(env_int("CUSTOM_OP_NVJPEG_GPU_SHARE", kDefaultGpuPercent, 0, 100));
    t->gpu_min_items.store(env_int("CUSTOM_OP_NVJPEG_GPU_MIN", kDefaultGpuMinItems, 0, 1 << 20));
    t->one_format.store(env_int("CUSTOM_OP_NVJPEG_ONE_FORMAT", kDefaultOneFormat, 0, 1));
    return t;
  }();
  return *t;
}

bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("CUSTOM_OP_NVJPEG_TRACE");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

void trace(const char* step) {
  if (tracing()) std::fprintf(stderr, "custom_op nvjpeg: %s\n", step);
}

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
    ++context.states_created;
  }
  state_ = create_state(context);
}

StateLease::~StateLease() {
  std::lock_guard<std::mutex> lock(context_.pool_mutex);
  context_.free_states.push_back(state_);
}

nvjpegJpegState_t batched_state(DeviceContext& context, Slot& slot, bool gpu, int job, int group) {
  nvjpegJpegState_t& state = gpu ? slot.gpu_states[group] : slot.hw_states[job][group];
  if (state == nullptr) CUSTOM_OP_NVJPEG_CHECK(nvjpegJpegStateCreate(gpu ? context.gpu_batched : context.hardware, &state));
  return state;
}

void reserve_job_streams(DecodeState& state, size_t n) {
  while (state.job_streams.size() < n) {
    cudaStream_t stream = nullptr;
    cudaEvent_t event = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    state.job_streams.push_back(stream);
    state.job_events.push_back(event);
  }
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
