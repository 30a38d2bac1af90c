// The random-access layout test, on plain header facts, for the CPU library (restart_index.h, from
// libjpeg's parsed header) and the GPU library (from its own header scan) alike.
//
// A file has that layout (custom_op.prepare_jpeg writes it) when it is sequential Huffman-coded with
// 8-bit samples, its first scan holds every component, and it has a restart marker at least once
// per MCU row (a restart interval of 1 to mcus_per_row MCUs). Each restart segment then covers at
// most one MCU row's worth of MCUs and decodes on its own. When the interval divides the MCUs per
// row the segments tile the image in rows of whole segments; otherwise a segment may run from the
// end of one MCU row into the next, and the segments around a window are still the ones holding its
// MCUs (restart_index.h says how such a window is decoded).
#pragma once

#include <cstdint>

namespace custom_op {

struct LayoutFacts {
  bool sequential_huffman;  // baseline or extended sequential, Huffman coding (not progressive, not arithmetic)
  int precision;            // bits per sample
  int components;
  int scan_components;   // components in the first scan
  int max_h, max_v;      // largest sampling factors
  int width, height;     // full-size pixels
  int restart_interval;  // MCUs per restart segment; 0: no restart markers
};

// MCUs per row of the first scan: a single-component scan has one block per MCU whatever the
// sampling factors say.
inline int64_t mcus_per_row(const LayoutFacts& f) {
  const int mcu_width = 8 * (f.components == 1 ? 1 : f.max_h);
  return (int64_t(f.width) + mcu_width - 1) / mcu_width;
}

inline bool random_access_layout(const LayoutFacts& f) {
  if (!f.sequential_huffman || f.precision != 8 || f.restart_interval <= 0) return false;
  if (f.components < 1 || f.scan_components != f.components || f.width <= 0 || f.height <= 0) return false;
  if (f.max_h < 1 || f.max_h > 4 || f.max_v < 1 || f.max_v > 4) return false;
  return f.restart_interval <= mcus_per_row(f);
}

}  // namespace custom_op
