// decode_and_resized_crop_jpegs_cuda: the batched fused resized crop on the GPU.
//
// 1. Plan, on the host: each file's header (the GPU planner's scan_items) gives the image's size, and
//    common/resized_crop_plan.h the DCT scale, the scaled pixels to decode and the box, exactly as the
//    CPU kernel plans them. A file the scan does not understand goes to the CPU kernel whole.
// 2. Decode: the GPU window decode (decode_jpegs_cuda) of every planned window at its scale, into one
//    buffer: our CUDA decoder, or the CPU path where it cannot give the CPU path's pixels at that scale.
// 3. Resample: the taps (common/resample_taps.h, on the host) and one descriptor per item go up in one
//    copy; two launches (resample_kernels.h) write every item's flipped, normalised output into its slot
//    of the stacked result, on the caller's stream.
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
#include "cuda/planner.h"
#include "cuda/resample_kernels.h"
#include "cuda/testing_options.h"
#include "jpeg_core/resample_weights.h"
#include "jpeg_core/scaling.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

using Results = std::tuple<at::Tensor, std::vector<int64_t>, std::vector<std::string>, std::vector<int64_t>>;
using WindowResults =
    std::tuple<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<std::string>, std::vector<int64_t>>;

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
  int window = -1;  // index into the GPU window decode's lists
};

// The items our header scan understands, planned (scan_items, planner.h); a plan's error is the
// item's, as on the CPU. The automatic scale of a file our own CUDA decoder does not take is 8/8: only
// that decoder decodes at a reduced scale, and the JPEG engines are faster at full scale than the CPU
// path at any.
std::vector<PlannedItem> plan_items(at::TensorList data, const int64_t* tops, const int64_t* lefts,
                                    const int64_t* heights, const int64_t* widths, const ResizedCropArgs& a,
                                    const CallOptions& options, std::vector<int64_t>& status,
                                    std::vector<std::string>& messages) {
  const std::vector<Item> scanned = scan_items(data, options, testing_options());
  std::vector<PlannedItem> planned(data.size());
  int windows = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const Item& it = scanned[i];
    if (!it.header_known || it.path == kFailed) continue;
    int64_t image_h = 0, image_w = 0;
    scaled_image_size(it, 8, &image_h, &image_w);
    ResizedCropRequest request = a.window_of(i, tops, lefts, heights, widths);
    if (request.scale == 0 && !it.own_decoder) request.scale = 8;
    const ItemOutcome outcome =
        capture_outcome([&] { planned[i].plan = plan_resized_crop(request, image_h, image_w, a.filter, a.antialias); });
    if (failed(outcome.status)) {
      status[i] = static_cast<int64_t>(outcome.status);
      messages[i] = outcome.message;
      continue;
    }
    planned[i].on_gpu = true;
    planned[i].window = windows++;
  }
  return planned;
}

// The planned windows of the GPU items, decoded at their scales by the GPU window decode.
WindowResults decode_windows(at::TensorList data, const std::vector<PlannedItem>& planned, const DecodeOptions& o,
                             int64_t device_index, bool check_entropy, std::vector<at::Tensor>& files) {
  std::vector<int64_t> tops, lefts, heights, widths, scales;
  for (size_t i = 0; i < planned.size(); ++i) {
    if (!planned[i].on_gpu) continue;
    const ResizedCropPlan& p = planned[i].plan;
    files.push_back(data[i]);
    tops.push_back(p.rows.first);
    lefts.push_back(p.cols.first);
    heights.push_back(p.rows.count);
    widths.push_back(p.cols.count);
    scales.push_back(p.scale);
  }
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("custom_op::decode_jpegs_cuda", "")
          .typed<WindowResults(at::TensorList, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef,
                               bool, int64_t, bool, int64_t, int64_t, bool, int64_t, bool, c10::IntArrayRef)>();
  return op.call(files, tops, lefts, heights, widths, /*whole=*/false, o.mode_code(), o.apply_exif_orientation,
                 o.on_warning_code(), o.max_pixels, /*stack=*/false, device_index, check_entropy, scales);
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

// One axis of an item's taps, as laid out in device memory from word `at`: first (outputs words),
// count (outputs), weights (outputs * ksize). `spec` and `geometry` for taps the GPU computes;
// `host` for taps the host computed (the filters with sin and cos).
struct AxisLayout {
  jc::ResampleAxisSpec spec{};
  jc::ResampleGeometry geometry{};
  int64_t out_start = 0;
  int32_t outputs = 0, ksize = 0, lo = 0, hi = 0;
  bool reverse = false;
  AxisTaps host;
  int64_t at = 0;

  int64_t words() const { return int64_t{outputs} * (2 + ksize); }
  jc::ResampleTaps device_taps(int32_t* words) const {
    int32_t* base = words + at;
    return {base, base + outputs, base + 2 * outputs, ksize, outputs, lo, hi};
  }
  TapsJob job(int32_t* words) const {
    int32_t* base = words + at;
    return {spec, geometry, out_start, outputs, reverse ? 1 : 0, base, base + outputs, base + 2 * outputs};
  }
  void write_host_taps(int32_t* words) const {
    int32_t* base = words + at;
    std::memcpy(base, host.first.data(), sizeof(int32_t) * outputs);
    std::memcpy(base + outputs, host.count.data(), sizeof(int32_t) * outputs);
    std::memcpy(base + 2 * outputs, host.weights.data(), sizeof(int32_t) * outputs * ksize);
  }
};

struct ItemTaps {
  AxisLayout rows, cols;
  int32_t vertical_first = 0;
  // The first pass's output, per channel (jpeg_core/resample.h's resample_mid_rows and _cols).
  int64_t mid_samples() const {
    return vertical_first ? int64_t{rows.outputs} * (cols.hi - cols.lo) : int64_t{rows.hi - rows.lo} * cols.outputs;
  }
};

// An axis whose taps the GPU computes: the host computes only its first and last outputs' taps, which
// bound the source span the passes read (the taps' first pixels are monotonic) and say whether the box
// lies in the source, with resize_box's message where it does not.
AxisLayout gpu_axis(const char* name, const ResampleAxis& p, const ResizedCropArgs& a, bool reverse,
                    std::vector<int32_t>& scratch) {
  AxisLayout axis;
  axis.spec = {p.in0, p.in1, p.out_size, p.origin, p.count, static_cast<int32_t>(a.filter), a.antialias ? 1 : 0};
  axis.geometry = jc::resample_geometry(axis.spec);
  axis.out_start = p.out_start;
  axis.outputs = static_cast<int32_t>(p.out_count);
  axis.ksize = axis.geometry.ksize;
  axis.reverse = reverse;
  scratch.resize(static_cast<size_t>(axis.ksize));
  int32_t first[2] = {0, 0}, count[2] = {0, 0};
  const int64_t ends[2] = {p.out_start, p.out_start + p.out_count - 1};
  for (int e = 0; e < 2; ++e) {
    count[e] = jc::arithmetic_output_taps(axis.spec, axis.geometry, ends[e], &first[e], scratch.data());
    CUSTOM_OP_CHECK_VALUE(count[e] > 0, "resize_box: output ", name, " ", ends[e],
                          " has no input pixel (the box lies outside the image)");
  }
  axis.lo = std::min(first[0], first[1]);
  axis.hi = std::max(first[0] + count[0], first[1] + count[1]);
  return axis;
}

AxisLayout host_axis(const char* name, const ResampleAxis& p, const ResizedCropArgs& a, bool reverse) {
  AxisLayout axis;
  axis.host =
      axis_taps(name, p.in0, p.in1, p.out_size, p.out_start, p.out_count, p.origin, p.count, a.filter, a.antialias);
  if (reverse) reverse_taps(&axis.host);
  axis.outputs = static_cast<int32_t>(p.out_count);
  axis.ksize = axis.host.ksize;
  std::tie(axis.lo, axis.hi) = taps_span(axis.host);
  return axis;
}

ItemTaps item_taps(const ResizedCropPlan& p, const ResizedCropArgs& a, bool flip, bool gpu_taps) {
  thread_local std::vector<int32_t> scratch;
  ItemTaps t;
  t.rows = gpu_taps ? gpu_axis("row", p.rows, a, false, scratch) : host_axis("row", p.rows, a, false);
  t.cols = gpu_taps ? gpu_axis("column", p.cols, a, flip, scratch) : host_axis("column", p.cols, a, flip);
  t.vertical_first =
      vertical_pass_first(p.rows.in1 - p.rows.in0, p.cols.in1 - p.cols.in0, p.rows.out_size, p.cols.out_size);
  return t;
}

Results decode_and_resized_crop_jpegs_cuda(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                                           c10::IntArrayRef heights, c10::IntArrayRef widths, c10::IntArrayRef size,
                                           int64_t resize_shorter, int64_t scale, int64_t filter, bool antialias,
                                           c10::IntArrayRef flips, c10::ArrayRef<double> mean,
                                           c10::ArrayRef<double> std, int64_t dtype, int64_t mode,
                                           bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels,
                                           int64_t device_index, bool check_entropy) {
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
  {
    RECORD_FUNCTION("custom_op::resized_crop_plan", std::vector<c10::IValue>());
    const CallOptions options{o, /*whole=*/false, check_entropy};
    planned = plan_items(data, tops.data(), lefts.data(), heights.data(), widths.data(), a, options, status, messages);
  }
  std::vector<at::Tensor> files;
  auto [windows, window_status, window_messages, window_paths] =
      decode_windows(data, planned, o, device_index, check_entropy, files);
  resized_crop_on_cpu(data, tops, lefts, heights, widths, size, resize_shorter, scale, filter, antialias, flips, mean,
                      std, dtype, o, planned, out, status, messages, paths);

  RECORD_FUNCTION("custom_op::resized_crop_resample", std::vector<c10::IValue>());
  const int64_t max_out = channels * out_h * out_w;
  const bool gpu_taps = jc::arithmetic_filter(static_cast<int32_t>(a.filter));
  std::vector<ItemTaps> taps;
  std::vector<size_t> resampled;  // item indices
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
    ItemTaps t;
    const auto outcome = capture_outcome([&] {
      CUSTOM_OP_CHECK(image.dim() == 3 && image.size(0) == channels && image.size(1) == p.rows.count &&
                          image.size(2) == p.cols.count,
                      "the GPU window decode returned an unexpected shape");
      t = item_taps(p, a, flip, gpu_taps);
    });
    if (failed(outcome.status)) {
      status[i] = static_cast<int64_t>(outcome.status);
      messages[i] = outcome.message;
      paths[i] = kFailed;
      continue;
    }
    taps.push_back(std::move(t));
    resampled.push_back(i);
  }
  for (size_t i = 0; i < n; ++i)
    if (failed(static_cast<ItemStatus>(status[i]))) out[static_cast<int64_t>(i)].zero_();
  if (resampled.empty()) return {out, status, messages, paths};

  // Device memory: the taps (computed there, or uploaded), the intermediates; then the descriptors
  // (and any host taps) go up in one copy from pinned memory.
  const size_t m = resampled.size();
  int64_t tap_words = 0, mid_total = 0, max_mid = 0, max_outputs = 0;
  std::vector<int64_t> mid_at(m);
  for (size_t j = 0; j < m; ++j) {
    for (AxisLayout* axis : {&taps[j].rows, &taps[j].cols}) {
      axis->at = tap_words;
      tap_words += axis->words();
      max_outputs = std::max<int64_t>(max_outputs, axis->outputs);
    }
    const int64_t mid = channels * taps[j].mid_samples();
    mid_at[j] = mid_total;
    mid_total += mid;
    max_mid = std::max(max_mid, mid);
  }
  const auto on_device = at::TensorOptions().dtype(at::kByte).device(device);
  at::Tensor tap_buffer = at::empty({std::max<int64_t>(tap_words, 1) * 4}, on_device);
  at::Tensor mids = at::empty({std::max<int64_t>(mid_total, 1)}, on_device);
  auto* const device_words = reinterpret_cast<int32_t*>(tap_buffer.data_ptr<uint8_t>());

  const size_t jobs = gpu_taps ? 2 * m : 0;
  const size_t items_bytes = m * sizeof(jc::ResampleItem), jobs_bytes = jobs * sizeof(TapsJob);
  const size_t host_words = gpu_taps ? 0 : static_cast<size_t>(tap_words);
  const size_t jobs_at = (items_bytes + 15) / 16 * 16, words_at = (jobs_at + jobs_bytes + 15) / 16 * 16;
  const size_t bytes = words_at + host_words * sizeof(int32_t);
  at::Tensor host = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  at::Tensor up = at::empty({static_cast<int64_t>(bytes)}, on_device);
  uint8_t* const h = host.data_ptr<uint8_t>();
  auto* const items = reinterpret_cast<jc::ResampleItem*>(h);
  auto* const job = reinterpret_cast<TapsJob*>(h + jobs_at);
  for (size_t j = 0; j < m; ++j) {
    const size_t i = resampled[j];
    const at::Tensor& image = windows[static_cast<size_t>(planned[i].window)];
    const ItemTaps& t = taps[j];
    jc::ResampleItem it{};
    it.source = image.const_data_ptr<uint8_t>();
    it.source_plane = image.size(1) * image.size(2);
    it.source_pitch = static_cast<int32_t>(image.size(2));
    it.mid = mids.data_ptr<uint8_t>() + mid_at[j];
    it.channels = static_cast<int32_t>(channels);
    it.vertical_first = t.vertical_first;
    it.rows = t.rows.device_taps(device_words);
    it.cols = t.cols.device_taps(device_words);
    it.out = static_cast<uint8_t*>(out.data_ptr()) + static_cast<int64_t>(i) * max_out * out.element_size();
    it.dtype = a.dtype;
    for (int c = 0; c < channels; ++c) {
      it.mean[c] = a.mean_of(c);
      it.std[c] = a.std_of(c);
    }
    items[j] = it;
    if (gpu_taps) {
      job[2 * j] = t.rows.job(device_words);
      job[2 * j + 1] = t.cols.job(device_words);
    } else {
      auto* const words = reinterpret_cast<int32_t*>(h + words_at);
      t.rows.write_host_taps(words);
      t.cols.write_host_taps(words);
    }
  }
  up.copy_(host, /*non_blocking=*/true);
  const uint8_t* u = up.const_data_ptr<uint8_t>();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  if (!gpu_taps)
    C10_CUDA_CHECK(
        cudaMemcpyAsync(device_words, u + words_at, host_words * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  C10_CUDA_CHECK(launch_resample(reinterpret_cast<const TapsJob*>(u + jobs_at), static_cast<int>(jobs), max_outputs,
                                 reinterpret_cast<const jc::ResampleItem*>(u), static_cast<int>(m), max_mid, max_out,
                                 stream));
  return {out, status, messages, paths};
}

}  // namespace

TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("decode_and_resized_crop_jpegs_cuda", &decode_and_resized_crop_jpegs_cuda);
}

}  // namespace gpu
}  // namespace custom_op
