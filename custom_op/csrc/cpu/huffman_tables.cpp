#include "huffman_tables.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace custom_op {
namespace {

constexpr int kLook = HuffmanTable::kLookBits;

// ac_whole entries (see huffman_tables.h).
constexpr uint32_t kAcMiss = 63u << 26;  // not even the first symbol fits

inline uint32_t ac_entry(uint32_t bits1, uint32_t bits2, uint32_t bits, uint32_t covers1, uint32_t covers2,
                         uint32_t covers) {
  return bits | bits1 << 6 | bits2 << 10 | std::min(covers1, 63u) << 14 | std::min(covers2, 63u) << 20 |
         std::min(covers, 63u) << 26;
}

}  // namespace

bool HuffmanTable::build(const JHUFF_TBL* table, bool is_dc) {
  if (table == nullptr) return false;
  std::memset(code, 0, sizeof(code));
  if (is_dc) std::memset(dc_whole, 0, sizeof(dc_whole));
  // AC only: the first whole symbol (code and extra bits) of each kAcBits-bit string, as
  // (bits used) | (coefficients covered << 5); 0 when it does not fit.
  constexpr int P = kAcBits;
  uint16_t single[1 << P];
  // AC only: the first whole symbol of each kValueBits-bit string as the second of a step (see
  // ac_steps), 0 when it does not fit; ac_steps gets it as the first.
  uint64_t second[1 << kValueBits];
  if (!is_dc) {
    std::memset(single, 0, sizeof(single));
    std::memset(second, 0, sizeof(second));
    std::fill_n(ac_steps, 1u << kValueBits, uint64_t{kAcMissAdvance} << 8 | uint64_t{kAcMissAdvance} << 24);
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
      if (length <= kLook) std::fill_n(code + (c << (kLook - length)), 1u << (kLook - length), (length << 8) | symbol);
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
          const uint64_t bits = static_cast<uint64_t>(value_bits);
          const uint64_t value = static_cast<uint16_t>(size != 0 ? extend(extra, size) : 0);
          const uint32_t first = ((c << size) | extra) << (kValueBits - value_bits);
          const uint32_t n = 1u << (kValueBits - value_bits);
          std::fill_n(ac_steps + first, n,
                      bits | uint64_t{advance} << 8 | bits << 16 | uint64_t{advance} << 24 | value << 32);
          std::fill_n(second + first, n, bits | uint64_t{advance} << 8 | value << 48);
        }
      }
      if (length > P) continue;
      short_codes[num_short++] = {static_cast<uint16_t>(c), static_cast<uint8_t>(length), static_cast<uint8_t>(symbol)};
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
  add_second_symbols(second);

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

void HuffmanTable::add_second_symbols(const uint64_t* second) {
  constexpr int B = kValueBits;
  // A first symbol of `used` bits holds the entries of its prefix, 2^R of them (R = B - used), and
  // the second symbol of each is the one that fits in the R bits after the prefix. Those depend on R
  // only: row R (at rows + 2^R - 1) holds them, made once for each R that occurs.
  uint64_t rows[1 << B];
  bool made[B] = {};
  for (uint32_t i = 0; i < (1u << B);) {
    const uint64_t first = ac_steps[i];
    const int used = static_cast<int>(first & 63);
    const uint64_t advance = (first >> 24) & 0xFF;
    if (used == 0) {
      ++i;
      continue;
    }
    const int R = B - used;
    const uint32_t n = 1u << R;
    if (R > 0 && advance < 64) {  // an end-of-block ends the step
      uint64_t* row = rows + (n - 1);
      if (!made[R]) {
        for (uint32_t r = 0; r < n; ++r) {
          const uint64_t two = second[r << used];
          row[r] = static_cast<int>(two & 63) <= R ? two : 0;
        }
        made[R] = true;
      }
      for (uint32_t r = 0; r < n; ++r) ac_steps[i + r] = first + row[r];
    }
    i += n;
  }
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

}  // namespace

const HuffmanTable* derived_table(const JHUFF_TBL* table, bool is_dc) { return TableCache::mine().get(table, is_dc); }

}  // namespace custom_op
