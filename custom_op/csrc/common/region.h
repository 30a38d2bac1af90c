// A rectangle of pixels, and where a window of the displayed image lies in the stored one under each
// EXIF orientation. Shared by the CPU and the GPU library, so both orient every window identically.
#pragma once

#include <cstddef>

namespace custom_op {

// A rectangle in an image's stored frame (before EXIF orientation), in output pixels.
struct Region {
  int top, left, height, width;
};

// Orientations 5..8 swap rows and columns between the stored and the displayed image.
inline bool swaps_axes(int orientation) { return orientation >= 5; }

// The stored-frame rectangle holding the displayed window (top, left, height, width) of an image
// stored as stored_height x stored_width. EXIF numbering: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise to display, 7 transverse, 8 rotate 90 counter-clockwise to display.
inline Region stored_region(int orientation, int stored_height, int stored_width, int top, int left, int height,
                            int width) {
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

// The smallest rectangle holding both.
inline Region bounding_box(const Region& a, const Region& b) {
  const int top = a.top < b.top ? a.top : b.top;
  const int left = a.left < b.left ? a.left : b.left;
  const int bottom = a.top + a.height > b.top + b.height ? a.top + a.height : b.top + b.height;
  const int right = a.left + a.width > b.left + b.width ? a.left + a.width : b.left + b.width;
  return {top, left, bottom - top, right - left};
}

}  // namespace custom_op
