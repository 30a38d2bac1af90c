// The batched resized crop's call-level arguments, checked once for the CPU and the GPU kernels alike
// (the same checks and messages on every device), before any item is decoded.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/item_status.h"
#include "common/resample_taps.h"
#include "common/resized_crop_plan.h"
#include "jpeg_core/normalize.h"

namespace custom_op {

struct ResizedCropArgs {
  int64_t out_height = 0, out_width = 0;
  int64_t resize_shorter = 0;
  int scale = 0;
  Filter filter = Filter::kBilinear;
  bool antialias = true;
  std::vector<bool> flips;       // one per item
  std::vector<float> mean, std;  // one per output channel, or empty
  int32_t dtype = jpeg_core::kOutUint8;

  ResizedCropRequest request(size_t i, const int64_t* tops, const int64_t* lefts, const int64_t* heights,
                             const int64_t* widths) const {
    ResizedCropRequest r;
    if (resize_shorter == 0) r = {tops[i], lefts[i], heights[i], widths[i], 0, out_height, out_width, scale};
    else r = {0, 0, 0, 0, resize_shorter, out_height, out_width, scale};
    return r;
  }
  float mean_of(int c) const { return mean.empty() ? 0.0f : mean[c]; }
  float std_of(int c) const { return std.empty() ? 1.0f : std[c]; }
};

// n items; window_lengths: the lengths of tops, lefts, heights and widths.
inline ResizedCropArgs checked_resized_crop_args(size_t n, const size_t window_lengths[4], const int64_t* size,
                                                 size_t size_length, int64_t resize_shorter, int64_t scale,
                                                 int64_t filter, bool antialias, const int64_t* flips,
                                                 size_t flips_length, const double* mean, size_t mean_length,
                                                 const double* std, size_t std_length, int64_t dtype) {
  ResizedCropArgs a;
  CUSTOM_OP_CHECK_VALUE(size_length == 2, kMessagePrefix, "size must hold (height, width), got ", size_length,
                        " values");
  a.out_height = size[0];
  a.out_width = size[1];
  CUSTOM_OP_CHECK_VALUE(a.out_height >= 1 && a.out_width >= 1 && a.out_height <= (1 << 24) && a.out_width <= (1 << 24),
                        kMessagePrefix, "size must be positive (and at most 2^24), got ", a.out_height, "x",
                        a.out_width);
  CUSTOM_OP_CHECK_VALUE(resize_shorter >= 0 && resize_shorter <= (1 << 24), kMessagePrefix,
                        "resize_shorter must be in 0..2^24, got ", resize_shorter);
  a.resize_shorter = resize_shorter;
  const size_t expected = resize_shorter == 0 ? n : 0;
  for (int k = 0; k < 4; ++k)
    CUSTOM_OP_CHECK_VALUE(window_lengths[k] == expected, kMessagePrefix,
                          resize_shorter == 0 ? "tops, lefts, heights and widths must each have one entry per image ("
                                              : "tops, lefts, heights and widths must be empty with resize_shorter (",
                          expected, ")");
  CUSTOM_OP_CHECK_VALUE(scale >= 0 && scale <= 16, kMessagePrefix,
                        "scale must be an integer number of eighths in 1..16 (8 = full resolution), got ", scale);
  a.scale = static_cast<int>(scale);
  CUSTOM_OP_CHECK_VALUE(filter >= 0 && filter <= 5, kMessagePrefix, "unknown filter code ", filter);
  a.filter = static_cast<Filter>(filter);
  a.antialias = antialias;
  CUSTOM_OP_CHECK_VALUE(flips_length == 0 || flips_length == n, kMessagePrefix, "flips must have one entry per image (",
                        n, ") or none, got ", flips_length);
  a.flips.assign(n, false);
  for (size_t i = 0; i < flips_length; ++i) {
    CUSTOM_OP_CHECK_VALUE(flips[i] == 0 || flips[i] == 1, kMessagePrefix, "flips must be 0 or 1, got ", flips[i]);
    a.flips[i] = flips[i] == 1;
  }
  CUSTOM_OP_CHECK_VALUE(dtype >= jpeg_core::kOutUint8 && dtype <= jpeg_core::kOutBfloat16, kMessagePrefix,
                        "unknown dtype code ", dtype);
  a.dtype = static_cast<int32_t>(dtype);
  CUSTOM_OP_CHECK_VALUE(mean_length == std_length, kMessagePrefix, "mean and std must have the same length, got ",
                        mean_length, " and ", std_length);
  CUSTOM_OP_CHECK_VALUE(mean_length <= 4, kMessagePrefix, "mean and std take one value per channel, got ", mean_length);
  CUSTOM_OP_CHECK_TYPE(mean_length == 0 || a.dtype != jpeg_core::kOutUint8, kMessagePrefix,
                       "mean and std need a floating-point dtype (float32, float16 or bfloat16), not uint8");
  for (size_t c = 0; c < mean_length; ++c) {
    CUSTOM_OP_CHECK_VALUE(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] != 0.0, kMessagePrefix,
                          "mean must be finite and std finite and non-zero, got mean ", mean[c], " and std ", std[c]);
    a.mean.push_back(static_cast<float>(mean[c]));
    a.std.push_back(static_cast<float>(std[c]));
  }
  return a;
}

}  // namespace custom_op
