#include "huffman_skip.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace custom_op {
namespace {

constexpr int kLook = HuffmanTable::kLookBits;

inline int category_of(int32_t value) {
  uint32_t magnitude = static_cast<uint32_t>(value < 0 ? -value : value);
  int n = 0;
  while (magnitude != 0) {
    ++n;
    magnitude >>= 1;
  }
  return n;
}

// DC predictors of a valid 8-bit file stay far inside this; hostile data must not overflow them.
constexpr int32_t kMaxPredictor = 1 << 20;

// ac_whole entries (see huffman_skip.h).
constexpr uint32_t kAcMiss = 63u << 26;       // not even the first symbol fits

inline uint32_t ac_entry(uint32_t bits1, uint32_t bits2, uint32_t bits, uint32_t covers1, uint32_t covers2,
                         uint32_t covers) {
  return bits | bits1 << 6 | bits2 << 10 | std::min(covers1, 63u) << 14 | std::min(covers2, 63u) << 20 |
         std::min(covers, 63u) << 26;
}

}  // namespace

bool HuffmanTable::build(const JHUFF_TBL* table, bool is_dc) {
  if (table == nullptr) return false;
  std::memset(code, 0, sizeof(code));
  std::memset(sym_len, 0, sizeof(sym_len));
  if (is_dc) std::memset(dc_whole, 0, sizeof(dc_whole));
  // AC only: the first whole symbol (code and extra bits) of each kAcBits-bit string, as
  // (bits used) | (coefficients covered << 5); 0 when it does not fit.
  constexpr int P = kAcBits;
  uint16_t single[1 << P];
  if (!is_dc) {
    std::memset(single, 0, sizeof(single));
    std::memset(ac_value, 0, sizeof(ac_value));
  }
  // AC only: the codes of at most P bits, in order.
  struct ShortCode {
    uint16_t code;
    uint8_t length, symbol;
  } short_codes[256];
  int num_short = 0;
  int count = 0;
  for (int length = 1; length <= 16; ++length) count += table->bits[length];
  if (count < 1 || count > 256) return false;
  uint32_t c = 0;
  int k = 0;
  for (int length = 1; length <= 16; ++length) {
    const int n = table->bits[length];
    valoffset[length] = k - static_cast<int32_t>(c);
    for (int i = 0; i < n; ++i, ++k, ++c) {
      // As libjpeg: the codes of each length must fit, and no code may be all ones. Checked before
      // the code is used as an index below, so a hostile table is refused before it writes anything.
      if (c + 1 >= (1u << length)) return false;
      const int symbol = table->huffval[k];
      if (is_dc && symbol > 15) return false;
      huffval[k] = static_cast<uint8_t>(symbol);
      if (sym_len[symbol] == 0) {
        sym_code[symbol] = static_cast<uint16_t>(c);
        sym_len[symbol] = static_cast<uint8_t>(length);
      }
      if (length <= kLook)
        std::fill_n(code + (c << (kLook - length)), 1u << (kLook - length), (length << 8) | symbol);
      if (is_dc) {
        // Each difference whose code and extra bits fit in kDcBits, with its value.
        const int used = length + symbol;
        if (used > kDcBits) continue;
        for (uint32_t extra = 0; extra < (1u << symbol); ++extra) {
          const int32_t value = symbol != 0 ? extend(extra, symbol) : 0;
          const uint32_t first = ((c << symbol) | extra) << (kDcBits - used);
          std::fill_n(dc_whole + first, 1u << (kDcBits - used), static_cast<uint16_t>(used | (value * 16)));
        }
        continue;
      }
      const int value_bits = length + (symbol & 15);
      if (value_bits <= kValueBits) {
        const int run = symbol >> 4, size = symbol & 15;
        const uint32_t advance = size != 0 ? run + 1 : (run == 15 ? 16 : 64);
        for (uint32_t extra = 0; extra < (1u << size); ++extra) {
          const int32_t value = size != 0 ? extend(extra, size) : 0;
          const uint32_t entry = static_cast<uint32_t>(value_bits) | advance << 8 | static_cast<uint32_t>(value) << 16;
          const uint32_t first = ((c << size) | extra) << (kValueBits - value_bits);
          std::fill_n(ac_value + first, 1u << (kValueBits - value_bits), static_cast<int32_t>(entry));
        }
      }
      if (length > P) continue;
      short_codes[num_short++] = {static_cast<uint16_t>(c), static_cast<uint8_t>(length),
                                  static_cast<uint8_t>(symbol)};
      const int run = symbol >> 4, size = symbol & 15;
      if (length + size > P) continue;
      const int covered = size != 0 ? run + 1 : (run == 15 ? 16 : 64);
      std::fill_n(single + (c << (P - length)), 1u << (P - length), (length + size) | (covered << 5));
    }
    maxcode[length] = n > 0 ? static_cast<int32_t>(c) - 1 : -1;
    c <<= 1;
  }
  maxcode[0] = -1;
  maxcode[17] = 0x7FFFFFFF;
  if (is_dc) return true;

  // The entry for bits that start with a symbol of used1 bits covering covered1 (< 64), then `rest`
  // (the bits after it, at the top of P bits). A further symbol counts when its code and extra bits
  // lie wholly within the P bits (the shift pads zeros) and no end-of-block came before it.
  const auto combine = [&](uint32_t used1, uint32_t covered1, uint32_t rest) {
    uint32_t used = used1, covered = covered1, used2 = used1, covered2 = covered1;
    const uint32_t second = single[rest];
    if (second != 0 && (second & 31) <= P - used) {
      used2 = used += second & 31;
      covered2 = covered += second >> 5;
      const uint32_t third = single[(rest << (second & 31)) & ((1u << P) - 1)];
      if ((second >> 5) < 64 && third != 0 && (third & 31) <= P - used) {
        used += third & 31;
        covered += third >> 5;
      }
    }
    return ac_entry(used1, used2, used, covered1, covered2, covered);
  };
  // Codes of at most P bits cover [0, covered_end) of the table, each a range of its own.
  uint32_t covered_end = 0;
  for (int i = 0; i < num_short; ++i) {
    const ShortCode& sc = short_codes[i];
    const uint32_t begin = static_cast<uint32_t>(sc.code) << (P - sc.length);
    covered_end = static_cast<uint32_t>(sc.code + 1) << (P - sc.length);
    const uint32_t run = sc.symbol >> 4, size = sc.symbol & 15, used1 = sc.length + size;
    if (used1 > P) {
      std::fill(ac_whole + begin, ac_whole + covered_end, kAcMiss);
    } else if (size == 0 && run != 15) {
      std::fill(ac_whole + begin, ac_whole + covered_end, ac_entry(used1, used1, used1, 64, 64, 64));
    } else {
      // The entries depend on the bits after the symbol, not on its extra bits: one row, repeated.
      const uint32_t row = 1u << (P - used1), covered1 = size != 0 ? run + 1 : 16;
      for (uint32_t r = 0; r < row; ++r) ac_whole[begin + r] = combine(used1, covered1, r << used1);
      for (uint32_t at = begin + row; at < covered_end; at += row)
        std::memcpy(ac_whole + at, ac_whole + begin, row * sizeof(uint32_t));
    }
  }
  std::fill(ac_whole + covered_end, ac_whole + (1u << P), kAcMiss);
  return true;
}

void BitReader::fill_slow() {
  while (bits_ < 56) {
    bool real = false;
    if (pos_ < end_) {
      const uint8_t byte = data_[pos_];
      if (byte != 0xFF) {
        ++pos_;
        real = true;
      } else if (pos_ + 1 < end_ && data_[pos_ + 1] == 0x00) {
        pos_ += 2;
        real = true;
      }
      // Otherwise a marker (or FF at the very end): it stays unread, and zeros follow.
      if (real) buf_ |= static_cast<uint64_t>(byte) << (56 - bits_);
    }
    bits_ += 8;
    if (real) {
      loaded_bits_ += 8;
    } else {
      fake_bits_ += 8;
      if (fake_bits_ > 64) return;  // far enough past the data; the walk will fail
    }
  }
}

size_t BitReader::offset_of(int64_t index) const {
  size_t q = pos_;
  for (int64_t j = loaded_bits_ / 8; j > index && q > begin_; --j) {
    --q;
    // A stuffed zero follows the FF it belongs to; the data byte is the FF.
    if (q > begin_ && data_[q] == 0x00 && data_[q - 1] == 0xFF) --q;
  }
  return q;
}

// A BitReader's state copied into one local object, so that it stays in registers through the walk
// (members reached through a reference are stored back after every symbol, since the predictors the
// walk updates might alias them). Its refill loads a whole word without first testing how many bits
// are left, which removes a data-dependent (often mispredicted) branch per lookup.
class __attribute__((visibility("hidden"))) BitWalker {
 public:
  explicit BitWalker(BitReader& in)
      : in_(in), data_(in.data_), end_(in.end_), pos_(in.pos_), buf_(in.buf_), bits_(in.bits_),
        loaded_bits_(in.loaded_bits_) {}

  // Hands the position back to the reader.
  void store() const {
    // A refill may have loaded part of the next bytes beyond bits_; the reader keeps zeros there.
    in_.buf_ = bits_ > 0 ? buf_ & (~0ULL << (64 - bits_)) : 0;
    in_.bits_ = bits_;
    in_.pos_ = pos_;
    in_.loaded_bits_ = loaded_bits_;
  }
  bool valid() const { return in_.fake_bits_ <= bits_; }

  // Afterwards at least 56 bits are loaded (unless the walk ran past the data, which fails it).
  // bits_ is at most 63 here (as everywhere), and not negative while the data lasts.
  __attribute__((always_inline)) void refill() {
    if (end_ - pos_ >= 8) {
      uint64_t w;
      std::memcpy(&w, data_ + pos_, 8);
      const uint64_t inv = ~w;
      // No FF among the 8 bytes: no stuffing and no marker, so they are data as they stand. Bytes
      // that only partly fit are loaded in part: the next refill loads them again, to the same place.
      if (__builtin_expect(((inv - 0x0101010101010101ULL) & ~inv & 0x8080808080808080ULL) == 0, 1)) {
        buf_ |= __builtin_bswap64(w) >> bits_;
        const int take = (63 - bits_) >> 3;
        pos_ += static_cast<size_t>(take);
        loaded_bits_ += 8 * take;
        bits_ |= 56;  // bits_ + 8 * take
        return;
      }
    }
    if (bits_ < 56) fill_slow();
  }
  // Afterwards at least `need` (at most 56) bits are loaded, as refill().
  __attribute__((always_inline)) void fill(int need) {
    if (bits_ < need) refill();
  }

  uint32_t peek(int n) const { return static_cast<uint32_t>(buf_ >> (64 - n)); }
  void drop(int n) {
    buf_ <<= n;
    bits_ -= n;
  }

 private:
  __attribute__((always_inline)) void fill_slow() {
    store();
    in_.fill_slow();
    buf_ = in_.buf_;
    bits_ = in_.bits_;
    pos_ = in_.pos_;
    loaded_bits_ = in_.loaded_bits_;
  }

  BitReader& in_;
  const uint8_t* const data_;
  const size_t end_;
  size_t pos_;
  uint64_t buf_;
  int bits_;
  int64_t loaded_bits_;
};

namespace {

__attribute__((always_inline)) inline bool walk_mcus(BitWalker& in, const ScanLayout& scan, int64_t count,
                                                     int32_t* pred) {
  const int blocks = scan.blocks_in_mcu;
  int component[10];
  const HuffmanTable* dc_table[10];
  const HuffmanTable* ac_table[10];
  for (int b = 0; b < blocks; ++b) {
    component[b] = scan.block_component[b];
    dc_table[b] = scan.dc[component[b]];
    ac_table[b] = scan.ac[component[b]];
  }
  for (int64_t m = 0; m < count; ++m) {
    for (int b = 0; b < blocks; ++b) {
      in.refill();
      int32_t diff;
      const uint16_t d = dc_table[b]->dc_whole[in.peek(HuffmanTable::kDcBits)];
      if (__builtin_expect(d != 0, 1)) {
        in.drop(d & 15);
        diff = static_cast<int16_t>(d) >> 4;
      } else {
        int s;
        if (!decode_symbol(in, *dc_table[b], &s)) return false;
        diff = 0;
        if (s != 0) {
          diff = extend(in.peek(s), s);
          in.drop(s);
        }
        in.fill(3 * HuffmanTable::kAcBits);
      }
      int32_t& p = pred[component[b]];
      p += diff;
      if (p > kMaxPredictor || p < -kMaxPredictor) return false;
      // A refill loads at least 56 bits: enough for the difference (at most kDcBits) and walk_ac.
      if (!walk_ac(in, *ac_table[b])) return false;
    }
    if (!in.valid()) return false;
  }
  return true;
}

}  // namespace

bool skip_mcus(BitReader& reader, const ScanLayout& scan, int64_t count, int32_t* pred) {
  BitWalker in(reader);
  const bool ok = walk_mcus(in, scan, count, pred);
  in.store();
  return ok;
}

bool record_mcu(BitReader& in, const ScanLayout& scan, int32_t* pred, RecordedBlock* blocks) {
  for (int b = 0; b < scan.blocks_in_mcu; ++b) {
    const int ci = scan.block_component[b];
    RecordedBlock& rb = blocks[b];
    in.fill();
    int s;
    if (!decode_symbol(in, *scan.dc[ci], &s)) return false;
    rb.dc_category = s;
    rb.dc_bits = s != 0 ? in.take(s) : 0;
    if (s != 0) pred[ci] += extend(rb.dc_bits, s);
    if (pred[ci] > kMaxPredictor || pred[ci] < -kMaxPredictor) return false;
    rb.num_ac = 0;
    rb.end_symbol = -1;
    rb.end_position = 64;
    for (int k = 1; k < 64;) {
      in.fill();
      int symbol;
      if (!decode_symbol(in, *scan.ac[ci], &symbol)) return false;
      const int run = symbol >> 4, size = symbol & 15;
      if (size == 0 && run != 15) {
        rb.end_symbol = symbol;
        rb.end_position = k;
        break;
      }
      rb.ac_symbol[rb.num_ac] = static_cast<uint8_t>(symbol);
      rb.ac_bits[rb.num_ac] = static_cast<uint16_t>(size != 0 ? in.take(size) : 0);
      ++rb.num_ac;
      k += size != 0 ? run + 1 : 16;
    }
  }
  return in.valid();
}

void BitWriter::put(uint32_t bits, int n) {
  if (n == 0) return;
  buf_ = (buf_ << n) | (bits & ((1u << n) - 1));
  bits_ += n;
  while (bits_ >= 8) {
    const uint8_t byte = static_cast<uint8_t>(buf_ >> (bits_ - 8));
    out_->push_back(byte);
    if (byte == 0xFF) out_->push_back(0x00);
    bits_ -= 8;
  }
  buf_ &= (1u << bits_) - 1;
}

bool write_first_mcus(BitWriter& out, const ScanLayout& scan, const RecordedBlock* blocks, int num_mcus,
                      const int32_t* pred_before, int want_mod8) {
  const int n = scan.blocks_in_mcu * num_mcus;
  if (num_mcus < 1 || n > kMaxRewrittenBlocks) return false;
  int32_t dc_diff[kMaxRewrittenBlocks];
  int base = 0;
  // Lengths each block may add (zero-run codes before its end-of-block code) and how many codes.
  int option_delta[kMaxRewrittenBlocks][5], option_runs[kMaxRewrittenBlocks][5], options[kMaxRewrittenBlocks];
  for (int b = 0; b < n; ++b) {
    const RecordedBlock& rb = blocks[b];
    const int in_mcu = b % scan.blocks_in_mcu;
    const int ci = scan.block_component[in_mcu];
    const HuffmanTable& dc = *scan.dc[ci];
    const HuffmanTable& ac = *scan.ac[ci];
    int32_t diff = rb.dc_category != 0 ? extend(rb.dc_bits, rb.dc_category) : 0;
    if (b < scan.blocks_in_mcu && scan.first_of_component[in_mcu]) diff += pred_before[ci];
    const int category = category_of(diff);
    if (category > 15 || dc.sym_len[category] == 0) return false;
    dc_diff[b] = diff;
    base += dc.sym_len[category] + category;
    for (int i = 0; i < rb.num_ac; ++i) base += ac.sym_len[rb.ac_symbol[i]] + (rb.ac_symbol[i] & 15);
    const int end_length = rb.end_symbol >= 0 ? ac.sym_len[rb.end_symbol] : 0;
    base += end_length;
    options[b] = 1;
    option_delta[b][0] = option_runs[b][0] = 0;
    if (rb.end_symbol < 0 || ac.sym_len[kZeroRun] == 0) continue;
    // A zero run is read only while the position is below 64; once runs carry it to 64 the block
    // is complete and its end-of-block code must go.
    for (int runs = 1; runs <= 4 && rb.end_position + 16 * (runs - 1) < 64; ++runs) {
      const bool drop_end = rb.end_position + 16 * runs >= 64;
      option_delta[b][options[b]] = runs * ac.sym_len[kZeroRun] - (drop_end ? end_length : 0);
      option_runs[b][options[b]] = runs;
      ++options[b];
    }
  }
  // Pick one option per block so the total length lands on want_mod8 (eight residues: a tiny search).
  int choice_at[kMaxRewrittenBlocks + 1][8];
  bool reachable[kMaxRewrittenBlocks + 1][8] = {};
  reachable[0][base % 8] = true;
  for (int b = 0; b < n; ++b)
    for (int r = 0; r < 8; ++r) {
      if (!reachable[b][r]) continue;
      for (int o = 0; o < options[b]; ++o) {
        const int next = ((r + option_delta[b][o]) % 8 + 8) % 8;
        if (!reachable[b + 1][next]) {
          reachable[b + 1][next] = true;
          choice_at[b + 1][next] = r * 8 + o;
        }
      }
    }
  if (!reachable[n][want_mod8]) return false;
  int chosen[kMaxRewrittenBlocks];
  for (int b = n, r = want_mod8; b > 0; --b) {
    chosen[b - 1] = choice_at[b][r] % 8;
    r = choice_at[b][r] / 8;
  }

  for (int b = 0; b < n; ++b) {
    const RecordedBlock& rb = blocks[b];
    const int ci = scan.block_component[b % scan.blocks_in_mcu];
    const HuffmanTable& dc = *scan.dc[ci];
    const HuffmanTable& ac = *scan.ac[ci];
    const int32_t diff = dc_diff[b];
    const int category = category_of(diff);
    out.put(dc.sym_code[category], dc.sym_len[category]);
    if (category != 0) out.put(static_cast<uint32_t>(diff < 0 ? diff - 1 : diff), category);
    for (int i = 0; i < rb.num_ac; ++i) {
      const uint8_t symbol = rb.ac_symbol[i];
      out.put(ac.sym_code[symbol], ac.sym_len[symbol]);
      out.put(rb.ac_bits[i], symbol & 15);
    }
    const int runs = option_runs[b][chosen[b]];
    for (int i = 0; i < runs; ++i) out.put(ac.sym_code[kZeroRun], ac.sym_len[kZeroRun]);
    if (rb.end_symbol >= 0 && rb.end_position + 16 * runs < 64)
      out.put(ac.sym_code[rb.end_symbol], ac.sym_len[rb.end_symbol]);
  }
  return true;
}

namespace {

// The per-thread cache behind derived_table.
class TableCache {
 public:
  static TableCache& mine() {
    thread_local TableCache cache;
    return cache;
  }

  const HuffmanTable* find(const JHUFF_TBL* table, bool is_dc) {
    const int count = symbol_count(table);
    if (count < 0) return nullptr;
    for (Entry& e : entries_) {
      if (e.is_dc == is_dc && std::memcmp(e.bits, table->bits, sizeof(e.bits)) == 0 &&
          std::memcmp(e.huffval, table->huffval, static_cast<size_t>(count)) == 0) {
        e.last_use = ++clock_;
        return e.derived.get();
      }
    }
    return nullptr;
  }

  const HuffmanTable* get(const JHUFF_TBL* table, bool is_dc) {
    if (const HuffmanTable* found = find(table, is_dc)) return found;
    const int count = symbol_count(table);
    if (count < 0) return nullptr;
    auto derived = std::make_unique<HuffmanTable>();
    if (!derived->build(table, is_dc)) return nullptr;
    Entry* slot;
    if (entries_.size() < kCapacity) {
      entries_.emplace_back();
      slot = &entries_.back();
    } else {
      slot = &*std::min_element(entries_.begin(), entries_.end(),
                                [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    }
    slot->is_dc = is_dc;
    std::memcpy(slot->bits, table->bits, sizeof(slot->bits));
    std::memset(slot->huffval, 0, sizeof(slot->huffval));
    std::memcpy(slot->huffval, table->huffval, static_cast<size_t>(count));
    slot->derived = std::move(derived);
    slot->last_use = ++clock_;
    return slot->derived.get();
  }

 private:
  static constexpr size_t kCapacity = 8;  // a scan uses at most 4 DC and 4 AC tables

  struct Entry {
    bool is_dc;
    UINT8 bits[17];
    UINT8 huffval[256];
    std::unique_ptr<HuffmanTable> derived;
    uint64_t last_use;
  };

  static int symbol_count(const JHUFF_TBL* table) {
    if (table == nullptr) return -1;
    int count = 0;
    for (int length = 1; length <= 16; ++length) count += table->bits[length];
    return count >= 1 && count <= 256 ? count : -1;
  }

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

// Calls visit(index in the scan, DC table, AC table) for each component of the header's first scan.
template <class Visit>
bool for_each_scan_table(const jpeg_decompress_struct& cinfo, Visit visit) {
  for (int i = 0; i < cinfo.comps_in_scan && i < MAX_COMPS_IN_SCAN; ++i) {
    const jpeg_component_info* comp = cinfo.cur_comp_info[i];
    if (comp == nullptr) return false;
    const int dc_no = comp->dc_tbl_no, ac_no = comp->ac_tbl_no;
    if (dc_no < 0 || dc_no >= NUM_HUFF_TBLS || ac_no < 0 || ac_no >= NUM_HUFF_TBLS) return false;
    if (!visit(i, cinfo.dc_huff_tbl_ptrs[dc_no], cinfo.ac_huff_tbl_ptrs[ac_no])) return false;
  }
  return true;
}

}  // namespace

const HuffmanTable* derived_table(const JHUFF_TBL* table, bool is_dc) { return TableCache::mine().get(table, is_dc); }

bool scan_tables_cached(const jpeg_decompress_struct& cinfo) {
  TableCache& cache = TableCache::mine();
  return for_each_scan_table(cinfo, [&](int, const JHUFF_TBL* dc, const JHUFF_TBL* ac) {
    return cache.find(dc, true) != nullptr && cache.find(ac, false) != nullptr;
  });
}

bool scan_layout(const jpeg_decompress_struct& cinfo, ScanLayout* scan) {
  if (cinfo.progressive_mode || cinfo.arith_code || cinfo.data_precision != 8) return false;
  if (cinfo.restart_interval != 0) return false;
  const int n = cinfo.num_components;
  if (n < 1 || n > 4 || cinfo.comps_in_scan != n || cinfo.comp_info == nullptr) return false;
  if (cinfo.image_width == 0 || cinfo.image_height == 0) return false;
  const int max_h = cinfo.max_h_samp_factor, max_v = cinfo.max_v_samp_factor;
  if (max_h < 1 || max_h > MAX_SAMP_FACTOR || max_v < 1 || max_v > MAX_SAMP_FACTOR) return false;
  scan->num_components = n;
  scan->blocks_in_mcu = 0;
  for (int i = 0; i < n; ++i) {
    const jpeg_component_info* comp = cinfo.cur_comp_info[i];
    if (comp == nullptr) return false;
    for (int j = 0; j < i; ++j)
      if (cinfo.cur_comp_info[j] == comp) return false;
    const int h = comp->h_samp_factor, v = comp->v_samp_factor;
    if (h < 1 || v < 1 || (n == 1 && (h != 1 || v != 1))) return false;
    if (scan->blocks_in_mcu + h * v > 10) return false;
    for (int b = 0; b < h * v; ++b) {
      scan->block_component[scan->blocks_in_mcu] = i;
      scan->first_of_component[scan->blocks_in_mcu] = b == 0;
      ++scan->blocks_in_mcu;
    }
  }
  const bool tables = for_each_scan_table(cinfo, [&](int i, const JHUFF_TBL* dc, const JHUFF_TBL* ac) {
    scan->dc[i] = derived_table(dc, true);
    scan->ac[i] = derived_table(ac, false);
    return scan->dc[i] != nullptr && scan->ac[i] != nullptr;
  });
  if (!tables) return false;
  scan->mcu_width = n == 1 ? DCTSIZE : DCTSIZE * max_h;
  scan->mcu_height = n == 1 ? DCTSIZE : DCTSIZE * max_v;
  scan->mcus_per_row = (static_cast<int64_t>(cinfo.image_width) + scan->mcu_width - 1) / scan->mcu_width;
  scan->mcu_rows = (static_cast<int64_t>(cinfo.image_height) + scan->mcu_height - 1) / scan->mcu_height;
  return true;
}

}  // namespace custom_op
