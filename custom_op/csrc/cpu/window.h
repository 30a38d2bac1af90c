// Geometry of EXIF orientations: where a window of the displayed image lies in the stored image, and
// where each stored pixel of it lands in the output.
#pragma once

#include <cstddef>

#include "libjpeg_session.h"

namespace custom_op {

// Orientations 5..8 swap rows and columns between the stored and the displayed image.
inline bool swaps_axes(int orientation) { return orientation >= 5; }

// The stored-frame rectangle holding the displayed window (top, left, height, width) of an image
// stored as stored_height x stored_width. EXIF numbering: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise to display, 7 transverse, 8 rotate 90 counter-clockwise to display.
inline Region stored_region(int orientation, int stored_height, int stored_width, int top, int left,
                            int height, int width) {
  const int H = stored_height, W = stored_width;
  switch (orientation) {
    case 2: return {top, W - left - width, height, width};
    case 3: return {H - top - height, W - left - width, height, width};
    case 4: return {H - top - height, left, height, width};
    case 5: return {left, top, width, height};
    case 6: return {H - left - width, top, width, height};
    case 7: return {H - left - width, W - top - height, width, height};
    case 8: return {left, W - top - height, width, height};
    default: return {top, left, height, width};
  }
}

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
