// Where an output pixel of a displayed (EXIF-oriented) window comes from in the stored frame, for the
// kernels that write outputs (window_copy.cu, segment_decoder.cu).
#pragma once

#include <cuda_runtime_api.h>

namespace custom_op {
namespace gpu {

// Output pixel (y, x) of the displayed window comes from stored pixel (r, s) of the region
// (last_row, last_col: the region's last stored row and column): the inverse of cpu/window.h's
// place_row, so that the GPU and CPU paths agree on every orientation.
__device__ __forceinline__ void stored_position(int orientation, int y, int x, int last_row, int last_col, int* r,
                                                int* s) {
  // clang-format off
  switch (orientation) {
    case 2: *r = y; *s = last_col - x; break;
    case 3: *r = last_row - y; *s = last_col - x; break;
    case 4: *r = last_row - y; *s = x; break;
    case 5: *r = x; *s = y; break;
    case 6: *r = last_row - x; *s = y; break;
    case 7: *r = last_row - x; *s = last_col - y; break;
    case 8: *r = x; *s = last_col - y; break;
    default: *r = y; *s = x; break;
  }
  // clang-format on
}

}  // namespace gpu
}  // namespace custom_op
