// Where each stored pixel of a region lands in the CPU path's output under an EXIF orientation
// (common/region.h maps the window the other way).
#pragma once

#include <cstddef>

#include "common/region.h"

namespace custom_op {

// Where stored pixel (row r, column 0) of the region goes in the output plane (out_width wide), and
// how far apart consecutive columns of that stored row land.
struct RowPlacement {
  std::ptrdiff_t start;
  std::ptrdiff_t step;
};

inline RowPlacement place_row(int orientation, int r, const Region& region, int out_width) {
  const std::ptrdiff_t w = out_width;
  const int last_row = region.height - 1, last_col = region.width - 1;
  switch (orientation) {
    case 2: return {r * w + last_col, -1};
    case 3: return {(last_row - r) * w + last_col, -1};
    case 4: return {(last_row - r) * w, 1};
    case 5: return {r, w};
    case 6: return {last_row - r, w};
    case 7: return {last_col * w + (last_row - r), -w};
    case 8: return {last_col * w + r, -w};
    default: return {r * w, 1};
  }
}

}  // namespace custom_op
