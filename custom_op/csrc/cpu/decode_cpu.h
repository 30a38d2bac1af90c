// The CPU decode of one image, for the single-image operators (decode_cpu.cpp) and the batched one
// (decode_batch_cpu.cpp). Errors are thrown as c10 exceptions whose messages start with "custom_op: ".
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "common/options.h"

namespace custom_op {

struct Decoded {
  at::Tensor image;      // [C, H, W] uint8
  std::string warnings;  // libjpeg's warnings with WarningPolicy::kWarn, else ""
};

// The operators' codes, checked (ValueError for anything else).
ReadMode checked_mode(int64_t mode);
WarningPolicy checked_policy(int64_t on_warning);

// The window [top, top + height) x [left, left + width) of the (scale_num/8-scaled, displayed when
// apply_exif_orientation) image. Writes into *into when it is a contiguous [C, height, width] uint8
// CPU tensor of the right channel count, else into a new tensor. max_pixels 0: no limit.
Decoded decode_and_crop(const at::Tensor& data, int64_t top, int64_t left, int64_t height, int64_t width, ReadMode mode,
                        bool apply_exif_orientation, WarningPolicy policy, int64_t max_pixels, int64_t scale_num,
                        const at::Tensor* into);

// The whole image, in the displayed frame when apply_exif_orientation.
Decoded decode_whole(const at::Tensor& data, ReadMode mode, bool apply_exif_orientation, WarningPolicy policy,
                     int64_t max_pixels);

}  // namespace custom_op
