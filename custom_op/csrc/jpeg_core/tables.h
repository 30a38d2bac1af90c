// Plain-data tables for the decoding core: Huffman decoding tables, quantisation tables, the
// coefficient order, and the frame geometry every stage shares.
//
// Why plain structs of fixed-size arrays: the host builds them once per file from the header, copies
// them to the GPU as bytes, and a kernel may copy them again into shared memory; pointers or
// containers inside would not survive either copy. A Huffman table is 3.5 KB, so the four a
// baseline scan uses fit easily in shared memory.
//
// Why the builders validate: the tables come from untrusted DHT/DQT/SOF segments. build_huffman_table
// refuses exactly what libjpeg-turbo's jpeg_make_d_derived_tbl refuses (more than 256 symbols, a
// code that does not fit its length or is all ones, a DC category above 15), and checks each code
// before using it as an index, so a hostile table is refused before it writes anything. make_frame
// refuses geometry libjpeg refuses (sampling factors outside 1..4, more than 10 blocks in an MCU), so
// that every later index computed from a Frame stays inside the planes sized from it.
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

constexpr int kMaxComponents = 4;    // MAX_COMPS_IN_SCAN
constexpr int kMaxBlocksInMcu = 10;  // D_MAX_BLOCKS_IN_MCU
constexpr int kMaxSampling = 4;      // MAX_SAMP_FACTOR
constexpr int kBlockSize = 64;

// ---- Huffman tables -----------------------------------------------------------------------------

constexpr int kHuffLookBits = 9;
// The bits an AC table's step entries (HuffTable::steps) are indexed by: as many as the lookup entries'. With 10
// (twice the entries, more pairs) stages 1 and 2 ran no faster on an H200 (CHANGELOG.md).
constexpr int kPairBits = 9;
static_assert(kPairBits >= kHuffLookBits, "a step entry's first code is its lookup entry's");
// A step entry (huffman_step_entry): (moved * kStepScale) << kStepUsedBits | used, where `used` is the bits its
// codes and their extra bits take (at most kPairBits + 15, below 1 << kStepUsedBits) and `moved` how far they move
// the coefficient index (at most 16 + kBlockSize). A decode that keeps no values counts the coefficient index
// k as (k + 16) * kStepScale (read_block): that count's bit kPairBits is set exactly from k = kBlockSize - 16 on,
// where a pair's second code may be the next block's, and, OR-ed into the index, it picks the entries of
// first codes alone (the table's second half). So the index needs no comparison with k, and the entry's bits
// count is its low bits, as a shift by it takes them, with no field to extract.
constexpr int kStepUsedBits = 5;
constexpr int kStepScale = (1 << kPairBits) / kBlockSize;
static_assert(kStepScale * kBlockSize == 1 << kPairBits, "a step count's bit kPairBits marks k = kBlockSize - 16");
static_assert(kPairBits + 15 < (1 << kStepUsedBits), "a step's bits fit its low bits");
static_assert(((16 + kBlockSize) * kStepScale << kStepUsedBits) < (1 << 16), "a step entry fits 16 bits");

struct HuffTable {
  // Indexed by the next kHuffLookBits bits: (code length << 8) | symbol for codes of at most
  // kHuffLookBits bits, 0 where the bits start no such code.
  uint16_t lookup[1 << kHuffLookBits];
  // What a decode that keeps no values needs of the codes, indexed by the next kPairBits bits: for an AC table
  // (huffman_step_entry), in the first half the first two codes' step where a second code starts and ends within
  // those bits, else the first's, and in the second half the first code's alone; for a DC table
  // (huffman_dc_step_entry), in the first half the code's step and its extra bits. 0 where the bits start no code
  // of at most kHuffLookBits bits.
  uint16_t steps[2 << kPairBits];
  // Canonical decoding of longer codes (JPEG standard, figure F.16): maxcode[l] is the largest code
  // of length l (-1 where there is none), and a code c of length l is symbol huffval[c + valoffset[l]].
  int32_t maxcode[18];
  int32_t valoffset[17];
  int32_t num_symbols;
  uint8_t huffval[256];
};

// Validates a DHT table (counts[i] codes of length i + 1, i = 0..15, then their symbols; `available`
// is how many symbol bytes the caller has) and fills every field of `t` but `lookup`. False, with
// `t` unusable, for a table libjpeg-turbo would reject with JERR_BAD_HUFF_TABLE (or one whose symbols
// are not all there). A table with no codes at all is accepted, as libjpeg accepts it: every code
// then fails to decode.
CUSTOM_OP_HD inline bool build_huffman_codes(const uint8_t counts[16], const uint8_t* symbols, int available,
                                             bool is_dc, HuffTable* t) {
  int total = 0;
  for (int i = 0; i < 16; ++i) total += counts[i];
  if (total > 256 || total > available || available < 0) return false;
  for (int i = 0; i < 256; ++i) t->huffval[i] = 0;
  t->num_symbols = total;
  uint32_t code = 0;
  int k = 0;
  for (int length = 1; length <= 16; ++length) {
    const int n = counts[length - 1];
    t->valoffset[length] = k - static_cast<int32_t>(code);
    for (int i = 0; i < n; ++i, ++k, ++code) {
      // libjpeg: the codes of each length must fit in it, and none may be all ones.
      if (code + 1 >= (1u << length)) return false;
      const uint8_t symbol = symbols[k];
      if (is_dc && symbol > 15) return false;
      t->huffval[k] = symbol;
    }
    t->maxcode[length] = n > 0 ? static_cast<int32_t>(code) - 1 : -1;
    code <<= 1;
  }
  t->maxcode[0] = -1;
  t->maxcode[17] = 0x7FFFFFFF;  // never reached: decoding stops after length 16
  t->valoffset[0] = 0;
  return true;
}

// t.lookup[bits]: (length << 8) | symbol for the code of at most kHuffLookBits bits that `bits` (the
// next kHuffLookBits bits of a stream) starts with, else 0; for a table build_huffman_codes
// accepted. It is the canonical decoding of figure F.16 over the short lengths: the codes of a
// length are one run of values, and a value below that run starts with a shorter code, found first.
// Each entry on its own, so that the GPU decoder builds a table with one thread per entry.
CUSTOM_OP_HD inline uint16_t huffman_lookup_entry(const HuffTable& t, uint32_t bits) {
  for (int length = 1; length <= kHuffLookBits; ++length) {
    const int32_t code = static_cast<int32_t>(bits >> (kHuffLookBits - length));
    if (code <= t.maxcode[length]) return static_cast<uint16_t>((length << 8) | t.huffval[code + t.valoffset[length]]);
  }
  return 0;
}

// The coefficient index an AC symbol moves a block's decode by: past its zero run and its value (run + 1);
// 16 for ZRL (15, 0); kBlockSize for EOB and the other (run, 0) symbols, which libjpeg also reads as the
// block's end.
CUSTOM_OP_HD inline int ac_symbol_advance(int symbol) {
  const int run = symbol >> 4;
  return (symbol & 15) != 0 ? run + 1 : (run == 15 ? 16 : kBlockSize);
}

// A step entry (kStepUsedBits): `used` bits taken, the coefficient index moved by `moved`.
CUSTOM_OP_HD inline uint16_t huffman_step(int used, int moved) {
  return static_cast<uint16_t>(((moved * kStepScale) << kStepUsedBits) | used);
}

// t.steps[i] for a table whose lookup entries are built: i's low kPairBits bits are the next bits of a stream,
// its bit kPairBits asks for the first code alone. The first code comes from its lookup entry: the bits it
// takes with its extra bits, and ac_symbol_advance. A second code is taken, in the first half, where the first
// is not an end of block and the second's code (not its extra bits) lies within the kPairBits bits after the
// first's code and extra bits, found by the canonical decoding of figure F.16 over the lengths that fit; the
// entry then counts both codes' bits and extra bits and the coefficients both move past. Why pairs: a decode
// that keeps no values waits, code after code, for each code's entry before it can find the next; an entry of
// two codes halves those waits where codes are short, as they are in the busy blocks that take most of a
// photo's bits.
CUSTOM_OP_HD inline uint16_t huffman_step_entry(const HuffTable& t, uint32_t i) {
  const uint32_t bits = i & ((1u << kPairBits) - 1);
  const uint16_t first = t.lookup[bits >> (kPairBits - kHuffLookBits)];
  if (first == 0) return 0;
  const int symbol = first & 0xFF;
  int used = (first >> 8) + (symbol & 15), moved = ac_symbol_advance(symbol);
  if ((i >> kPairBits) == 0 && moved != kBlockSize && used < kPairBits) {
    const int left = kPairBits - used;
    const uint32_t rest = bits & ((1u << left) - 1);
    for (int length = 1; length <= left; ++length) {
      const int32_t code = static_cast<int32_t>(rest >> (left - length));
      if (code <= t.maxcode[length]) {
        const int second = t.huffval[code + t.valoffset[length]];
        used += length + (second & 15);
        moved += ac_symbol_advance(second);
        break;
      }
    }
  }
  return huffman_step(used, moved);
}

// t.steps[i] for a DC table whose lookup entries are built (i below 1 << kPairBits; the entries past them are 0):
// a short code's step, its code and extra bits together (at most kHuffLookBits + 15) in the low bits, and the
// number of its extra bits (its symbol, at most 15: build_huffman_codes refuses more) above them.
CUSTOM_OP_HD inline uint16_t huffman_dc_step_entry(const HuffTable& t, uint32_t i) {
  if ((i >> kPairBits) != 0) return 0;
  const uint16_t first = t.lookup[i >> (kPairBits - kHuffLookBits)];
  if (first == 0) return 0;
  const int symbol = first & 0xFF;
  return static_cast<uint16_t>((symbol << kStepUsedBits) | ((first >> 8) + symbol));
}

// Builds `t` from a DHT table: build_huffman_codes, then every lookup entry and every step entry.
CUSTOM_OP_HD inline bool build_huffman_table(const uint8_t counts[16], const uint8_t* symbols, int available,
                                             bool is_dc, HuffTable* t) {
  if (!build_huffman_codes(counts, symbols, available, is_dc, t)) return false;
  for (uint32_t i = 0; i < (1u << kHuffLookBits); ++i) t->lookup[i] = huffman_lookup_entry(*t, i);
  for (uint32_t i = 0; i < (2u << kPairBits); ++i)
    t->steps[i] = is_dc ? huffman_dc_step_entry(*t, i) : huffman_step_entry(*t, i);
  return true;
}

// ---- Quantisation and coefficient order ---------------------------------------------------------

// A DQT table in natural (row-major) order, as libjpeg keeps it; 8-bit tables are widened.
struct QuantTable {
  uint16_t value[kBlockSize];
};

// Where the k-th decoded coefficient of a block (k in zigzag order, 0..79) is stored. Entries 64..79
// are all 63: a damaged block whose zero runs carry it past the end stores its value at position 63,
// as libjpeg's jpeg_natural_order does (it has the same 16 extra entries).
struct CoefOrder {
  uint8_t position[80];
};

// Natural order: the zigzag walk of the JPEG standard (figure A.6), computed rather than tabulated.
CUSTOM_OP_HD inline void make_natural_order(CoefOrder* order) {
  int i = 0;
  for (int s = 0; s < 15; ++s) {
    for (int j = 0; j <= s; ++j) {
      const int r = (s % 2 == 0) ? s - j : j;
      const int c = s - r;
      if (r < 8 && c < 8) order->position[i++] = static_cast<uint8_t>(8 * r + c);
    }
  }
  for (; i < 80; ++i) order->position[i] = 63;
}

// The zigzag index of the coefficient at row r, column c of a block: the inverse of the natural
// order's first 64 entries, computed (diagonal s = r + c, walked up on even diagonals, down on odd
// ones) so that a loop over constant positions folds it into constants.
CUSTOM_OP_HD constexpr int zigzag_index(int r, int c) {
  const int s = r + c;
  const int j = s % 2 == 0 ? c : r;  // the position along the diagonal, in walking order
  return s < 8 ? s * (s + 1) / 2 + j : 64 - (15 - s) * (16 - s) / 2 + j - (s - 7);
}

// Zigzag order (coefficient k stored at index k), with the same clamp past the end.
CUSTOM_OP_HD inline void make_zigzag_order(CoefOrder* order) {
  for (int i = 0; i < 80; ++i) order->position[i] = static_cast<uint8_t>(i < 64 ? i : 63);
}

// ---- Frame geometry -----------------------------------------------------------------------------

// Everything about a baseline frame with one interleaved scan that the stages need, in libjpeg's
// terms (jdinput.c initial_setup / per_scan_setup).
struct Frame {
  int width, height;  // pixels
  int num_components;
  int h[kMaxComponents], v[kMaxComponents];  // sampling factors as declared
  int max_h, max_v;
  int mcus_per_row, mcu_rows;
  // Per component: its coefficient plane (whole MCUs, so padded past the image), its real samples
  // (libjpeg's downsampled_width/height, what upsampling reads), its upsampling ratios, and the
  // blocks it has in one MCU (h x v, or 1 x 1 in a single-component scan).
  int blocks_per_row[kMaxComponents], block_rows[kMaxComponents];
  int sample_width[kMaxComponents], sample_height[kMaxComponents];
  int h_ratio[kMaxComponents], v_ratio[kMaxComponents];  // 0 where not integral (no upsampling)
  int mcu_blocks_h[kMaxComponents], mcu_blocks_v[kMaxComponents];
  // The MCU's blocks in decoding order: component, and position inside the MCU.
  int blocks_in_mcu;
  uint8_t mcu_component[kMaxBlocksInMcu];
  uint8_t mcu_bx[kMaxBlocksInMcu], mcu_by[kMaxBlocksInMcu];
};

CUSTOM_OP_HD inline int ceil_div_int(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Fills `f` for a frame of width x height pixels whose single scan holds every component, in
// scan_order (frame component indices in the order the SOS lists them; null for frame order).
// False for what libjpeg refuses or this core does not handle (a size of 0 or above 65535, more
// than 4 components, a sampling factor outside 1..4, more than 10 blocks per MCU).
CUSTOM_OP_HD inline bool make_frame(int width, int height, int num_components, const int* h, const int* v,
                                    const int* scan_order, Frame* f) {
  if (width < 1 || width > 65535 || height < 1 || height > 65535) return false;
  if (num_components < 1 || num_components > kMaxComponents) return false;
  f->width = width;
  f->height = height;
  f->num_components = num_components;
  f->max_h = 1;
  f->max_v = 1;
  for (int c = 0; c < num_components; ++c) {
    if (h[c] < 1 || h[c] > kMaxSampling || v[c] < 1 || v[c] > kMaxSampling) return false;
    f->h[c] = h[c];
    f->v[c] = v[c];
    f->max_h = max_int(f->max_h, h[c]);
    f->max_v = max_int(f->max_v, v[c]);
  }
  for (int c = num_components; c < kMaxComponents; ++c) {
    f->h[c] = f->v[c] = 0;
    f->blocks_per_row[c] = f->block_rows[c] = 0;
    f->sample_width[c] = f->sample_height[c] = 0;
    f->h_ratio[c] = f->v_ratio[c] = 0;
    f->mcu_blocks_h[c] = f->mcu_blocks_v[c] = 0;
  }
  for (int c = 0; c < num_components; ++c) {
    f->sample_width[c] = ceil_div_int(static_cast<int64_t>(width) * h[c], f->max_h);
    f->sample_height[c] = ceil_div_int(static_cast<int64_t>(height) * v[c], f->max_v);
    f->h_ratio[c] = f->max_h % h[c] == 0 ? f->max_h / h[c] : 0;
    f->v_ratio[c] = f->max_v % v[c] == 0 ? f->max_v / v[c] : 0;
  }
  if (num_components == 1) {
    // A single-component scan is not interleaved: its MCU is one block, whatever the factors say.
    f->mcus_per_row = ceil_div_int(f->sample_width[0], 8);
    f->mcu_rows = ceil_div_int(f->sample_height[0], 8);
    f->mcu_blocks_h[0] = f->mcu_blocks_v[0] = 1;
    f->blocks_per_row[0] = f->mcus_per_row;
    f->block_rows[0] = f->mcu_rows;
    f->blocks_in_mcu = 1;
    f->mcu_component[0] = 0;
    f->mcu_bx[0] = f->mcu_by[0] = 0;
    return true;
  }
  f->mcus_per_row = ceil_div_int(width, 8 * f->max_h);
  f->mcu_rows = ceil_div_int(height, 8 * f->max_v);
  int blocks = 0;
  bool seen[kMaxComponents] = {false, false, false, false};
  for (int i = 0; i < num_components; ++i) {
    const int c = scan_order != nullptr ? scan_order[i] : i;
    if (c < 0 || c >= num_components || seen[c]) return false;
    seen[c] = true;
    f->mcu_blocks_h[c] = h[c];
    f->mcu_blocks_v[c] = v[c];
    f->blocks_per_row[c] = f->mcus_per_row * h[c];
    f->block_rows[c] = f->mcu_rows * v[c];
    if (blocks + h[c] * v[c] > kMaxBlocksInMcu) return false;
    for (int by = 0; by < v[c]; ++by) {
      for (int bx = 0; bx < h[c]; ++bx) {
        f->mcu_component[blocks] = static_cast<uint8_t>(c);
        f->mcu_bx[blocks] = static_cast<uint8_t>(bx);
        f->mcu_by[blocks] = static_cast<uint8_t>(by);
        ++blocks;
      }
    }
  }
  f->blocks_in_mcu = blocks;
  return true;
}

CUSTOM_OP_HD inline int64_t frame_total_mcus(const Frame& f) {
  return static_cast<int64_t>(f.mcus_per_row) * f.mcu_rows;
}

// Coefficients in component c's plane: blocks_per_row * block_rows blocks of 64.
CUSTOM_OP_HD inline int64_t plane_coefficients(const Frame& f, int c) {
  return static_cast<int64_t>(f.blocks_per_row[c]) * f.block_rows[c] * kBlockSize;
}

}  // namespace jpeg_core
}  // namespace custom_op
