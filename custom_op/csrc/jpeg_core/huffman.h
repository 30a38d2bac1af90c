// Huffman decoding of one restart segment into coefficient blocks: what one GPU thread does.
//
// Why per segment: a restart marker resets the DC predictors and byte-aligns the data, so segments
// are independent and the GPU can give each one a thread. Within a segment decoding is sequential.
//
// Exactness: for any segment that libjpeg-turbo 2.1.5 decodes WITHOUT a warning, the coefficients
// here are libjpeg's, bit for bit, including its behaviour on data no valid encoder writes but which
// libjpeg accepts silently: a zero-size AC symbol other than ZRL (0xF0) ends the block like EOB; a
// zero run past coefficient 63 stores its value at 63 (jpeg_natural_order's 16 extra entries, see
// CoefOrder); AC categories up to 15 and DC categories up to 15 are decoded (values up to +-32767);
// the DC predictor wraps as a 32-bit integer and only its low 16 bits are stored (JCOEF). (libjpeg
// takes restart-interval files through decode_mcu_slow, whose semantics these are.)
//
// Everything libjpeg WOULD warn about is reported instead, and the caller falls back to the CPU path
// so that warnings, errors and the pixels of damaged files stay exactly libjpeg's:
//   kBadCode      a code the table lacks (libjpeg: "Corrupt JPEG data: bad Huffman code", then it
//                 decodes a zero and goes on);
//   kEarlyMarker  a bit past an FF inside the range was needed: a marker inside the segment, or
//                 FF FF .. FF 00, which libjpeg reads as one data byte FF but valid encoders never
//                 write (refusing it is conservative);
//   kOverrun      a bit past the end of the range was needed (the segment's data is too short);
//   kTrailingData the MCUs ended with 8 or more data bits left, or an FF that is not stuffing lies
//                 inside the range. libjpeg discards such bytes, with "Corrupt JPEG data: N
//                 extraneous bytes before marker" when they lie past its read-ahead, silently when
//                 its bit buffer had already reached the marker; reporting them always is
//                 conservative (valid encoders pad with fewer than 8 bits);
//   kBadArguments the MCU range lies outside the frame, or a table pointer is null.
// The coefficients of a reported segment are whatever was decoded up to the error: unusable.
#pragma once

#include <string.h>

#include "bit_reader.h"
#include "tables.h"

namespace custom_op {
namespace jpeg_core {

enum SegmentFlags : uint32_t {
  kSegmentOk = 0,
  kBadCode = 1u << 0,
  kEarlyMarker = 1u << 1,
  kOverrun = 1u << 2,
  kTrailingData = 1u << 3,
  kBadArguments = 1u << 4,
};

// The tables one segment needs, per frame component (not per table number), so that a kernel can
// point them at its shared-memory copies.
struct SegmentTables {
  const HuffTable* dc[kMaxComponents];
  const HuffTable* ac[kMaxComponents];
  // Where each decoded coefficient is stored; null: zigzag order (coefficient k at index k, past the
  // end at 63, as make_zigzag_order), with no table read per coefficient, which the GPU decoder uses
  // (its inverse-DCT kernel puts the coefficients in natural order as it loads them).
  const CoefOrder* order;
};

// The JPEG standard's EXTEND: the value of `size` extra bits (size 1..15).
CUSTOM_OP_HD inline int32_t huff_extend(uint32_t bits, int size) {
  return bits < (1u << (size - 1)) ? static_cast<int32_t>(bits) - static_cast<int32_t>((1u << size) - 1)
                                   : static_cast<int32_t>(bits);
}

// A code longer than kHuffLookBits bits (the lookup entry of its first bits is 0): its symbol, or -1
// for a code the table lacks. Needs 16 bits buffered.
CUSTOM_OP_HD inline int decode_long_code(BitReader* r, const HuffTable& t) {
  for (int length = kHuffLookBits + 1; length <= 16; ++length) {
    const int32_t code = static_cast<int32_t>(reader_peek(r, length));
    if (code <= load_readonly(&t.maxcode[length])) {
      const int32_t index = code + load_readonly(&t.valoffset[length]);
      // Always true for a table build_huffman_table accepted (canonical codes); checked anyway so
      // that no table can send the read outside huffval.
      if (index < 0 || index >= load_readonly(&t.num_symbols)) return -1;
      reader_drop(r, length);
      return load_readonly(&t.huffval[index]);
    }
  }
  return -1;
}

// The lookup entry of the next kHuffLookBits bits: (length << 8) | symbol for a code that short,
// else 0 (decode_long_code then).
CUSTOM_OP_HD inline uint32_t short_code_entry(const BitReader* r, const HuffTable& t) {
  return load_readonly(&t.lookup[reader_peek(r, kHuffLookBits)]);
}

// One symbol, or -1 for a code the table lacks. Needs 16 bits buffered. (decode_block spells this
// out, so that only the long-code path tests for a failure: through a helper, the compiler kept a
// test and a branch out of three nested loops on every symbol of the GPU decoder.)
CUSTOM_OP_HD inline int decode_symbol(BitReader* r, const HuffTable& t) {
  const uint32_t e = short_code_entry(r, t);
  if (e == 0) return decode_long_code(r, t);
  reader_drop(r, static_cast<int>(e >> 8));
  return static_cast<int>(e & 0xFF);
}

// One block: DC difference added to *pred, then the AC coefficients, into `block` (zeroed here; in
// device code it must be 16-byte aligned), at position[k] for coefficient k, or at k (63 past the end)
// where position is null. With Store false, the same codes are read and *pred advances, but nothing is
// written (`block` is not used): what a decoder needs that only looks for where blocks start
// (sync_decode.h).
// Returns false on a code the table lacks.
template <bool Store>
CUSTOM_OP_HD inline bool read_block(BitReader* r, const HuffTable& dc, const HuffTable& ac, const uint8_t* position,
                                    int32_t* pred, int16_t* block) {
  if constexpr (Store) {
#if defined(__CUDA_ARCH__)
    // Eight 16-byte stores rather than 64 of 2 bytes (the GPU decoder's blocks are 16-byte aligned): the
    // decoding thread's time fell by a tenth on ImageNet photos. A memset of memory said to be aligned,
    // not stores through a uint4 pointer: those break the aliasing rules, and nvcc, which compiles
    // memset to the same eight stores, may then drop them together with the coefficients' own stores.
    // The pointer is made void* first: nvcc at -O2 with debug info, given int16_t* here, emitted a
    // memset call of the wrong type that its own IR verifier refused.
    void* aligned = __builtin_assume_aligned(static_cast<void*>(block), 16);
    memset(aligned, 0, kBlockSize * sizeof(int16_t));
#else
    for (int i = 0; i < kBlockSize; ++i) block[i] = 0;
#endif
  }
  reader_refill(r);
  int32_t diff = 0;
  const uint32_t dc_step = Store ? 0u : load_readonly(&dc.steps[reader_peek(r, kPairBits)]);
  if (!Store && dc_step != 0) {
    // The codes alone: the DC code's step entry (huffman_dc_step_entry) drops its code and extra bits at once,
    // and the extra bits, the last of those, are read from the bits as they were.
    const int s = static_cast<int>(dc_step >> kStepUsedBits);
    const uint32_t extra = reader_peek(r, static_cast<int>(dc_step & 31)) & ((1u << s) - 1);
    if (s != 0) diff = huff_extend(extra, s);
    reader_drop_low(r, dc_step);
  } else {
    int s;
    if (const uint32_t entry = short_code_entry(r, dc)) {
      reader_drop(r, static_cast<int>(entry >> 8));
      s = static_cast<int>(entry & 0xFF);
    } else if ((s = decode_long_code(r, dc)) < 0) {
      return false;
    }
    if (s != 0) {  // s <= 15: build_huffman_table refuses larger DC symbols; 57 - 16 bits are left
      diff = huff_extend(reader_peek(r, s), s);
      reader_drop(r, s);
    }
  }
  *pred = static_cast<int32_t>(static_cast<uint32_t>(*pred) + static_cast<uint32_t>(diff));
  if constexpr (Store) block[0] = wrap_int16(*pred);
  if constexpr (!Store) {
    // The codes alone, a step entry at a time (tables.h's huffman_step_entry): the bits a code and its extra bits
    // take and how far it moves the coefficient index, or the same for two codes, in one entry, where the chain
    // of steps each code waits for would otherwise extract the symbol's fields. Both codes of a pair are the
    // block's while the first leaves the index below 64, as it does from below 48 (a first code moves it by at
    // most 16; an end of block has no second): from 48 on the entry of the first code alone is taken. The index
    // is counted as (k + 16) * kStepScale, whose bit kPairBits says which half of the table to read, and an
    // entry's low bits are the bits it takes, so that between one entry's load and the next, a code waits only
    // for the shift of the bits, the next index and its address.
    constexpr uint32_t kStepsEnd = (kBlockSize + 16) * kStepScale;
    for (uint32_t at = (1 + 16) * kStepScale; at < kStepsEnd;) {  // k = 1
      // A code (16) and its extra bits (15), or a pair's (at most kPairBits + 15), fit in the 32 bits this leaves.
      reader_refill(r);
      const uint32_t index = reader_peek(r, kPairBits) | (at & (1u << kPairBits));
      // Taken whatever the entry: an entry of 0 (a longer code) drops no bits and moves nothing, so the shift
      // waits only for the load, not also for the test.
      const uint32_t e = load_readonly(&ac.steps[index]);
      reader_drop_low(r, e);
      at += e >> kStepUsedBits;
      if (e == 0) {
        const int symbol = decode_long_code(r, ac);
        if (symbol < 0) return false;
        reader_drop(r, symbol & 15);
        at += static_cast<uint32_t>(kStepScale * ac_symbol_advance(symbol));
      }
    }
    return true;
  } else {
    for (int k = 1; k < kBlockSize; ++k) {
      reader_refill(r);  // a code (16) and its extra bits (15) fit in the 32 bits this leaves
      int symbol;
      if (const uint32_t e = short_code_entry(r, ac)) {
        symbol = static_cast<int>(e & 0xFF);
        reader_drop(r, static_cast<int>(e >> 8));
      } else if ((symbol = decode_long_code(r, ac)) < 0) {
        return false;
      }
      const int run = symbol >> 4, size = symbol & 15;
      if (size != 0) {
        k += run;  // k <= 63 + 15, inside position[80]
        const int32_t value = huff_extend(reader_peek(r, size), size);
        reader_drop(r, size);
        block[position != nullptr ? position[k] : (k < kBlockSize ? k : kBlockSize - 1)] =
            static_cast<int16_t>(value);  // |value| <= 32767
      } else {
        if (run != 15) break;  // EOB, or a symbol libjpeg also reads as one
        k += 15;
      }
    }
    return true;
  }
}

CUSTOM_OP_HD inline bool decode_block(BitReader* r, const HuffTable& dc, const HuffTable& ac, const uint8_t* position,
                                      int32_t* pred, int16_t* block) {
  return read_block<true>(r, dc, ac, position, pred, block);
}

// Whether `f` is consistent and every table and plane its MCU's blocks use is there: make_frame
// guarantees the first, checked anyway so that no Frame, however it was made, can send a block outside
// the plane_coefficients(f, c) values the caller allocated. `planes` may be null (nothing is written).
CUSTOM_OP_HD inline bool segment_arguments_ok(const Frame& f, const SegmentTables& t, int16_t* const* planes) {
  if (f.blocks_in_mcu < 1 || f.blocks_in_mcu > kMaxBlocksInMcu) return false;
  for (int b = 0; b < f.blocks_in_mcu; ++b) {
    const int c = f.mcu_component[b];
    if (c >= f.num_components || t.dc[c] == nullptr || t.ac[c] == nullptr ||
        (planes != nullptr && planes[c] == nullptr))
      return false;
    if (f.mcu_bx[b] >= f.mcu_blocks_h[c] || f.mcu_by[b] >= f.mcu_blocks_v[c] ||
        static_cast<int64_t>(f.blocks_per_row[c]) < static_cast<int64_t>(f.mcus_per_row) * f.mcu_blocks_h[c] ||
        static_cast<int64_t>(f.block_rows[c]) < static_cast<int64_t>(f.mcu_rows) * f.mcu_blocks_v[c])
      return false;
  }
  return true;
}

// Where block b of the MCU in row `row` (counted from the plane's first block row) and column `col`
// starts in its component's plane, in coefficients.
CUSTOM_OP_HD inline int64_t mcu_block_offset(const Frame& f, int b, int64_t row, int64_t col) {
  const int c = f.mcu_component[b];
  const int64_t block_row = row * f.mcu_blocks_v[c] + f.mcu_by[b];
  const int64_t block_col = col * f.mcu_blocks_h[c] + f.mcu_bx[b];
  return (block_row * f.blocks_per_row[c] + block_col) * kBlockSize;
}

// Decodes MCUs first_mcu .. first_mcu + mcu_count - 1 (in raster order over the frame) from the
// segment's bytes [begin, end), whose DC predictors start at zero, keeping only the blocks of MCU rows
// first_row .. first_row + num_rows - 1: block (row, col) of component c, counted from the first kept
// block row, goes to planes[c] + (row * f.blocks_per_row[c] + col) * 64, in the order t.order gives
// (natural order for the IDCT; zigzag where t.order is null). The blocks of other MCU rows are
// decoded (their codes are checked the same) into `scratch` and dropped. Why: a window needs a few
// MCU rows, but a segment may run across rows, and the GPU decoder keeps the coefficients of those
// rows only. Each plane must hold num_rows * mcu_blocks_v[c] * blocks_per_row[c] blocks; `f` should
// come from make_frame. Returns SegmentFlags.
CUSTOM_OP_HD inline uint32_t decode_segment_rows(const uint8_t* begin, const uint8_t* end, const Frame& f,
                                                 const SegmentTables& t, int64_t first_mcu, int64_t mcu_count,
                                                 int16_t* const* planes, int64_t first_row, int64_t num_rows,
                                                 int16_t* scratch) {
  if (begin == nullptr || end < begin || planes == nullptr || scratch == nullptr) return kBadArguments;
  if (first_row < 0 || num_rows < 1 || first_row > f.mcu_rows - num_rows) return kBadArguments;
  if (first_mcu < 0 || mcu_count < 1 || first_mcu > frame_total_mcus(f) - mcu_count) return kBadArguments;
  if (!segment_arguments_ok(f, t, planes)) return kBadArguments;
  BitReader r;
  reader_init(&r, begin, end);
  int32_t pred[kMaxComponents] = {0, 0, 0, 0};
  int64_t row = first_mcu / f.mcus_per_row;
  int64_t col = first_mcu % f.mcus_per_row;
  for (int64_t m = 0; m < mcu_count; ++m) {
    for (int b = 0; b < f.blocks_in_mcu; ++b) {
      const int c = f.mcu_component[b];
      const bool kept = row >= first_row && row < first_row + num_rows;
      int16_t* block = kept ? planes[c] + mcu_block_offset(f, b, row - first_row, col) : scratch;
      if (!decode_block(&r, *t.dc[c], *t.ac[c], t.order != nullptr ? t.order->position : nullptr, &pred[c], block))
        return kBadCode;
      if (reader_overran(&r)) return reader_stopped_early(&r) ? kEarlyMarker : kOverrun;
    }
    if (++col == f.mcus_per_row) {
      col = 0;
      ++row;
    }
  }
  return reader_unconsumed_bits(&r) >= 8 ? kTrailingData : kSegmentOk;
}

// The same, keeping every row: each plane holds plane_coefficients(f, c) values.
CUSTOM_OP_HD inline uint32_t decode_segment(const uint8_t* begin, const uint8_t* end, const Frame& f,
                                            const SegmentTables& t, int64_t first_mcu, int64_t mcu_count,
                                            int16_t* const* planes) {
  alignas(16) int16_t scratch[kBlockSize];
  return decode_segment_rows(begin, end, f, t, first_mcu, mcu_count, planes, 0, f.mcu_rows, scratch);
}

}  // namespace jpeg_core
}  // namespace custom_op
