// decode_and_resized_crop_jpegs_cuda: the batched fused resized crop on the GPU.
//
// 1. Plan, on the host: each file's header (the GPU planner's scan_items) gives the image's size, and
//    common/resized_crop_plan.h the DCT scale, the scaled pixels to decode and the box, exactly as the
//    CPU kernel plans them. A file the scan does not understand goes to the CPU kernel whole.
// 2. Decode: the GPU window decode (decode_planned.h) of every planned window at its scale, from the
//    same header scan, into one buffer: our CUDA decoder, or the CPU path where it cannot give the CPU
//    path's pixels at that scale.
// 3. Resample (resample_batch.h): the taps, then both passes, flip and normalisation of every item into
//    its slot of the stacked result, in three launches on the caller's stream.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common/checked_options.h"
#include "common/decode_path.h"
#include "common/item_status.h"
#include "common/resample_taps.h"
#include "common/resized_crop_args.h"
#include "common/resized_crop_plan.h"
#include "cuda/batch_item.h"
#include "cuda/decode_planned.h"
#include "cuda/planner.h"
#include "cuda/resample_batch.h"
#include "cuda/testing_options.h"
#include "jpeg_core/scaling.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

using Results = std::tuple<at::Tensor, std::vector<int64_t>, std::vector<std::string>, std::vector<int64_t>>;

at::ScalarType scalar_type(int32_t dtype) {
  switch (dtype) {
    case jc::kOutFloat32: return at::kFloat;
    case jc::kOutFloat16: return at::kHalf;
    case jc::kOutBfloat16: return at::kBFloat16;
    default: return at::kByte;
  }
}

struct PlannedItem {
  bool on_gpu = false;  // planned here; else the CPU kernel does the whole item
  ResizedCropPlan plan;
  int window = -1;  // index into the GPU window decode's items
};

// The items our header scan understands, planned (scan_items, planner.h); a plan's error is the
// item's, as on the CPU. The automatic scale of a file our own CUDA decoder does not take is 8/8: only
// that decoder decodes at a reduced scale, and the JPEG engines are faster at full scale than the CPU
// path at any. The scanned items of the GPU's windows are moved to `windows`, in item order, with their
// windows at their scales placed (plan_windows), ready for the window decode.
std::vector<PlannedItem> plan_items(at::TensorList data, const int64_t* tops, const int64_t* lefts,
                                    const int64_t* heights, const int64_t* widths, const ResizedCropArgs& a,
                                    const CallOptions& options, const TestingOptions& testing,
                                    std::vector<int64_t>& status, std::vector<std::string>& messages,
                                    std::vector<Item>& windows) {
  std::vector<Item> scanned = scan_items(data, options, testing);
  std::vector<PlannedItem> planned(data.size());
  std::vector<int64_t> t, l, h, w, scales;
  for (size_t i = 0; i < data.size(); ++i) {
    Item& it = scanned[i];
    if (!it.header_known || it.path == kFailed) continue;
    int64_t image_h = 0, image_w = 0;
    scaled_image_size(it, 8, &image_h, &image_w);
    ResizedCropRequest request = a.window_of(i, tops, lefts, heights, widths);
    if (request.scale == 0 && !it.own_decoder) request.scale = 8;
    ResizedCropPlan& p = planned[i].plan;
    const ItemOutcome outcome =
        capture_outcome([&] { p = plan_resized_crop(request, image_h, image_w, a.filter, a.antialias); });
    if (failed(outcome.status)) {
      status[i] = static_cast<int64_t>(outcome.status);
      messages[i] = outcome.message;
      continue;
    }
    planned[i].on_gpu = true;
    planned[i].window = static_cast<int>(windows.size());
    windows.push_back(std::move(it));
    t.push_back(p.rows.first);
    l.push_back(p.cols.first);
    h.push_back(p.rows.count);
    w.push_back(p.cols.count);
    scales.push_back(p.scale);
  }
  plan_windows(windows, t, l, h, w, scales, options, testing);
  return planned;
}

using CpuResults = std::tuple<at::Tensor, std::vector<int64_t>, std::vector<std::string>>;

// The CPU kernel (decode_and_resized_crop_jpegs) on these items.
CpuResults call_cpu_kernel(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts, c10::IntArrayRef heights,
                           c10::IntArrayRef widths, c10::IntArrayRef size, int64_t resize_shorter, int64_t scale,
                           int64_t filter, bool antialias, c10::IntArrayRef flips, c10::ArrayRef<double> mean,
                           c10::ArrayRef<double> std, int64_t dtype, const DecodeOptions& o) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("custom_op::decode_and_resized_crop_jpegs", "")
          .typed<CpuResults(at::TensorList, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef,
                            c10::IntArrayRef, int64_t, int64_t, int64_t, bool, c10::IntArrayRef, c10::ArrayRef<double>,
                            c10::ArrayRef<double>, int64_t, int64_t, bool, int64_t, int64_t)>();
  return op.call(data, tops, lefts, heights, widths, size, resize_shorter, scale, filter, antialias, flips, mean, std,
                 dtype, o.mode_code(), o.apply_exif_orientation, o.on_warning_code(), o.max_pixels);
}

// The items the GPU path does not plan, by the CPU kernel, into their slots of `out`.
void resized_crop_on_cpu(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts, c10::IntArrayRef heights,
                         c10::IntArrayRef widths, c10::IntArrayRef size, int64_t resize_shorter, int64_t scale,
                         int64_t filter, bool antialias, c10::IntArrayRef flips, c10::ArrayRef<double> mean,
                         c10::ArrayRef<double> std, int64_t dtype, const DecodeOptions& o,
                         const std::vector<PlannedItem>& planned, at::Tensor& out, std::vector<int64_t>& status,
                         std::vector<std::string>& messages, std::vector<int64_t>& paths) {
  std::vector<at::Tensor> files;
  std::vector<int64_t> which, t, l, h, w, f;
  for (size_t i = 0; i < planned.size(); ++i) {
    if (planned[i].on_gpu || failed(static_cast<ItemStatus>(status[i]))) continue;
    which.push_back(static_cast<int64_t>(i));
    files.push_back(data[i]);
    if (resize_shorter == 0) {
      t.push_back(tops[i]);
      l.push_back(lefts[i]);
      h.push_back(heights[i]);
      w.push_back(widths[i]);
    }
    if (!flips.empty()) f.push_back(flips[i]);
  }
  if (which.empty()) return;
  auto [images, st, msgs] =
      call_cpu_kernel(files, t, l, h, w, size, resize_shorter, scale, filter, antialias, f, mean, std, dtype, o);
  const at::Tensor index = at::tensor(which, at::kLong).to(out.device());
  out.index_copy_(0, index, images.to(out.device()));
  for (size_t j = 0; j < which.size(); ++j) {
    status[which[j]] = st[j];
    messages[which[j]] = msgs[j];
    paths[which[j]] = failed(static_cast<ItemStatus>(st[j])) ? kFailed : kCpu;
  }
}

AxisPlan axis_plan(const ResampleAxis& a, bool reverse) {
  AxisPlan p;
  p.in0 = a.in0;
  p.in1 = a.in1;
  p.out_size = a.out_size;
  p.out_start = a.out_start;
  p.out_count = a.out_count;
  p.origin = a.origin;
  p.in_count = a.count;
  p.reverse = reverse;
  return p;
}

Results decode_and_resized_crop_jpegs_cuda(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                                           c10::IntArrayRef heights, c10::IntArrayRef widths, c10::IntArrayRef size,
                                           int64_t resize_shorter, int64_t scale, int64_t filter, bool antialias,
                                           c10::IntArrayRef flips, c10::ArrayRef<double> mean,
                                           c10::ArrayRef<double> std, int64_t dtype, int64_t mode,
                                           bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels,
                                           int64_t device_index, bool check_entropy, int64_t decoder) {
  const size_t n = data.size();
  const size_t windows_lengths[4] = {tops.size(), lefts.size(), heights.size(), widths.size()};
  const ResizedCropArgs a =
      checked_resized_crop_args(n, windows_lengths, size.data(), size.size(), resize_shorter, scale, filter, antialias,
                                flips.data(), flips.size(), mean.data(), mean.size(), std.data(), std.size(), dtype,
                                mode, apply_exif_orientation, on_warning, max_pixels);
  const DecodeOptions& o = a.options;
  // Only our CUDA decoder scales, at 1/8, 2/8, 4/8 and 8/8; another forced scale is the CPU path's.
  CUSTOM_OP_CHECK_VALUE(a.crop.scale == 0 || jc::valid_scale(a.crop.scale), kMessagePrefix, kResizedCropOp,
                        ": on the GPU, scale must be 0 (automatic), 1, 2, 4 or 8 (eighths), got ", a.crop.scale);
  CUSTOM_OP_CHECK_VALUE(device_index >= 0, kMessagePrefix, "device index must be >= 0, got ", device_index);
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::CUDAGuard device_guard(device);
  const int64_t channels = fixed_channels(o.mode);
  if (channels == 0) {
    // Mode UNCHANGED: the output's channel count is the files' (CMYK has 4), known once they are
    // decoded; the CPU kernel decodes such a batch, and its result is copied.
    auto [images, status, messages] = call_cpu_kernel(data, tops, lefts, heights, widths, size, resize_shorter, scale,
                                                      filter, antialias, flips, mean, std, dtype, o);
    std::vector<int64_t> paths(n, kCpu);
    for (size_t i = 0; i < n; ++i)
      if (failed(static_cast<ItemStatus>(status[i]))) paths[i] = kFailed;
    return {images.to(device), status, messages, paths};
  }
  const int64_t out_h = a.crop.out_height, out_w = a.crop.out_width;
  std::vector<int64_t> status(n, 0), paths(n, kFailed);
  std::vector<std::string> messages(n);
  at::Tensor out = at::empty({static_cast<int64_t>(n), channels, out_h, out_w},
                             at::TensorOptions().dtype(scalar_type(a.dtype)).device(device));
  std::vector<PlannedItem> planned;
  std::vector<Item> window_items;
  const CallOptions options{o, /*whole=*/false, check_entropy, checked_gpu_decoder(decoder)};
  const TestingOptions testing = testing_options();
  {
    RECORD_FUNCTION("custom_op::resized_crop_plan", std::vector<c10::IValue>());
    planned = plan_items(data, tops.data(), lefts.data(), heights.data(), widths.data(), a, options, testing, status,
                         messages, window_items);
  }
  auto [windows, window_status, window_messages, window_paths] =
      decode_planned(window_items, /*stack=*/false, options, testing, device);
  resized_crop_on_cpu(data, tops, lefts, heights, widths, size, resize_shorter, scale, filter, antialias, flips, mean,
                      std, dtype, o, planned, out, status, messages, paths);

  RECORD_FUNCTION("custom_op::resized_crop_resample", std::vector<c10::IValue>());
  const int64_t slot_bytes = channels * out_h * out_w * out.element_size();
  ResampleBatch batch(a.filter, a.antialias, a.dtype, a.mean, a.std);
  batch.reserve(window_items.size(), 2 * window_items.size());
  for (size_t i = 0; i < n; ++i) {
    if (!planned[i].on_gpu) continue;
    const size_t k = static_cast<size_t>(planned[i].window);
    status[i] = window_status[k];
    messages[i] = window_messages[k];
    paths[i] = window_paths[k];
    if (failed(static_cast<ItemStatus>(status[i]))) continue;
    const at::Tensor& image = windows[k];
    const ResizedCropPlan& p = planned[i].plan;
    const bool flip = !flips.empty() && flips[i] == 1;
    const auto outcome = capture_outcome([&] {
      CUSTOM_OP_CHECK(image.dim() == 3 && image.size(0) == channels && image.size(1) == p.rows.count &&
                          image.size(2) == p.cols.count,
                      "the GPU window decode returned an unexpected shape");
      const int rows = batch.add_axis("row", axis_plan(p.rows, false));
      const int cols = batch.add_axis("column", axis_plan(p.cols, flip));
      batch.add_item(image.const_data_ptr<uint8_t>(), channels, image.size(1), image.size(2), rows, cols,
                     static_cast<uint8_t*>(out.data_ptr()) + static_cast<int64_t>(i) * slot_bytes);
    });
    if (failed(outcome.status)) {
      status[i] = static_cast<int64_t>(outcome.status);
      messages[i] = outcome.message;
      paths[i] = kFailed;
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (failed(static_cast<ItemStatus>(status[i]))) out[static_cast<int64_t>(i)].zero_();
  batch.run(device, c10::cuda::getCurrentCUDAStream(device.index()).stream());
  return {out, status, messages, paths};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("decode_and_resized_crop_jpegs_cuda", &decode_and_resized_crop_jpegs_cuda);
}

}  // namespace gpu
}  // namespace custom_op
