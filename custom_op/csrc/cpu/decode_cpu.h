// The CPU decode of one image, for the single-image operators (decode_cpu.cpp) and the batched one
// (decode_batch_cpu.cpp). Errors are thrown as custom_op::Error (common/item_status.h), their messages
// starting with "custom_op: " after their type's tag.
#pragma once

#include <cstdint>
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

// The whole image, in the displayed frame when options.apply_exif_orientation.
Decoded decode_whole(const Tensor& data, const DecodeOptions& options);

}  // namespace custom_op
