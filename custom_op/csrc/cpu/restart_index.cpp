#include "restart_index.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/int_math.h"

namespace custom_op {
namespace {

std::atomic<int64_t> g_random_access_decodes{0};

constexpr uint8_t kFF = 0xFF;
constexpr uint8_t kEOI = 0xD9, kRST0 = 0xD0;

bool is_rst(uint8_t code) { return code >= kRST0 && code <= kRST0 + 7; }

// Offset of the first 0xFF byte in data[from, size) that the next byte does not make a stuffed
// FF 00 (a marker's, a fill byte, or the data's last byte), or size. A prepared file has an FF every
// hundred bytes or so, a stuffed one as often as a marker: 16-byte compares of each byte and the one
// after it step over the stuffed ones without stopping.
inline size_t next_unstuffed_ff(const uint8_t* data, size_t from, size_t size) {
  size_t p = from;
#if defined(__SSE2__)
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF));
  const __m128i zero = _mm_setzero_si128();
  for (; p + 17 <= size; p += 16) {
    const __m128i here = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + p));
    const __m128i after = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + p + 1));
    const unsigned unstuffed = static_cast<unsigned>(
        _mm_movemask_epi8(_mm_andnot_si128(_mm_cmpeq_epi8(after, zero), _mm_cmpeq_epi8(here, ff))));
    if (unstuffed != 0) return p + static_cast<size_t>(__builtin_ctz(unstuffed));
  }
#endif
  for (; p < size; ++p)
    if (data[p] == kFF && (p + 1 == size || data[p + 1] != 0x00)) return p;
  return size;
}

}  // namespace

bool frame_facts(const jpeg_decompress_struct& cinfo, FrameFacts* facts) {
  const int n = cinfo.num_components;
  if (n < 1 || n > MAX_COMPS_IN_SCAN || cinfo.comp_info == nullptr) return false;
  // The scan's components must be the frame's, each once (a hostile header may repeat one).
  for (int i = 0; i < cinfo.comps_in_scan && i < MAX_COMPS_IN_SCAN; ++i) {
    if (cinfo.cur_comp_info[i] == nullptr) return false;
    for (int j = 0; j < i; ++j)
      if (cinfo.cur_comp_info[j] == cinfo.cur_comp_info[i]) return false;
  }
  facts->layout = {!cinfo.progressive_mode && !cinfo.arith_code,
                   cinfo.data_precision,
                   n,
                   cinfo.comps_in_scan,
                   cinfo.max_h_samp_factor,
                   cinfo.max_v_samp_factor,
                   static_cast<int>(std::min<JDIMENSION>(cinfo.image_width, 1 << 30)),
                   static_cast<int>(std::min<JDIMENSION>(cinfo.image_height, 1 << 30)),
                   static_cast<int>(cinfo.restart_interval)};
  for (int i = 0; i < n; ++i) {
    facts->h_samp[i] = cinfo.comp_info[i].h_samp_factor;
    facts->v_samp[i] = cinfo.comp_info[i].v_samp_factor;
  }
  return true;
}

bool restart_layout(const jpeg_decompress_struct& cinfo, RestartLayout* layout) {
  FrameFacts facts;
  return frame_facts(cinfo, &facts) && restart_layout(facts, layout);
}

bool build_sub_image(const jpeg_decompress_struct& cinfo, const uint8_t* data, size_t size, size_t scan_start,
                     const Region& region, SubImage* sub) {
  RestartLayout L;
  if (!restart_layout(cinfo, &L) || scan_start > size) return false;
  if (cinfo.scale_denom != 8 || cinfo.scale_num < 1 || cinfo.scale_num > 16) return false;
  const int64_t s = cinfo.scale_num;
  const int64_t W = cinfo.image_width, H = cinfo.image_height;
  if (int64_t(cinfo.output_width) != ceil_div(W * s, 8) || int64_t(cinfo.output_height) != ceil_div(H * s, 8))
    return false;
  // A valid scan has at least a byte of data and a two-byte marker per segment: a header declaring
  // more segments than the data could hold is refused before any planning.
  const int64_t P = L.mcus_per_row, k = L.interval;
  if (ceil_div(P * L.mcu_rows, k) > static_cast<int64_t>((size - scan_start) / 3) + 1) return false;
  SubImagePlan plan;
  if (!plan_sub_image(L, W, H, static_cast<int>(s), region, &plan)) return false;

  sub->region = plan.region;
  ExpectedFrame& f = sub->frame;
  f.height = static_cast<int>(plan.height);
  f.width = static_cast<int>(plan.width);
  f.num_components = cinfo.num_components;
  f.color_space = cinfo.jpeg_color_space;
  f.restart_interval = cinfo.restart_interval;
  for (int i = 0; i < cinfo.num_components; ++i) {
    f.h_samp[i] = cinfo.comp_info[i].h_samp_factor;
    f.v_samp[i] = cinfo.comp_info[i].v_samp_factor;
  }

  // The segments the sub-image holds, in file order, and where each one's data lies.
  const std::vector<int64_t>& slots = plan.slots;
  std::vector<int64_t> wanted(slots);
  const bool in_order = std::is_sorted(slots.begin(), slots.end());  // fillers repeat the slot before
  if (!in_order) std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<std::pair<size_t, size_t>> where(wanted.size());
  const int64_t total = ceil_div(P * L.mcu_rows, k);

  // Walk the segments in file order up to the last one needed, the way libjpeg reads the data:
  // FF 00 is a stuffed FF byte, FF FF.. fill before a marker, FF D0..D7 restart n mod 8, any other
  // marker ends the scan.
  size_t pos = scan_start;
  size_t next = 0;  // the next wanted segment
  for (int64_t seg = 0; next < wanted.size(); ++seg) {
    size_t p = pos;
    uint8_t code;
    size_t after;
    for (;;) {
      p = next_unstuffed_ff(data, p, size);
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
    if (wanted[next] == seg) where[next++] = {pos, p};
    if (next < wanted.size() && !is_rst(code)) return false;  // not reached: no segment is planned past the scan
    pos = after;
  }

  // Which entry of `wanted` each slot holds: found by moving forward when the slots are in file order.
  std::vector<size_t> entry(slots.size());
  size_t bytes = 0;
  for (size_t slot = 0, w = 0; slot < slots.size(); ++slot) {
    if (in_order) {
      while (wanted[w] != slots[slot]) ++w;
    } else {
      w = size_t(std::lower_bound(wanted.begin(), wanted.end(), slots[slot]) - wanted.begin());
    }
    entry[slot] = w;
    bytes += where[w].second - where[w].first + 2;
  }
  std::vector<uint8_t>& out = sub->bytes;
  out.reserve(1024 + bytes);
  if (!append_sub_header(data, scan_start, f.height, f.width, &out)) return false;
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    const auto& [begin, end] = where[entry[slot]];
    out.insert(out.end(), data + begin, data + end);
    if (slot + 1 < slots.size()) {
      out.push_back(kFF);
      out.push_back(static_cast<uint8_t>(kRST0 + (slot & 7)));
    }
  }
  out.push_back(kFF);
  out.push_back(kEOI);
  return true;
}

int64_t random_access_decodes() { return g_random_access_decodes.load(std::memory_order_relaxed); }

void count_random_access_decode() { g_random_access_decodes.fetch_add(1, std::memory_order_relaxed); }

}  // namespace custom_op
