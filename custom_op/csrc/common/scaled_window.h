// A window of an image decoded at a DCT scale (scale / 8 of the size each way, scale 1, 2, 4 or 8:
// jpeg_core/scaling.h), in terms of the image's MCU grid: the rectangle of MCUs whose samples the
// window's pixels are computed from. The GPU path's planner and our CUDA decoder's host side
// (cuda/segment_executor.cpp) size their decodes with it; tests/scaled_window_check.cpp checks on the
// CPU that upsampling at every sampling and scale reads nothing outside it.
//
// Why an MCU covers whole output pixels at every scale: an MCU is max_h x max_v blocks of a
// full-size component (one block in a single-component scan), and such a block becomes
// scale x scale samples and as many pixels. A subsampled component's block covers the same pixels
// whatever its IDCT size (scaling.h: its IDCT enlarges it by what its upsampler does not), so an MCU
// row or column of the output holds exactly one MCU's samples of every component.
#pragma once

#include "common/region.h"

namespace custom_op {

// An image's MCU grid as a decode at `scale` eighths sees it, in output pixels.
struct ScaledGrid {
  int mcu_width, mcu_height;  // output pixels per MCU
  int mcus_per_row, mcu_rows;
  int width, height;  // the output: ceil(size * scale / 8) each way (libjpeg's output_width/height)
};

// The grid of an image of width x height full-size pixels with MCUs of full_mcu_width x
// full_mcu_height pixels (multiples of 8), at scale 1, 2, 4 or 8.
inline ScaledGrid scaled_grid(int width, int height, int full_mcu_width, int full_mcu_height, int scale) {
  ScaledGrid g;
  g.mcu_width = full_mcu_width * scale / 8;
  g.mcu_height = full_mcu_height * scale / 8;
  g.mcus_per_row = (width + full_mcu_width - 1) / full_mcu_width;
  g.mcu_rows = (height + full_mcu_height - 1) / full_mcu_height;
  g.width = static_cast<int>((static_cast<long long>(width) * scale + 7) / 8);
  g.height = static_cast<int>((static_cast<long long>(height) * scale + 7) / 8);
  return g;
}

// The region a decode of window `r` (output pixels of the stored frame) covers: one more pixel on
// each side (interpolating upsamplers read the neighbours of the window's edge pixels), rounded out
// to whole MCUs, so that the region starts on the same chroma sample phase as the whole image, and
// cut at the image's edges.
inline Region region_with_margin(const Region& r, const ScaledGrid& g) {
  const int top = (r.top > 0 ? r.top - 1 : 0) / g.mcu_height * g.mcu_height;
  const int left = (r.left > 0 ? r.left - 1 : 0) / g.mcu_width * g.mcu_width;
  const int bottom_mcus = (r.top + r.height + 1 + g.mcu_height - 1) / g.mcu_height * g.mcu_height;
  const int right_mcus = (r.left + r.width + 1 + g.mcu_width - 1) / g.mcu_width * g.mcu_width;
  const int bottom = bottom_mcus < g.height ? bottom_mcus : g.height;
  const int right = right_mcus < g.width ? right_mcus : g.width;
  return {top, left, bottom - top, right - left};
}

// MCU rows [row0, row0 + rows) and columns [col0, col0 + cols).
struct McuRect {
  int row0, rows, col0, cols;
};

// The MCUs our CUDA decoder decodes for `decoded` (region_with_margin's, or several windows' bounding
// box of them): those holding its pixels, and one more all round where the image has one, so that
// the upsampler finds every neighbour it reads. Empty (rows or cols 0) for an empty region.
inline McuRect decode_rectangle(const Region& decoded, const ScaledGrid& g) {
  const int c0 = decoded.left / g.mcu_width - 1, r0 = decoded.top / g.mcu_height - 1;
  const int c1 = (decoded.left + decoded.width + g.mcu_width - 1) / g.mcu_width + 1;
  const int r1 = (decoded.top + decoded.height + g.mcu_height - 1) / g.mcu_height + 1;
  McuRect m;
  m.col0 = c0 > 0 ? c0 : 0;
  m.row0 = r0 > 0 ? r0 : 0;
  m.cols = (c1 < g.mcus_per_row ? c1 : g.mcus_per_row) - m.col0;
  m.rows = (r1 < g.mcu_rows ? r1 : g.mcu_rows) - m.row0;
  if (m.cols < 0 || m.rows < 0 || decoded.width <= 0 || decoded.height <= 0) m.cols = m.rows = 0;
  return m;
}

}  // namespace custom_op
