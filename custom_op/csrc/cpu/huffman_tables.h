// Derived Huffman tables for our entropy decoder (entropy_decoder.h), and the lookups that use them.
//
// A decoder's speed is bound by the chain of dependent table lookups, one per symbol in the plain
// method. These tables read more per lookup: a code together with its extra bits (a DC difference,
// or an AC coefficient with its position), or, for walking MCUs whose coefficients are not needed,
// up to three whole AC symbols. Tables come from untrusted headers: build() refuses what libjpeg
// would refuse, before writing anything from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>

#include <jpeglib.h>

// Used only inside the library: hidden symbols let the compiler treat calls among these functions as
// local (with default visibility, a shared library's exported functions may be interposed, which
// showed in a large crop's time when this code walked the rows above a window).
#pragma GCC visibility push(hidden)

namespace custom_op {

// One Huffman table, derived for decoding and for walking symbols.
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
  // AC tables only, for decoding a block's coefficients. Indexed by the next kValueBits bits: the
  // first whole symbol there (code and extra bits) with its coefficient, and the second too when it
  // fits after the first and the first is not an end-of-block. The chain of dependent lookups bounds
  // a Huffman decoder's speed; two symbols in a lookup shorten it. Fields:
  //   bits 0-5:   bits both symbols use (0: not even the first fits; bits 6-7 stay 0)
  //   bits 8-15:  coefficients both advance (the first's when there is no second)
  //   bits 16-19: bits of the first, bits 24-31: coefficients the first advances
  //   bits 32-47: the first coefficient, bits 48-63: the second.
  // (The fields the decoder reads every step are where x86 reads them in one instruction.)
  // A symbol advances run + 1, a zero run 16 and an end-of-block 64; an entry where not even the
  // first fits advances 128 (kAcMissAdvance), so that one test after the lookup catches it with
  // the end of the block. Storing even the zeros, at position k + advance - 1 (clamped to 63), keeps
  // the decoder free of branches on the symbols' kinds: nothing was stored at or after k yet.
  static constexpr int kValueBits = 11;
  static constexpr uint32_t kAcMissAdvance = 128;
  uint64_t ac_steps[1 << kValueBits];
  int32_t maxcode[18];  // largest code of each length, -1 where there is none
  int32_t valoffset[17];
  uint8_t huffval[256];

  // False for a table libjpeg would reject (over-subscribed, a DC category above 15) or lack.
  bool build(const JHUFF_TBL* table, bool is_dc);

 private:
  // Adds to each entry of ac_steps, which holds the first symbol, the second where it fits: second[j]
  // is the first symbol of index j laid out as a step's second.
  void add_second_symbols(const uint64_t* second);
};

// ac_whole's bits of the first symbol: zero only where not even the first symbol fits.
constexpr uint32_t kAcFirstBits = 15u << 6;

// The value of `category` extra bits (the JPEG standard's EXTEND); category in 1..15.
inline int32_t extend(uint32_t bits, int category) {
  return bits < (1u << (category - 1)) ? static_cast<int32_t>(bits) - (1 << category) + 1 : static_cast<int32_t>(bits);
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
      open =
          ac_step(in, table, k, e) && ac_step(in, table, k, e) && ac_step(in, table, k, e) && ac_step(in, table, k, e);
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

// The derived form of a header's table, from a small per-thread cache: files written by the same
// encoder (most use the standard tables) share their tables, so a loop over a dataset derives them
// about once. Null for a table build() refuses. Valid until eight more distinct tables have been
// asked for on this thread.
const HuffmanTable* derived_table(const JHUFF_TBL* table, bool is_dc);

}  // namespace custom_op

#pragma GCC visibility pop
