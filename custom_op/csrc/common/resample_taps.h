// The resampler's weights: for each output pixel of one axis, which input pixels it reads and with
// what fixed-point weights. Computed on the host for the CPU resize (cpu/resize_cpu.cpp) and for the
// GPU's resized crop alike, so that both sum the same taps (jpeg_core/resample.h sums them).
//
// The arithmetic is Pillow's resize (ImagingResample): a separable filter whose support widens with
// the downscale factor (when antialiasing), weights normalised per output pixel and rounded to 22
// fractional bits, and Pillow's rounding of each output's tap range. Coefficients are computed in the
// frame of the whole (virtual) output and only the requested outputs are produced, so that
// resize-then-crop needs only the pixels under the crop.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "jpeg_core/resample.h"
#include "jpeg_core/resample_weights.h"

namespace custom_op {

// Filter codes of the resize_box schema (and of Python's _resample.INTERPOLATIONS).
enum class Filter : int64_t { kNearest = 0, kBilinear = 1, kBicubic = 2, kBox = 3, kHamming = 4, kLanczos = 5 };

// For each output pixel of one axis: its first input pixel (index into the given image), the number
// of taps, and the fixed-point weights (ksize per output, zero padded).
struct AxisTaps {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
  bool identity = false;  // every output is one input pixel with weight 1, consecutive
};

// in0, in1: the box in frame coordinates, mapped onto out_size output pixels; only outputs
// [out_start, out_start + out_count) are computed; the image holds frame pixels
// [origin, origin + in_count). Taps are clamped to those pixels. Throws ValueError (naming `axis`)
// for an output with no input pixel.
AxisTaps axis_taps(const char* axis, double in0, double in1, int64_t out_size, int64_t out_start, int64_t out_count,
                   int64_t origin, int64_t in_count, Filter filter, bool antialias);

// Output i's taps (jpeg_core/resample_weights.h's, any filter): *first, the weights, their count
// returned. Throws ValueError (naming `axis`) when the output has no input pixel.
int32_t output_taps(const char* axis, const jpeg_core::ResampleAxisSpec& s, const jpeg_core::ResampleGeometry& g,
                    int64_t i, int32_t* first, int32_t* weights);

// The same outputs in reverse order: a left-right flip of the result, at no cost, since each output
// column is computed from its own taps alone. The taps' first indices then decrease.
void reverse_taps(AxisTaps* taps);

// The input columns (or rows) [lo, hi) that some output reads: the taps' first indices are monotonic,
// increasing or (reversed) decreasing, so the extremes are at the ends.
std::pair<int, int> taps_span(const AxisTaps& taps);

// Pillow's pass order (since Pillow 13): vertical first when the height shrinks by more than twice as
// many pixels as the width. The order changes the uint8 intermediate, so it is followed for equality.
bool vertical_pass_first(double box_h, double box_w, int64_t out_h, int64_t out_w);

}  // namespace custom_op
