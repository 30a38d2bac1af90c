// Integer helpers shared by the layout planners of both libraries.
#pragma once

#include <cstdint>

namespace custom_op {

// a / b rounded up, for a >= 0 and b > 0.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace custom_op
