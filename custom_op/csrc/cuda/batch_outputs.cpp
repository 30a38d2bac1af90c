#include "cuda/batch_outputs.h"

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/TensorImpl.h>

#include "common/item_status.h"

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
    CUSTOM_OP_CHECK_VALUE(outputs[i].sizes() == first->sizes(), "custom_op: stack=True needs one output shape; got ",
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

BatchOutputs allocate_outputs(const std::vector<Item>& items, bool stack, bool views, const at::TensorOptions& device) {
  BatchOutputs out;
  out.per_item.resize(items.size());
  if (!stack) {
    // Every item whose output shape the header gives; with `views`, each output a view of its own part
    // of one allocation: an allocation per output, and its release when the caller drops the output,
    // cost the host more than the rest of a batch's work for that item.
    std::vector<int64_t> at(items.size(), -1);
    int64_t total = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      if (!it.shape_known || it.channels <= 0 || failed(it.status)) continue;
      if (!views) {  // (without the dispatcher, through which an op costs about a microsecond)
        out.per_item[i] =
            at::detail::empty_cuda({it.channels, it.height, it.width}, at::kByte, device.device(), c10::nullopt);
        continue;
      }
      at[i] = total;
      total += output_part_bytes(int64_t{it.channels} * it.height * it.width);
    }
    if (total == 0) return out;
    const at::Tensor block = at::empty({total}, device);
    for (size_t i = 0; i < items.size(); ++i)
      if (at[i] >= 0) out.per_item[i] = part_of(block, at[i], {items[i].channels, items[i].height, items[i].width});
    return out;
  }
  const Item* first = nullptr;
  int channels = 0;
  for (const Item& it : items) {
    if (!it.shape_known) continue;
    if (first == nullptr) first = &it;
    CUSTOM_OP_CHECK_VALUE(it.height == first->height && it.width == first->width,
                          "custom_op: stack=True needs windows of one size; got ", first->height, "x", first->width,
                          " and ", it.height, "x", it.width);
    if (channels == 0) channels = it.channels;
    CUSTOM_OP_CHECK_VALUE(it.channels == 0 || it.channels == channels,
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
  return out;
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
