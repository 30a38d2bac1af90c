// Which restart segments a window's decode reads, worked out from header facts alone, for the CPU
// library (cpu/restart_index.h builds its sub-images from these plans) and the GPU library (our CUDA
// decoder, cuda/segment_executor.cpp, decodes a superset of what the CPU path reads, so that damage
// the CPU path would report is found on the GPU too and the item goes to the CPU path). One source
// for both, so that the two cannot disagree about a window.
//
// cpu/restart_index.h says how a sub-image is laid out and why its plan reads no more of a file than
// a decode of the whole file down to the window would.
#pragma once

#include <cstdint>
#include <vector>

#include "common/random_access.h"
#include "common/region.h"

namespace custom_op {

// What the plans depend on: the layout facts, and each component's sampling factors (the margins
// chroma upsampling reads depend on them).
struct FrameFacts {
  LayoutFacts layout;
  int h_samp[4] = {0, 0, 0, 0};  // the first layout.components entries are used
  int v_samp[4] = {0, 0, 0, 0};
};

// How a header's MCUs and restart segments are laid out.
struct RestartLayout {
  int mcu_width, mcu_height;  // full-size pixels
  int mcus_per_row, mcu_rows;
  int interval;  // MCUs per restart segment, 1 .. mcus_per_row
  // Output pixels around a window that fancy upsampling reads: the largest sampling factor along an
  // axis where some component is subsampled, else 0 (4:4:4 and grayscale need no context).
  int margin_x, margin_y;
};

// True (and *layout filled) when the facts declare the random-access layout (random_access.h).
bool restart_layout(const FrameFacts& facts, RestartLayout* layout);

// A sub-image: its MCU row i, column j is the original's MCU row r0 + i, column c_base + j (past the
// row's end: the next row's first MCUs; past the image's last row: nothing). Its MCUs are handed to
// libjpeg as the original's restart segments, one in each slot of the original's interval.
struct SubImagePlan {
  int64_t r0, rows, c_base, cols;
  std::vector<int64_t> slots;  // the original segment in each slot, in slot order
  int64_t width, height;       // the sub-image's frame, in full-size pixels
  Region region;               // where the window lies in the sub-image's scaled output
};

// Plans the sub-image holding `region` (in the output scaled by scale_num/8 of an image of
// width x height pixels laid out as L). False when the region does not fit the image, no sub-image
// lines up with the segments, or it would not save any work (it would start at the first row and
// span whole rows): the CPU path then decodes the ordinary way.
bool plan_sub_image(const RestartLayout& L, int64_t width, int64_t height, int scale_num, const Region& region,
                    SubImagePlan* plan);

// What the CPU path's decode of a window reads: a sub-image's segments, or (`ordinary`) every
// segment from the first through the one holding the last MCU of row last_row.
struct SegmentsRead {
  bool ordinary;
  int64_t last_row;               // ordinary: the last MCU row it may decode
  std::vector<int64_t> segments;  // a sub-image: the original segments its slots hold, sorted, each once
};

// For `region`, a stored-frame window at full scale (the GPU path's), of a file with these facts.
// The ordinary path decodes the rows down to the window's last; where chroma is subsampled down the
// rows, libjpeg's context rows may make it decode the row below too, and last_row counts that row.
// Refusals of the CPU path that depend on the file's bytes (markers out of place, unexpected header
// segments) are not foreseen here: those take the ordinary path although this says sub-image.
SegmentsRead cpu_segments_read(const FrameFacts& facts, const Region& region);

// The last segment holding an MCU of rows 0 .. row (segments of `interval` MCUs, mcus_per_row a row).
inline int64_t last_segment_of_row(int64_t row, int64_t mcus_per_row, int64_t interval) {
  return ((row + 1) * mcus_per_row - 1) / interval;
}

// Restart segments first .. first + count - 1.
struct SegmentRun {
  int64_t first, count;
};

// The segments our CUDA decoder decodes for a file with these facts (restart_interval > 0), when it
// decodes the MCU rectangle of rows [r0, r1) and columns [c0, c1) and takes the `count` windows
// (stored-frame regions of the output at scale_num / 8) from it: those holding the rectangle's MCUs,
// and every segment the CPU path's decode at that scale reads for any of the windows (as
// cpu_segments_read says at full scale). Without the random-access layout, every segment from the
// first through the rectangle's last row. As runs of consecutive segments, in order, none empty and
// no two touching: a window's rectangle gives one run per MCU row at most.
std::vector<SegmentRun> decoder_segments(const FrameFacts& facts, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                         const Region* windows, size_t count, int scale_num = 8);

}  // namespace custom_op
