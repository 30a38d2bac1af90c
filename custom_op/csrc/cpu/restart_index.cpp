#include "restart_index.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/random_access.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace custom_op {
namespace {

std::atomic<int64_t> g_random_access_decodes{0};

constexpr uint8_t kFF = 0xFF;
constexpr uint8_t kEOI = 0xD9, kRST0 = 0xD0;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_rst(uint8_t code) { return code >= kRST0 && code <= kRST0 + 7; }

// Offset of the first 0xFF byte in data[from, size), or size. FF bytes come every hundred bytes or so
// in a prepared file (each restart marker, each stuffed FF 00); inlined 16-byte compares cost a
// fraction of a memchr call per hit.
inline size_t next_ff(const uint8_t* data, size_t from, size_t size) {
  size_t p = from;
#if defined(__SSE2__)
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF));
  for (; p + 16 <= size; p += 16) {
    const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + p));
    const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(chunk, ff)));
    if (mask != 0) return p + static_cast<size_t>(__builtin_ctz(mask));
  }
#endif
  for (; p < size; ++p)
    if (data[p] == kFF) return p;
  return size;
}

}  // namespace

bool restart_layout(const jpeg_decompress_struct& cinfo, RestartLayout* layout) {
  const int n = cinfo.num_components;
  if (n < 1 || n > MAX_COMPS_IN_SCAN || cinfo.comp_info == nullptr) return false;
  // The scan's components must be the frame's, each once (a hostile header may repeat one).
  for (int i = 0; i < cinfo.comps_in_scan && i < MAX_COMPS_IN_SCAN; ++i) {
    if (cinfo.cur_comp_info[i] == nullptr) return false;
    for (int j = 0; j < i; ++j)
      if (cinfo.cur_comp_info[j] == cinfo.cur_comp_info[i]) return false;
  }
  const int max_h = cinfo.max_h_samp_factor, max_v = cinfo.max_v_samp_factor;
  const LayoutFacts facts{!cinfo.progressive_mode && !cinfo.arith_code,
                          cinfo.data_precision,
                          n,
                          cinfo.comps_in_scan,
                          max_h,
                          max_v,
                          static_cast<int>(std::min<JDIMENSION>(cinfo.image_width, 1 << 30)),
                          static_cast<int>(std::min<JDIMENSION>(cinfo.image_height, 1 << 30)),
                          static_cast<int>(cinfo.restart_interval)};
  if (!random_access_layout(facts)) return false;
  bool sub_h = false, sub_v = false;
  for (int i = 0; i < n; ++i) {
    sub_h |= cinfo.comp_info[i].h_samp_factor < max_h;
    sub_v |= cinfo.comp_info[i].v_samp_factor < max_v;
  }
  // A single-component scan has one block per MCU, whatever the sampling factors say.
  const int mcu_width = n == 1 ? DCTSIZE : DCTSIZE * max_h;
  const int mcu_height = n == 1 ? DCTSIZE : DCTSIZE * max_v;
  layout->mcu_width = mcu_width;
  layout->mcu_height = mcu_height;
  layout->mcus_per_row = static_cast<int>(mcus_per_row(facts));
  layout->mcu_rows = static_cast<int>(ceil_div(cinfo.image_height, mcu_height));
  layout->interval = static_cast<int>(cinfo.restart_interval);
  layout->margin_x = sub_h ? max_h : 0;
  layout->margin_y = sub_v ? max_v : 0;
  return true;
}

bool build_sub_image(const jpeg_decompress_struct& cinfo, const uint8_t* data, size_t size, size_t scan_start,
                     const Region& region, SubImage* sub) {
  RestartLayout L;
  if (!restart_layout(cinfo, &L) || scan_start > size) return false;
  if (cinfo.scale_denom != 8 || cinfo.scale_num < 1 || cinfo.scale_num > 16) return false;
  const int64_t s = cinfo.scale_num;
  const int64_t W = cinfo.image_width, H = cinfo.image_height;
  const int64_t out_w = cinfo.output_width, out_h = cinfo.output_height;
  if (out_w != ceil_div(W * s, 8) || out_h != ceil_div(H * s, 8)) return false;
  if (region.top < 0 || region.left < 0 || region.height < 1 || region.width < 1 ||
      region.height > out_h - region.top || region.width > out_w - region.left)
    return false;

  // An MCU is a whole number of blocks, so it covers a whole number of scaled output pixels.
  const int64_t mcu_out_w = L.mcu_width * s / 8, mcu_out_h = L.mcu_height * s / 8;
  const int64_t k = L.interval;
  const int64_t first_x = std::max<int64_t>(0, region.left - L.margin_x);
  const int64_t end_x = std::min<int64_t>(out_w, int64_t(region.left) + region.width + L.margin_x);
  const int64_t first_y = std::max<int64_t>(0, region.top - L.margin_y);
  const int64_t end_y = std::min<int64_t>(out_h, int64_t(region.top) + region.height + L.margin_y);
  int64_t c0 = first_x / mcu_out_w / k * k;
  int64_t c1 = std::min<int64_t>(L.mcus_per_row, ceil_div(ceil_div(end_x, mcu_out_w), k) * k);
  // libjpeg upsamples a plane of 2 samples or fewer without the fancy filter (at 2/8 scale one MCU
  // of 4:2:2 chroma is 2 samples), so a sub-image narrower than two whole MCUs would not decode like
  // the image around it: widen it, towards the image's other columns.
  while (L.margin_x > 0 && std::min(W, c1 * L.mcu_width) - c0 * L.mcu_width < 2 * L.mcu_width &&
         (c0 > 0 || c1 < L.mcus_per_row)) {
    if (c0 > 0) c0 -= k;
    else c1 = std::min<int64_t>(L.mcus_per_row, c1 + k);
  }
  const int64_t r0 = first_y / mcu_out_h;
  const int64_t r1 = std::min<int64_t>(L.mcu_rows, ceil_div(end_y, mcu_out_h));
  if (r0 == 0 && c0 == 0 && c1 == L.mcus_per_row) return false;

  const int64_t sub_w = std::min(W, c1 * L.mcu_width) - c0 * L.mcu_width;
  const int64_t sub_h = std::min(H, r1 * L.mcu_height) - r0 * L.mcu_height;
  if (sub_w < 1 || sub_h < 1) return false;
  sub->region = {static_cast<int>(region.top - r0 * mcu_out_h), static_cast<int>(region.left - c0 * mcu_out_w),
                 region.height, region.width};
  ExpectedFrame& f = sub->frame;
  f.height = static_cast<int>(sub_h);
  f.width = static_cast<int>(sub_w);
  f.num_components = cinfo.num_components;
  f.color_space = cinfo.jpeg_color_space;
  f.restart_interval = cinfo.restart_interval;
  for (int i = 0; i < cinfo.num_components; ++i) {
    f.h_samp[i] = cinfo.comp_info[i].h_samp_factor;
    f.v_samp[i] = cinfo.comp_info[i].v_samp_factor;
  }

  std::vector<uint8_t>& out = sub->bytes;
  const int64_t per_row = L.mcus_per_row / k;  // segments per MCU row
  const int64_t total = per_row * L.mcu_rows;
  const int64_t s0 = c0 / k, s1 = c1 / k;
  const int64_t last = (r1 - 1) * per_row + s1 - 1;
  const int64_t wanted = (r1 - r0) * (s1 - s0);
  const double share = static_cast<double>(wanted) / static_cast<double>(total);
  out.reserve(1024 + static_cast<size_t>(1.25 * share * static_cast<double>(size - scan_start)));
  if (!append_sub_header(data, scan_start, static_cast<int>(sub_h), static_cast<int>(sub_w), &out)) return false;

  // Walk the segments in file order up to the last one needed, the way libjpeg reads the data:
  // FF 00 is a stuffed FF byte, FF FF.. fill before a marker, FF D0..D7 restart n mod 8, any other
  // marker ends the scan.
  size_t pos = scan_start;
  int64_t emitted = 0;
  // Row and column of segment `seg`, counted as the walk goes.
  int64_t row = 0, column = 0;
  for (int64_t seg = 0;; ++seg) {
    size_t p = pos;
    uint8_t code;
    size_t after;
    for (;;) {
      p = next_ff(data, p, size);
      if (p >= size) return false;  // data ends inside a needed segment
      size_t q = p + 1;
      while (q < size && data[q] == kFF) ++q;
      if (q >= size) return false;
      if (data[q] == 0x00) {
        p = q + 1;
        continue;
      }
      code = data[q];
      after = q + 1;
      break;
    }
    if (is_rst(code)) {
      if (code - kRST0 != (seg & 7)) return false;  // missing, extra or misnumbered restart marker
    } else if (seg != total - 1) {
      return false;  // the scan ends before its last segment
    }
    if (row >= r0 && column >= s0 && column < s1) {
      out.insert(out.end(), data + pos, data + p);
      if (seg == last) break;
      out.push_back(kFF);
      out.push_back(static_cast<uint8_t>(kRST0 + (emitted & 7)));
      ++emitted;
    }
    if (!is_rst(code)) return false;  // not reached: the last segment is always wanted
    pos = after;
    if (++column == per_row) {
      column = 0;
      ++row;
    }
  }
  out.push_back(kFF);
  out.push_back(kEOI);
  return true;
}

int64_t random_access_decodes() { return g_random_access_decodes.load(std::memory_order_relaxed); }

void count_random_access_decode() { g_random_access_decodes.fetch_add(1, std::memory_order_relaxed); }

}  // namespace custom_op
