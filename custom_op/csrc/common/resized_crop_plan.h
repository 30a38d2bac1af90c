// How one item of a fused resized crop is decoded and resampled: the DCT scale, the scaled pixels to
// decode, and how they map onto the output. The CPU batched call and the GPU's resized crop plan every
// item here, so both decode the same pixels and sum the same taps.
//
// Two requests:
//   - crop then resize (RandomResizedCrop): the full-resolution window [top, top + height) x
//     [left, left + width) becomes the box [top * s / 8, (top + height) * s / 8) of the image decoded at
//     s / 8, and only the scaled pixels that box touches are decoded; the box, fractional edges
//     included, is resampled onto the output;
//   - resize then centre crop (Resize(shorter) + CenterCrop): the whole image is resized so that its
//     shorter side is `resize_shorter` (the longer one truncated, as torchvision), and only the output
//     pixels of the centred crop are computed, from the scaled pixels their taps reach.
// The scale, unless forced: the smallest of 1/8, 2/8, 4/8 (the scales with a fast reduced IDCT) that
// keeps what is resized at least the output's size in both directions, else 8/8.
#pragma once

#include <cstdint>

#include "common/resample_taps.h"

namespace custom_op {

struct ResizedCropRequest {
  // The window, in full-resolution pixels of the displayed frame (ignored when resize_shorter > 0).
  int64_t top = 0, left = 0, height = 0, width = 0;
  int64_t resize_shorter = 0;  // > 0: resize then centre crop
  int64_t out_height = 0, out_width = 0;
  int scale = 0;  // eighths (1..16); 0: chosen as above
};

// One axis of the plan.
struct ResampleAxis {
  int64_t first = 0, count = 0;          // the scaled pixels decoded
  double in0 = 0, in1 = 0;               // the box, in the frame whose 0 is at `origin`
  int64_t out_size = 0;                  // the (virtual) output the box maps onto
  int64_t out_start = 0, out_count = 0;  // the outputs produced
  int64_t origin = 0;                    // the frame position of the first decoded pixel
};

struct ResizedCropPlan {
  int scale = 8;
  ResampleAxis rows, cols;
};

// The scale chosen for resizing a height x width area (full resolution) to out_height x out_width.
int auto_resize_scale(int64_t height, int64_t width, int64_t out_height, int64_t out_width);

// The plan for an image of image_height x image_width (full resolution, displayed frame). Throws
// ValueError for a window that does not fit in the image, an empty output, a scale outside 1..16, or a
// centre crop larger than the resized image.
ResizedCropPlan plan_resized_crop(const ResizedCropRequest& request, int64_t image_height, int64_t image_width,
                                  Filter filter, bool antialias);

}  // namespace custom_op
