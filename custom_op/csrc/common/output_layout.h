// Where each window of a GPU batch's list lies in the list's one allocation (cuda/batch_outputs.h):
// part of the op's contract, since custom_op/_ops.py's fake kernel makes the same views (and
// tests/test_ops.py checks its alignment against this one through _constants).
#pragma once

#include <cstdint>

#include "common/int_math.h"

namespace custom_op {

// Each output starts at a multiple of this many bytes.
constexpr int64_t kOutputAlignment = 256;

// The bytes an output of `bytes` takes in that allocation.
inline int64_t output_part_bytes(int64_t bytes) { return ceil_div(bytes, kOutputAlignment) * kOutputAlignment; }

}  // namespace custom_op
