// CPU kernel of the batched decode (custom_op::decode_jpegs): the items are decoded in parallel on
// torch's intra-op thread pool (torch.get_num_threads() threads; one in DataLoader workers, where torch
// sets it so), so that one process can decode a whole batch without worker processes. The Python
// binding of torch.ops releases the GIL for the call.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/checked_options.h"
#include "common/item_status.h"
#include "decode_cpu.h"
#include "parallel_items.h"
#include "tensors.h"

namespace custom_op {
namespace {

// The channel count every decoded window has in this mode, or 0 when it depends on the file.
int fixed_channels(ReadMode mode) { return mode == ReadMode::kGray ? 1 : mode == ReadMode::kRgb ? 3 : 0; }

std::tuple<std::vector<Tensor>, std::vector<int64_t>, std::vector<std::string>> decode_jpegs_cpu(
    const std::vector<Tensor>& data, IntArrayRef tops, IntArrayRef lefts, IntArrayRef heights, IntArrayRef widths,
    bool whole, int64_t mode, bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels, bool stack) {
  const int64_t n = static_cast<int64_t>(data.size());
  const size_t count = data.size();
  if (!whole)
    CUSTOM_OP_CHECK_VALUE(
        tops.size() == count && lefts.size() == count && heights.size() == count && widths.size() == count,
        kMessagePrefix, "tops, lefts, heights and widths must each have one entry per image (", n, ")");
  const auto options = checked_decode_options(mode, apply_exif_orientation, on_warning, max_pixels);

  // Windows of one size in a mode with a fixed channel count decode straight into the stack.
  std::optional<Tensor> stacked;
  const int channels = fixed_channels(options.mode);
  if (stack && !whole && n > 0 && channels > 0) {
    bool one_size = true;
    for (size_t i = 1; i < count; ++i) one_size &= heights[i] == heights[0] && widths[i] == widths[0];
    CUSTOM_OP_CHECK_VALUE(one_size, kMessagePrefix, "stack=True needs windows of one size; got ", heights[0], "x",
                          widths[0], " and others");
    if (heights[0] > 0 && widths[0] > 0) stacked = new_cpu_tensor({n, channels, heights[0], widths[0]});
  }

  std::vector<Tensor> images(count);
  std::vector<ItemOutcome> outcomes(count);
  for_each_item(n, [&](int64_t i) {
    const size_t k = static_cast<size_t>(i);
    std::string warnings;
    outcomes[k] = capture_outcome([&] {
      const std::optional<Tensor> into =
          stacked ? std::optional<Tensor>(torch::stable::select(*stacked, 0, i)) : std::nullopt;
      Decoded decoded = whole ? decode_whole(data[k], options)
                              : decode_and_crop(data[k], tops[k], lefts[k], heights[k], widths[k], options,
                                                /*scale_num=*/8, into ? &*into : nullptr);
      images[k] = std::move(decoded.image);
      warnings = std::move(decoded.warnings);
    });
    if (outcomes[k].status == ItemStatus::kOk && !warnings.empty()) outcomes[k] = {ItemStatus::kWarned, warnings};
  });

  auto [status, messages] = outcome_lists(outcomes);
  if (!stack) {
    for (size_t i = 0; i < count; ++i)
      if (failed(outcomes[i].status)) images[i] = new_cpu_tensor({0});
    return {std::move(images), std::move(status), std::move(messages)};
  }
  if (stacked) {
    for (size_t i = 0; i < count; ++i) {
      if (!failed(outcomes[i].status)) continue;
      Tensor slot = torch::stable::select(*stacked, 0, static_cast<int64_t>(i));
      torch::stable::zero_(slot);
    }
    return {{*stacked}, std::move(status), std::move(messages)};
  }
  // The shape was known only after decoding (whole images, or mode UNCHANGED).
  const Tensor* first = nullptr;
  for (size_t i = 0; i < count; ++i) {
    if (failed(outcomes[i].status)) continue;
    if (first == nullptr) first = &images[i];
    CUSTOM_OP_CHECK_VALUE(same_shape(images[i].sizes(), first->sizes()), kMessagePrefix,
                          "stack=True needs one output shape; got ", shape_text(first->sizes()), " and ",
                          shape_text(images[i].sizes()));
  }
  if (first == nullptr) return {{new_cpu_tensor({0})}, std::move(status), std::move(messages)};
  std::vector<int64_t> sizes = first->sizes().vec();
  sizes.insert(sizes.begin(), n);
  Tensor out = new_cpu_tensor(sizes);
  for (size_t i = 0; i < count; ++i) {
    Tensor slot = torch::stable::select(out, 0, static_cast<int64_t>(i));
    if (failed(outcomes[i].status)) {
      torch::stable::zero_(slot);
    } else {
      torch::stable::copy_(slot, images[i]);
    }
  }
  return {{out}, std::move(status), std::move(messages)};
}

}  // namespace

// CompositeExplicitAutograd rather than CPU: an empty batch has no tensor to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("decode_jpegs", TORCH_BOX(&decode_jpegs_cpu));
}

}  // namespace custom_op
