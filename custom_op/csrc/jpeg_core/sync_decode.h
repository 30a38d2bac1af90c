// Huffman decoding of a whole scan, restart markers or not, split into chunks of a fixed number of
// bytes that threads decode in parallel: self-synchronising decoding (Weissenberger and Schmidt,
// ICPP 2018).
//
// Why: huffman.h gives each thread one restart segment, so it needs files with short restart
// intervals, and most files have none. A thread given a chunk of bytes does not know where in the code
// stream its chunk starts (which bit starts a code, which block of the MCU, which coefficient). But a
// Huffman decoder started at a wrong bit soon reaches a bit where the true decode also starts a block
// of the same place in the MCU, and from there on both read the same symbols: the decoders
// synchronise. So a decode runs in stages, each one thread per chunk (or one thread in all):
//
//   1. decode_chunk from chunk_guess: the chunk's first data byte taken as the start of an MCU. It
//      decodes up to the first block that starts at or past the chunk's end and records that point
//      (a SyncPoint: the block's first bit and its place in the MCU), the blocks it decoded and their
//      DC differences summed per component (a ChunkRecord).
//   2. sync_chunk: a chunk whose record does not start where the previous chunk's record ends is
//      decoded again from there. Repeated in rounds (each thread reading the last round's records)
//      until no record changes; or called in chunk order on one thread, which needs one sweep. Chunk 0
//      starts where the scan starts, so once every record starts where the one before it ends, every
//      record is the decode of its chunk from its true start (by induction). The previous chunk's
//      decoder has usually synchronised inside its chunk, so its end is already true: with chunks of a
//      few kilobytes, one or two rounds bring nearly every photo in sync (tests/test_sync_decode.py).
//      A decode in a round records its state where each part of its chunk ends (below), and stops at the
//      first of those where it meets one of the chunk's decodes of the last round (same bit, same place
//      in the MCU): from there both read the same codes, so it takes the rest of that decode's record
//      (EarlierDecodes). Most decodes from a corrected start meet the old one within a part or two.
//      A round always makes at least one more chunk true, so the rounds are bounded by the number of
//      chunks; a caller that stops before (a decoder that never synchronised, as when every component
//      has the same tables, where nothing tells a wrong block of the MCU from the right one) gets
//      kUnsynced from chunk_starts and decodes the file elsewhere. A decode reads its chunk and at most
//      one block past it.
//   3. chunk_starts: each chunk's exact start (its first bit, the scan index of its first block, the DC
//      predictors) from the records, a running sum (the predictors are sums of DC differences, reset
//      at restart markers); one thread's loop, or a parallel scan with join_records (the lane steps
//      share it, with walk_slots' choice of records, among a warp's threads). A window needs the scan
//      only through its last MCU row: chunk_starts_through checks the chunks up to there alone.
//   4. decode_chunk_blocks: the blocks that start in the chunk, decoded from its exact start into the
//      coefficient planes (decode_segment's layout, so the same IDCT consumes them); decode_chunk_rect
//      keeps a window's rectangle of MCUs (in planes of whole rows, as decode_segment_rows). A band's
//      decode skips the chunks wholly above the band that stage 3 found clean (strict_decode_needed).
//
// Stage 4 may run in finer chunks than stages 1 to 3 (split_scan: each chunk in `parts` parts). Stages 1
// to 3 need chunks long enough for most decoders to fall in step inside them; stage 4 knows where every
// part starts and wants as many threads as it can get. So the decodes of stages 1 and 2 also record their
// state where each part of their chunk ends (PartEnds), and part_start gives each part's exact start from
// its chunk's. Stage 4 checks each part's end against the next part's start as it checks a chunk's, so the
// argument below holds for parts as it does for chunks.
//
// Bit offsets: a point of the code stream is named by reader_bit_offset's offset from the file's first
// byte, which counts the bytes as they lie in the file (a stuffed FF 00 is the FF's 8 bits), so that
// decoders started at different bytes name the same bit the same way. Chunk j covers the bytes from
// scan_start + j * chunk_bytes, and owns the blocks whose first bit lies in them.
//
// Restart markers: stages 1 and 2 take a restart marker that follows an MCU's end with nothing but the
// padding between (fewer than 8 bits, all ones), or that a decoder runs into, as a restart (MCU start,
// predictors zero, the data goes on after it), and EOI or any other marker there as the scan's end: the
// true decode of a valid file does exactly that, and a wrong one is put right by it, since after a
// marker every decoder is in the same state. They do not know which MCU they are in, so they cannot
// check more; stage 4 does: it requires each restart marker exactly where the restart interval puts it,
// numbered as find_segments requires, and EOI after the last MCU. (A file padded with other bits than
// ones, which libjpeg accepts, may have blocks of its padding counted by stages 1 and 2: stage 4 then
// reports kUnsynced, and the file goes to the CPU path.)
//
// Exactness: stages 1 to 3 only find where chunks start, and read leniently (a code a table lacks is
// taken as a wrong guess: a bit is skipped and the next block taken as an MCU's first). Stage 4 alone
// decides. It checks everything decode_segment and find_segments check and reports it with the same
// flags (kBadMarker where find_segments would give a ScanError), and it checks that the chunk ends
// exactly where chunk_starts says the next one starts (first bit, block index, predictors; kUnsynced
// otherwise). So when stage 4 returns 0 for every chunk, the chunks' decodes join into one strict
// decode of the whole scan from its start: the coefficients are those decode_segment gives segment by
// segment, libjpeg-turbo's. Any flag sends the whole file to the CPU path (a chunk's own decode may
// be unflagged and still wrong where an earlier chunk is damaged). Stages 1 and 2 count their lenient
// reads in each record: a chunk above the band whose record on the chain counts none (in a file without
// restart markers, where stage 4 checks no marker above the band) was read from its true start exactly
// as stage 4 would read it, without a flag, so stage 4 has nothing to add there and starts at the
// first chunk that is not such.
#pragma once

#include "bit_reader.h"
#include "huffman.h"
#include "tables.h"

namespace custom_op {
namespace jpeg_core {

// Flags of decode_chunk_blocks and chunk_starts beside SegmentFlags.
enum ChunkFlags : uint32_t {
  // A restart marker missing, misnumbered or where none belongs, no EOI after the last MCU, or another
  // marker where the data ends.
  kBadMarker = 1u << 5,
  // The chunk does not end where the next chunk's start says (the records were not synchronised, or
  // damage made them wrong).
  kUnsynced = 1u << 6,
};

constexpr int32_t kLenientMost = INT32_MAX;  // ChunkRecord::lenient's cap
constexpr int64_t kScanEnd = INT64_MAX;      // SyncPoint::bit past the scan's end (EOI or the end of the data)
constexpr int64_t kNoStart = -1;             // SyncPoint::bit of a slot in no use (see the slots below)

// SyncPoint and ChunkRecord have no padding (SyncPoint's `unused` field is written as 0): a kernel copies
// records whole, and a copy of padding is a read of memory nothing wrote (compute-sanitizer's initcheck).

// A point where a block starts.
struct SyncPoint {
  int64_t bit;     // its first bit (reader_bit_offset from the file's first byte), or kScanEnd
  int32_t block;   // its place in the MCU (0 at kScanEnd)
  int32_t unused;  // 0
};

// One chunk decoded from a start point (stages 1 and 2).
struct ChunkRecord {
  SyncPoint start;             // where the decode started
  SyncPoint end;               // the first block start at or past the chunk's end
  int64_t blocks;              // blocks decoded (those from start to end)
  int32_t dc[kMaxComponents];  // DC differences summed per component (wrapping), since start or the last restart
  int32_t restarted;           // 1: a restart marker lies between start and end
  // The times the decode read leniently (lenient_read): a code the table lacks, data that stopped, a marker after
  // an MCU. Where it is 0, a strict decode from the same start reads the same blocks and flags nothing, in a file
  // without restart markers. Saturates at kLenientMost.
  int32_t lenient;
};
static_assert(sizeof(SyncPoint) == 16 && sizeof(ChunkRecord) == 2 * 16 + 8 + 4 * kMaxComponents + 8,
              "no padding in the records");

// A chunk's exact start (stage 3).
struct ChunkStart {
  int64_t bit;                   // its first block's first bit, or kScanEnd
  int64_t block;                 // that block's index in the scan: MCU * blocks_in_mcu + place in the MCU
  int32_t pred[kMaxComponents];  // the DC predictors there
};

// The scan index (ChunkStart::block's) of the first block of MCU row `row`: a window's first block, or, for the
// row after its last, one past its last block.
CUSTOM_OP_HD inline int64_t row_first_block(const Frame& f, int64_t row) {
  return row * f.mcus_per_row * f.blocks_in_mcu;
}

// The scan and its chunks.
struct ChunkedScan {
  const uint8_t* data;  // the file: every read stays inside [data, data + size)
  int64_t size;
  int64_t scan_start;  // the entropy-coded data's first byte (after the SOS segment)
  int64_t chunk_bytes;
  int64_t num_chunks;
  int64_t restart_interval;  // MCUs per restart segment (the DRI's), 0 where there are no restart markers
};

constexpr int64_t kMaxScanBytes = INT64_MAX >> 4;  // bit offsets of the bytes and of a chunk past them fit

// Fills `s` for the file data[0, size) whose scan data starts at scan_start, in chunks of chunk_bytes (one
// chunk where that is more than the file). False for arguments no chunking exists for (chunk_bytes < 1,
// scan_start outside the data, a restart interval above 65535, a size past kMaxScanBytes).
CUSTOM_OP_HD inline bool make_chunked_scan(const uint8_t* data, int64_t size, int64_t scan_start, int64_t chunk_bytes,
                                           int64_t restart_interval, ChunkedScan* s) {
  if (data == nullptr || size < 1 || size > kMaxScanBytes || scan_start < 0 || scan_start >= size || chunk_bytes < 1)
    return false;
  if (chunk_bytes > size) chunk_bytes = size;
  if (restart_interval < 0 || restart_interval > 65535) return false;
  s->data = data;
  s->size = size;
  s->scan_start = scan_start;
  s->chunk_bytes = chunk_bytes;
  s->num_chunks = (size - scan_start + chunk_bytes - 1) / chunk_bytes;
  s->restart_interval = restart_interval;
  return true;
}

// Whether `s` is what make_chunked_scan makes and has a chunk j.
CUSTOM_OP_HD inline bool chunked_scan_ok(const ChunkedScan& s, int64_t chunk) {
  return s.data != nullptr && s.size <= kMaxScanBytes && s.scan_start >= 0 && s.scan_start < s.size &&
         s.chunk_bytes >= 1 && s.chunk_bytes <= s.size &&
         s.num_chunks == (s.size - s.scan_start + s.chunk_bytes - 1) / s.chunk_bytes && s.restart_interval >= 0 &&
         chunk >= 0 && chunk < s.num_chunks;
}

// The scan of stage 4's chunks when each chunk of `s` is split in `parts` parts: false (and no split) where
// the chunks' bytes are not a multiple of parts. Part k of chunk j is then chunk j * parts + k of *fine,
// whose limit is where that part ends; the last part of chunk j ends where chunk j does.
CUSTOM_OP_HD inline bool split_scan(const ChunkedScan& s, int64_t parts, ChunkedScan* fine) {
  if (parts < 1 || s.chunk_bytes % parts != 0) return false;
  *fine = s;
  fine->chunk_bytes = s.chunk_bytes / parts;
  fine->num_chunks = (s.size - s.scan_start + fine->chunk_bytes - 1) / fine->chunk_bytes;
  return true;
}

// Stages 1 and 2 name the tables of f's MCU by their byte offsets from the lowest of them, 16 bits each
// (McuTables): every one of those tables must start within 64 KB of it, as one image's tables in one array do
// (the GPU's, the harness's). Needs segment_arguments_ok(f, t, nullptr).
CUSTOM_OP_HD inline uintptr_t mcu_tables_base(const Frame& f, const SegmentTables& t) {
  uintptr_t base = reinterpret_cast<uintptr_t>(t.dc[f.mcu_component[0]]);
  for (int b = 0; b < f.blocks_in_mcu; ++b) {
    const uintptr_t dc = reinterpret_cast<uintptr_t>(t.dc[f.mcu_component[b]]);
    const uintptr_t ac = reinterpret_cast<uintptr_t>(t.ac[f.mcu_component[b]]);
    base = dc < base ? dc : base;
    base = ac < base ? ac : base;
  }
  return base;
}

CUSTOM_OP_HD inline bool mcu_tables_packable(const Frame& f, const SegmentTables& t) {
  const uintptr_t base = mcu_tables_base(f, t);
  for (int b = 0; b < f.blocks_in_mcu; ++b) {
    if (reinterpret_cast<uintptr_t>(t.dc[f.mcu_component[b]]) - base > 0xFFFFu ||
        reinterpret_cast<uintptr_t>(t.ac[f.mcu_component[b]]) - base > 0xFFFFu)
      return false;
  }
  return true;
}

// The DC and AC tables of f's MCU as one address and each component's two offsets from it, rather than as eight
// pointers: a GPU thread at 64 registers (segment_decoder.cu) kept the pointers in local memory, and each block
// waited for their loads before its first code. Needs mcu_tables_packable(f, t).
struct McuTables {
  uintptr_t base;
  uint32_t dc01, dc23, ac01, ac23;  // component c's offset in bits 16 * (c & 1) of the word for c's pair
};

CUSTOM_OP_HD inline McuTables mcu_tables(const Frame& f, const SegmentTables& t) {
  McuTables m = {mcu_tables_base(f, t), 0, 0, 0, 0};
  for (int b = 0; b < f.blocks_in_mcu; ++b) {
    const int c = f.mcu_component[b];
    const uint32_t shift = 16u * static_cast<uint32_t>(c & 1);
    const uint32_t dc = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(t.dc[c]) - m.base) << shift;
    const uint32_t ac = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(t.ac[c]) - m.base) << shift;
    // Every block of a component ORs in the same offsets.
    (c < 2 ? m.dc01 : m.dc23) |= dc;
    (c < 2 ? m.ac01 : m.ac23) |= ac;
  }
  return m;
}

// Component c's table from its pair's word (dc01/dc23 or ac01/ac23). Its address is opaque to nvcc, which held
// it through the block's AC loop only so: else it worked it out again from the words in every turn of that loop.
CUSTOM_OP_HD inline const HuffTable& mcu_table(uintptr_t base, uint32_t pair01, uint32_t pair23, uint32_t c) {
  const uint32_t word = (c & 2u) != 0 ? pair23 : pair01;
  uintptr_t address = base + ((word >> (16u * (c & 1u))) & 0xFFFFu);
#if defined(__CUDA_ARCH__)
  asm("" : "+l"(address));
#endif
  return *reinterpret_cast<const HuffTable*>(address);
}

// Whether the stages can run on chunk j of `s` with `f` and `t` (and write to `planes`, where not null):
// a chunk, a frame with MCUs, and the tables and planes of every block of its MCU.
CUSTOM_OP_HD inline bool chunk_arguments_ok(const ChunkedScan& s, int64_t chunk, const Frame& f, const SegmentTables& t,
                                            int16_t* const* planes) {
  return chunked_scan_ok(s, chunk) && f.mcus_per_row >= 1 && f.mcu_rows >= 1 && segment_arguments_ok(f, t, planes) &&
         mcu_tables_packable(f, t);
}

// The bit offset where chunk j's bytes end: the first block starting there or later belongs to the next
// chunk. The last chunk has no end: it decodes to the scan's end.
CUSTOM_OP_HD inline int64_t chunk_limit(const ChunkedScan& s, int64_t chunk) {
  return chunk + 1 >= s.num_chunks ? kScanEnd : 8 * (s.scan_start + (chunk + 1) * s.chunk_bytes);
}

// Stage 1's start point of chunk j: chunk 0's is exact; another's is its first byte taken as an MCU's
// first bit, moved past a byte that cannot start data (the 00 of a stuffed FF 00, a marker's code; what
// follows a restart marker is then exact).
CUSTOM_OP_HD inline SyncPoint chunk_guess(const ChunkedScan& s, int64_t chunk) {
  if (!chunked_scan_ok(s, chunk)) return SyncPoint{kScanEnd, 0, 0};
  int64_t byte = s.scan_start + chunk * s.chunk_bytes;
  if (chunk > 0 && byte < s.size && reader_byte(s.data + byte - 1) == 0xFF && reader_byte(s.data + byte) != 0xFF)
    ++byte;
  return SyncPoint{8 * byte, 0, 0};
}

// ---- One decoder ---------------------------------------------------------------------------------

// A decoder's place: its reader, where the reader started (reader_bit_offset walks back to there at
// most), the block of the MCU it decodes next.
struct ChunkCursor {
  BitReader r;
  const uint8_t* begin;
  int block;
  bool at_end;  // past the scan's end
};

// What a decode adds up: blocks (stages 1 and 2: decoded; stage 4: the scan index of the next block),
// DC sums (stages 1 and 2: differences since the start or the last restart; stage 4: the predictors).
struct ChunkTally {
  int64_t blocks;
  int32_t dc[kMaxComponents];
  int32_t restarted;
  int32_t lenient;  // stages 1 and 2: ChunkRecord::lenient
};

// a + b for ChunkRecord::lenient counts (each at most kLenientMost), capped there.
CUSTOM_OP_HD inline int32_t lenient_sum(int32_t a, int32_t b) { return a >= kLenientMost - b ? kLenientMost : a + b; }

// Stages 1 and 2: one more lenient read.
CUSTOM_OP_HD inline void lenient_read(ChunkTally* tally) { tally->lenient = lenient_sum(tally->lenient, 1); }

CUSTOM_OP_HD inline void cursor_at(const ChunkedScan& s, const uint8_t* begin, ChunkCursor* c) {
  c->begin = begin;
  reader_init(&c->r, begin, s.data + s.size);
  c->block = 0;
}

// Puts the cursor at point p. False where p lies outside the scan's data or names no block of the MCU.
CUSTOM_OP_HD inline bool cursor_start(const ChunkedScan& s, const Frame& f, SyncPoint p, ChunkCursor* c) {
  cursor_at(s, s.data + s.size, c);
  c->at_end = p.bit == kScanEnd;
  if (c->at_end) return p.block == 0;
  if (p.bit < 8 * s.scan_start || p.bit > 8 * s.size || p.block < 0 || p.block >= f.blocks_in_mcu) return false;
  cursor_at(s, s.data + (p.bit >> 3), c);
  c->block = p.block;
  reader_fill(&c->r);
  reader_drop(&c->r, static_cast<int>(p.bit & 7));  // fill buffered at least 57 bits
  return true;
}

constexpr int kDataGoesOn = -1;  // marker_after_mcu: 8 or more data bits before the data stops
constexpr int kNoMarker = -2;    // the data stops at the end of the bytes, or at fill FFs there

// Where the reader stopped at an FF that is not stuffing: the code of the marker there (skipping fill
// FFs, as find_segments does; 0 for FF .. FF 00, which is no marker), and in *after the byte after it.
CUSTOM_OP_HD inline int stopped_marker(const ChunkedScan& s, const BitReader& r, const uint8_t** after) {
  if (!reader_stopped_early(&r)) return kNoMarker;
  const uint8_t* end = s.data + s.size;
  const uint8_t* q = r.next + 1;
  while (q < end && reader_byte(q) == 0xFF) ++q;
  if (q >= end) return kNoMarker;
  *after = q + 1;
  return static_cast<int>(reader_byte(q));
}

// At an MCU's end: kDataGoesOn, or the marker the data stops at (fewer than 8 bits before it: the
// padding to a byte), or kNoMarker.
CUSTOM_OP_HD inline int marker_after_mcu(const ChunkedScan& s, ChunkCursor* c, const uint8_t** after) {
  BitReader* r = &c->r;
  if (r->bits - r->padded >= 8) return kDataGoesOn;
  if (!r->stopped) reader_fill(r);  // leaves 57 bits, or stops within them
  if (r->bits - r->padded >= 8) return kDataGoesOn;
  return stopped_marker(s, *r, after);
}

// Whether the data bits left in the reader (fewer than 8, where the data stops) are all ones: the
// padding encoders write before a marker. Nothing else can be: a block's first code (its DC code) would
// have to be all ones, which no Huffman table has. Other bits may still hold blocks (a block takes 2 bits
// at least), so stages 1 and 2 take only ones as the end of a segment.
CUSTOM_OP_HD inline bool padding_ones(const BitReader& r) {
  const int left = r.bits - r.padded;
  return left <= 0 || reader_peek(&r, left) == (1u << left) - 1;
}

CUSTOM_OP_HD inline bool is_restart_marker(int code) { return code >= 0xD0 && code <= 0xD7; }

CUSTOM_OP_HD inline void restart_after(const ChunkedScan& s, const uint8_t* after, ChunkCursor* c, ChunkTally* tally) {
  cursor_at(s, after, c);
  for (int k = 0; k < kMaxComponents; ++k) tally->dc[k] = 0;
  tally->restarted = 1;
}

// Stages 1 and 2, where the data stopped inside a block: at a restart marker, the decode goes on after
// it (see the header); anywhere else the scan has ended.
CUSTOM_OP_HD inline void lenient_stop(const ChunkedScan& s, ChunkCursor* c, ChunkTally* tally) {
  lenient_read(tally);
  const uint8_t* after = nullptr;
  if (is_restart_marker(stopped_marker(s, c->r, &after))) restart_after(s, after, c, tally);
  else c->at_end = true;
}

// The point the cursor is at (a block start).
CUSTOM_OP_HD inline SyncPoint cursor_point(const ChunkedScan& s, const ChunkCursor& c) {
  if (c.at_end) return SyncPoint{kScanEnd, 0, 0};
  return SyncPoint{reader_bit_offset(&c.r, c.begin, s.data), c.block, 0};
}

// A round's earlier decodes of a chunk, from other starts (its k slots and their part ends: slot g's part end m
// at part_ends[g * stride + m]), which a decode from a new start may meet at a part end. Both decoders are then
// at the same bit and the same place of the MCU, and a decoder's way on depends on nothing else, so the new
// decode stops there and takes the rest of the one it met (decode_chunk): a round's decodes from corrected
// starts mostly fall in step with an earlier one early in the chunk.
struct EarlierDecodes {
  const ChunkRecord* slots;
  const ChunkRecord* part_ends;
  int64_t stride;
  int k;
};

// Where a decode of stages 1 and 2 also records its state: at the limits of chunks first .. first + count - 1
// of `fine` (split_scan: the parts of the chunk decoded, but its last), into out[0 .. count - 1], each the
// record of the decode from its start to the first block start at or past that limit. `done` counts those
// recorded; a limit the decode never reaches (it ended first) gets the record of the whole decode. With
// `earlier`, the decode stops at the first part end where it meets one of them (met_slot, met_at: which, and
// where; -1 where it met none).
struct PartEnds {
  const ChunkedScan* fine;
  int64_t first;
  int count;
  int done;
  ChunkRecord* out;
  const EarlierDecodes* earlier = nullptr;
  int met_slot = -1;
  int met_at = -1;
};

// The limit of the next part end `parts` records, or kScanEnd where none is left (or parts is null) or the
// next one is the scan's end (the decode's end then records it).
CUSTOM_OP_HD inline int64_t next_part_limit(const PartEnds* parts) {
  return parts == nullptr || parts->done >= parts->count ? kScanEnd
                                                         : chunk_limit(*parts->fine, parts->first + parts->done);
}

CUSTOM_OP_HD inline void record_part_end(SyncPoint start, SyncPoint end, const ChunkTally& tally, ChunkRecord* out) {
  out->start = start;
  out->end = end;
  out->blocks = tally.blocks;
  for (int k = 0; k < kMaxComponents; ++k) out->dc[k] = tally.dc[k];
  out->restarted = tally.restarted;
  out->lenient = tally.lenient;
}

// The earlier decode (slot) that recorded part end m at `end`, or -1. Not one that restarted before that part
// end: its later records could not say whether another restart lies after it, which the DC sums need.
CUSTOM_OP_HD inline int earlier_met(const EarlierDecodes& e, int m, SyncPoint end) {
  for (int g = 0; g < e.k; ++g) {
    if (e.slots[g].start.bit == kNoStart) continue;  // a slot in no use: its part ends hold nothing
    const ChunkRecord& at = e.part_ends[g * e.stride + m];
    if (at.end.bit == end.bit && at.end.block == end.block && !at.restarted) return g;
  }
  return -1;
}

// Where stage 4 stores blocks: those of the MCU rectangle of rows [first_row, first_row + num_rows) and columns
// [first_col, first_col + num_cols), into planes of whole rows (block row 0 of a plane is the first of those
// rows', as decode_segment_rows stores them). The blocks outside it are read and checked as strictly, with
// read_block's codes-only path, and not stored. Why not stored: a window's blocks are a small part of its rows'
// in a large photo, and a thread's scattered stores of the others cost stage 4 more than its decoding.
struct StoredRect {
  int16_t* const* planes;
  int64_t first_row, num_rows, first_col, num_cols;
};

// Where stage 4's next block lies: its MCU's index in the scan, that MCU's row (from StoredRect's first_row)
// and column, and the MCUs from it to the next restart marker (it included; 0 without restart markers).
struct MCUPlace {
  int64_t mcu, row, col, to_restart;
};

CUSTOM_OP_HD inline MCUPlace mcu_place(const ChunkedScan& s, const Frame& f, int64_t block, int64_t first_row) {
  MCUPlace at;
  at.mcu = block / f.blocks_in_mcu;
  at.row = at.mcu / f.mcus_per_row - first_row;
  at.col = at.mcu % f.mcus_per_row;
  at.to_restart = s.restart_interval > 0 ? s.restart_interval - at.mcu % s.restart_interval : 0;
  return at;
}

// Stage 4: decodes blocks from the cursor until the next block would start at or past bit `limit`, or the
// scan ends; stores each block into `out` at its scan index tally->blocks, with the predictors tally->dc,
// checks restart markers and EOI against the MCU count, and returns SegmentFlags | ChunkFlags at the first
// damage.
CUSTOM_OP_HD inline uint32_t run_chunk_strict(const ChunkedScan& s, const Frame& f, const SegmentTables& t,
                                              int64_t limit, ChunkCursor* c, ChunkTally* tally, const StoredRect* out) {
  const int per_mcu = f.blocks_in_mcu;
  const int64_t total_blocks = frame_total_mcus(f) * per_mcu;
  // The MCU the next block belongs to, its row (from the first stored row) and column, and the MCUs left
  // before a restart marker, kept up to date as blocks are decoded rather than divided out of the block's
  // index each time (64-bit divisions, which a GPU thread runs as long subroutines).
  MCUPlace at = mcu_place(s, f, tally->blocks, out->first_row);
  while (!c->at_end) {
    BitReader* r = &c->r;
    if (reader_overran(r)) return reader_stopped_early(r) ? kEarlyMarker : kOverrun;
    // Where this block starts: an upper bound first (each stuffed byte buffered moves the offset down
    // by 8), the exact offset only near the limit.
    const int64_t bound = 8 * static_cast<int64_t>(r->next - s.data) - (r->bits - r->padded);
    if (limit != kScanEnd && bound >= limit && reader_bit_offset(r, c->begin, s.data) >= limit) break;
    const int b = c->block;
    const int comp = f.mcu_component[b];
    if (tally->blocks >= total_blocks) return kUnsynced;  // a start past the last block
    const bool stored =
        at.row >= 0 && at.row < out->num_rows && at.col >= out->first_col && at.col - out->first_col < out->num_cols;
    const bool ok =
        stored ? read_block<true>(r, *t.dc[comp], *t.ac[comp], t.order != nullptr ? t.order->position : nullptr,
                                  &tally->dc[comp], out->planes[comp] + mcu_block_offset(f, b, at.row, at.col))
               : read_block<false>(r, *t.dc[comp], *t.ac[comp], nullptr, &tally->dc[comp], nullptr);
    if (!ok) return kBadCode;
    if (reader_overran(r)) return reader_stopped_early(r) ? kEarlyMarker : kOverrun;
    ++tally->blocks;
    if (++c->block < per_mcu) continue;
    c->block = 0;
    const int64_t mcus = ++at.mcu;  // MCUs decoded
    if (++at.col == f.mcus_per_row) {
      at.col = 0;
      ++at.row;
    }
    const bool restart = s.restart_interval > 0 && --at.to_restart == 0;
    if (restart) at.to_restart = s.restart_interval;
    const bool last = tally->blocks == total_blocks;
    if (!last && !restart) continue;
    const uint8_t* after = nullptr;
    const int code = marker_after_mcu(s, c, &after);
    if (code == kDataGoesOn) return kTrailingData;
    if (code != (last ? 0xD9 : 0xD0 + static_cast<int>((mcus / s.restart_interval - 1) & 7))) return kBadMarker;
    if (last) {
      c->at_end = true;
    } else {
      restart_after(s, after, c, tally);
    }
  }
  return kSegmentOk;
}

// Stages 1 and 2: decodes blocks from the cursor until the next block would start at or past bit `limit`, or
// the scan ends; stores nothing, sums DC differences, records the part ends of `parts` (where not null) from
// `start` as it passes them, and never fails (see the header).
CUSTOM_OP_HD inline void run_chunk_lenient(const ChunkedScan& s, const Frame& f, const SegmentTables& t, int64_t limit,
                                           ChunkCursor* c, ChunkTally* tally, PartEnds* parts, SyncPoint start) {
  const int per_mcu = f.blocks_in_mcu;
  // Which component each block of the MCU is (two bits each; chunk_arguments_ok checked them), and each
  // component's tables (McuTables) and DC sum, read once and held apart rather than in arrays indexed by the
  // block's component, so that a GPU thread keeps them in registers: from the arrays, each block waited for
  // three loads in turn (the component, its tables, its sum), the larger part of a block's time where blocks
  // are a few bits each, as in a photo's smooth regions.
  uint32_t components = 0;
  for (int b = 0; b < per_mcu; ++b) components |= static_cast<uint32_t>(f.mcu_component[b] & 3) << (2 * b);
  const McuTables tables = mcu_tables(f, t);
  uint32_t sum0 = static_cast<uint32_t>(tally->dc[0]), sum1 = static_cast<uint32_t>(tally->dc[1]),
           sum2 = static_cast<uint32_t>(tally->dc[2]), sum3 = static_cast<uint32_t>(tally->dc[3]);
  auto sums_out = [&] {
    tally->dc[0] = static_cast<int32_t>(sum0);
    tally->dc[1] = static_cast<int32_t>(sum1);
    tally->dc[2] = static_cast<int32_t>(sum2);
    tally->dc[3] = static_cast<int32_t>(sum3);
  };
  auto sums_in = [&] {
    sum0 = static_cast<uint32_t>(tally->dc[0]);
    sum1 = static_cast<uint32_t>(tally->dc[1]);
    sum2 = static_cast<uint32_t>(tally->dc[2]);
    sum3 = static_cast<uint32_t>(tally->dc[3]);
  };
  auto stop = [&] {  // lenient_stop, which may restart (the sums then start again from zero)
    sums_out();
    lenient_stop(s, c, tally);
    sums_in();
  };
  int64_t part_limit = next_part_limit(parts);  // kScanEnd: no part end left to record
  // The reader's address from which a block may start at or past part_limit or `limit` (a block starts at
  // most 8 * (next - s.data) bits in): below it, a block costs one comparison of addresses rather than the
  // offset's arithmetic.
  auto check_from = [&] {
    const int64_t least = part_limit < limit ? part_limit : limit;
    return least == kScanEnd ? UINTPTR_MAX : reinterpret_cast<uintptr_t>(s.data) + static_cast<uintptr_t>(least / 8);
  };
  uintptr_t check = check_from();
  while (!c->at_end) {
    BitReader* r = &c->r;
    if (reader_overran(r)) {
      stop();
      continue;
    }
    if (reinterpret_cast<uintptr_t>(r->next) >= check) {
      // Where this block starts: an upper bound first (each stuffed byte buffered moves the offset down
      // by 8), the exact offset only near a limit.
      const int64_t bound = 8 * static_cast<int64_t>(r->next - s.data) - (r->bits - r->padded);
      if (bound >= part_limit) sums_out();  // record_part_end reads them
      while (bound >= part_limit) {
        const int64_t bit = reader_bit_offset(r, c->begin, s.data);
        if (bit < part_limit) break;
        const SyncPoint here = {bit, c->block, 0};
        record_part_end(start, here, *tally, &parts->out[parts->done++]);
        if (parts->earlier != nullptr) {
          parts->met_slot = earlier_met(*parts->earlier, parts->done - 1, here);
          if (parts->met_slot >= 0) {
            parts->met_at = parts->done - 1;
            return;
          }
        }
        part_limit = next_part_limit(parts);
      }
      check = check_from();
      if (limit != kScanEnd && bound >= limit && reader_bit_offset(r, c->begin, s.data) >= limit) break;
    }
    const uint32_t comp = (components >> (2 * c->block)) & 3u;
    const HuffTable& dc = mcu_table(tables.base, tables.dc01, tables.dc23, comp);
    const HuffTable& ac = mcu_table(tables.base, tables.ac01, tables.ac23, comp);
    int32_t diff = 0;  // the block's DC difference, where its DC code was read
    const bool ok = read_block<false>(r, dc, ac, nullptr, &diff, nullptr);
    const uint32_t d = static_cast<uint32_t>(diff);
    sum0 += comp == 0 ? d : 0u;
    sum1 += comp == 1 ? d : 0u;
    sum2 += comp == 2 ? d : 0u;
    sum3 += comp == 3 ? d : 0u;
    if (reader_overran(r)) {
      stop();
      continue;
    }
    if (!ok) {  // a wrong guess: try the next bit as an MCU's first (the refill left 32 bits)
      lenient_read(tally);
      reader_drop(r, 1);
      c->block = 0;
      continue;
    }
    ++tally->blocks;
    if (++c->block < per_mcu) continue;
    c->block = 0;
    const uint8_t* after = nullptr;
    const int code = marker_after_mcu(s, c, &after);
    if (code == kDataGoesOn || !padding_ones(*r)) continue;
    lenient_read(tally);
    if (is_restart_marker(code)) {
      sums_out();
      restart_after(s, after, c, tally);
      sums_in();
    } else {
      c->at_end = true;
    }
  }
  sums_out();
}

// ---- The stages ----------------------------------------------------------------------------------

// Where chunk j of `s` records its part ends (split_scan's `fine` in `parts` parts) in `part_ends`, which
// holds parts - 1 records per chunk (none where parts is 1).
CUSTOM_OP_HD inline PartEnds chunk_part_ends(const ChunkedScan& fine, int64_t parts, int64_t chunk,
                                             ChunkRecord* part_ends) {
  return PartEnds{&fine, chunk * parts, static_cast<int>(parts - 1), 0, part_ends + chunk * (parts - 1)};
}

// What a decode that met an earlier one at part end m (parts->met_slot, met_at) records: its own record to there
// (parts->out[m]) joined with the earlier decode's from there to each of its later part ends and to its end.
CUSTOM_OP_HD inline ChunkRecord joined_at_meeting(const ChunkRecord& mine, const ChunkRecord& met,
                                                  const ChunkRecord& later) {
  ChunkRecord r = mine;
  r.end = later.end;
  r.blocks = mine.blocks + (later.blocks - met.blocks);
  // A restart after the meeting point (met has none before it: earlier_met): later's sums count from there.
  // Else they add to mine's.
  const bool restart_after = later.restarted != 0;
  for (int k = 0; k < kMaxComponents; ++k)
    r.dc[k] = restart_after
                  ? later.dc[k]
                  : static_cast<int32_t>(static_cast<uint32_t>(mine.dc[k]) +
                                         (static_cast<uint32_t>(later.dc[k]) - static_cast<uint32_t>(met.dc[k])));
  r.restarted = mine.restarted | (restart_after ? 1 : 0);
  // The same decoder state from the meeting point on: the earlier decode's lenient reads from there are this one's.
  r.lenient = met.lenient == kLenientMost ? kLenientMost : lenient_sum(mine.lenient, later.lenient - met.lenient);
  return r;
}

CUSTOM_OP_HD inline void take_rest_of_earlier(PartEnds* parts, ChunkRecord* out) {
  const EarlierDecodes& e = *parts->earlier;
  const ChunkRecord* theirs = e.part_ends + parts->met_slot * e.stride;
  const ChunkRecord mine = parts->out[parts->met_at];
  const ChunkRecord met = theirs[parts->met_at];
  for (int m = parts->met_at + 1; m < parts->count; ++m) parts->out[m] = joined_at_meeting(mine, met, theirs[m]);
  parts->done = parts->count;
  *out = joined_at_meeting(mine, met, e.slots[parts->met_slot]);
}

// Stages 1 and 2: chunk j decoded from `start` (chunk_guess, or where the previous record ends) into
// *out, and its part ends into `parts` where not null. A start outside the data decodes nothing (the
// record then ends at kScanEnd). Returns kBadArguments for arguments that name no chunk or a frame the
// tables do not cover, else 0.
CUSTOM_OP_HD inline uint32_t decode_chunk(const ChunkedScan& s, const Frame& f, const SegmentTables& t, int64_t chunk,
                                          SyncPoint start, ChunkRecord* out, PartEnds* parts = nullptr) {
  if (out == nullptr || !chunk_arguments_ok(s, chunk, f, t, nullptr)) return kBadArguments;
  ChunkTally tally = {0, {0, 0, 0, 0}, 0, 0};
  ChunkCursor c;
  if (parts != nullptr) parts->met_slot = parts->met_at = -1;
  if (!cursor_start(s, f, start, &c)) c.at_end = true;  // nothing to decode
  run_chunk_lenient(s, f, t, chunk_limit(s, chunk), &c, &tally, parts, start);
  if (parts != nullptr && parts->met_slot >= 0) {
    take_rest_of_earlier(parts, out);
    return kSegmentOk;
  }
  const SyncPoint end = cursor_point(s, c);
  record_part_end(start, end, tally, out);
  while (parts != nullptr && parts->done < parts->count) record_part_end(start, end, tally, &parts->out[parts->done++]);
  return kSegmentOk;
}

CUSTOM_OP_HD inline bool same_point(SyncPoint a, SyncPoint b) { return a.bit == b.bit && a.block == b.block; }

// Stage 2 for chunk j >= 1: *out becomes `current` (chunk j's record) where it starts where `previous`
// (chunk j - 1's) ends, else chunk j decoded again from there. Returns whether it was decoded again.
// `out` may be &current (one thread sweeping in chunk order), or another array (rounds, where every
// thread reads the last round's records).
// `parts`, where not null, gets the part ends of a chunk decoded again (and keeps those of `current`).
CUSTOM_OP_HD inline bool sync_chunk(const ChunkedScan& s, const Frame& f, const SegmentTables& t, int64_t chunk,
                                    const ChunkRecord& previous, const ChunkRecord& current, ChunkRecord* out,
                                    PartEnds* parts = nullptr) {
  if (chunk < 1 || same_point(current.start, previous.end)) {
    if (out != &current) *out = current;
    return false;
  }
  if (decode_chunk(s, f, t, chunk, previous.end, out, parts) != kSegmentOk) *out = current;
  return true;
}

// ---- Several starts a chunk (slots) --------------------------------------------------------------
//
// Where an MCU holds several blocks of one component (4:2:0, 4:2:2), a decoder often falls in step on the
// bit at the wrong one of those blocks (they share tables) and out of step again at the next component's:
// with one guess a chunk, the photos where this happens keep their chunks out of step for scores of rounds.
// So a chunk may hold k records, its slots (chunk j's slot h at records[j * k + h]): stage 1 guesses from
// the chunk's first byte at each of the MCU's first k places (guess_slot), and a round gives chunk j's slots
// the distinct ends of chunk j-1's slots (sync_slot). The chain's start of chunk j is among those ends as
// soon as one of chunk j-1's decodes has fallen in step, and decoders in step end alike. The slots those
// ends leave over keep their records, and so their ends: a guess that fell in step inside its chunk keeps
// offering the chunk's true end to the next chunk, whose decode from there is then ready when the chain
// reaches it, instead of the chain moving on one chunk a round. walk_slots then picks each chunk's record on
// the chain for stages 3 and 4. With k = 1 these are decode_chunk from chunk_guess and sync_chunk.
// A slot's part ends (PartEnds) lie slot by slot (slot_part_ends).

constexpr int kMaxSlots = kMaxBlocksInMcu;

// Where slot h of chunk j records its part ends, as an index into the part ends of all the slots: slot h's of
// every chunk after those of the slots before it, each slot's as chunk_part_ends lays them out over num_chunks
// chunks. The one place that says so: slot_part_ends writes there, part_start reads there.
CUSTOM_OP_HD inline int64_t slot_part_ends_index(int64_t parts, int64_t num_chunks, int64_t chunk, int64_t h) {
  return (h * num_chunks + chunk) * (parts - 1);
}

// Where slot h of chunk j records its part ends (slot_part_ends_index).
CUSTOM_OP_HD inline PartEnds slot_part_ends(const ChunkedScan& fine, int64_t parts, int64_t num_chunks, int64_t chunk,
                                            int h, ChunkRecord* part_ends) {
  return chunk_part_ends(fine, parts, chunk, part_ends + slot_part_ends_index(parts, num_chunks, 0, h));
}

// Chunk j's k slots of a round and their part ends (slot_part_ends_index), as sync_slot's earlier decodes.
CUSTOM_OP_HD inline EarlierDecodes earlier_slots(int64_t parts, int64_t num_chunks, int64_t chunk, int k,
                                                 const ChunkRecord* slots, const ChunkRecord* part_ends) {
  return EarlierDecodes{slots + chunk * k, part_ends + slot_part_ends_index(parts, num_chunks, chunk, 0),
                        slot_part_ends_index(parts, num_chunks, 0, 1), k};
}

CUSTOM_OP_HD inline bool slot_used(const ChunkRecord& r) { return r.start.bit != kNoStart; }

CUSTOM_OP_HD inline void clear_slot(ChunkRecord* r) {
  *r = ChunkRecord{};
  r->start.bit = kNoStart;
}

// The slots a chunk of a file holds, and how many of them stage 1 fills with guesses (slot_layout): the GPU
// decoder's layout, which the CPU harness tests as well.
struct SlotLayout {
  int slots;    // records a chunk, 1 to kMaxSlots
  int guesses;  // of them guessed in stage 1 (guess_slot), at the MCU's first places; the others start free
};

// A subsampled file holds a slot for each place of its MCU: there a decoder often falls in step with the codes
// at the wrong one of a component's blocks, which share their tables, and stays at the wrong place, while a
// decode from the right place is in step from there. Stage 1 guesses only at the MCU's first three places and
// leaves the other slots free: the rounds bring the few chunks whose guesses all missed in step from their
// neighbours' ends, and stage 1 decodes half the blocks on 4:2:0 photos (bench/results/chunk_sync_rounds.md);
// two guesses leave too many chunks to the rounds. In a file with one block a component, a decoder at the
// wrong place reads the next block with the wrong tables and soon falls in step on its own, so one guess a
// chunk does (the others' decodes would cost more GPU time than they save); its chunk holds a free slot beside
// it, which the rounds fill first (sync_slot), so that the guess and its end stay on offer while the chain has
// not reached its chunk.
// A scan of kLargeScanBytes or more (a photo of several megapixels), whatever its sampling, gets that layout
// too. Its batch's launches last as long as the GPU takes for all their decodes rather than as long as their
// slowest chunk, and the rounds decode each of its chunks again from its true start anyway: three guesses
// decode three times stage 1's blocks for fewer of the rounds' (chunk_sync_rounds.md's large photos), and more
// slots only add threads and records to every round. The few chunks it leaves out of step after the rounds
// are stage 3's to decode again (lane_repair), within its budget.
constexpr int kSubsampledGuesses = 3;
constexpr int64_t kLargeScanBytes = 524288;  // 512 KB

// The layout of a file whose entropy-coded data (from its scan's first byte to the file's end) is scan_bytes.
CUSTOM_OP_HD inline SlotLayout slot_layout(const Frame& f, int64_t scan_bytes) {
  if (f.blocks_in_mcu > f.num_components && scan_bytes < kLargeScanBytes) {
    const int k = f.blocks_in_mcu < kMaxSlots ? f.blocks_in_mcu : kMaxSlots;
    return SlotLayout{k, k < kSubsampledGuesses ? k : kSubsampledGuesses};
  }
  return SlotLayout{2, 1};
}

// Stage 1, slot h of chunk j: the chunk decoded from chunk_guess at MCU place h, for h below `guesses`; the
// other slots start free (cleared). Chunk 0 uses slot 0 only (its start is exact), and places past the MCU's
// blocks none.
CUSTOM_OP_HD inline uint32_t guess_slot(const ChunkedScan& s, const Frame& f, const SegmentTables& t, int64_t chunk,
                                        int h, int guesses, ChunkRecord* out, PartEnds* parts = nullptr) {
  if (out == nullptr) return kBadArguments;
  SyncPoint g = chunk_guess(s, chunk);
  if ((chunk == 0 && h > 0) || h < 0 || h >= guesses || h >= f.blocks_in_mcu || (h > 0 && g.bit == kScanEnd)) {
    clear_slot(out);
    return kSegmentOk;
  }
  g.block = h;
  return decode_chunk(s, f, t, chunk, g, out, parts);
}

// The distinct ends of the slots in use among slots[0 .. k - 1], in slot order, into ends; their count.
CUSTOM_OP_HD inline int slot_ends(const ChunkRecord* slots, int k, SyncPoint* ends) {
  int n = 0;
  for (int h = 0; h < k; ++h) {
    if (!slot_used(slots[h])) continue;
    bool seen = false;
    for (int i = 0; i < n; ++i) seen = seen || same_point(ends[i], slots[h].end);
    if (!seen) ends[n++] = slots[h].end;
  }
  return n;
}

// Which of slots[0 .. k - 1] in use starts at p, or -1.
CUSTOM_OP_HD inline int slot_starting_at(const ChunkRecord* slots, int k, SyncPoint p) {
  for (int h = 0; h < k; ++h)
    if (slot_used(slots[h]) && same_point(slots[h].start, p)) return h;
  return -1;
}

// sync_slot's slot h keeping its record (and, with `earlier`, its part ends) into the next round's buffers.
CUSTOM_OP_HD inline bool keep_slot(const ChunkRecord* current, int h, ChunkRecord* out, PartEnds* parts,
                                   const EarlierDecodes* earlier) {
  *out = current[h];
  if (parts != nullptr && earlier != nullptr && slot_used(current[h]))
    for (int m = 0; m < parts->count; ++m) parts->out[m] = earlier->part_ends[h * earlier->stride + m];
  return false;
}

// Stage 2 for slot h of chunk j >= 1 (k slots, 1 <= k <= kMaxSlots): `previous` and `current` are chunk j-1's
// and chunk j's slots in the last round; *out becomes slot h in the next. A slot whose record starts at one of
// previous's distinct ends keeps it; the ends no slot starts at go, in order, to the other slots (free ones
// first, then in slot order), which decode chunk j from there (with `parts`, slot h's part ends); the slots
// left over keep their records. Each slot's thread computes the same assignment, and a slot that keeps its record keeps
// its part ends. Returns whether slot h decoded. `out` must not be one of `current`. With `earlier` (current's slots
// and part ends, in another buffer than `parts` writes: earlier->slots is current), a slot that keeps its record copies
// its part ends into `parts`, and a slot that decodes stops where it meets one of current's decodes (EarlierDecodes).
CUSTOM_OP_HD inline bool sync_slot(const ChunkedScan& s, const Frame& f, const SegmentTables& t, int64_t chunk,
                                   const ChunkRecord* previous, const ChunkRecord* current, int k, int h,
                                   ChunkRecord* out, PartEnds* parts = nullptr,
                                   const EarlierDecodes* earlier = nullptr) {
  if (k < 1 || k > kMaxSlots || h < 0 || h >= k) {  // no slot h: nothing of current is read
    clear_slot(out);
    return false;
  }
  if (chunk < 1) return keep_slot(current, h, out, parts, earlier);  // chunk 0's slots are final from stage 1
  SyncPoint ends[kMaxSlots];
  const int n = slot_ends(previous, k, ends);
  bool kept[kMaxSlots];
  for (int g = 0; g < k; ++g) {
    kept[g] = false;
    for (int i = 0; i < n && !kept[g]; ++i) kept[g] = slot_used(current[g]) && same_point(current[g].start, ends[i]);
  }
  if (kept[h]) return keep_slot(current, h, out, parts, earlier);
  // The ends no slot keeps, in order, and slot h's rank among the slots that keep nothing: those not in use
  // first, so that a slot in use gives up its record only where no slot is free.
  int rank = 0;
  const bool free_h = !slot_used(current[h]);
  for (int g = 0; g < k; ++g) {
    if (kept[g] || g == h) continue;
    const bool free_g = !slot_used(current[g]);
    rank += (free_g && !free_h) || (free_g == free_h && g < h) ? 1 : 0;
  }
  for (int i = 0; i < n; ++i) {
    if (slot_starting_at(current, k, ends[i]) >= 0) continue;  // a kept slot's
    if (rank-- > 0) continue;
    if (parts != nullptr) parts->earlier = earlier;
    if (decode_chunk(s, f, t, chunk, ends[i], out, parts) != kSegmentOk) clear_slot(out);
    return true;
  }
  return keep_slot(current, h, out, parts, earlier);
}

// Stage 3's walk over slots, in chunk order through the chunks a decode through block `last_block` reads: chunk
// j's record is its slot that starts where chunk j-1's chosen record ends, or else (at most `budget` times, then
// false) chunk j decoded again from there into slot 0's part ends (slot_part_ends(j, h, storage) gives chunk j's
// slot h's, or null); with a budget below 0, slot 0's record as it is (no decode; chunk_starts_through then
// flags the chain). Fills chosen[0 .. num_chunks - 1] (chunks past the walk: their slot 0) and chosen_slot (whose
// part ends stage 4 reads), and *redone with the chunks decoded again. Then chunk_starts_through(s, f, chosen,
// ...) as for one slot. One thread's loop over the chunks: the GPU runs the same walk on a warp's lanes (below,
// lane_repair for its decodes), which the CPU harness checks against this one.
template <typename SlotPartEnds>
CUSTOM_OP_HD inline bool walk_slots(const ChunkedScan& s, const Frame& f, const SegmentTables& t,
                                    const ChunkRecord* records, int k, int64_t last_block, int64_t budget,
                                    SlotPartEnds slot_part_ends, ChunkRecord* chosen, int32_t* chosen_slot,
                                    int64_t* redone) {
  *redone = 0;
  for (int64_t j = 0; j < s.num_chunks; ++j) {
    chosen[j] = records[j * k];
    chosen_slot[j] = 0;
  }
  int64_t blocks = chosen[0].blocks;  // before chunk j
  for (int64_t j = 1; j < s.num_chunks && blocks <= last_block; ++j) {
    const int h = slot_starting_at(records + j * k, k, chosen[j - 1].end);
    if (h >= 0) {
      chosen[j] = records[j * k + h];
      chosen_slot[j] = h;
    } else if (budget >= 0) {
      if (++*redone > budget) return false;
      PartEnds ends{};
      PartEnds* parts = slot_part_ends(j, 0, &ends);
      if (decode_chunk(s, f, t, j, chosen[j - 1].end, &chosen[j], parts) != kSegmentOk) return false;
    }
    blocks += chosen[j].blocks;
  }
  return true;
}

// How many chunks through block last_block have no slot that starts where the chunk before's (as walk_slots
// chooses, slot 0 where none does) ends: walk_slots' decodes, nearly always, before it has decoded any.
CUSTOM_OP_HD inline int64_t slots_missing_through(const ChunkedScan& s, const ChunkRecord* records, int k,
                                                  int64_t last_block) {
  int64_t missing = 0;
  const ChunkRecord* before = &records[0];
  int64_t blocks = before->blocks;
  for (int64_t j = 1; j < s.num_chunks && blocks <= last_block; ++j) {
    const int h = slot_starting_at(records + j * k, k, before->end);
    missing += h < 0 ? 1 : 0;
    before = &records[j * k + (h < 0 ? 0 : h)];
    blocks += before->blocks;
  }
  return missing;
}

// How many chunks from chunk 1 on have records that do not start where the previous one ends, among those
// a decode through block `last_block` reads (by the records' block counts, which are true where the
// records are): zero where chunk_starts_through needs no chunk decoded again. A sweep in chunk order
// decodes again the first of them at least, and mostly each, so a caller with a budget of decodes can
// tell beforehand, nearly always, an image its sweep would not bring in step.
CUSTOM_OP_HD inline int64_t unsynced_chunks_through(const ChunkedScan& s, const ChunkRecord* records,
                                                    int64_t last_block) {
  int64_t count = 0;
  int64_t blocks = records[0].blocks;  // before chunk j
  for (int64_t j = 1; j < s.num_chunks && blocks <= last_block; ++j) {
    if (!same_point(records[j].start, records[j - 1].end)) ++count;
    blocks += records[j].blocks;
  }
  return count;
}

// The start of the chunk after one that starts at `start` and whose record is `r`.
CUSTOM_OP_HD inline ChunkStart chunk_start_after(const ChunkStart& start, const ChunkRecord& r) {
  ChunkStart next;
  next.bit = r.end.bit;
  next.block = start.block + r.blocks;
  for (int k = 0; k < kMaxComponents; ++k)
    next.pred[k] = r.restarted
                       ? r.dc[k]
                       : static_cast<int32_t>(static_cast<uint32_t>(start.pred[k]) + static_cast<uint32_t>(r.dc[k]));
  return next;
}

// The record of two stretches decoded one after the other (`a` ends where `b` starts). Associative, so
// that stage 3 may be a parallel scan: starts[j] is chunk_start_after(starts[0], the join of records 0
// to j - 1).
CUSTOM_OP_HD inline ChunkRecord join_records(const ChunkRecord& a, const ChunkRecord& b) {
  ChunkRecord r;
  r.start = a.start;
  r.end = b.end;
  r.blocks = a.blocks + b.blocks;
  for (int k = 0; k < kMaxComponents; ++k)
    r.dc[k] =
        b.restarted ? b.dc[k] : static_cast<int32_t>(static_cast<uint32_t>(a.dc[k]) + static_cast<uint32_t>(b.dc[k]));
  r.restarted = a.restarted | b.restarted;
  r.lenient = lenient_sum(a.lenient, b.lenient);
  return r;
}

// Whether a frame and last_block are what chunk_starts_through takes (else kBadArguments): a frame with
// blocks, and last_block inside its scan. The lanes' steps need the same.
CUSTOM_OP_HD inline bool starts_arguments_ok(const ChunkedScan& s, const Frame& f, int64_t last_block) {
  return f.blocks_in_mcu >= 1 && s.num_chunks >= 1 && last_block >= 0 &&
         last_block < frame_total_mcus(f) * f.blocks_in_mcu;
}

// Where the scan's first chunk starts: its first byte's first bit, block 0, the predictors 0.
CUSTOM_OP_HD inline ChunkStart scan_first_start(const ChunkedScan& s) {
  ChunkStart at;
  at.bit = 8 * s.scan_start;
  at.block = 0;
  for (int k = 0; k < kMaxComponents; ++k) at.pred[k] = 0;
  return at;
}

// Whether a strict decode of a chunk whose record on the chain is r may flag what the rounds' decode of it, from
// its true start, read without a flag: where the file has restart markers (whose order only a strict decode checks)
// or r read something leniently. Elsewhere the strict decode reads the same codes and flags nothing.
CUSTOM_OP_HD inline bool strict_read_may_flag(const ChunkedScan& s, const ChunkRecord& r) {
  return s.restart_interval != 0 || r.lenient != 0;
}

// Whether stage 4 decodes chunk j, which a decode of the MCU rows from block first_block on reads, whose record on
// the chain is r and which ends where `next` starts. Not where all its blocks lie before first_block, the file has
// no restart markers and r read nothing leniently (and no chunk before it did: strict_from): the rounds' decode of
// the chunk from its true start then read exactly what stage 4's would and would have flagged nothing (stage 4
// flags only bad codes, data that stops and markers there, which are lenient reads), and the chunk's blocks are
// no rows' the decode keeps. Why: a window's rows seldom start at the top, and the chunks above them would be
// decoded only to be checked, most of stage 4's work for a window low in a large photo.
CUSTOM_OP_HD inline bool strict_decode_needed(const ChunkedScan& s, const ChunkRecord& r, const ChunkStart& next,
                                              int64_t first_block) {
  return strict_read_may_flag(s, r) || next.block > first_block;
}

// Stage 3's step for chunk j, whose record is r and which starts at *at: starts[j] = *at; where a decode
// through block last_block reads the chunk, it counts in *needed and r must start there (else kUnsynced in
// *flags); where stage 4 decodes it (strict_decode_needed, from block first_block), *strict_from becomes j if it
// is more, and where a strict decode of it may flag something (strict_read_may_flag), so does *whole_from; *at
// moves to the next chunk's start.
CUSTOM_OP_HD inline void place_chunk_start(const ChunkedScan& s, const Frame& f, const ChunkRecord& r, int64_t j,
                                           int64_t last_block, int64_t first_block, ChunkStart* at, ChunkStart* starts,
                                           int64_t* needed, int64_t* strict_from, int64_t* whole_from,
                                           uint32_t* flags) {
  starts[j] = *at;
  if (at->block <= last_block && at->bit != kScanEnd) {
    *needed = j + 1;
    const SyncPoint expected = {at->bit, static_cast<int32_t>(at->block % f.blocks_in_mcu), 0};
    if (!same_point(r.start, expected)) *flags |= kUnsynced;
  }
  *at = chunk_start_after(*at, r);
  if (j < *strict_from && strict_decode_needed(s, r, *at, first_block)) *strict_from = j;
  if (j < *whole_from && strict_read_may_flag(s, r)) *whole_from = j;
}

// Stage 3's first chunk for stage 4 from the least chunk that strict_decode_needed (`least`) and `needed`: 0 where
// that is no chunk stage 4 reads (a decode that keeps no block, or a broken chain, which stage 3 flags anyway).
CUSTOM_OP_HD inline int64_t strict_from_result(int64_t least, int64_t needed) { return least < needed ? least : 0; }

// Stage 3's first chunk whose every part stage 4 decodes, from the least chunk strict_read_may_flag (`least`)
// and `needed`: none of those stage 4 reads (needed) where that is no chunk it reads.
CUSTOM_OP_HD inline int64_t whole_from_result(int64_t least, int64_t needed) { return least < needed ? least : needed; }

// Stage 3's last check: kUnsynced where the decode reads no chunk, or its chunks end before last_block's end.
CUSTOM_OP_HD inline uint32_t starts_end_flags(const ChunkStart* starts, int64_t needed, int64_t last_block) {
  return needed == 0 || starts[needed].block <= last_block ? static_cast<uint32_t>(kUnsynced)
                                                           : static_cast<uint32_t>(kSegmentOk);
}

// Stage 3 for a decode that needs the scan only through block `last_block` (by scan index: a window's
// last MCU row's last block): starts[0 .. num_chunks] from records[0 .. num_chunks - 1], and in *needed
// the chunks that decode reads: those that start at or before last_block; where strict_from is not null, the
// first of them stage 4 decodes for a decode that keeps the blocks from first_block on (strict_decode_needed;
// stage 4 then decodes chunks strict_from .. needed - 1), and where whole_from is not null, the first of them whose
// every part stage 4 decodes (part_decode_needed). Returns kUnsynced where one of
// those records does not start where the previous one ends (or chunk 0's where the scan starts), or they
// end before last_block's end; kBadArguments for a frame with no blocks or a last_block outside the
// scan. The starts of later chunks are whatever their records give. Stage 4 may still run: it checks
// each chunk.
CUSTOM_OP_HD inline uint32_t chunk_starts_through(const ChunkedScan& s, const Frame& f, const ChunkRecord* records,
                                                  int64_t last_block, ChunkStart* starts, int64_t* needed,
                                                  int64_t first_block = 0, int64_t* strict_from = nullptr,
                                                  int64_t* whole_from = nullptr) {
  if (records == nullptr || starts == nullptr || needed == nullptr || !starts_arguments_ok(s, f, last_block))
    return kBadArguments;
  uint32_t flags = kSegmentOk;
  ChunkStart at = scan_first_start(s);
  *needed = 0;
  int64_t least = INT64_MAX, least_whole = INT64_MAX;
  for (int64_t j = 0; j < s.num_chunks; ++j)
    place_chunk_start(s, f, records[j], j, last_block, first_block, &at, starts, needed, &least, &least_whole, &flags);
  starts[s.num_chunks] = at;
  if (strict_from != nullptr) *strict_from = strict_from_result(least, *needed);
  if (whole_from != nullptr) *whole_from = whole_from_result(least_whole, *needed);
  return flags | starts_end_flags(starts, *needed, last_block);
}

// Stage 3 for the whole scan: chunk_starts_through its last block, and the records must end at the
// scan's end (starts[num_chunks]) after that block.
CUSTOM_OP_HD inline uint32_t chunk_starts(const ChunkedScan& s, const Frame& f, const ChunkRecord* records,
                                          ChunkStart* starts) {
  int64_t needed = 0;
  const uint32_t flags =
      chunk_starts_through(s, f, records, frame_total_mcus(f) * f.blocks_in_mcu - 1, starts, &needed);
  if (flags == kBadArguments) return flags;
  const ChunkStart& end = starts[s.num_chunks];
  return end.bit != kScanEnd || end.block != frame_total_mcus(f) * f.blocks_in_mcu ? flags | kUnsynced : flags;
}

// Stage 4 in parts: the exact start of part k of chunk j (chunk m = j * parts + k of split_scan's `fine`),
// from starts[j] (chunk_starts) and the part ends that chunk j's decode recorded (chunk_part_ends). m may
// be fine.num_chunks (the end of the last part). Part m is decoded by decode_chunk_rect on `fine` from
// part_start(m) to part_start(m + 1). With slots, chosen_slot and num_chunks say whose part ends to read.
CUSTOM_OP_HD inline ChunkStart part_start(const ChunkStart* starts, const ChunkRecord* part_ends, int64_t parts,
                                          int64_t m, const int32_t* chosen_slot = nullptr, int64_t num_chunks = 0) {
  const int64_t j = m / parts, k = m % parts;
  if (k == 0) return starts[j];
  // With slots (walk_slots' chosen_slot), the chosen slot's part ends.
  const int64_t slot = chosen_slot != nullptr ? chosen_slot[j] : 0;
  return chunk_start_after(starts[j], part_ends[slot_part_ends_index(parts, num_chunks, j, slot) + k - 1]);
}

// Whether MCUs first_mcu .. last_mcu of the scan (scan order, first_mcu <= last_mcu) include one of the MCU rectangle
// of rows [first_row, first_row + num_rows) and columns [first_col, first_col + num_cols).
CUSTOM_OP_HD inline bool mcus_meet_rect(const Frame& f, int64_t first_mcu, int64_t last_mcu, int64_t first_row,
                                        int64_t num_rows, int64_t first_col, int64_t num_cols) {
  const int64_t w = f.mcus_per_row;
  int64_t row0 = first_mcu / w, col0 = first_mcu % w, row1 = last_mcu / w, col1 = last_mcu % w;
  if (row1 < first_row || row0 >= first_row + num_rows) return false;
  if (row0 < first_row) {
    row0 = first_row;
    col0 = 0;
  }
  if (row1 >= first_row + num_rows) {
    row1 = first_row + num_rows - 1;
    col1 = w - 1;
  }
  if (row0 == row1) return col0 < first_col + num_cols && col1 >= first_col;
  // Row row0 from col0 on, every column of the rows between, row row1 up to col1.
  return row1 - row0 >= 2 || col0 < first_col + num_cols || col1 >= first_col;
}

// Whether stage 4 decodes part [from, to) (blocks from.block .. to.block - 1, part_start's) of chunk j, one of
// chunk_starts_through's strict_from .. needed - 1. From whole_from on, every part. Before it no chunk's strict
// decode flags anything (strict_read_may_flag), so only a part that holds a block of the MCU rectangle (rows
// [first_row, first_row + num_rows), columns [first_col, first_col + num_cols)) is decoded, to store the rectangle's
// blocks, and the part that holds the scan's last block, whose end only a strict decode checks. Why: a window's
// blocks are a small part of its rows' in a large photo, and decoding the others only to check them was most of
// stage 4's work.
CUSTOM_OP_HD inline bool part_decode_needed(const Frame& f, int64_t chunk, int64_t whole_from, const ChunkStart& from,
                                            const ChunkStart& to, int64_t first_row, int64_t num_rows,
                                            int64_t first_col, int64_t num_cols) {
  if (chunk >= whole_from || to.bit == kScanEnd || from.block < 0 || from.block >= to.block ||
      to.block >= frame_total_mcus(f) * f.blocks_in_mcu)
    return true;
  return mcus_meet_rect(f, from.block / f.blocks_in_mcu, (to.block - 1) / f.blocks_in_mcu, first_row, num_rows,
                        first_col, num_cols);
}

// Stage 4's part m (of chunk m / parts, one of chunk_starts_through's strict_from .. needed - 1; chosen_slot and
// num_chunks as part_start takes them): its exact bounds into *from and *to (part_start), and whether stage 4
// decodes it (part_decode_needed). The GPU's stage 4 and the CPU harness both ask it.
CUSTOM_OP_HD inline bool stage4_part(const Frame& f, const ChunkStart* starts, const ChunkRecord* part_ends,
                                     int64_t parts, int64_t m, const int32_t* chosen_slot, int64_t num_chunks,
                                     int64_t whole_from, int64_t first_row, int64_t num_rows, int64_t first_col,
                                     int64_t num_cols, ChunkStart* from, ChunkStart* to) {
  *from = part_start(starts, part_ends, parts, m, chosen_slot, num_chunks);
  *to = part_start(starts, part_ends, parts, m + 1, chosen_slot, num_chunks);
  return part_decode_needed(f, m / parts, whole_from, *from, *to, first_row, num_rows, first_col, num_cols);
}

// ---- A window's first try ---------------------------------------------------------------------------
//
// A window needs the scan only through its last MCU row, and where that row's data ends is known only once the
// scan is decoded. So a window's decode in a large scan first takes only the scan's first window_scan_bytes: the
// share 1.25 f + 0.05 of its bytes, f the rows' share (the rows through the window's last of the frame's MCU
// rows), which no last row of the photos in bench/results/window_bytes.md needed more than, and a chunk, a block
// and kWindowCutSlack more. The stages run on those bytes as on a whole file. Every decode reads forward from its
// start, and at most kWindowCutSlack bytes past the block start it ends at (a reader's fill and look-ahead: fewer
// than 24 bytes; the fill bytes before a marker lie before the block that follows it), unless it ends at the
// scan's end (a marker that ends the scan, or the bytes' end: at the cut, that is where the cut bytes stop). So
// where the chain's end through the rows (starts[needed], or the point where the walk found it broken) is a block
// start that far before the cut, every read the decode's outcome rests on was of the same bytes as in the whole
// file, and so is the outcome, flags and coefficients. Elsewhere (window_cut_short) the caller decodes the window
// again with the whole file.
constexpr int64_t kWindowCutSlack = 64;
// More than a block's bytes: 63 AC codes of 16 bits and their 10 extra bits, and a DC code and its 11, every
// byte stuffed, are 420 bytes.
constexpr int64_t kMaxBlockBytes = 448;

// The scan bytes a window's first try takes, for a scan of scan_bytes in chunks of chunk_bytes whose window
// reads rows_through of its mcu_rows MCU rows: scan_bytes where that is no fewer.
CUSTOM_OP_HD inline int64_t window_scan_bytes(int64_t scan_bytes, int64_t rows_through, int64_t mcu_rows,
                                              int64_t chunk_bytes) {
  if (scan_bytes <= 0 || mcu_rows <= 0 || rows_through >= mcu_rows) return scan_bytes;
  const double share = 1.25 * static_cast<double>(rows_through) / static_cast<double>(mcu_rows) + 0.05;
  if (share >= 1.0) return scan_bytes;
  const int64_t bytes =
      static_cast<int64_t>(share * static_cast<double>(scan_bytes)) + chunk_bytes + kMaxBlockBytes + kWindowCutSlack;
  return bytes < scan_bytes ? bytes : scan_bytes;
}

// Whether a first try on a scan cut to `s` (its size) may have read differently from a decode of the whole file,
// where the chain through the window's rows ends at bit end_bit (or kScanEnd): see above.
CUSTOM_OP_HD inline bool window_cut_short(const ChunkedScan& s, int64_t end_bit) {
  return end_bit == kScanEnd || end_bit / 8 + kWindowCutSlack > s.size;
}

// ---- Stage 3 on lanes --------------------------------------------------------------------------------
//
// walk_slots and chunk_starts_through are one thread's loops over every chunk, each step waiting on the one
// before: on a GPU that one thread's time grows with the file and holds up its launch. Where the walk needs
// no chunk decoded again (every chunk it reaches has a slot on the chain: nearly always after the rounds),
// both are scans that `lanes` threads can share, since following the chain through a range of chunks is a
// map from the slot it enters at to the slot it leaves at, and join_records joins a range's records. Each
// lane takes a range of chunks (lane_chunks) and runs the steps below in turn; between two steps the lanes
// exchange their LaneChain (shared memory and a barrier on a GPU, a loop over the lanes on the CPU), and a
// step reads only the LaneChain of the lanes before its own. Where lanes_walk_end says the walk would need a
// decode, one lane decodes that chunk again (lane_repair) and the lanes run steps 1 to 3 again, as many times as
// walk_slots' budget allows. The lanes then give what walk_slots with that budget and chunk_starts_through give:
// chosen_slot for every chunk (walk_slots' choice, slot 0 for a chunk decoded again and past the walk), the
// chosen records (a chunk decoded again: its slot 0, which walk_slots writes into its own array), the starts,
// *needed and the flags of chunk_starts_through over them.

// Lane `lane`'s chunks, [begin, end), of n among `lanes` lanes (empty where n < lanes).
struct LaneRange {
  int64_t begin, end;
};

CUSTOM_OP_HD inline LaneRange lane_chunks(int64_t n, int lane, int lanes) {
  return {n * lane / lanes, n * (lane + 1) / lanes};
}

// A chain through a range of chunks: for each slot it enters at, the slot it leaves at, or -1 where some
// chunk of the range has no slot starting where the chain reaches it.
struct SlotMap {
  int8_t to[kMaxSlots];
};

// The slot of chunk j >= 1 that starts where slot `from` of chunk j - 1 ends (walk_slots' step), or -1.
CUSTOM_OP_HD inline int chain_link(const ChunkRecord* records, int k, int64_t j, int from) {
  return from < 0 ? -1 : slot_starting_at(records + j * k, k, records[(j - 1) * k + from].end);
}

// What the lanes exchange. Each step fills its fields of its own lane's.
struct LaneChain {
  int64_t chunks;       // lane_chain_map: the range's chunks
  SlotMap map;          // lane_chain_map
  int64_t blocks;       // lane_chain_walk: the blocks of the chain's records in the range, up to `broken`
  int64_t broken;       // lane_chain_walk: the range's first chunk off the chain, INT64_MAX where none is
  int64_t stop;         // lane_walk_stop: the range's chunk where walk_slots stops, INT64_MAX where none
  ChunkRecord joined;   // lane_chain_join: the chosen records of the range joined
  int64_t needed;       // lane_starts: the most chunks a decode reads, as far as the range tells
  int64_t strict_from;  // lane_starts: the range's first chunk strict_decode_needed, INT64_MAX where none
  int64_t whole_from;   // lane_starts: the range's first chunk strict_read_may_flag, INT64_MAX where none
  uint32_t flags;       // lane_starts: chunk_starts_through's flags from the range's chunks
};

// Step 1: the chain's map through the lane's chunks. The range that holds chunk 0 enters at chunk 0's slot 0.
CUSTOM_OP_HD inline void lane_chain_map(const ChunkRecord* records, int k, LaneRange r, LaneChain* out) {
  out->chunks = r.end - r.begin;
  for (int g = 0; g < kMaxSlots; ++g) out->map.to[g] = static_cast<int8_t>(g < k ? g : -1);
  for (int64_t j = r.begin < 1 ? 1 : r.begin; j < r.end; ++j)
    for (int g = 0; g < k; ++g) out->map.to[g] = static_cast<int8_t>(chain_link(records, k, j, out->map.to[g]));
}

// The slot of the chunk before lane `lane`'s range that the chain from chunk 0's slot 0 reaches (slot 0 for
// the lane that starts at chunk 0), from the maps of the lanes before it; -1 where it breaks before.
CUSTOM_OP_HD inline int lane_entry_slot(const LaneChain* lanes, int lane) {
  int slot = 0;
  for (int q = 0; q < lane && slot >= 0; ++q) slot = lanes[q].map.to[slot];
  return slot;
}

// Step 2: the chain's slot of each of the lane's chunks into chosen_slot (from `broken` on, whatever it is),
// and the blocks of their records.
CUSTOM_OP_HD inline void lane_chain_walk(const ChunkRecord* records, int k, LaneRange r, const LaneChain* lanes,
                                         int lane, int32_t* chosen_slot, LaneChain* out) {
  int slot = lane_entry_slot(lanes, lane);
  out->blocks = 0;
  out->broken = INT64_MAX;
  for (int64_t j = r.begin; j < r.end; ++j) {
    if (j > 0) slot = chain_link(records, k, j, slot);
    if (slot < 0) {
      out->broken = j;
      return;
    }
    chosen_slot[j] = slot;
    out->blocks += records[j * k + slot].blocks;
  }
}

// Step 3: the chunk of the lane's range where walk_slots stops, as through block last_block: the first
// chunk j >= 1 that more than last_block + 1 blocks precede.
CUSTOM_OP_HD inline void lane_walk_stop(const ChunkRecord* records, int k, LaneRange r, const LaneChain* lanes,
                                        int lane, const int32_t* chosen_slot, int64_t last_block, LaneChain* out) {
  int64_t blocks = 0;  // before chunk j
  for (int q = 0; q < lane; ++q) blocks += lanes[q].blocks;
  out->stop = INT64_MAX;
  for (int64_t j = r.begin; j < r.end; ++j) {
    if (j >= 1 && blocks > last_block) {
      out->stop = j;
      return;
    }
    if (j >= out->broken) return;
    blocks += records[j * k + chosen_slot[j]].blocks;
  }
}

// After step 3: the first chunk off the chain among the lanes' (`broken`), INT64_MAX where none is. Where
// lanes_walk_end says the walk reaches it, walk_slots decodes it again there.
CUSTOM_OP_HD inline int64_t lanes_first_broken(const LaneChain* lanes, int count) {
  int64_t broken = INT64_MAX;
  for (int q = 0; q < count; ++q) broken = lanes[q].broken < broken ? lanes[q].broken : broken;
  return broken;
}

// After step 3, the same for every lane: whether the lanes may go on (the walk stops before any chunk off
// the chain), and in *end the chunk where it stops (n: it walks them all).
CUSTOM_OP_HD inline bool lanes_walk_end(const LaneChain* lanes, int count, int64_t n, int64_t* end) {
  int64_t stop = INT64_MAX;
  for (int q = 0; q < count; ++q) stop = lanes[q].stop < stop ? lanes[q].stop : stop;
  const int64_t broken = lanes_first_broken(lanes, count);
  *end = stop < n ? stop : n;
  return broken == INT64_MAX || stop <= broken;
}

// The repair of a chain the walk finds broken at chunk `broken` (lanes_first_broken), by one lane: the chunk
// decoded again from where the chain reaches it, as walk_slots decodes it, into its slot 0 (the record, and the
// part ends slot_part_ends(broken, 0, storage) gives). None of the chunk's slots was on the chain, so slot 0 may
// take the decode, which then continues it. The lanes then run steps 1 to 3 again; only the maps of the lanes
// whose range holds the chunk or the one after it change (lane_map_stale). A chain breaks at a few chunks at most
// after the rounds (bench/results/chunk_sync_rounds.md), and the lanes keep sharing the rest of the walk, which
// one thread's walk_slots would take in turn over every chunk. The decode stops where it meets one of the chunk's
// slots at a part end, as a round's does (EarlierDecodes; the warp's other lanes wait for a repair): its part ends go
// to `scratch` (room for `scratch_size`) and its record to a local until it ends, then replace slot 0's, whose own
// decode it may have met. With less room than the chunk's part ends, it decodes the whole chunk. The records and part
// ends are then what walk_slots' decode from the same start gives. *decoded (where not null) gets the blocks the
// repair decoded itself: to the meeting, or all of the record's. Returns decode_chunk's result.
template <typename SlotPartEnds>
CUSTOM_OP_HD inline uint32_t lane_repair(const ChunkedScan& s, const Frame& f, const SegmentTables& t,
                                         ChunkRecord* records, int k, int64_t broken, const int32_t* chosen_slot,
                                         SlotPartEnds slot_part_ends, ChunkRecord* scratch, int scratch_size,
                                         int64_t* decoded = nullptr) {
  if (broken < 1 || broken >= s.num_chunks || k < 1 || k > kMaxSlots) return kBadArguments;
  PartEnds storage{};
  PartEnds* parts = slot_part_ends(broken, 0, &storage);
  const SyncPoint from = records[(broken - 1) * k + chosen_slot[broken - 1]].end;
  if (parts == nullptr || parts->count < 1 || parts->count > scratch_size || scratch == nullptr) {
    const uint32_t whole = decode_chunk(s, f, t, broken, from, &records[broken * k], parts);
    if (decoded != nullptr) *decoded = records[broken * k].blocks;
    return whole;
  }
  // The chunk's slots and their part ends, slot_part_ends_index's layout (parts->count + 1 parts a chunk) apart.
  const EarlierDecodes earlier{records + broken * k, parts->out,
                               slot_part_ends_index(parts->count + 1, s.num_chunks, 0, 1), k};
  PartEnds mine = *parts;
  mine.out = scratch;
  mine.done = 0;
  mine.earlier = &earlier;
  ChunkRecord repaired;
  const uint32_t result = decode_chunk(s, f, t, broken, from, &repaired, &mine);
  if (result != kSegmentOk) return result;
  if (decoded != nullptr) *decoded = mine.met_slot >= 0 ? scratch[mine.met_at].blocks : repaired.blocks;
  for (int m = 0; m < parts->count; ++m) parts->out[m] = scratch[m];
  records[broken * k] = repaired;
  return result;
}

// Whether a lane's map (step 1) changes where lane_repair decoded chunk `repaired` again: its range holds that
// chunk, or the one after it, whose links start from the chunk's ends.
CUSTOM_OP_HD inline bool lane_map_stale(LaneRange r, int64_t repaired) {
  return r.begin <= repaired + 1 && repaired < r.end;
}

// Step 4: the chosen slots of the lane's chunks from chunk `end` on become 0 (as walk_slots leaves the chunks
// past its walk), and the chosen records of the range joined.
CUSTOM_OP_HD inline void lane_chain_join(const ChunkRecord* records, int k, LaneRange r, int64_t end,
                                         int32_t* chosen_slot, LaneChain* out) {
  for (int64_t j = r.begin; j < r.end; ++j) {
    if (j >= end) chosen_slot[j] = 0;
    const ChunkRecord& c = records[j * k + chosen_slot[j]];
    out->joined = j == r.begin ? c : join_records(out->joined, c);
  }
}

// Step 5: chunk_starts_through's starts of the lane's chunks (and starts[n] by the lane that holds the last
// chunk), with its needed, strict_from (from first_block) and flags as far as the range tells.
CUSTOM_OP_HD inline void lane_starts(const ChunkedScan& s, const Frame& f, const ChunkRecord* records, int k,
                                     LaneRange r, const LaneChain* lanes, int lane, const int32_t* chosen_slot,
                                     int64_t last_block, int64_t first_block, ChunkStart* starts, LaneChain* out) {
  ChunkStart at = scan_first_start(s);
  for (int q = 0; q < lane; ++q)
    if (lanes[q].chunks > 0) at = chunk_start_after(at, lanes[q].joined);
  out->needed = 0;
  out->strict_from = out->whole_from = INT64_MAX;
  out->flags = kSegmentOk;
  for (int64_t j = r.begin; j < r.end; ++j)
    place_chunk_start(s, f, records[j * k + chosen_slot[j]], j, last_block, first_block, &at, starts, &out->needed,
                      &out->strict_from, &out->whole_from, &out->flags);
  if (r.end == s.num_chunks && r.begin < r.end) starts[s.num_chunks] = at;
}

// After step 5, by one lane: chunk_starts_through's *needed, *strict_from, *whole_from and flags.
CUSTOM_OP_HD inline uint32_t lanes_starts_result(const LaneChain* lanes, int count, const ChunkStart* starts,
                                                 int64_t last_block, int64_t* needed, int64_t* strict_from,
                                                 int64_t* whole_from) {
  uint32_t flags = kSegmentOk;
  *needed = 0;
  int64_t least = INT64_MAX, least_whole = INT64_MAX;
  for (int q = 0; q < count; ++q) {
    flags |= lanes[q].flags;
    *needed = lanes[q].needed > *needed ? lanes[q].needed : *needed;
    least = lanes[q].strict_from < least ? lanes[q].strict_from : least;
    least_whole = lanes[q].whole_from < least_whole ? lanes[q].whole_from : least_whole;
  }
  *strict_from = strict_from_result(least, *needed);
  *whole_from = whole_from_result(least_whole, *needed);
  return flags | starts_end_flags(starts, *needed, last_block);
}

// Stage 4: the blocks of chunk j decoded from `start` (starts[j]), those of the MCU rectangle of rows
// [first_row, first_row + num_rows) and columns [first_col, first_col + num_cols) stored into `planes` (each
// holding num_rows * mcu_blocks_v[c] * blocks_per_row[c] blocks, whole rows, in decode_segment_rows' layout:
// natural order, or zigzag where t.order is null; the rows' blocks outside the columns are not written),
// checked to end at `next` (starts[j + 1]). Returns SegmentFlags | ChunkFlags (see the header): 0 from
// every chunk stage 4 decodes (chunk_starts_through's strict_from .. needed - 1) means the planes hold the
// exact coefficients of the rectangle's blocks that lie in those chunks (chunks write disjoint blocks).
CUSTOM_OP_HD inline uint32_t decode_chunk_rect(const ChunkedScan& s, const Frame& f, const SegmentTables& t,
                                               int64_t chunk, const ChunkStart& start, const ChunkStart& next,
                                               int16_t* const* planes, int64_t first_row, int64_t num_rows,
                                               int64_t first_col, int64_t num_cols) {
  if (planes == nullptr || !chunk_arguments_ok(s, chunk, f, t, planes)) return kBadArguments;
  if (first_row < 0 || num_rows < 1 || first_row > f.mcu_rows - num_rows) return kBadArguments;
  if (first_col < 0 || num_cols < 1 || first_col > f.mcus_per_row - num_cols) return kBadArguments;
  if (start.block < 0 || start.block > frame_total_mcus(f) * f.blocks_in_mcu) return kUnsynced;
  ChunkCursor c;
  const SyncPoint point = {start.bit, start.bit == kScanEnd ? 0 : static_cast<int32_t>(start.block % f.blocks_in_mcu),
                           0};
  if (!cursor_start(s, f, point, &c)) return kUnsynced;
  ChunkTally tally = {start.block, {0, 0, 0, 0}, 0, 0};
  for (int k = 0; k < kMaxComponents; ++k) tally.dc[k] = start.pred[k];
  const StoredRect out = {planes, first_row, num_rows, first_col, num_cols};
  const uint32_t flags = run_chunk_strict(s, f, t, chunk_limit(s, chunk), &c, &tally, &out);
  if (flags != kSegmentOk) return flags;
  const SyncPoint end = cursor_point(s, c);
  if (end.bit != next.bit || tally.blocks != next.block) return kUnsynced;
  if (end.bit != kScanEnd) {
    for (int k = 0; k < kMaxComponents; ++k)
      if (tally.dc[k] != next.pred[k]) return kUnsynced;
  }
  return kSegmentOk;
}

// The same, storing every block: each plane holds plane_coefficients(f, c) values.
CUSTOM_OP_HD inline uint32_t decode_chunk_blocks(const ChunkedScan& s, const Frame& f, const SegmentTables& t,
                                                 int64_t chunk, const ChunkStart& start, const ChunkStart& next,
                                                 int16_t* const* planes) {
  return decode_chunk_rect(s, f, t, chunk, start, next, planes, 0, f.mcu_rows, 0, f.mcus_per_row);
}

}  // namespace jpeg_core
}  // namespace custom_op
