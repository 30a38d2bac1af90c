#include "cuda/batch_outputs.h"

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

namespace custom_op {
namespace gpu {
namespace {

// A contiguous tensor of `sizes` on `base`'s storage from element `offset` (what a narrow and a view
// of base give), made without the dispatcher, through which an op costs about a microsecond: for
// every item of a batch.
at::Tensor part_of(const at::Tensor& base, int64_t offset, c10::IntArrayRef sizes) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(), base.dtype());
  impl->set_storage_offset(offset);
  impl->set_sizes_contiguous(sizes);
  return at::Tensor(std::move(impl));
}

// Stacks the outputs when no shape was known before decoding (every file went to the CPU path).
at::Tensor stack_after_decoding(const std::vector<Item>& items, const std::vector<at::Tensor>& outputs,
                                const at::TensorOptions& device) {
  const at::Tensor* first = nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    if (failed(items[i].status)) continue;
    if (first == nullptr) first = &outputs[i];
    TORCH_CHECK_VALUE(outputs[i].sizes() == first->sizes(), "custom_op: stack=True needs one output shape; got ",
                      first->sizes(), " and ", outputs[i].sizes());
  }
  if (first == nullptr) return at::empty({0}, device);
  std::vector<at::Tensor> parts;
  parts.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    parts.push_back(failed(items[i].status) ? at::zeros_like(*first) : outputs[i]);
  return at::stack(parts);
}

}  // namespace

BatchOutputs allocate_outputs(const std::vector<Item>& items, bool stack, const at::TensorOptions& device) {
  BatchOutputs out;
  out.per_item.resize(items.size());
  if (stack) {
    const Item* first = nullptr;
    int channels = 0;
    for (const Item& it : items) {
      if (!it.shape_known) continue;
      if (first == nullptr) first = &it;
      TORCH_CHECK_VALUE(it.height == first->height && it.width == first->width,
                        "custom_op: stack=True needs windows of one size; got ", first->height, "x", first->width,
                        " and ", it.height, "x", it.width);
      if (channels == 0) channels = it.channels;
      TORCH_CHECK_VALUE(it.channels == 0 || it.channels == channels,
                        "custom_op: stack=True needs one channel count; mode=UNCHANGED gives ", channels,
                        " channels for one file and ", it.channels,
                        " for another (use mode=RGB or GRAY, or stack=False)");
    }
    if (first != nullptr && channels > 0) {
      out.stacked = at::empty({static_cast<int64_t>(items.size()), channels, first->height, first->width}, device);
      const int64_t each = int64_t{channels} * first->height * first->width;
      for (size_t i = 0; i < items.size(); ++i)
        out.per_item[i] = part_of(out.stacked, static_cast<int64_t>(i) * each, {channels, first->height, first->width});
    }
  }
  return out;
}

void allocate_item_outputs(const std::vector<Item>& items, std::vector<at::Tensor>& per_item,
                           const at::TensorOptions& device) {
  // Each its own allocation (the op's outputs must not alias one another), made without the dispatcher.
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (!per_item[i].defined() && on_gpu(it.path))
      per_item[i] =
          at::detail::empty_cuda({it.channels, it.height, it.width}, at::kByte, device.device(), c10::nullopt);
  }
}

BatchResults batch_results(const std::vector<Item>& items, BatchOutputs& outputs, bool stack,
                           const at::TensorOptions& device) {
  const size_t n = items.size();
  std::vector<int64_t> status(n), paths(n);
  std::vector<std::string> messages(n);
  for (size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    const Item& decoder = it.leader >= 0 ? items[static_cast<size_t>(it.leader)] : it;
    paths[i] = it.path;
    if (decoder.segments.defined() && staged(it.path)) paths[i] |= kSegmentsFlag;
    status[i] = static_cast<int64_t>(it.status);
    messages[i] = it.message;
    if (!failed(it.status)) continue;
    if (outputs.stacked.defined()) {
      outputs.per_item[i].zero_();  // a failed item's place in a stack reads as black, never as stale memory
    } else {
      outputs.per_item[i] = at::empty({0}, device);
    }
  }
  std::vector<at::Tensor> images;
  if (outputs.stacked.defined()) {
    images = {outputs.stacked};
  } else if (stack) {
    images = {stack_after_decoding(items, outputs.per_item, device)};
  } else {
    images = std::move(outputs.per_item);
  }
  return {std::move(images), std::move(status), std::move(messages), std::move(paths)};
}

}  // namespace gpu
}  // namespace custom_op
