// The resampler's weights for one output pixel of one axis, as Pillow computes them (ImagingResample's
// precompute_coeffs): which input pixels it reads and their fixed-point weights. The CPU resize's taps
// (common/resample_taps.cpp) and the GPU's resized crop (one thread per output) use this one definition,
// so both sum the same taps (jpeg_core/resample.h).
//
// Equal on both sides because every step is one IEEE operation, rounded on its own: on the GPU the
// products and sums go through __dmul_rn / __dadd_rn, which the compiler cannot fuse into FMAs (a
// fused a * b + c rounds once and can differ in the last bit, and with it a weight). The filters here
// are plain arithmetic; Hamming and Lanczos need sin and cos, whose GPU versions differ from the C
// library's, so their taps are computed on the host only (common/resample_taps.cpp).
#pragma once

#include <math.h>  // ceil

#include "hd.h"
#include "resample.h"

namespace custom_op {
namespace jpeg_core {

// Filter codes (common/resample_taps.h's Filter, the ops' `filter`).
enum ResampleFilter : int32_t {
  kFilterNearest = 0,
  kFilterBilinear = 1,
  kFilterBicubic = 2,
  kFilterBox = 3,
  kFilterHamming = 4,
  kFilterLanczos = 5
};

// Whether this file's code computes the filter's taps (else the host's, with sin and cos).
CUSTOM_OP_HD inline bool arithmetic_filter(int32_t filter) { return filter >= kFilterNearest && filter <= kFilterBox; }

CUSTOM_OP_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CUSTOM_OP_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CUSTOM_OP_HD inline double sub_rn(double a, double b) { return add_rn(a, -b); }
CUSTOM_OP_HD inline double abs_d(double x) { return x < 0 ? -x : x; }

struct TriangleFilter {
  CUSTOM_OP_HD double operator()(double x) const {
    x = abs_d(x);
    return x < 1.0 ? sub_rn(1.0, x) : 0.0;
  }
};

struct BoxFilter {
  CUSTOM_OP_HD double operator()(double x) const { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }
};

// Keys' cubic convolution with a = -0.5.
struct CubicFilter {
  CUSTOM_OP_HD double operator()(double x) const {
    constexpr double a = -0.5;
    x = abs_d(x);
    if (x < 1.0) return add_rn(mul_rn(mul_rn(sub_rn(mul_rn(a + 2.0, x), a + 3.0), x), x), 1.0);
    if (x < 2.0) return mul_rn(sub_rn(mul_rn(add_rn(mul_rn(sub_rn(x, 5.0), x), 8.0), x), 4.0), a);
    return 0.0;
  }
};

// Filter half-widths before widening by the downscale factor (Pillow's supports).
CUSTOM_OP_HD inline double filter_support(int32_t filter) {
  switch (filter) {
    case kFilterNearest: return 0.0;
    case kFilterBox: return 0.5;
    case kFilterBicubic: return 2.0;
    case kFilterLanczos: return 3.0;
    default: return 1.0;  // bilinear, Hamming
  }
}

// One axis: the box [in0, in1) of a frame mapped onto out_size output pixels; the source holds frame
// pixels [origin, origin + in_count), and taps are clamped to them.
struct ResampleAxisSpec {
  double in0, in1;
  int64_t out_size, origin, in_count;
  int32_t filter, antialias;
};

// What every output of an axis shares.
struct ResampleGeometry {
  double scale;    // box pixels per output pixel
  double support;  // the filter's half-width in box pixels
  double inv;      // 1 / the filter's widening
  int32_t ksize;   // taps per output at most
};

CUSTOM_OP_HD inline ResampleGeometry resample_geometry(const ResampleAxisSpec& s) {
  ResampleGeometry g;
  g.scale = sub_rn(s.in1, s.in0) / static_cast<double>(s.out_size);
  if (s.filter == kFilterNearest) {
    g.support = 0.0;
    g.inv = 1.0;
    g.ksize = 1;
    return g;
  }
  const double filterscale = s.antialias && g.scale > 1.0 ? g.scale : 1.0;
  g.support = mul_rn(filter_support(s.filter), filterscale);
  g.inv = 1.0 / filterscale;
  // No output can have more taps than the source has pixels: this bounds the buffer for huge boxes.
  const double taps = mul_rn(ceil(g.support), 2.0) + 1.0;
  g.ksize = static_cast<int32_t>(taps < static_cast<double>(s.in_count) ? taps : static_cast<double>(s.in_count));
  return g;
}

// Output i's taps (i counts from the virtual output's first pixel): *first, the first source pixel
// (an index into the source), and weights[0 .. count), the count returned; 0 when the output has no
// source pixel (the box lies outside the source). f: the filter (not nearest).
template <class Filter>
CUSTOM_OP_HD inline int32_t resample_output_taps(const ResampleAxisSpec& s, const ResampleGeometry& g, Filter f,
                                                 int64_t i, int32_t* first, int32_t* weights) {
  const double center = add_rn(s.in0, mul_rn(add_rn(static_cast<double>(i), 0.5), g.scale));
  // Pillow's rounding of the tap range (truncation, then clamping), so that the same taps are used.
  int64_t xmin = static_cast<int64_t>(add_rn(sub_rn(center, g.support), 0.5));
  int64_t xmax = static_cast<int64_t>(add_rn(add_rn(center, g.support), 0.5));
  if (xmin < s.origin) xmin = s.origin;
  if (xmax > s.origin + s.in_count) xmax = s.origin + s.in_count;
  if (xmax <= xmin) return 0;
  const int32_t n = xmax - xmin < g.ksize ? static_cast<int32_t>(xmax - xmin) : g.ksize;
  // The weights are computed twice (for their sum, then each divided by it) rather than kept: the
  // same operations give the same values, and a GPU thread keeps no array of them.
  double sum = 0.0;
  for (int32_t x = 0; x < n; ++x)
    sum = add_rn(sum, f(mul_rn(add_rn(sub_rn(static_cast<double>(x + xmin), center), 0.5), g.inv)));
  for (int32_t x = 0; x < n; ++x) {
    const double w = f(mul_rn(add_rn(sub_rn(static_cast<double>(x + xmin), center), 0.5), g.inv));
    const double v = sum != 0.0 ? w / sum : w;
    const double fixed = mul_rn(v, static_cast<double>(int32_t{1} << kResamplePrecisionBits));
    weights[x] = static_cast<int32_t>(v < 0 ? sub_rn(fixed, 0.5) : add_rn(fixed, 0.5));
  }
  *first = static_cast<int32_t>(xmin - s.origin);
  return n;
}

// Nearest: Pillow's nearest resize (ImagingScaleAffine) steps the source position by repeated
// addition, so this does the same (i additions): the picked pixel is then Pillow's even where
// rounding decides. One tap of weight 1.
CUSTOM_OP_HD inline int32_t nearest_output_tap(const ResampleAxisSpec& s, const ResampleGeometry& g, int64_t i,
                                               int32_t* first, int32_t* weights) {
  double pos = add_rn(s.in0, mul_rn(g.scale, 0.5));
  for (int64_t j = 0; j < i; ++j) pos = add_rn(pos, g.scale);
  int64_t x = pos < 0 ? -1 : static_cast<int64_t>(pos);
  if (x < s.origin) x = s.origin;
  if (x > s.origin + s.in_count - 1) x = s.origin + s.in_count - 1;
  *first = static_cast<int32_t>(x - s.origin);
  weights[0] = int32_t{1} << kResamplePrecisionBits;
  return 1;
}

// Output i's taps for the arithmetic filters (arithmetic_filter).
CUSTOM_OP_HD inline int32_t arithmetic_output_taps(const ResampleAxisSpec& s, const ResampleGeometry& g, int64_t i,
                                                   int32_t* first, int32_t* weights) {
  switch (s.filter) {
    case kFilterNearest: return nearest_output_tap(s, g, i, first, weights);
    case kFilterBicubic: return resample_output_taps(s, g, CubicFilter(), i, first, weights);
    case kFilterBox: return resample_output_taps(s, g, BoxFilter(), i, first, weights);
    default: return resample_output_taps(s, g, TriangleFilter(), i, first, weights);
  }
}

}  // namespace jpeg_core
}  // namespace custom_op
