// CPU kernel of the batched fused resized crop (custom_op::decode_and_resized_crop_jpegs): for each item,
// the header is read once, the item planned (common/resized_crop_plan.h), the planned scaled pixels
// decoded (decode_cpu.h), resampled (resize_cpu.h) and written into the item's slot of one
// [N, C, h, w] output, in its dtype and normalised (jpeg_core/normalize.h). The single-image resized
// crop and the transforms call it with one item.
//
// Items run in parallel on torch's intra-op thread pool, one item per task (parallel_items.h); each
// has a status and a message (common/item_status.h), and a failed item's slot is zeros.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/item_status.h"
#include "common/resample_taps.h"
#include "common/resized_crop_args.h"
#include "common/resized_crop_plan.h"
#include "decode_cpu.h"
#include "jpeg_core/normalize.h"
#include "parallel_items.h"
#include "resize_cpu.h"
#include "tensors.h"

namespace custom_op {
namespace {

constexpr const char* kOp = kResizedCropOp;

ScalarType scalar_type(int64_t dtype) {
  switch (dtype) {
    case jpeg_core::kOutFloat32: return ScalarType::Float;
    case jpeg_core::kOutFloat16: return ScalarType::Half;
    case jpeg_core::kOutBfloat16: return ScalarType::BFloat16;
    default: return ScalarType::Byte;
  }
}

// One channel's 256 output values: every uint8 sample maps to one, so a table computes each once.
template <class T>
void fill_table(T* table, float mean, float std, int32_t dtype) {
  for (int x = 0; x < 256; ++x) {
    const float v = jpeg_core::normalize_sample(static_cast<uint8_t>(x), mean, std);
    if constexpr (sizeof(T) == 4) {
      table[x] = v;
    } else {
      table[x] =
          dtype == jpeg_core::kOutFloat16 ? jpeg_core::float_to_half_bits(v) : jpeg_core::float_to_bfloat16_bits(v);
    }
  }
}

template <class T>
void convert_planes(const uint8_t* src, int64_t channels, int64_t plane, const ResizedCropArgs& r, T* dst) {
  T table[256];
  for (int64_t c = 0; c < channels; ++c) {
    const bool normalised = !r.mean.empty();
    fill_table(table, normalised ? r.mean[c] : 0.0f, normalised ? r.std[c] : 1.0f, r.dtype);
    const uint8_t* in = src + c * plane;
    T* out = dst + c * plane;
    for (int64_t i = 0; i < plane; ++i) out[i] = table[in[i]];
  }
}

// The item's uint8 [channels, h, w] pixels written into `slot` (contiguous, of the output's dtype).
void write_output(const uint8_t* pixels, int64_t channels, int64_t plane, const ResizedCropArgs& r, void* slot) {
  switch (r.dtype) {
    case jpeg_core::kOutFloat32: convert_planes(pixels, channels, plane, r, static_cast<float*>(slot)); break;
    case jpeg_core::kOutFloat16:
    case jpeg_core::kOutBfloat16: convert_planes(pixels, channels, plane, r, static_cast<uint16_t*>(slot)); break;
    default: std::memcpy(slot, pixels, static_cast<size_t>(channels * plane));
  }
}

// Where one item's output goes: `slot`, its place in the stacked output (contiguous, of the output's
// dtype), or, when that is null (mode UNCHANGED, whose channel count the file gives), a new tensor.
struct ItemOutput {
  void* slot = nullptr;
  std::optional<Tensor> own;
};

// One item: decode the planned pixels and resample them into its output. Returns libjpeg's warnings
// (on_warning "warn").
std::string resized_crop_item(const Tensor& data, const ResizedCropArgs& r, ResizedCropRequest crop, bool flip,
                              ItemOutput& out) {
  ResizedCropPlan plan;
  const WindowPlanner planner = [&](const ImageFrame& frame) {
    if (crop.resize_shorter == 0)  // the window's own message, naming the EXIF frame when there is one
      check_window(crop.top, crop.left, crop.height, crop.width, frame.height, frame.width, frame.oriented);
    plan = plan_resized_crop(crop, frame.height, frame.width, r.filter, r.antialias);
    return ScaledWindow{plan.scale, plan.rows.first, plan.cols.first, plan.rows.count, plan.cols.count};
  };
  Decoded decoded = decode_planned(data, r.options, planner, kOp);
  const Tensor& image = decoded.image;
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  CUSTOM_OP_CHECK_VALUE(r.mean.empty() || static_cast<int64_t>(r.mean.size()) == C, kMessagePrefix,
                        "mean and std have ", r.mean.size(), " values for an image of ", C, " channels");
  const ResampleAxis& ra = plan.rows;
  const ResampleAxis& ca = plan.cols;
  const AxisTaps rows =
      axis_taps("row", ra.in0, ra.in1, ra.out_size, ra.out_start, ra.out_count, ra.origin, H, r.filter, r.antialias);
  AxisTaps cols =
      axis_taps("column", ca.in0, ca.in1, ca.out_size, ca.out_start, ca.out_count, ca.origin, W, r.filter, r.antialias);
  if (flip) reverse_taps(&cols);
  const bool vertical_first = vertical_pass_first(ra.in1 - ra.in0, ca.in1 - ca.in0, ra.out_size, ca.out_size);
  if (out.slot == nullptr) {
    out.own = new_cpu_tensor({C, ra.out_count, ca.out_count}, scalar_type(r.dtype));
    out.slot = out.own->mutable_data_ptr();
  }
  const uint8_t* src = image.const_data_ptr<uint8_t>();
  if (r.dtype == jpeg_core::kOutUint8) {
    resample_planes(src, C, H, W, rows, cols, vertical_first, static_cast<uint8_t*>(out.slot));
  } else {
    const int64_t plane = ra.out_count * ca.out_count;
    std::unique_ptr<uint8_t[]> pixels(new uint8_t[C * plane]);
    resample_planes(src, C, H, W, rows, cols, vertical_first, pixels.get());
    write_output(pixels.get(), C, plane, r, out.slot);
  }
  return std::move(decoded.warnings);
}

// The order the items are handed out in: the most work first, so that the batch does not end with one
// thread on a large window while the others wait (threads take the next item as they finish one). The
// work is about the scaled pixels decoded: the window's area at its DCT scale, known before its header
// is read; items of the centre crop keep their order.
std::vector<size_t> largest_first(const ResizedCropArgs& r, IntArrayRef heights, IntArrayRef widths, size_t count) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = i;
  if (r.crop.resize_shorter > 0) return order;
  std::vector<int64_t> work(count);
  for (size_t i = 0; i < count; ++i) {
    // Clamped: the windows are checked only later, per item, and a bogus one must not overflow here.
    const int64_t h = std::clamp<int64_t>(heights[i], 0, int64_t{1} << 24);
    const int64_t w = std::clamp<int64_t>(widths[i], 0, int64_t{1} << 24);
    const int64_t s = r.crop.scale != 0 ? r.crop.scale : auto_resize_scale(h, w, r.crop.out_height, r.crop.out_width);
    work[i] = h * w / 64 * s * s;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return work[a] > work[b]; });
  return order;
}

std::tuple<Tensor, std::vector<int64_t>, std::vector<std::string>> decode_and_resized_crop_jpegs_cpu(
    const std::vector<Tensor>& data, IntArrayRef tops, IntArrayRef lefts, IntArrayRef heights, IntArrayRef widths,
    IntArrayRef size, int64_t resize_shorter, int64_t scale, int64_t filter, bool antialias, IntArrayRef flips,
    const std::vector<double>& mean, const std::vector<double>& std, int64_t dtype, int64_t mode,
    bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels) {
  const size_t count = data.size();
  const int64_t n = static_cast<int64_t>(count);
  const size_t windows[4] = {tops.size(), lefts.size(), heights.size(), widths.size()};
  const ResizedCropArgs r = checked_resized_crop_args(
      count, windows, size.data(), size.size(), resize_shorter, scale, filter, antialias, flips.data(), flips.size(),
      mean.data(), mean.size(), std.data(), std.size(), dtype, mode, apply_exif_orientation, on_warning, max_pixels);
  const int64_t h = r.crop.out_height, w = r.crop.out_width;
  const ScalarType type = scalar_type(r.dtype);
  const int64_t channels = fixed_channels(r.options.mode);
  CUSTOM_OP_CHECK_VALUE(channels > 0 || n > 0, kMessagePrefix, kOp,
                        ": mode UNCHANGED on an empty batch: the channel count of its [0, C, h, w] tensor is unknown");
  // With a fixed channel count the items are written straight into the output.
  std::optional<Tensor> stacked;
  if (channels > 0) stacked = new_cpu_tensor({n, channels, h, w}, type);
  // Slots by address: a select per item would be a call through the stable ABI each.
  auto* const base = static_cast<uint8_t*>(stacked ? stacked->mutable_data_ptr() : nullptr);
  const int64_t slot_bytes = channels * h * w * jpeg_core::output_dtype_bytes(r.dtype);

  std::vector<ItemOutput> slots(count);
  std::vector<ItemOutcome> outcomes(count);
  const std::vector<size_t> order = largest_first(r, heights, widths, count);
  for_each_item(n, [&](int64_t i) {
    const size_t k = order[static_cast<size_t>(i)];
    std::string warnings;
    outcomes[k] = capture_outcome([&] {
      ResizedCropRequest crop = r.crop;
      if (resize_shorter == 0) {
        crop.top = tops[k];
        crop.left = lefts[k];
        crop.height = heights[k];
        crop.width = widths[k];
      }
      if (base != nullptr) slots[k].slot = base + static_cast<int64_t>(k) * slot_bytes;
      warnings = resized_crop_item(data[k], r, crop, !flips.empty() && flips[k] == 1, slots[k]);
    });
    if (outcomes[k].status == ItemStatus::kOk && !warnings.empty()) outcomes[k] = {ItemStatus::kWarned, warnings};
  });

  auto [status, messages] = outcome_lists(outcomes);
  if (!stacked) {
    // Mode UNCHANGED: the channel count is the decoded items', which must agree (0 when none decoded).
    int64_t c = -1;
    for (size_t i = 0; i < count; ++i) {
      if (failed(outcomes[i].status)) continue;
      const int64_t ci = slots[i].own->size(0);
      if (c < 0) c = ci;
      CUSTOM_OP_CHECK_VALUE(ci == c, kMessagePrefix, kOp, ": mode UNCHANGED needs one channel count in a batch; got ",
                            c, " and ", ci);
    }
    c = std::max<int64_t>(c, 0);
    stacked = new_cpu_tensor({n, c, h, w}, type);
  }
  const int64_t bytes = stacked->size(1) * h * w * jpeg_core::output_dtype_bytes(r.dtype);
  auto* const out = static_cast<uint8_t*>(stacked->mutable_data_ptr());
  for (size_t i = 0; i < count; ++i) {
    uint8_t* slot = out + static_cast<int64_t>(i) * bytes;
    if (failed(outcomes[i].status)) {
      std::memset(slot, 0, static_cast<size_t>(bytes));
    } else if (slots[i].own) {
      std::memcpy(slot, slots[i].slot, static_cast<size_t>(bytes));
    }
  }
  return {*stacked, std::move(status), std::move(messages)};
}

}  // namespace

// CompositeExplicitAutograd rather than CPU: an empty batch has no tensor to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("decode_and_resized_crop_jpegs", TORCH_BOX(&decode_and_resized_crop_jpegs_cpu));
}

}  // namespace custom_op
