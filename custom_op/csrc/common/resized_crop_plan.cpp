#include "common/resized_crop_plan.h"

#include <algorithm>
#include <cmath>

#include "common/int_math.h"
#include "common/item_status.h"
#include "jpeg_core/resample_weights.h"

namespace custom_op {
namespace {

// Crop then resize, one axis: the box [start, start + length) * s / 8 onto `out` pixels, in a frame
// whose 0 is the first decoded pixel (so at s = 8 the box is (0, length), as for a crop). start >= 0
// (the window was checked).
ResampleAxis crop_axis(int64_t start, int64_t length, int s, int64_t out) {
  ResampleAxis a;
  a.first = start * s / 8;
  a.count = ceil_div((start + length) * s, 8) - a.first;
  a.in0 = static_cast<double>(start * s - 8 * a.first) / 8;
  a.in1 = static_cast<double>((start + length) * s - 8 * a.first) / 8;
  a.out_size = a.out_count = out;
  return a;
}

// Resize then crop, one axis: the whole scaled image onto `resized` pixels, of which [crop_start,
// crop_start + crop) are produced, from only the scaled pixels their filter taps read.
ResampleAxis resize_crop_axis(int64_t image_size, int s, int64_t resized, int64_t crop_start, int64_t crop,
                              Filter filter, bool antialias) {
  const int64_t scaled_size = ceil_div(image_size * s, 8);
  const double in1 = static_cast<double>(image_size * s) / 8;
  const double step = in1 / static_cast<double>(resized);
  const double support =
      jpeg_core::filter_support(static_cast<int32_t>(filter)) * (antialias ? std::max(step, 1.0) : 1.0);
  const double lo_centre = (static_cast<double>(crop_start) + 0.5) * step;
  const double hi_centre = (static_cast<double>(crop_start + crop) - 0.5) * step;
  // resample_taps rounds each output's tap range as Pillow does; one pixel more each side covers any
  // rounding here.
  ResampleAxis a;
  a.first = std::max<int64_t>(0, static_cast<int64_t>(std::floor(lo_centre - support)) - 1);
  const int64_t last = std::min<int64_t>(scaled_size, static_cast<int64_t>(std::ceil(hi_centre + support)) + 2);
  a.count = last - a.first;
  a.in0 = 0.0;
  a.in1 = in1;
  a.out_size = resized;
  a.out_start = crop_start;
  a.out_count = crop;
  a.origin = a.first;
  return a;
}

}  // namespace

int auto_resize_scale(int64_t height, int64_t width, int64_t out_height, int64_t out_width) {
  for (int s : {1, 2, 4})
    if (height * s >= 8 * out_height && width * s >= 8 * out_width) return s;
  return 8;
}

ResizedCropPlan plan_resized_crop(const ResizedCropRequest& r, int64_t image_height, int64_t image_width, Filter filter,
                                  bool antialias) {
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  CUSTOM_OP_CHECK_VALUE(r.out_height >= 1 && r.out_width >= 1 && r.out_height <= kMaxSize && r.out_width <= kMaxSize,
                        "custom_op: size must be positive (and at most 2^24), got ", r.out_height, "x", r.out_width);
  CUSTOM_OP_CHECK_VALUE(r.scale >= 0 && r.scale <= 16,
                        "custom_op: scale must be an integer number of eighths in 1..16 (8 = full resolution), got ",
                        r.scale);
  ResizedCropPlan plan;
  if (r.resize_shorter <= 0) {
    // Written so that no sum can overflow, whatever the caller passed.
    CUSTOM_OP_CHECK_VALUE(
        r.height > 0 && r.width > 0 && r.top >= 0 && r.left >= 0 && r.top < image_height && r.left < image_width &&
            r.height <= image_height - r.top && r.width <= image_width - r.left,
        "custom_op: crop window (top=", r.top, ", left=", r.left, ", height=", r.height, ", width=", r.width,
        ") does not fit in the image of height ", image_height, " and width ", image_width);
    plan.scale = r.scale != 0 ? r.scale : auto_resize_scale(r.height, r.width, r.out_height, r.out_width);
    plan.rows = crop_axis(r.top, r.height, plan.scale, r.out_height);
    plan.cols = crop_axis(r.left, r.width, plan.scale, r.out_width);
    return plan;
  }
  CUSTOM_OP_CHECK_VALUE(r.resize_shorter <= kMaxSize, "custom_op: resize_size must be at most 2^24, got ",
                        r.resize_shorter);
  // torchvision's Resize(int): the shorter side becomes resize_shorter, the longer one
  // int(resize_shorter * long / short), computed in double as Python does.
  const bool portrait = image_width <= image_height;
  const int64_t shorter = portrait ? image_width : image_height, longer = portrait ? image_height : image_width;
  const auto resized_longer = static_cast<int64_t>(static_cast<double>(r.resize_shorter) * static_cast<double>(longer) /
                                                   static_cast<double>(shorter));
  const int64_t rh = portrait ? resized_longer : r.resize_shorter;
  const int64_t rw = portrait ? r.resize_shorter : resized_longer;
  CUSTOM_OP_CHECK_VALUE(r.out_height <= rh && r.out_width <= rw, "custom_op: crop_size (", r.out_height, ", ",
                        r.out_width, ") does not fit in the resized image ", rh, "x", rw,
                        " (torchvision would pad; this transform does not)");
  // CenterCrop's offsets: Python's round(), half to even, as std::nearbyint in the default mode.
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(rh - r.out_height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(rw - r.out_width) / 2.0));
  plan.scale = r.scale != 0 ? r.scale : auto_resize_scale(image_height, image_width, rh, rw);
  plan.rows = resize_crop_axis(image_height, plan.scale, rh, top, r.out_height, filter, antialias);
  plan.cols = resize_crop_axis(image_width, plan.scale, rw, left, r.out_width, filter, antialias);
  return plan;
}

}  // namespace custom_op
