// The CPU resampler (resize_cpu.cpp): a planar uint8 image resampled with precomputed taps
// (common/resample_taps.h), for the resize_box operator and the batched resized crop.
#pragma once

#include <cstdint>

#include "common/resample_taps.h"

namespace custom_op {

// dst [C, rows.count.size(), cols.count.size()] (contiguous) from src [C, H, W] (contiguous): output
// pixel (y, x) of channel c is the taps' sum over rows.first[y] + .. and cols.first[x] + .., in two
// passes, each rounded and clamped to uint8, vertical first when `vertical_first`
// (vertical_pass_first gives Pillow's order). Runs on the calling thread.
void resample_planes(const uint8_t* src, int64_t C, int64_t H, int64_t W, const AxisTaps& rows, const AxisTaps& cols,
                     bool vertical_first, uint8_t* dst);

}  // namespace custom_op
