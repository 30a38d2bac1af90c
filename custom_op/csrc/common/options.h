// The decoding options every decoding operator takes by name (`*, int mode, bool
// apply_exif_orientation, int on_warning, int max_pixels`: csrc/ops.cpp), as one value; the kernels
// make it with checked_decode_options (common/checked_options.h). custom_op/_args.py makes the codes
// from the public names; tests/test_ops.py checks that its codes are these (custom_op::_constants).
// Free of torch's headers: the sanitizer build of tests/fuzz/ compiles the libjpeg session without them.
#pragma once

#include <cstdint>

namespace custom_op {

// Which channels a decode returns (ImageReadMode in Python).
enum class ReadMode : int64_t { kUnchanged = 0, kGray = 1, kRgb = 2 };

// What a decode does with libjpeg's warnings (recoverable corruption): raise an error, return the
// image with the warnings' text (Python turns it into a UserWarning), or return the image alone.
enum class WarningPolicy : int { kRaise = 0, kWarn = 1, kIgnore = 2 };

struct DecodeOptions {
  ReadMode mode = ReadMode::kRgb;
  bool apply_exif_orientation = false;
  WarningPolicy on_warning = WarningPolicy::kRaise;
  int64_t max_pixels = 0;  // 0 (or less): no limit

  // The codes, as the operators take them back (the GPU library calls the CPU operators with them).
  int64_t mode_code() const { return static_cast<int64_t>(mode); }
  int64_t on_warning_code() const { return static_cast<int64_t>(on_warning); }
};

}  // namespace custom_op
