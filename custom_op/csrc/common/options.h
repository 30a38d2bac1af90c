// The codes the operators take for their options (custom_op/_args.py produces them from the public
// names), and the checks every kernel applies to them.
#pragma once

#include <cstdint>

namespace custom_op {

// Which channels a decode returns (ImageReadMode in Python).
enum class ReadMode : int64_t { kUnchanged = 0, kGray = 1, kRgb = 2 };

// What a decode does with libjpeg's warnings (recoverable corruption): raise an error, return the
// image with the warnings' text (Python turns it into a UserWarning), or return the image alone.
enum class WarningPolicy : int { kRaise = 0, kWarn = 1, kIgnore = 2 };

inline bool valid_read_mode(int64_t code) { return code >= 0 && code <= 2; }
inline bool valid_warning_policy(int64_t code) { return code >= 0 && code <= 2; }

}  // namespace custom_op
