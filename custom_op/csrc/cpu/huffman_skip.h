// A baseline Huffman scan reader that walks MCUs without producing coefficients.
//
// Skipping rows above a window is most of what decode-and-crop costs on a large photo, and libjpeg
// can only skip by entropy-decoding every block with its general decoder. Walking a scan only needs
// each symbol's length: one table lookup covers a code and its extra bits together, and nothing is
// dequantized or stored. Only the DC differences are summed, because the decoder that takes over
// must know the predictors.
//
// Everything here reads untrusted bytes: each read is bounds-checked, and anything unexpected (a bad
// code, a marker, the end of the data) makes the walk fail, so the caller falls back to libjpeg,
// which reports the damage as it always does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "libjpeg_session.h"

// Used only inside the library: hidden symbols let the compiler treat calls among these functions as
// local (with default visibility, a shared library's exported functions may be interposed, which
// cost about 5% of a large crop's time here).
#pragma GCC visibility push(hidden)

namespace custom_op {

// One Huffman table, derived for walking (decoding) and for writing (re-encoding) symbols.
class HuffmanTable {
 public:
  static constexpr int kLookBits = 11;
  static constexpr int kAcBits = 12;
  static constexpr int kDcBits = 11;
  // Indexed by the next kLookBits bits: (code length << 8) | symbol, or 0 when the code is longer.
  uint16_t code[1 << kLookBits];
  union {
    // AC tables only. Indexed by the next kAcBits bits: the first one, two or three whole symbols
    // there (codes with their extra bits). Counting coefficients covered (an end-of-block covers
    // 64) and capping covers at 63:
    //   bits 0-5: bits of all, bits 6-9: bits of the first, bits 10-13: bits of the first two,
    //   bits 14-19: coefficients the first covers, bits 20-25: the first two, bits 26-31: all.
    // Nothing follows an end-of-block. When not even the first symbol fits: bits 0-25 are 0 and
    // the cover 63.
    // Several symbols per lookup cut the dependent loads that bound a Huffman decoder's speed. The
    // common case is a block that stays open after all of them (position + cover < 64): then the
    // walk shifts by the entry itself (x86 shifts use the low six bits); any other entry ends the
    // block in it, or starts a symbol too long for the table.
    uint32_t ac_whole[1 << kAcBits];
    // DC tables only. Indexed by the next kDcBits bits: a whole difference (code and extra bits),
    // as (bits used) | (difference << 4), or 0 when it does not fit.
    uint16_t dc_whole[1 << kDcBits];
  };
  // AC tables only. Indexed by the next kValueBits bits: the first symbol with its coefficient,
  // when its code and extra bits fit, as (bits used) | (coefficients it advances << 8) | (value << 16),
  // where an end-of-block advances 64 and a zero run (value 0) 16; 0 when it does not fit. Storing
  // even the zeros at position k + advance - 1 (clamped to 63) keeps the decoder's loop free of
  // branches on the symbol's kind: nothing was stored at or after k yet.
  static constexpr int kValueBits = 11;
  int32_t ac_value[1 << kValueBits];
  int32_t maxcode[18];  // largest code of each length, -1 where there is none
  int32_t valoffset[17];
  uint8_t huffval[256];
  // The encoder's view: the code of each symbol, and its length (0: the table has no code for it).
  uint16_t sym_code[256];
  uint8_t sym_len[256];

  // False for a table libjpeg would reject (over-subscribed, a DC category above 15) or lack.
  bool build(const JHUFF_TBL* table, bool is_dc);
};

constexpr uint8_t kZeroRun = 0xF0;  // ZRL: sixteen zero coefficients

// ac_whole's bits of the first symbol: zero only where not even the first symbol fits.
constexpr uint32_t kAcFirstBits = 15u << 6;

// The value of `category` extra bits (the JPEG standard's EXTEND); category in 1..15.
inline int32_t extend(uint32_t bits, int category) {
  return bits < (1u << (category - 1)) ? static_cast<int32_t>(bits) - (1 << category) + 1
                                       : static_cast<int32_t>(bits);
}

// Decodes one symbol; needs at least 16 bits in the reader (anything with peek and drop).
template <class Reader>
inline bool decode_symbol(Reader& in, const HuffmanTable& t, int* symbol) {
  const uint16_t e = t.code[in.peek(HuffmanTable::kLookBits)];
  if (e != 0) {
    in.drop(e >> 8);
    *symbol = e & 0xFF;
    return true;
  }
  for (int length = HuffmanTable::kLookBits + 1; length <= 16; ++length) {
    const int32_t c = static_cast<int32_t>(in.peek(length));
    if (c <= t.maxcode[length]) {
      in.drop(length);
      *symbol = t.huffval[c + t.valoffset[length]];
      return true;
    }
  }
  return false;  // no such code: corrupt data
}

// One lookup of a block's AC symbols at position k: false, leaving the entry in e, when the block
// ends in it or it starts a symbol longer than the table. Needs kAcBits bits loaded.
template <class Reader>
__attribute__((always_inline)) inline bool ac_step(Reader& in, const uint32_t* table, int& k, uint32_t& e) {
  e = table[in.peek(HuffmanTable::kAcBits)];
  const int next = k + static_cast<int>(e >> 26);
  if (__builtin_expect(next >= 64, 0)) return false;
  in.drop(static_cast<int>(e & 63));
  k = next;
  return true;
}

// Walks a block's AC symbols without producing them; needs 3 * kAcBits bits loaded. The reader's
// refill() must leave at least 56 bits loaded and fill(n) at least n. False on a code the table lacks.
template <class Reader>
__attribute__((always_inline)) inline bool walk_ac(Reader& in, const HuffmanTable& t) {
  const uint32_t* const table = t.ac_whole;
  int k = 1;
  uint32_t e;
  // A refill loads 56 bits or more, enough for four lookups.
  bool open = ac_step(in, table, k, e) && ac_step(in, table, k, e) && ac_step(in, table, k, e);
  for (;;) {
    while (open) {
      in.refill();
      open = ac_step(in, table, k, e) && ac_step(in, table, k, e) && ac_step(in, table, k, e) &&
             ac_step(in, table, k, e);
    }
    if (__builtin_expect((e & kAcFirstBits) != 0, 1)) {
      // The block ends after the first symbol of the entry, or the second, or else the third.
      int used = static_cast<int>(e & 63);
      if (k + static_cast<int>((e >> 20) & 63) >= 64) used = static_cast<int>((e >> 10) & 15);
      if (k + static_cast<int>((e >> 14) & 63) >= 64) used = static_cast<int>((e >> 6) & 15);
      in.drop(used);
      return true;
    }
    // A symbol longer than the table.
    in.fill(31);
    int symbol;
    if (!decode_symbol(in, t, &symbol)) return false;
    const int run = symbol >> 4, size = symbol & 15;
    if (size != 0) {
      in.drop(size);
      k += run + 1;
    } else if (run == 15) {
      k += 16;
    } else {
      return true;
    }
    if (k >= 64) return true;
    open = true;
  }
}

// Reads entropy-coded bits, removing byte stuffing. Bits past a marker or the end of the data read
// as zeros and are counted, so the walk can tell it ran off the real data.
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t begin, size_t end) : data_(data), pos_(begin), begin_(begin), end_(end) {}

  // Position of the next unread bit, counted in unstuffed data bits from `begin`.
  int64_t consumed() const { return loaded_bits_ + fake_bits_ - bits_; }
  // True while every bit read so far was real data.
  bool valid() const { return consumed() <= loaded_bits_; }
  // Offset in the original bytes of unstuffed data byte `index` (counted from `begin`); index must be
  // one of the last few loaded.
  size_t offset_of(int64_t index) const;

  // Afterwards more than 32 bits are loaded (fewer only once far past the data), at most 63.
  inline void fill() {
    if (bits_ > 32) return;
    if (end_ - pos_ >= 8) {
      uint64_t w;
      std::memcpy(&w, data_ + pos_, 8);
      // No FF among the 8 bytes: no stuffing and no marker, so they are data as they stand.
      const uint64_t inv = ~w;
      if (((inv - 0x0101010101010101ULL) & ~inv & 0x8080808080808080ULL) == 0) {
        w = __builtin_bswap64(w);
        const int take = (63 - bits_) >> 3;  // whole bytes that fit, leaving bits_ below 64
        const int keep = 8 * take;
        buf_ |= (w >> (64 - keep) << (64 - keep)) >> bits_;
        bits_ += keep;
        pos_ += static_cast<size_t>(take);
        loaded_bits_ += keep;
        return;
      }
    }
    fill_slow();
  }
  inline uint32_t peek(int n) const { return static_cast<uint32_t>(buf_ >> (64 - n)); }
  inline void drop(int n) {
    buf_ <<= n;
    bits_ -= n;
  }
  inline uint32_t take(int n) {  // n in 1..16
    const uint32_t v = peek(n);
    drop(n);
    return v;
  }

 private:
  friend class BitWalker;  // huffman_skip.cpp: the same reader for skip_mcus, its state in locals
  void fill_slow();

  const uint8_t* data_;
  size_t pos_, begin_, end_;
  uint64_t buf_ = 0;  // unread bits, most significant first; zeros after them
  int bits_ = 0;      // never above 63
  int64_t loaded_bits_ = 0;  // real data bits put into buf_ so far
  int64_t fake_bits_ = 0;    // zero bits put in past a marker or the end
};

// The block layout of an interleaved (or single-component) baseline scan.
struct ScanLayout {
  int blocks_in_mcu;
  int block_component[10];  // index into the scan's components, per block of an MCU
  bool first_of_component[10];
  int num_components;
  const HuffmanTable* dc[4];
  const HuffmanTable* ac[4];
  int64_t mcus_per_row, mcu_rows;
  int mcu_width, mcu_height;  // full-size pixels
};

// Walks `count` MCUs, summing DC differences into pred (one per scan component). False on anything
// a valid scan would not contain.
bool skip_mcus(BitReader& in, const ScanLayout& scan, int64_t count, int32_t* pred);

// One block's symbols as read, so they can be written again with a different DC difference.
struct RecordedBlock {
  int dc_category;
  uint32_t dc_bits;
  int num_ac;
  uint8_t ac_symbol[64];
  uint16_t ac_bits[64];
  int end_symbol;  // the EOB-like symbol that ended the block, or -1 when it ran to coefficient 63
  int end_position;  // coefficient index at which end_symbol was read
};

// Reads one MCU's symbols, updating pred as skip_mcus does.
bool record_mcu(BitReader& in, const ScanLayout& scan, int32_t* pred, RecordedBlock* blocks);

// Writes entropy-coded bits with byte stuffing.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>* out) : out_(out) {}
  void put(uint32_t bits, int n);  // n in 0..24
  int pending_bits() const { return bits_; }
  // Only when pending_bits() is 0.
  bool aligned() const { return bits_ == 0; }

 private:
  std::vector<uint8_t>* out_;
  uint32_t buf_ = 0;
  int bits_ = 0;
};

// Blocks write_first_mcus can rewrite at once: up to 8 MCUs of up to 10 blocks.
constexpr int kMaxRewrittenBlocks = 80;

// Writes num_mcus recorded MCUs (blocks in order) as the first MCUs of a new scan, whose DC
// predictors start at zero: each component's first block gets its absolute DC value (pred_before +
// difference) as its difference. Zero-run codes are added before end-of-block codes where blocks
// have room, so that the written length is congruent to want_mod8 modulo 8. False, having written
// nothing, when the tables cannot express that; more MCUs give more room.
bool write_first_mcus(BitWriter& out, const ScanLayout& scan, const RecordedBlock* blocks, int num_mcus,
                      const int32_t* pred_before, int want_mod8);

// The derived form of a header's table, from a small per-thread cache: files written by the same
// encoder (most use the standard tables) share their tables, so a loop over a dataset derives them
// about once. Null for a table build() refuses. Valid until eight more distinct tables have been
// asked for on this thread.
const HuffmanTable* derived_table(const JHUFF_TBL* table, bool is_dc);

// Whether derived_table would find every table of the header's first scan in this thread's cache.
bool scan_tables_cached(const jpeg_decompress_struct& cinfo);

// Builds the layout of the header's first scan. False unless the scan is a single baseline Huffman
// scan holding every component (interleaved, or one component with 1x1 sampling), 8-bit, without
// restart markers.
bool scan_layout(const jpeg_decompress_struct& cinfo, ScanLayout* scan);

}  // namespace custom_op

#pragma GCC visibility pop
