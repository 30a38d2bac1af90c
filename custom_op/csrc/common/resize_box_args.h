// resize_box's arguments, checked once, with the same messages, for its CPU kernel (cpu/resize_cpu.cpp)
// and its CUDA kernel (cuda/resize_box_cuda.cpp). Free of torch's headers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/item_status.h"
#include "common/resample_taps.h"

namespace custom_op {

struct ResizeBoxArgs {
  int64_t images = 1;  // N of an [N, C, H, W] batch (1 for [C, H, W])
  int64_t C = 0, H = 0, W = 0;
  double box[4] = {0, 0, 0, 0};
  int64_t out_h = 0, out_w = 0;
  int64_t top = 0, left = 0, height = 0, width = 0;  // out_window
  int64_t origin_row = 0, origin_col = 0;
  Filter filter = Filter::kBilinear;
  bool antialias = true;
  bool flip = false;
};

// dims: the image's sizes (dim values); `shape` names them in messages.
inline ResizeBoxArgs checked_resize_box_args(const int64_t* dims, size_t dim, const std::string& shape,
                                             const double* box, size_t box_length, const int64_t* size,
                                             size_t size_length, const int64_t* out_window, size_t window_length,
                                             const int64_t* origin, size_t origin_length, int64_t filter,
                                             bool antialias, bool flip) {
  ResizeBoxArgs a;
  CUSTOM_OP_CHECK_VALUE(box_length == 4 && size_length == 2 && window_length == 4 && origin_length == 2,
                        "resize_box: box needs 4 values, size 2, out_window 4, origin 2");
  CUSTOM_OP_CHECK_VALUE(filter >= 0 && filter <= 5, "resize_box: unknown filter code ", filter);
  const size_t at = dim - 3;
  a.images = dim == 4 ? dims[0] : 1;
  a.C = dims[at];
  a.H = dims[at + 1];
  a.W = dims[at + 2];
  CUSTOM_OP_CHECK_VALUE(a.C >= 1 && a.H >= 1 && a.W >= 1, "resize_box: empty image of shape ", shape);
  // Bounds that keep every coordinate below exactly representable and every index within int.
  constexpr double kMaxCoord = 1 << 30;
  CUSTOM_OP_CHECK_VALUE(a.H < kMaxCoord && a.W < kMaxCoord, "resize_box: image too large: ", shape);
  for (size_t i = 0; i < 4; ++i) {
    CUSTOM_OP_CHECK_VALUE(std::isfinite(box[i]) && box[i] >= 0 && box[i] <= kMaxCoord,
                          "resize_box: box values must be in [0, 2^30]");
    a.box[i] = box[i];
  }
  CUSTOM_OP_CHECK_VALUE(box[2] > box[0] && box[3] > box[1], "resize_box: empty box (", box[0], ", ", box[1], ", ",
                        box[2], ", ", box[3], ")");
  CUSTOM_OP_CHECK_VALUE(origin[0] >= 0 && origin[1] >= 0 && origin[0] < kMaxCoord && origin[1] < kMaxCoord,
                        "resize_box: origin must be in [0, 2^30), got (", origin[0], ", ", origin[1], ")");
  a.origin_row = origin[0];
  a.origin_col = origin[1];
  a.out_h = size[0];
  a.out_w = size[1];
  CUSTOM_OP_CHECK_VALUE(a.out_h >= 1 && a.out_w >= 1 && a.out_h <= (1 << 24) && a.out_w <= (1 << 24),
                        "resize_box: output size must be in 1..2^24, got ", a.out_h, "x", a.out_w);
  a.top = out_window[0];
  a.left = out_window[1];
  a.height = out_window[2];
  a.width = out_window[3];
  CUSTOM_OP_CHECK_VALUE(a.height >= 1 && a.width >= 1 && a.top >= 0 && a.left >= 0 && a.top <= a.out_h - a.height &&
                            a.left <= a.out_w - a.width,
                        "resize_box: out_window (", a.top, ", ", a.left, ", ", a.height, ", ", a.width,
                        ") does not fit in the output of size ", a.out_h, "x", a.out_w);
  a.filter = static_cast<Filter>(filter);
  a.antialias = antialias;
  a.flip = flip;
  return a;
}

}  // namespace custom_op
