// The decoding options from an operator's arguments: the one check of their codes that every kernel
// (CPU and GPU, single and batched) applies, and its message.
#pragma once

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

}  // namespace custom_op
