#include "huffman_skip.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace custom_op {
namespace {

constexpr int kLook = HuffmanTable::kLookBits;
constexpr uint8_t kZeroRun = 0xF0;  // ZRL: sixteen zero coefficients

inline int32_t extend(uint32_t bits, int category) {
  return bits < (1u << (category - 1)) ? static_cast<int32_t>(bits) - (1 << category) + 1
                                       : static_cast<int32_t>(bits);
}

inline int category_of(int32_t value) {
  uint32_t magnitude = static_cast<uint32_t>(value < 0 ? -value : value);
  int n = 0;
  while (magnitude != 0) {
    ++n;
    magnitude >>= 1;
  }
  return n;
}

// Decodes one symbol; needs at least 16 bits in the reader.
inline bool decode_symbol(BitReader& in, const HuffmanTable& t, int* symbol) {
  const uint16_t e = t.code[in.peek(kLook)];
  if (e != 0) {
    in.drop(e >> 8);
    *symbol = e & 0xFF;
    return true;
  }
  for (int length = kLook + 1; length <= 16; ++length) {
    const int32_t c = static_cast<int32_t>(in.peek(length));
    if (c <= t.maxcode[length]) {
      in.drop(length);
      *symbol = t.huffval[c + t.valoffset[length]];
      return true;
    }
  }
  return false;  // no such code: corrupt data
}

// DC predictors of a valid 8-bit file stay far inside this; hostile data must not overflow them.
constexpr int32_t kMaxPredictor = 1 << 20;

}  // namespace

bool HuffmanTable::build(const JHUFF_TBL* table, bool is_dc) {
  if (table == nullptr) return false;
  std::memset(code, 0, sizeof(code));
  std::memset(sym_len, 0, sizeof(sym_len));
  // AC only: the first whole symbol (code and extra bits) of each kPairBits-bit string, as
  // (bits used) | (coefficients covered << 5); 0 when it does not fit.
  constexpr int P = kPairBits;
  uint16_t single[1 << P];
  if (!is_dc) std::memset(single, 0, sizeof(single));
  int count = 0;
  for (int length = 1; length <= 16; ++length) count += table->bits[length];
  if (count < 1 || count > 256) return false;
  uint32_t c = 0;
  int k = 0;
  for (int length = 1; length <= 16; ++length) {
    const int n = table->bits[length];
    valoffset[length] = k - static_cast<int32_t>(c);
    for (int i = 0; i < n; ++i, ++k, ++c) {
      const int symbol = table->huffval[k];
      if (is_dc && symbol > 15) return false;
      huffval[k] = static_cast<uint8_t>(symbol);
      if (sym_len[symbol] == 0) {
        sym_code[symbol] = static_cast<uint16_t>(c);
        sym_len[symbol] = static_cast<uint8_t>(length);
      }
      if (length <= kLook) {
        const int spare = kLook - length;
        const uint16_t entry = static_cast<uint16_t>((length << 8) | symbol);
        for (uint32_t f = 0; f < (1u << spare); ++f) code[(c << spare) + f] = entry;
      }
      const int run = symbol >> 4, size = symbol & 15;
      if (is_dc || length + size > P) continue;
      const int covered = size != 0 ? run + 1 : (run == 15 ? 16 : 64);
      const uint16_t entry = static_cast<uint16_t>((length + size) | (covered << 5));
      const int spare = P - length;
      for (uint32_t f = 0; f < (1u << spare); ++f) single[(c << spare) + f] = entry;
    }
    maxcode[length] = n > 0 ? static_cast<int32_t>(c) - 1 : -1;
    // As libjpeg: the codes of each length must fit, and no code may be all ones.
    if (c >= (1u << length)) return false;
    c <<= 1;
  }
  maxcode[0] = -1;
  maxcode[17] = 0x7FFFFFFF;
  if (is_dc) return true;
  for (uint32_t index = 0; index < (1u << P); ++index) {
    const uint32_t first = single[index];
    const int used = first & 31, covered = first >> 5;
    uint32_t entry = first;
    if (first == 0) {
      ac_pair[index] = 0;
      continue;
    }
    int both_used = used, both_covered = covered;
    // The second symbol's code must lie wholly in the bits after the first (the shift pads zeros).
    const uint32_t second = covered < 64 ? single[(index << used) & ((1u << P) - 1)] : 0;
    if (second != 0 && static_cast<int>(second & 31) <= P - used) {
      both_used += second & 31;
      both_covered = std::min(127, both_covered + static_cast<int>(second >> 5));
    }
    entry |= static_cast<uint32_t>(both_used << 12) | static_cast<uint32_t>(both_covered << 17);
    ac_pair[index] = entry;
  }
  return true;
}

void BitReader::fill_slow() {
  while (bits_ <= 56) {
    uint8_t byte = 0;
    bool real = false;
    if (pos_ < end_) {
      byte = data_[pos_];
      if (byte != 0xFF) {
        ++pos_;
        real = true;
      } else if (pos_ + 1 < end_ && data_[pos_ + 1] == 0x00) {
        pos_ += 2;
        real = true;
      }
      // Otherwise a marker (or FF at the very end): it stays unread, and zeros follow.
    }
    buf_ |= static_cast<uint64_t>(real ? byte : 0) << (56 - bits_);
    bits_ += 8;
    if (real)
      loaded_bits_ += 8;
    else
      fake_bits_ += 8;
    if (!real && fake_bits_ > 64) return;  // far enough past the data; the walk will fail
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

bool skip_mcus(BitReader& in, const ScanLayout& scan, int64_t count, int32_t* pred) {
  for (int64_t m = 0; m < count; ++m) {
    for (int b = 0; b < scan.blocks_in_mcu; ++b) {
      const int ci = scan.block_component[b];
      const HuffmanTable& dc = *scan.dc[ci];
      const HuffmanTable& ac = *scan.ac[ci];
      in.fill();
      int s;
      if (!decode_symbol(in, dc, &s)) return false;
      if (s != 0) {
        pred[ci] += extend(in.take(s), s);
        if (pred[ci] > kMaxPredictor || pred[ci] < -kMaxPredictor) return false;
      }
      for (int k = 1; k < 64;) {
        in.fill();
        const uint32_t e = ac.ac_pair[in.peek(HuffmanTable::kPairBits)];
        if (e != 0) {
          // Both symbols only while the first leaves the block open.
          const int first_covers = (e >> 5) & 127;
          if (k + first_covers < 64) {
            in.drop((e >> 12) & 31);
            k += static_cast<int>(e >> 17);
          } else {
            in.drop(e & 31);
            k += first_covers;
          }
          continue;
        }
        int symbol;
        if (!decode_symbol(in, ac, &symbol)) return false;
        const int run = symbol >> 4, size = symbol & 15;
        if (size != 0) {
          in.drop(size);
          k += run + 1;
        } else if (run == 15) {
          k += 16;
        } else {
          break;
        }
      }
    }
    if (!in.valid()) return false;
  }
  return true;
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
