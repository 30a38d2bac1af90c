// The CPU decode of one image, for the single-image operators (decode_cpu.cpp) and the batched one
// (decode_batch_cpu.cpp). Errors are thrown as custom_op::Error (common/item_status.h), their messages
// starting with "custom_op: " after their type's tag.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/options.h"
#include "tensors.h"

namespace custom_op {

struct Decoded {
  Tensor image;          // [C, H, W] uint8
  std::string warnings;  // libjpeg's warnings with WarningPolicy::kWarn, else ""
};

// The window [top, top + height) x [left, left + width) of the (scale_num/8-scaled, displayed when
// options.apply_exif_orientation) image. Writes into *into when it is a contiguous [C, height, width]
// uint8 CPU tensor of the right channel count, else into a new tensor.
Decoded decode_and_crop(const Tensor& data, int64_t top, int64_t left, int64_t height, int64_t width,
                        const DecodeOptions& options, int64_t scale_num, const Tensor* into);

// The image's size as a window is given in: full resolution, in the displayed frame when
// options.apply_exif_orientation; `oriented` when that frame is not the stored one.
struct ImageFrame {
  int64_t height = 0, width = 0;
  bool oriented = false;
};

// A window of the image decoded at scale_num / 8, in that scaled image (displayed frame).
struct ScaledWindow {
  int64_t scale_num = 8;
  int64_t top = 0, left = 0, height = 0, width = 0;
};

using WindowPlanner = std::function<ScaledWindow(const ImageFrame&)>;

// A window chosen from the header: reads it once, asks `plan` which window of which scale to decode,
// and decodes that window into a new tensor. `op` names the caller in the messages about its data.
Decoded decode_planned(const Tensor& data, const DecodeOptions& options, const WindowPlanner& plan, const char* op);

// Throws the ValueError of a window that does not fit in an image_h x image_w image (`oriented`: the
// message says the image is in the EXIF-oriented frame).
void check_window(int64_t top, int64_t left, int64_t height, int64_t width, int64_t image_h, int64_t image_w,
                  bool oriented);

// The whole image, in the displayed frame when options.apply_exif_orientation.
Decoded decode_whole(const Tensor& data, const DecodeOptions& options);

}  // namespace custom_op
