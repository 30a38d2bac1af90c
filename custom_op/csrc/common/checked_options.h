// The decoding options from an operator's arguments: the one check of their codes that every kernel
// (CPU and GPU, single and batched) applies, and its message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/item_status.h"
#include "common/options.h"

namespace custom_op {

// A code out of range is a ValueError.
inline DecodeOptions checked_decode_options(int64_t mode, bool apply_exif_orientation, int64_t on_warning,
                                            int64_t max_pixels) {
  CUSTOM_OP_CHECK_VALUE(mode >= 0 && mode <= 2, kMessagePrefix,
                        "mode code must be 0 (UNCHANGED), 1 (GRAY) or 2 (RGB), got ", mode);
  CUSTOM_OP_CHECK_VALUE(on_warning >= 0 && on_warning <= 2, kMessagePrefix,
                        "on_warning code must be 0 (raise), 1 (warn) or 2 (ignore), got ", on_warning);
  return {static_cast<ReadMode>(mode), apply_exif_orientation, static_cast<WarningPolicy>(on_warning), max_pixels};
}

// A batch's per-item DCT scales on the GPU (eighths; none given: all 8), checked before any work: one
// per item, each 1, 2, 4 or 8 (the scales our CUDA decoder's IDCTs give), and only for windows (a
// whole-image decode is at full size). `count` scales at `scales`.
inline void check_gpu_scales(const int64_t* scales, size_t count, size_t items, bool whole) {
  if (count == 0) return;
  CUSTOM_OP_CHECK_VALUE(!whole, kMessagePrefix, "scales apply to windows only; a whole-image decode is at scale 8");
  CUSTOM_OP_CHECK_VALUE(count == items, kMessagePrefix, "scales must have one entry per image (", items, "), got ",
                        count);
  for (size_t i = 0; i < count; ++i)
    CUSTOM_OP_CHECK_VALUE(scales[i] == 1 || scales[i] == 2 || scales[i] == 4 || scales[i] == 8, kMessagePrefix,
                          "a GPU decode's scale must be 1, 2, 4 or 8 (eighths), got ", scales[i], " for image ", i);
}

}  // namespace custom_op
