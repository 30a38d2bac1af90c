// The GPU library's kernels for the operators ops.cpp declares: decode_jpegs_cuda, gpu_backend_info and
// _set_gpu_testing.
//
// decode_jpegs_cuda: the planner reads every header on the host and decides which items the GPU
// decoders may take (planner.h); the executors claim those, in order, and queue their decodes: our own
// CUDA decoder writes its windows straight into the outputs, nvJPEG's decoders write into a staging
// buffer on the decode state's stream, from which one kernel on the caller's stream copies every
// window into its output (executor.h, copy_out.h); then the CPU path decodes the rest, including what
// the GPU decoders failed on (cpu_fallback.h).
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/checked_options.h"
#include "common/item_status.h"
#include "cuda/batch_item.h"
#include "cuda/batch_outputs.h"
#include "cuda/copy_out.h"
#include "cuda/cpu_fallback.h"
#include "cuda/decode_planned.h"
#include "cuda/executor.h"
#include "cuda/nvjpeg_context.h"
#include "cuda/planner.h"
#include "cuda/testing_options.h"

namespace custom_op {
namespace gpu {
namespace {

void decode_on_gpu(std::vector<Item>& items, std::vector<at::Tensor>& outputs, const CallOptions& options,
                   const TestingOptions& testing, const c10::Device& on) {
  const c10::DeviceIndex device = on.index();
  DeviceContext& context = device_context(device);
  StateLease lease(context);
  Slot& slot = lease->slots[lease->next_slot];
  lease->next_slot ^= 1;
  slot.wait();
  for (const Item& it : items) {
    slot.inputs.push_back(it.data);
    if (it.segments.defined()) slot.inputs.push_back(it.segments);
  }
  const cudaStream_t caller = c10::cuda::getCurrentCUDAStream(device).stream();
  DecodeCall call{context, *lease, slot, options, testing, outputs, caller};
  const std::unique_ptr<Executor> executors[] = {segment_executor(), hardware_executor(), hybrid_executor()};
  {
    RECORD_FUNCTION("custom_op::gpu_claim", std::vector<c10::IValue>());
    // Our own decoder claims first; what it leaves goes to nvJPEG's executors only where nvJPEG may
    // take it, checked first when the caller asks for the CPU path's outcome on damaged files
    // (executor.h's nvjpeg_files_checked).
    executors[0]->claim(call, items);
    leave_to_cpu_what_nvjpeg_cannot_take(items, testing);
    if (nvjpeg_files_checked(options, testing)) send_unchecked_files_to_cpu(items);
    for (size_t e = 1; e < std::size(executors); ++e) executors[e]->claim(call, items);
    slot.staging.reserve(std::max<size_t>(lay_out_staging(items), 1), context.tag_stream);
  }
  {
    RECORD_FUNCTION("custom_op::gpu_queue", std::vector<c10::IValue>());
    for (const auto& executor : executors) executor->decode(call, items);
    share_leader_decodes(items);
    C10_CUDA_CHECK(cudaEventRecord(lease->decoded, lease->decode_stream));
    C10_CUDA_CHECK(cudaStreamWaitEvent(caller, lease->decoded, 0));
    copy_out(context, slot, items, outputs, caller);
    C10_CUDA_CHECK(cudaEventRecord(slot.done, caller));
    slot.in_flight = true;
  }
  RECORD_FUNCTION("custom_op::gpu_finish", std::vector<c10::IValue>());
  for (const auto& executor : executors) executor->finish(call, items);
}

}  // namespace

BatchResults decode_planned(std::vector<Item>& items, bool stack, const CallOptions& options,
                            const TestingOptions& testing, const c10::Device& device) {
  const auto on_device = at::TensorOptions().dtype(at::kByte).device(device);
  // The phases are recorded for torch.profiler, so that a trace shows where a call's host time goes.
  BatchOutputs outputs;
  {
    RECORD_FUNCTION("custom_op::gpu_outputs", std::vector<c10::IValue>());
    outputs = allocate_outputs(items, stack, !options.whole && options.mode != ReadMode::kUnchanged, on_device);
  }
  bool any_gpu = false;
  for (const Item& it : items) any_gpu |= it.path == kPending;
  if (any_gpu) decode_on_gpu(items, outputs.per_item, options, testing, device);
  {
    RECORD_FUNCTION("custom_op::cpu_fallback", std::vector<c10::IValue>());
    decode_on_cpu(items, outputs.per_item, options, stack, on_device);
  }
  RECORD_FUNCTION("custom_op::gpu_results", std::vector<c10::IValue>());
  return batch_results(items, outputs, stack, on_device);
}

namespace {

BatchResults decode_jpegs_cuda(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                               c10::IntArrayRef heights, c10::IntArrayRef widths, bool whole, int64_t mode,
                               bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels, bool stack,
                               int64_t device_index, bool check_entropy, c10::IntArrayRef scales, int64_t decoder) {
  // The call's checks and messages are those of the CPU operator (decode_jpegs); with whole=True the
  // window lists are ignored.
  const size_t n = data.size();
  if (!whole)
    CUSTOM_OP_CHECK_VALUE(tops.size() == n && lefts.size() == n && heights.size() == n && widths.size() == n,
                          kMessagePrefix, "tops, lefts, heights and widths must each have one entry per image (", n,
                          ")");
  check_gpu_scales(scales.data(), scales.size(), n, whole);
  const CallOptions options{checked_decode_options(mode, apply_exif_orientation, on_warning, max_pixels), whole,
                            check_entropy, checked_gpu_decoder(decoder)};
  CUSTOM_OP_CHECK_VALUE(device_index >= 0, kMessagePrefix, "device index must be >= 0, got ", device_index);
  const TestingOptions testing = testing_options();
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::CUDAGuard device_guard(device);
  std::vector<Item> items;
  {
    RECORD_FUNCTION("custom_op::gpu_plan", std::vector<c10::IValue>());
    items = plan_items(data, tops, lefts, heights, widths, scales, options, testing);
  }
  return decode_planned(items, stack, options, testing, device);
}

std::tuple<std::string, bool, int64_t, int64_t, std::string, bool> gpu_backend_info(int64_t device_index) {
  CUSTOM_OP_CHECK_VALUE(device_index >= 0, "custom_op: device index must be >= 0, got ", device_index);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  const DeviceContext& c = device_context(static_cast<int>(device_index));
  const std::string version = std::to_string(c.nvjpeg_version[0]) + "." + std::to_string(c.nvjpeg_version[1]) + "." +
                              std::to_string(c.nvjpeg_version[2]);
  return {version,
          c.hardware != nullptr,
          static_cast<int64_t>(c.hardware_engines),
          static_cast<int64_t>(c.hardware_cores),
          c.hardware_note,
          c.torch_allocators};
}

}  // namespace

// CompositeExplicitAutograd: the encoded bytes are CPU tensors and an empty batch has none, and a
// CompositeImplicitAutograd kernel would be decomposed by FakeTensor tracing, which uses the fake
// kernels of custom_op/_ops.py instead.
TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("decode_jpegs_cuda", &decode_jpegs_cuda);
  m.impl("gpu_backend_info", &gpu_backend_info);
  m.impl("_set_gpu_testing", &set_gpu_testing);
  m.impl("_cuda_decoder_fallbacks", &segment_decoder_fallbacks);
  m.impl("_cuda_decoder_retries", &segment_decoder_retries);
}

}  // namespace gpu
}  // namespace custom_op
