#include "common/resample_taps.h"

#include <algorithm>
#include <cmath>

#include "common/item_status.h"

namespace custom_op {
namespace {

double box_filter(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

double triangle_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_filter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x *= M_PI;
  // Single-precision constants, as Pillow writes them: they change the coefficients' last bits.
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}

double cubic_filter(double x) {  // Keys' cubic convolution with a = -0.5
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

double lanczos_filter(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0; }

struct FilterDef {
  double (*f)(double);
  double support;
};

FilterDef filter_def(Filter filter) {
  switch (filter) {
    case Filter::kBox: return {box_filter, 0.5};
    case Filter::kBicubic: return {cubic_filter, 2.0};
    case Filter::kHamming: return {hamming_filter, 1.0};
    case Filter::kLanczos: return {lanczos_filter, 3.0};
    case Filter::kBilinear:
    default: return {triangle_filter, 1.0};
  }
}

}  // namespace

AxisTaps axis_taps(const char* axis, double in0, double in1, int64_t out_size, int64_t out_start, int64_t out_count,
                   int64_t origin, int64_t in_count, Filter filter, bool antialias) {
  AxisTaps taps;
  const double scale = (in1 - in0) / static_cast<double>(out_size);
  const int64_t lo = origin, hi = origin + in_count;
  taps.first.resize(out_count);
  taps.count.resize(out_count);
  if (filter == Filter::kNearest) {
    // Pillow's nearest resize (ImagingScaleAffine) steps the source position by repeated addition;
    // doing the same keeps the picked pixels equal to its choice even where rounding decides.
    taps.ksize = 1;
    taps.weights.assign(out_count, int32_t(1) << jpeg_core::kResamplePrecisionBits);
    double pos = in0 + scale * 0.5;
    for (int64_t j = 0; j < out_start; ++j) pos += scale;
    for (int64_t i = 0; i < out_count; ++i, pos += scale) {
      const int64_t x = std::clamp<int64_t>(pos < 0 ? -1 : static_cast<int64_t>(pos), lo, hi - 1);
      taps.first[i] = static_cast<int>(x - origin);
      taps.count[i] = 1;
    }
  } else {
    const FilterDef def = filter_def(filter);
    const double filterscale = antialias ? std::max(scale, 1.0) : 1.0;
    const double support = def.support * filterscale;
    const double inv = 1.0 / filterscale;
    // No output can have more taps than the image has pixels: this bounds the buffer for huge boxes.
    taps.ksize = static_cast<int>(std::min<double>(std::ceil(support) * 2 + 1, static_cast<double>(in_count)));
    taps.weights.assign(out_count * taps.ksize, 0);
    std::vector<double> w(taps.ksize);
    for (int64_t i = 0; i < out_count; ++i) {
      const double center = in0 + (static_cast<double>(out_start + i) + 0.5) * scale;
      // Pillow's rounding of the tap range (truncation, then clamping), so that the same taps are used.
      const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), lo);
      const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), hi);
      CUSTOM_OP_CHECK_VALUE(xmax > xmin, "resize_box: output ", axis, " ", out_start + i,
                            " has no input pixel (the box lies outside the image)");
      const int n = static_cast<int>(std::min<int64_t>(xmax - xmin, taps.ksize));
      double sum = 0.0;
      for (int x = 0; x < n; ++x) {
        w[x] = def.f((static_cast<double>(x + xmin) - center + 0.5) * inv);
        sum += w[x];
      }
      int32_t* k = &taps.weights[i * taps.ksize];
      for (int x = 0; x < n; ++x) {
        const double v = sum != 0.0 ? w[x] / sum : w[x];
        const double fixed = v * (1 << jpeg_core::kResamplePrecisionBits);
        k[x] = static_cast<int32_t>(v < 0 ? fixed - 0.5 : fixed + 0.5);
      }
      taps.first[i] = static_cast<int>(xmin - origin);
      taps.count[i] = n;
    }
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
