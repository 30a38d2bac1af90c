// The batched resized crop's call-level arguments, checked once, with the same messages, for the CPU
// kernel (cpu/resized_crop_batch_cpu.cpp) and the GPU one (cuda/resized_crop_cuda.cpp), before any
// item is decoded. Free of torch's headers: the two libraries pass their own array types as pointers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/checked_options.h"
#include "common/item_status.h"
#include "common/options.h"
#include "common/resample_taps.h"
#include "common/resized_crop_plan.h"
#include "jpeg_core/normalize.h"

namespace custom_op {

constexpr const char* kResizedCropOp = "decode_and_resized_crop_jpegs";

// The channel count every item has in this mode, or 0 when it depends on the file (UNCHANGED).
inline int64_t fixed_channels(ReadMode mode) { return mode == ReadMode::kGray ? 1 : mode == ReadMode::kRgb ? 3 : 0; }

// What the call asks of every item.
struct ResizedCropArgs {
  ResizedCropRequest crop;  // the window fields are set per item (window_of)
  Filter filter = Filter::kBilinear;
  bool antialias = true;
  int32_t dtype = jpeg_core::kOutUint8;
  std::vector<float> mean, std;  // empty: no normalisation
  DecodeOptions options;

  // Item i's request: the call's, with item i's window where the windows are crops.
  ResizedCropRequest window_of(size_t i, const int64_t* tops, const int64_t* lefts, const int64_t* heights,
                               const int64_t* widths) const {
    ResizedCropRequest r = crop;
    if (r.resize_shorter == 0) {
      r.top = tops[i];
      r.left = lefts[i];
      r.height = heights[i];
      r.width = widths[i];
    }
    return r;
  }
  float mean_of(int64_t c) const { return mean.empty() ? 0.0f : mean[static_cast<size_t>(c)]; }
  float std_of(int64_t c) const { return std.empty() ? 1.0f : std[static_cast<size_t>(c)]; }
};

// windows[4]: the lengths of tops, lefts, heights and widths.
inline ResizedCropArgs checked_resized_crop_args(size_t n, const size_t windows[4], const int64_t* size,
                                                 size_t size_length, int64_t resize_shorter, int64_t scale,
                                                 int64_t filter, bool antialias, const int64_t* flips,
                                                 size_t flips_length, const double* mean, size_t mean_length,
                                                 const double* std, size_t std_length, int64_t dtype, int64_t mode,
                                                 bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels) {
  constexpr const char* kOp = kResizedCropOp;
  ResizedCropArgs r;
  r.options = checked_decode_options(mode, apply_exif_orientation, on_warning, max_pixels);
  CUSTOM_OP_CHECK_VALUE(size_length == 2, kMessagePrefix, kOp, ": size must be [h, w], got ", size_length, " values");
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  CUSTOM_OP_CHECK_VALUE(size[0] >= 1 && size[1] >= 1 && size[0] <= kMaxSize && size[1] <= kMaxSize, kMessagePrefix, kOp,
                        ": size must be positive (and at most 2^24), got ", size[0], "x", size[1]);
  CUSTOM_OP_CHECK_VALUE(resize_shorter >= 0 && resize_shorter <= kMaxSize, kMessagePrefix, kOp,
                        ": resize_shorter must be 0 (crop then resize) or a size in 1..2^24, got ", resize_shorter);
  const size_t expected = resize_shorter > 0 ? 0 : n;
  CUSTOM_OP_CHECK_VALUE(
      windows[0] == expected && windows[1] == expected && windows[2] == expected && windows[3] == expected,
      kMessagePrefix, kOp, ": tops, lefts, heights and widths must each have ",
      resize_shorter > 0 ? "no entry when resize_shorter > 0" : "one entry per image", " (", n, " images)");
  CUSTOM_OP_CHECK_VALUE(scale >= 0 && scale <= 16, kMessagePrefix, kOp,
                        ": scale must be 0 (automatic) or a number of eighths in 1..16, got ", scale);
  CUSTOM_OP_CHECK_VALUE(filter >= 0 && filter <= 5, kMessagePrefix, kOp, ": unknown filter code ", filter);
  CUSTOM_OP_CHECK_VALUE(flips_length == 0 || flips_length == n, kMessagePrefix, kOp,
                        ": flips must be empty or have one entry per image (", n, "), got ", flips_length);
  for (size_t i = 0; i < flips_length; ++i)
    CUSTOM_OP_CHECK_VALUE(flips[i] == 0 || flips[i] == 1, kMessagePrefix, kOp, ": flips[", i, "] must be 0 or 1, got ",
                          flips[i]);
  CUSTOM_OP_CHECK_VALUE(dtype >= jpeg_core::kOutUint8 && dtype <= jpeg_core::kOutBfloat16, kMessagePrefix, kOp,
                        ": dtype code must be 0 (uint8), 1 (float32), 2 (float16) or 3 (bfloat16), got ", dtype);
  CUSTOM_OP_CHECK_VALUE(mean_length == std_length, kMessagePrefix, kOp,
                        ": mean and std must have one value per channel each, got ", mean_length, " and ", std_length);
  CUSTOM_OP_CHECK_TYPE(mean_length == 0 || dtype != jpeg_core::kOutUint8, kMessagePrefix, kOp,
                       ": mean and std need a floating-point dtype (normalised values are not uint8)");
  const int64_t channels = fixed_channels(r.options.mode);
  CUSTOM_OP_CHECK_VALUE(mean_length == 0 || (channels == 0 ? mean_length <= 4 : mean_length == size_t(channels)),
                        kMessagePrefix, kOp, ": mean and std have ", mean_length, " values for ", channels,
                        " channels");
  for (size_t c = 0; c < mean_length; ++c) {
    r.mean.push_back(static_cast<float>(mean[c]));
    r.std.push_back(static_cast<float>(std[c]));
    CUSTOM_OP_CHECK_VALUE(std::isfinite(r.mean[c]) && std::isfinite(r.std[c]) && r.std[c] != 0.0f, kMessagePrefix, kOp,
                          ": mean must be finite and std finite and non-zero (as float32), got mean[", c, "]=", mean[c],
                          ", std[", c, "]=", std[c]);
  }
  r.crop.out_height = size[0];
  r.crop.out_width = size[1];
  r.crop.resize_shorter = resize_shorter;
  r.crop.scale = static_cast<int>(scale);
  r.filter = static_cast<Filter>(filter);
  r.antialias = antialias;
  r.dtype = static_cast<int32_t>(dtype);
  return r;
}

}  // namespace custom_op
