#include "restart_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "common/int_math.h"

namespace custom_op {
namespace {

// n / k, rounded toward 0 as C++ divides, for n = n0, n0 + step, n0 + 2 * step, ... (step >= 0, k > 0), without a
// division for each: one for each MCU row cost a good part of the planning time.
class Quotients {
 public:
  Quotients(int64_t n0, int64_t step, int64_t k) : q_(n0 / k), r_(n0 % k), step_q_(step / k), step_r_(step % k), k_(k) {
    if (r_ < 0) {  // n rounded down: n = q_ * k + r_, 0 <= r_ < k
      r_ += k;
      --q_;
    }
  }
  int64_t operator*() const { return q_ < 0 && r_ > 0 ? q_ + 1 : q_; }
  void next() {
    q_ += step_q_;
    r_ += step_r_;
    if (r_ >= k_) {
      r_ -= k_;
      ++q_;
    }
  }

 private:
  int64_t q_, r_;
  const int64_t step_q_, step_r_, k_;
};

// The MCU grid and margins of a frame, whatever its restart interval.
bool frame_geometry(const FrameFacts& facts, RestartLayout* layout) {
  const LayoutFacts& f = facts.layout;
  const int n = f.components;
  if (n < 1 || n > 4 || f.max_h < 1 || f.max_h > 4 || f.max_v < 1 || f.max_v > 4 || f.width <= 0 || f.height <= 0)
    return false;
  bool sub_h = false, sub_v = false;
  for (int i = 0; i < n; ++i) {
    sub_h |= facts.h_samp[i] < f.max_h;
    sub_v |= facts.v_samp[i] < f.max_v;
  }
  // A single-component scan has one block per MCU, whatever the sampling factors say.
  layout->mcu_width = n == 1 ? 8 : 8 * f.max_h;
  layout->mcu_height = n == 1 ? 8 : 8 * f.max_v;
  layout->mcus_per_row = static_cast<int>(mcus_per_row(f));
  layout->mcu_rows = static_cast<int>(ceil_div(f.height, layout->mcu_height));
  layout->interval = f.restart_interval;
  layout->margin_x = sub_h ? f.max_h : 0;
  layout->margin_y = sub_v ? f.max_v : 0;
  return true;
}

// A candidate grid of a sub-image (SubImagePlan's r0, rows, c_base, cols) and its slots' segments,
// plan[s] in the sub-image's s-th slot of k MCUs.
struct SubLayout {
  int64_t r0, rows;
  int64_t c_base, cols;
  std::vector<int64_t> plan;
  bool unneeded;          // holds a segment the window does not need (see plan_slots)
  int64_t width, height;  // the sub-image's frame in full-size pixels, set on the plan plan_window chooses
};

// A sub-image row's needed slots, as plan_slots finds them: slots first .. first + count - 1, which
// take the original's segments slot + shift.
struct NeededRun {
  int64_t first, count, shift;
};

// The planners' working storage.
struct Scratch {
  SubLayout plan, fallback;       // plan_window's candidate, and the first plan it found with an unneeded segment
  std::vector<NeededRun> needed;  // plan_slots'
  std::vector<uint64_t> wanted;   // decoder_segments' mark for each segment, a bit each
};

// A call's Scratch: the thread's own, kept between calls, as decoder_segments runs for every image of a GPU batch
// and allocating the buffers afresh for each call added about a quarter to its host time. A call that grew them
// past a few MiB (a huge image's plan) gives that memory back as it ends.
class ThreadScratch {
 public:
  ThreadScratch() : s_(kept()) {}
  ~ThreadScratch() {
    const size_t bytes = sizeof(int64_t) * (s_.plan.plan.capacity() + s_.fallback.plan.capacity()) +
                         sizeof(NeededRun) * s_.needed.capacity() + sizeof(uint64_t) * s_.wanted.capacity();
    if (bytes > (size_t(4) << 20)) s_ = Scratch();
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  Scratch& operator*() { return s_; }
  Scratch* operator->() { return &s_; }

 private:
  static Scratch& kept() {
    thread_local Scratch scratch;
    return scratch;
  }
  Scratch& s_;
};

// Plans the restart slots of a sub-image whose grid is set in *sub, or says it cannot be made. The
// sub-image declares the original's restart interval k, so its MCU stream, in its own raster order,
// is cut every k MCUs; each slot must hold a whole segment of the original with exactly the slot's
// number of MCUs. Sub-image MCU t of row i is original MCU t + d(i), d(i) = (r0 + i) * P + c_base -
// i * cols; the grids plan_sub_image tries make every d(i) a multiple of k, so each slot lines up
// with an original segment for each row it touches. A slot holding needed MCUs (columns x0..x1 of
// rows y0..y1) takes that segment, and its needed MCUs must all come from one row's alignment. Any
// other slot is filler: decoded, but no pixel of the window depends on it. It repeats a needed
// segment (the one before it, or the first), so that the sub-image holds no segment the window does
// not need; only where none fits (a last slot shorter than k, which only the original's last segment
// fits, or no needed segment of k MCUs) does it take another, and *sub says so.
//
// Neither may make the sub-image read more of a damaged file than the ordinary path does, or libjpeg
// would warn about damage there that a decode of the whole file down to the window never sees. The
// ordinary path decodes every MCU of the rows down to the window's last (last_row), and of the next
// one when chroma upsampling down the rows asks libjpeg for it; the segment holding the last MCU it
// decodes may run on past it, and the restart marker after that segment is not read. libjpeg decodes
// the sub-image's rows down to the same row. So for either last row, every slot the sub-image path
// decodes must hold a segment whose MCUs, as far as it decodes them, the ordinary path decodes too,
// and the marker after it must be one the ordinary path reads if the sub-image path reads it.
bool plan_slots(const RestartLayout& L, int64_t x0, int64_t x1, int64_t y0, int64_t y1, int64_t last_row,
                SubLayout* sub, std::vector<NeededRun>& needed) {
  const int64_t P = L.mcus_per_row, k = L.interval;
  const int64_t total = P * L.mcu_rows;
  const int64_t segments = ceil_div(total, k);
  const int64_t last_size = total - (segments - 1) * k;
  const int64_t T = sub->rows * sub->cols;
  const int64_t slots = ceil_div(T, k);
  auto offset = [&](int64_t i) { return (sub->r0 + i) * P + sub->c_base - i * sub->cols; };
  if (offset(0) % k != 0 || (P - sub->cols) % k != 0) return false;
  auto size_of = [&](int64_t g) { return g == segments - 1 ? last_size : k; };
  auto length_of = [&](int64_t s) { return std::min(T, s * k + k) - s * k; };  // slot s's MCUs
  // Whether segment g may fill slot s: for each row the decodes may end with, the sub-image path
  // decodes no more of g than the ordinary path, and reads its marker only where that path does.
  const int contexts = L.margin_y > 0 ? 2 : 1;
  auto fits_in_full = [&](int64_t g, int64_t s) {
    for (int context = 0; context < contexts; ++context) {
      const int64_t plain_rows = std::min<int64_t>(L.mcu_rows, last_row + context + 1);  // rows 0 .. plain_rows - 1
      const int64_t sub_rows = std::min(sub->rows, last_row + context + 1 - sub->r0);
      const int64_t sub_mcus = std::clamp(sub_rows * sub->cols - s * k, int64_t(0), length_of(s));
      if (sub_mcus == 0) continue;
      const int64_t plain_mcus = std::clamp(plain_rows * P - g * k, int64_t(0), size_of(g));
      if (sub_mcus > plain_mcus) return false;
      const bool sub_marker = s + 1 < slots && (s + 1) * k < sub_rows * sub->cols;
      const bool plain_marker = g + 1 < segments && (g + 1) * k < plain_rows * P;
      if (sub_marker && !plain_marker) return false;
    }
    return true;
  };
  // The cheap answer for nearly every slot. The ordinary path decodes at least the MCUs before `decoded` (more
  // for the larger last row). A segment g whose marker lies among them, (g + 1) * k < decoded or g < sure, is not
  // the last segment (decoded <= total), so for either last row the ordinary path decodes all k of its MCUs, which
  // no slot exceeds, and reads the marker after it: g fits any slot.
  const int64_t decoded = std::min<int64_t>(L.mcu_rows, last_row + 1) * P;
  const int64_t sure = (decoded - 1) / k;
  auto fits = [&](int64_t g, int64_t s) { return g < sure || fits_in_full(g, s); };
  // Every slot is written below where the plan is made (the needed slots, then the gaps between them).
  std::vector<int64_t>& plan = sub->plan;
  plan.resize(static_cast<size_t>(slots));
  sub->unneeded = false;
  // The needed MCUs, row by row: the slots holding them take the segment that row lines up with, slot + d(i) / k
  // (d below). Row i's needed MCUs are the sub-image's i * cols + x0 - c_base through i * cols + x1 - 1 - c_base
  // (x0 >= c_base, cols >= x1 - c_base), so its first slot is at or past the row above's last, and only that one
  // may be taken already: the last one taken, assigned_end - 1. d(i) = offset(0) + i * (P - cols) never falls from
  // row to row, so the segments rise from slot to slot: `needed`, the needed slots as a run per row, holds each
  // needed segment once, in order.
  needed.clear();
  int64_t assigned_end = 0;  // past the last needed slot taken
  const int64_t i0 = std::max(y0, sub->r0) - sub->r0;
  Quotients firsts(i0 * sub->cols + x0 - sub->c_base, sub->cols, k);
  Quotients lasts(i0 * sub->cols + x1 - 1 - sub->c_base, sub->cols, k);
  const int64_t d_step = (P - sub->cols) / k;
  for (int64_t i = i0, d = offset(i0) / k; i < std::min(y1, sub->r0 + sub->rows) - sub->r0;
       ++i, d += d_step, firsts.next(), lasts.next()) {
    const int64_t last = *lasts;
    int64_t slot = *firsts;
    if (slot < assigned_end) {
      if (plan[size_t(slot)] != slot + d) return false;  // needed MCUs of two rows that do not line up alike
      ++slot;
    }
    if (slot > last) continue;
    // Only the last slot may hold fewer than k MCUs, and only the last segment.
    if (slot + d < 0 || last + d >= segments || size_of(last + d) != length_of(last)) return false;
    // Field by field: a NeededRun built whole on the stack and copied in makes every row wait for the
    // load of what it has just stored (a failed store-to-load forward).
    NeededRun& run = needed.emplace_back();
    run.first = slot;
    run.count = last - slot + 1;
    run.shift = d;
    assigned_end = last + 1;
    if (last + d < sure) {  // every segment of the row fits (nearly every row): no test per slot
      for (int64_t s = slot; s <= last; ++s) plan[size_t(s)] = s + d;
      continue;
    }
    for (; slot <= last; ++slot) {
      const int64_t g = slot + d;
      if (!fits(g, slot)) return false;
      plan[size_t(slot)] = g;
    }
  }
  // The filler slots: the gaps between the needed slots' runs. `previous` is the segment of the needed slot
  // before the gap, one of k MCUs (only the last slot may hold fewer).
  const int64_t full_slots = length_of(slots - 1) == k ? slots : slots - 1;  // those of k MCUs
  int64_t s = 0;
  for (size_t next = 0; s < slots;) {
    if (next < needed.size() && s == needed[next].first) {
      s += needed[next++].count;
      continue;
    }
    const int64_t gap_end = next < needed.size() ? needed[next].first : slots;
    const int64_t previous = s > 0 ? plan[size_t(s - 1)] : -1;
    if (previous >= 0 && previous < sure)  // it fits every slot of k MCUs, the gap's nearly always
      for (; s < std::min(gap_end, full_slots); ++s) plan[size_t(s)] = previous;
    for (; s < gap_end; ++s) {
      int64_t& g = plan[size_t(s)];
      g = -1;
      const int64_t length = length_of(s);
      if (length == k) {
        if (previous >= 0 && fits(previous, s)) {
          g = previous;
          continue;
        }
        // Else the first needed segment of k MCUs that fits.
        for (size_t r = 0; r < needed.size() && g < 0; ++r)
          for (int64_t slot = needed[r].first; slot < std::min(needed[r].first + needed[r].count, full_slots); ++slot) {
            if (fits(slot + needed[r].shift, s)) {
              g = slot + needed[r].shift;
              break;
            }
          }
        if (g >= 0) continue;
      }
      const int64_t own = (s * k + offset(s * k / sub->cols)) / k;  // the segment its first row lines up with
      if (own < segments && size_of(own) == length && fits(own, s)) {
        g = own;
      } else if (length == last_size && fits(segments - 1, s)) {
        g = segments - 1;
      } else {
        return false;
      }
      sub->unneeded = true;
    }
  }
  return true;
}

// plan_sub_image's plan (its grid and slots) and the sub-image's frame, in scratch; null where it has none.
const SubLayout* plan_window(const RestartLayout& L, int64_t width, int64_t height, int scale_num, const Region& region,
                             Scratch& scratch) {
  if (scale_num < 1 || scale_num > 16) return nullptr;
  const int64_t s = scale_num;
  const int64_t W = width, H = height;
  const int64_t out_w = ceil_div(W * s, 8), out_h = ceil_div(H * s, 8);
  if (region.top < 0 || region.left < 0 || region.height < 1 || region.width < 1 ||
      region.height > out_h - region.top || region.width > out_w - region.left)
    return nullptr;

  // The MCUs the window's pixels depend on: its own, and those holding the neighbours that chroma
  // upsampling reads. An MCU is a whole number of blocks, so it covers a whole number of scaled
  // output pixels.
  const int64_t mcu_out_w = L.mcu_width * s / 8, mcu_out_h = L.mcu_height * s / 8;
  const int64_t P = L.mcus_per_row, k = L.interval;
  const int64_t x0 = std::max<int64_t>(0, region.left - L.margin_x) / mcu_out_w;
  const int64_t x1 = std::min<int64_t>(
      P, ceil_div(std::min<int64_t>(out_w, int64_t(region.left) + region.width + L.margin_x), mcu_out_w));
  const int64_t y0 = std::max<int64_t>(0, region.top - L.margin_y) / mcu_out_h;
  const int64_t y1 = std::min<int64_t>(
      L.mcu_rows, ceil_div(std::min<int64_t>(out_h, int64_t(region.top) + region.height + L.margin_y), mcu_out_h));
  const int64_t last_row = (int64_t(region.top) + region.height - 1) / mcu_out_h;  // of the window's last pixels

  // The sub-image's grid. Its first MCU starts a segment: c_base = x0 less x0's place in its segment
  // on row r0 (c_base = -r0 * P modulo k, and not below 0). Its width is P modulo k, so that every row
  // lines up alike (d(i) a multiple of k), and it holds a whole number of segments: a multiple of the
  // q rows after which the segment boundaries repeat, rows past the window being filler (never
  // decoded here). Or, where the window reaches the image's bottom and chroma is subsampled down the
  // rows (libjpeg replicates the edge samples there), it ends with the image, whose last segment then
  // ends it. Those (and windows in the first MCU column, c_base = 0) need r0 * P to be a multiple of
  // k: r0 a multiple of q, which costs up to q - 1 rows above the window, decoded and skipped. Across
  // the columns: where chroma is subsampled across them, an image edge among the needed MCUs must be
  // the sub-image's too, and the sub-image is at least two whole MCUs wide (libjpeg upsamples a plane
  // of two samples or fewer without the fancy filter). The columns beside the window may need to
  // grow by up to two segments so that no slot mixes needed MCUs of two rows (plan_slots checks).
  const int64_t q = k / std::gcd(P, k);
  const bool edge_x = L.margin_x > 0, edge_y = L.margin_y > 0 && y1 == L.mcu_rows;
  auto pixel_width = [&](int64_t c_base, int64_t cols) {
    return c_base + cols == P ? W - c_base * L.mcu_width : cols * L.mcu_width;
  };
  auto pixel_height = [&](int64_t r0, int64_t rows) {
    return r0 + rows == L.mcu_rows ? H - r0 * L.mcu_height : rows * L.mcu_height;
  };
  struct Candidate {
    int64_t cost;  // MCUs libjpeg decodes: the rows from r0 to the window's last
    int64_t r0, rows, c_base, cols;
    bool operator<(const Candidate& o) const { return cost != o.cost ? cost < o.cost : rows * cols < o.rows * o.cols; }
  };
  Candidate candidates[3 * 3 * 3 + 1];
  int count = 0;
  for (int choice = 0; choice < 3; ++choice) {
    int64_t r0, rows;
    if (choice == 0) {  // from the window's first row, filler rows below
      r0 = y0;
      rows = ceil_div(y1 - y0, q) * q;
      if (edge_y && r0 + rows != L.mcu_rows) continue;
    } else if (choice == 1) {  // to the window's last row, filler rows above
      rows = ceil_div(y1 - y0, q) * q;
      r0 = y1 - rows;
      if (r0 < 0 || rows == y1 - y0) continue;  // or the first choice again
    } else {                                    // from a row where the segments start in column 0
      r0 = y0 / q * q;
      rows = edge_y ? L.mcu_rows - r0 : ceil_div(y1 - r0, q) * q;
      if (r0 == y0 && rows == ceil_div(y1 - y0, q) * q) continue;  // the first choice again
    }
    if (rows > 65535 / L.mcu_height) continue;
    const int64_t start = x0 - (r0 * P + x0) % k;
    for (int64_t c_base = start, n = 0; n < 3 && c_base >= 0; ++n, c_base -= k) {
      if (edge_x && x0 == 0 && c_base != 0) break;
      const int64_t need = x1 - c_base;
      const int64_t fewest = need + ((P - need) % k + k) % k;
      for (int64_t extra = 0; extra < 3; ++extra) {
        const int64_t cols = edge_x && x1 == P ? P - c_base : fewest + extra * k;
        if (cols >= 1 && cols <= P && (P - cols) % k == 0 && pixel_width(c_base, cols) <= 65535 &&
            (!edge_x || (x1 < P || c_base + cols == P)) &&
            (!edge_x || pixel_width(c_base, cols) >= 2 * L.mcu_width || (c_base == 0 && cols == P)))
          candidates[count++] = {(y1 - r0) * cols, r0, rows, c_base, cols};
        if (edge_x && x1 == P) break;
      }
    }
  }
  // Whole rows from a row where the segments start in column 0 always line up.
  const int64_t r0 = y0 / q * q, rows = edge_y ? L.mcu_rows - r0 : ceil_div(y1 - r0, q) * q;
  if (rows <= 65535 / L.mcu_height && W <= 65535) candidates[count++] = {(y1 - r0) * P, r0, rows, 0, P};
  std::sort(candidates, candidates + count);
  // The cheapest plan whose segments the window all needs (so that no decode of the window reads, and
  // reports damage in, a segment its pixels do not depend on), else the cheapest.
  SubLayout* plan = &scratch.plan;
  SubLayout* fallback = &scratch.fallback;
  bool found = false, found_fallback = false;
  for (int i = 0; i < count && !found; ++i) {
    plan->r0 = candidates[i].r0;
    plan->rows = candidates[i].rows;
    plan->c_base = candidates[i].c_base;
    plan->cols = candidates[i].cols;
    if (!plan_slots(L, x0, x1, y0, y1, last_row, plan, scratch.needed)) continue;
    found = !plan->unneeded;
    if (!found && !found_fallback) {
      std::swap(plan, fallback);
      found_fallback = true;
    }
  }
  if (!found && !found_fallback) return nullptr;
  if (!found) plan = fallback;
  if (plan->r0 == 0 && plan->cols >= P) return nullptr;  // the ordinary path reads no more than that

  plan->width = pixel_width(plan->c_base, plan->cols);
  plan->height = pixel_height(plan->r0, plan->rows);
  if (plan->width < 1 || plan->height < 1 || plan->width > 65535 || plan->height > 65535) return nullptr;
  return plan;
}

// What cpu_segments_read finds for a frame of geometry L and a region of its output at scale_num / 8: the
// sub-image's plan (in scratch), or null and the last row the ordinary path may decode.
const SubLayout* plan_read(const FrameFacts& facts, const RestartLayout& L, const Region& region, int scale_num,
                           Scratch& scratch, int64_t* last_row) {
  if (random_access_layout(facts.layout)) {
    const SubLayout* plan = plan_window(L, facts.layout.width, facts.layout.height, scale_num, region, scratch);
    if (plan) return plan;
  }
  const int64_t mcu_out_h = std::max<int64_t>(1, int64_t{L.mcu_height} * scale_num / 8);
  const int64_t last = (std::max<int64_t>(0, int64_t(region.top) + region.height - 1)) / mcu_out_h;
  *last_row = std::clamp<int64_t>(last + (L.margin_y > 0 ? 1 : 0), 0, L.mcu_rows - 1);
  return nullptr;
}

}  // namespace

bool restart_layout(const FrameFacts& facts, RestartLayout* layout) {
  return random_access_layout(facts.layout) && frame_geometry(facts, layout);
}

bool plan_sub_image(const RestartLayout& L, int64_t width, int64_t height, int scale_num, const Region& region,
                    SubImagePlan* out) {
  ThreadScratch scratch;
  const SubLayout* plan = plan_window(L, width, height, scale_num, region, *scratch);
  if (!plan) return false;
  const int64_t mcu_out_w = L.mcu_width * scale_num / 8, mcu_out_h = L.mcu_height * scale_num / 8;
  out->r0 = plan->r0;
  out->rows = plan->rows;
  out->c_base = plan->c_base;
  out->cols = plan->cols;
  out->slots = plan->plan;
  out->width = plan->width;
  out->height = plan->height;
  out->region = {static_cast<int>(region.top - plan->r0 * mcu_out_h),
                 static_cast<int>(region.left - plan->c_base * mcu_out_w), region.height, region.width};
  return true;
}

SegmentsRead cpu_segments_read(const FrameFacts& facts, const Region& region) {
  SegmentsRead read{true, 0, {}};
  RestartLayout L;
  if (!frame_geometry(facts, &L)) return read;
  ThreadScratch scratch;
  if (const SubLayout* plan = plan_read(facts, L, region, /*scale_num=*/8, *scratch, &read.last_row)) {
    read.ordinary = false;
    read.segments = plan->plan;
    std::sort(read.segments.begin(), read.segments.end());
    read.segments.erase(std::unique(read.segments.begin(), read.segments.end()), read.segments.end());
  }
  return read;
}

std::vector<SegmentRun> decoder_segments(const FrameFacts& facts, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                         const Region* windows, size_t count, int scale_num) {
  RestartLayout L;
  if (!frame_geometry(facts, &L) || L.interval <= 0) return {};
  const int64_t P = L.mcus_per_row, k = L.interval;
  const int64_t total = ceil_div(P * L.mcu_rows, k);
  ThreadScratch scratch;
  // One mark per segment of the file, a bit each, then the runs of marked ones in order: a call runs for
  // every image of a GPU batch, and sorting and merging lists of segments cost more host time than the rest.
  std::vector<uint64_t>& wanted = scratch->wanted;
  wanted.assign(static_cast<size_t>(ceil_div(total, 64)), 0);
  uint64_t* const bits = wanted.data();
  auto mark = [&](int64_t first, int64_t last) {  // those of segments first .. last that the file has
    first = std::max<int64_t>(first, 0);
    last = std::min(last, total - 1);
    for (int64_t w = first >> 6; first <= last && w <= last >> 6; ++w) {
      uint64_t m = ~uint64_t{0};
      if (w == first >> 6) m &= ~uint64_t{0} << (first & 63);
      if (w == last >> 6) m &= ~uint64_t{0} >> (63 - (last & 63));
      bits[w] |= m;
    }
  };
  // The last MCU row read from the first segment down (-1: none).
  int64_t prefix_row = -1;
  if (random_access_layout(facts.layout)) {
    Quotients firsts(r0 * P + c0, P, k), lasts(r0 * P + c1 - 1, P, k);  // (r * P + c0) / k, (r * P + c1 - 1) / k
    for (int64_t r = r0; r < r1 && c0 < c1; ++r, firsts.next(), lasts.next()) mark(*firsts, *lasts);
  } else {
    prefix_row = r1 - 1;
  }
  for (size_t i = 0; i < count; ++i) {
    int64_t last_row;
    if (const SubLayout* plan = plan_read(facts, L, windows[i], scale_num, *scratch, &last_row)) {
      // plan_slots fills each slot with a segment of the file
      for (const int64_t s : plan->plan) bits[s >> 6] |= uint64_t{1} << (s & 63);
    } else {
      prefix_row = std::max(prefix_row, last_row);
    }
  }
  if (prefix_row >= 0) mark(0, last_segment_of_row(std::min<int64_t>(prefix_row, L.mcu_rows - 1), P, k));
  // The runs: where one starts or ends, a bit differs from the one before it; those bits are taken in
  // order, a word at a time (a memchr for each run's start and end cost more than the planning). No
  // bit is set past the last segment.
  std::vector<SegmentRun> runs;
  runs.reserve(static_cast<size_t>(std::max<int64_t>(r1 - r0, 0)) + 1);  // a run per row, as a rule
  int64_t start = -1;
  uint64_t before = 0;  // the previous word's last bit
  for (size_t w = 0; w < wanted.size(); ++w) {
    const uint64_t m = bits[w];
    uint64_t edges = m ^ ((m << 1) | before);
    before = m >> 63;
    for (; edges != 0; edges &= edges - 1) {
      const int64_t at = static_cast<int64_t>(w) * 64 + __builtin_ctzll(edges);
      if (start < 0) {
        start = at;
        continue;
      }
      SegmentRun& run = runs.emplace_back();  // (field by field: see plan_slots)
      run.first = start;
      run.count = at - start;
      start = -1;
    }
  }
  if (start >= 0) {
    SegmentRun& run = runs.emplace_back();
    run.first = start;
    run.count = total - start;
  }
  return runs;
}

}  // namespace custom_op
