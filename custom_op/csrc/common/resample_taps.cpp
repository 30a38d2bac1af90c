#include "common/resample_taps.h"

#include <algorithm>
#include <cmath>

#include "common/item_status.h"
#include "jpeg_core/resample_weights.h"

namespace custom_op {
namespace {

double hamming_filter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x *= M_PI;
  // Single-precision constants, as Pillow writes them: they change the coefficients' last bits.
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

// The filters with sin and cos, host only (jpeg_core/resample_weights.h has the others).
struct HammingFilter {
  double operator()(double x) const { return hamming_filter(x); }
};
struct LanczosFilter {
  double operator()(double x) const { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0; }
};

}  // namespace

int32_t output_taps(const char* axis, const jpeg_core::ResampleAxisSpec& s, const jpeg_core::ResampleGeometry& g,
                    int64_t i, int32_t* first, int32_t* weights) {
  int32_t n;
  switch (s.filter) {
    case jpeg_core::kFilterHamming:
      n = jpeg_core::resample_output_taps(s, g, HammingFilter(), i, first, weights);
      break;
    case jpeg_core::kFilterLanczos:
      n = jpeg_core::resample_output_taps(s, g, LanczosFilter(), i, first, weights);
      break;
    default: n = jpeg_core::arithmetic_output_taps(s, g, i, first, weights);
  }
  CUSTOM_OP_CHECK_VALUE(n > 0, "resize_box: output ", axis, " ", i,
                        " has no input pixel (the box lies outside the image)");
  return n;
}

AxisTaps axis_taps(const char* axis, double in0, double in1, int64_t out_size, int64_t out_start, int64_t out_count,
                   int64_t origin, int64_t in_count, Filter filter, bool antialias) {
  const jpeg_core::ResampleAxisSpec spec{in0, in1, out_size, origin, in_count, static_cast<int32_t>(filter), antialias};
  const jpeg_core::ResampleGeometry geometry = jpeg_core::resample_geometry(spec);
  AxisTaps taps;
  taps.ksize = geometry.ksize;
  taps.first.resize(out_count);
  taps.count.resize(out_count);
  taps.weights.assign(out_count * taps.ksize, 0);
  for (int64_t i = 0; i < out_count; ++i) {
    int32_t first = 0;
    const int32_t n = output_taps(axis, spec, geometry, out_start + i, &first, &taps.weights[i * taps.ksize]);
    taps.first[i] = first;
    taps.count[i] = n;
  }
  taps.identity = true;
  for (int64_t i = 0; i < out_count && taps.identity; ++i) {
    taps.identity = taps.count[i] == 1 &&
                    taps.weights[i * taps.ksize] == (int32_t(1) << jpeg_core::kResamplePrecisionBits) &&
                    taps.first[i] == taps.first[0] + i;
  }
  return taps;
}

void reverse_taps(AxisTaps* taps) {
  const int64_t n = static_cast<int64_t>(taps->first.size()), k = taps->ksize;
  std::reverse(taps->first.begin(), taps->first.end());
  std::reverse(taps->count.begin(), taps->count.end());
  for (int64_t i = 0; i < n / 2; ++i)
    std::swap_ranges(taps->weights.begin() + i * k, taps->weights.begin() + (i + 1) * k,
                     taps->weights.begin() + (n - 1 - i) * k);
  taps->identity = n == 1 && taps->identity;
}

std::pair<int, int> taps_span(const AxisTaps& taps) {
  const size_t last = taps.first.size() - 1;
  return {std::min(taps.first[0], taps.first[last]),
          std::max(taps.first[0] + taps.count[0], taps.first[last] + taps.count[last])};
}

bool vertical_pass_first(double box_h, double box_w, int64_t out_h, int64_t out_w) {
  const double shrink_h = box_h - static_cast<double>(out_h);
  const double shrink_w = box_w - static_cast<double>(out_w);
  return shrink_h > 0 && shrink_h > 2 * shrink_w;
}

}  // namespace custom_op
