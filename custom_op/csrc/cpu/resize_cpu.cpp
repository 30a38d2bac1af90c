// Antialiased resampling of a (possibly fractional) box of a planar uint8 image: the resize step of the
// fused resized crop (resample_planes, which the batched resized crop calls per item) and the resize_box
// operator around it. A window mapped into a DCT-scaled decode has fractional edges, which
// F.interpolate cannot take.
//
// The arithmetic is Pillow's resize (ImagingResample): the taps of common/resample_taps.h, summed as
// jpeg_core/resample.h does, each pass rounded and clamped to uint8, in Pillow's pass order. So on an
// integer box the result is Pillow's, pixel for pixel: what torchvision's resize gives on PIL images.
//
// One image's resize runs on the calling thread, never in torch's intra-op pool: it is too little work
// for a parallel region, whose threads stall when the cores are busy (a DataLoader's workers, a test
// suite beside it), and the batched calls are where parallelism belongs (one item per thread).
//
// CUSTOM_OP_RESIZE_NO_SIMD=1 (read once per process) selects the portable kernels, for testing them.
#include "resize_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/item_status.h"
#include "common/resample_taps.h"
#include "common/resize_box_args.h"
#include "jpeg_core/resample.h"
#include "tensors.h"

namespace custom_op {
namespace {

// The one arithmetic kernel of both passes: out[x] = clip8(half + sum_t k[t] * in[t * stride + x]),
// x in [0, width): a weighted sum of n rows, vectorised along the row. The horizontal pass uses it on
// transposed blocks (see horizontal_pass).
void combine_rows_scalar(const uint8_t* __restrict in, std::ptrdiff_t stride, const int32_t* k, int n,
                         uint8_t* __restrict out, int64_t width) {
  for (int64_t x = 0; x < width; ++x) out[x] = jpeg_core::resample_sample(in + x, stride, k, n);
}

#if defined(__x86_64__) || defined(__i386__)
// 32-bit products, as the scalar code: 16-bit tricks would need coefficients with fewer bits, and
// the results would no longer be Pillow's.
__attribute__((target("avx2"))) void combine_rows_avx2(const uint8_t* __restrict in, std::ptrdiff_t stride,
                                                       const int32_t* k, int n, uint8_t* __restrict out,
                                                       int64_t width) {
  int64_t x = 0;
  for (; x + 16 <= width; x += 16) {
    __m256i lo = _mm256_set1_epi32(jpeg_core::kResampleHalf), hi = lo;
    for (int t = 0; t < n; ++t) {
      const __m128i px = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + t * stride + x));
      const __m256i kt = _mm256_set1_epi32(k[t]);
      lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(px), kt));
      hi = _mm256_add_epi32(hi, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(px, 8)), kt));
    }
    // Shift, then saturate to 16 and to 8 bits: the same as clip8. packs works within 128-bit lanes,
    // hence the permute.
    const __m256i w16 =
        _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_srai_epi32(lo, jpeg_core::kResamplePrecisionBits),
                                                    _mm256_srai_epi32(hi, jpeg_core::kResamplePrecisionBits)),
                                 0xD8);
    const __m128i w8 = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), w8);
  }
  if (x < width) combine_rows_scalar(in + x, stride, k, n, out + x, width - x);
}

bool has_avx2() {
  static const bool supported = [] {
    const char* off = std::getenv("CUSTOM_OP_RESIZE_NO_SIMD");
    return __builtin_cpu_supports("avx2") && !(off != nullptr && off[0] == '1');
  }();
  return supported;
}
#endif

void combine_rows(const uint8_t* in, std::ptrdiff_t stride, const int32_t* k, int n, uint8_t* out, int64_t width) {
#if defined(__x86_64__) || defined(__i386__)
  if (has_avx2()) return combine_rows_avx2(in, stride, k, n, out, width);
#endif
  combine_rows_scalar(in, stride, k, n, out, width);
}

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols.
void transpose(const uint8_t* __restrict src, std::ptrdiff_t src_stride, uint8_t* __restrict dst,
               std::ptrdiff_t dst_stride, int64_t rows, int64_t cols) {
  int64_t r = 0;
#if defined(__SSE2__)
  for (; r + 8 <= rows; r += 8) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      // 8x8 bytes: interleave bytes, then 16-bit pairs, then 32-bit quads of row pairs.
      const uint8_t* s = src + r * src_stride + c;
      __m128i a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i * src_stride));
      const __m128i b0 = _mm_unpacklo_epi8(a[0], a[1]), b1 = _mm_unpacklo_epi8(a[2], a[3]);
      const __m128i b2 = _mm_unpacklo_epi8(a[4], a[5]), b3 = _mm_unpacklo_epi8(a[6], a[7]);
      const __m128i c0 = _mm_unpacklo_epi16(b0, b1), c1 = _mm_unpackhi_epi16(b0, b1);
      const __m128i c2 = _mm_unpacklo_epi16(b2, b3), c3 = _mm_unpackhi_epi16(b2, b3);
      const __m128i d[4] = {_mm_unpacklo_epi32(c0, c2), _mm_unpackhi_epi32(c0, c2), _mm_unpacklo_epi32(c1, c3),
                            _mm_unpackhi_epi32(c1, c3)};
      uint8_t* o = dst + c * dst_stride + r;
      for (int i = 0; i < 4; ++i) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + (2 * i) * dst_stride), d[i]);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(o + (2 * i + 1) * dst_stride), _mm_unpackhi_epi64(d[i], d[i]));
      }
    }
    for (; c < cols; ++c)
      for (int64_t i = r; i < r + 8; ++i) dst[c * dst_stride + i] = src[i * src_stride + c];
  }
#endif
  for (; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * dst_stride + r] = src[r * src_stride + c];
}

// A channel-planar uint8 image: row r of channel c starts at data + c * plane + r * stride.
struct Plane {
  uint8_t* data;
  std::ptrdiff_t stride;
  std::ptrdiff_t plane;
};

// Rows this many at a time go through the horizontal pass: the transposed blocks stay in cache.
constexpr int64_t kStrip = 64;

// dst rows [0, n_rows) of every channel from the same rows of src. The taps' first indices count
// from src column `shift` (src.data points at column `shift` of the image's columns).
// A row-by-row horizontal filter cannot be vectorised without gathers; on a transposed block of
// rows it is combine_rows along the block's height, then the block is transposed back.
void horizontal_pass(const Plane& src, const Plane& dst, int64_t C, int64_t n_rows, const AxisTaps& cols, int shift) {
  const int64_t width = static_cast<int64_t>(cols.count.size());
  const auto [c_lo, c_hi] = taps_span(cols);
  const int64_t n_cols = c_hi - c_lo;
  const int64_t strips = (n_rows + kStrip - 1) / kStrip;
  std::vector<uint8_t> in_t(n_cols * kStrip), out_t(width * kStrip);
  for (int64_t i = 0; i < C * strips; ++i) {
    const int64_t c = i / strips, r0 = (i % strips) * kStrip, rows = std::min(kStrip, n_rows - r0);
    const uint8_t* s = src.data + c * src.plane + r0 * src.stride + (c_lo - shift);
    transpose(s, src.stride, in_t.data(), kStrip, rows, n_cols);
    for (int64_t x = 0; x < width; ++x) {
      combine_rows(in_t.data() + (cols.first[x] - c_lo) * kStrip, kStrip, &cols.weights[x * cols.ksize], cols.count[x],
                   out_t.data() + x * kStrip, rows);
    }
    transpose(out_t.data(), kStrip, dst.data + c * dst.plane + r0 * dst.stride, dst.stride, width, rows);
  }
}

// dst rows [0, rows.count.size()) of every channel, `width` columns; src row 0 is input row `row0`.
void vertical_pass(const Plane& src, const Plane& dst, int64_t C, const AxisTaps& rows, int row0, int64_t width) {
  const int64_t n_out = static_cast<int64_t>(rows.count.size());
  for (int64_t i = 0; i < C * n_out; ++i) {
    const int64_t c = i / n_out, y = i % n_out;
    const uint8_t* first = src.data + c * src.plane + (rows.first[y] - row0) * src.stride;
    uint8_t* out = dst.data + c * dst.plane + y * dst.stride;
    if (rows.identity) {
      std::memcpy(out, first, width);
    } else {
      combine_rows(first, src.stride, &rows.weights[y * rows.ksize], rows.count[y], out, width);
    }
  }
}

}  // namespace

void resample_planes(const uint8_t* src, int64_t C, int64_t H, int64_t W, const AxisTaps& rows, const AxisTaps& cols,
                     bool vertical_first, uint8_t* dst) {
  const int64_t wh = static_cast<int64_t>(rows.count.size()), ww = static_cast<int64_t>(cols.count.size());
  // Plane is shared by inputs and outputs; the input is only read.
  const Plane in{const_cast<uint8_t*>(src), W, H * W};
  const Plane out{dst, ww, wh * ww};
  // The part of the input that the first pass reads along the other axis.
  const auto [row_first, row_last] = taps_span(rows);
  const auto [col_first, col_last] = taps_span(cols);
  // The first pass's output, left uninitialised: every byte of it is written.
  std::unique_ptr<uint8_t[]> tmp;
  if (!vertical_first) {
    Plane mid{in.data + static_cast<std::ptrdiff_t>(row_first) * W, W, in.plane};
    if (!cols.identity) {
      tmp.reset(new uint8_t[C * (row_last - row_first) * ww]);
      const Plane t{tmp.get(), ww, (row_last - row_first) * ww};
      horizontal_pass(mid, t, C, row_last - row_first, cols, 0);
      mid = t;
    } else {
      mid.data += col_first;
    }
    vertical_pass(mid, out, C, rows, row_first, ww);
  } else {
    Plane mid{in.data + col_first, W, in.plane};
    if (!rows.identity) {
      tmp.reset(new uint8_t[C * wh * (col_last - col_first)]);
      const Plane t{tmp.get(), col_last - col_first, wh * (col_last - col_first)};
      vertical_pass(mid, t, C, rows, 0, col_last - col_first);
      mid = t;
    } else {
      mid.data += static_cast<std::ptrdiff_t>(row_first) * W;
    }
    horizontal_pass(mid, out, C, wh, cols, col_first);
  }
}

namespace {

Tensor resize_box_cpu(const Tensor& image, const std::vector<double>& box, IntArrayRef size, IntArrayRef out_window,
                      IntArrayRef origin, int64_t filter, bool antialias, bool flip) {
  CUSTOM_OP_CHECK_TYPE(
      image.is_cpu() && image.scalar_type() == ScalarType::Byte && (image.dim() == 3 || image.dim() == 4),
      "resize_box: image must be a uint8 CPU tensor [C, H, W] or [N, C, H, W], got ", image.scalar_type(), " of shape ",
      shape_text(image.sizes()), " on ", device_text(image.device()));
  const ResizeBoxArgs a = checked_resize_box_args(
      image.sizes().data(), image.sizes().size(), shape_text(image.sizes()), box.data(), box.size(), size.data(),
      size.size(), out_window.data(), out_window.size(), origin.data(), origin.size(), filter, antialias, flip);
  const AxisTaps rows =
      axis_taps("row", a.box[0], a.box[2], a.out_h, a.top, a.height, a.origin_row, a.H, a.filter, a.antialias);
  AxisTaps cols =
      axis_taps("column", a.box[1], a.box[3], a.out_w, a.left, a.width, a.origin_col, a.W, a.filter, a.antialias);
  if (flip) reverse_taps(&cols);
  const bool vertical_first = vertical_pass_first(a.box[2] - a.box[0], a.box[3] - a.box[1], a.out_h, a.out_w);

  const Tensor src = torch::stable::contiguous(image);
  Tensor out =
      image.dim() == 3 ? new_cpu_tensor({a.C, a.height, a.width}) : new_cpu_tensor({a.images, a.C, a.height, a.width});
  const int64_t in_plane = a.C * a.H * a.W, out_plane = a.C * a.height * a.width;
  // The images of a batch one after the other, on the calling thread (see the top of this file).
  for (int64_t i = 0; i < a.images; ++i)
    resample_planes(src.const_data_ptr<uint8_t>() + i * in_plane, a.C, a.H, a.W, rows, cols, vertical_first,
                    out.mutable_data_ptr<uint8_t>() + i * out_plane);
  return out;
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(custom_op, CPU, m) { m.impl("resize_box", TORCH_BOX(&resize_box_cpu)); }

}  // namespace custom_op
