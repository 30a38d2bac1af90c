// Our own CUDA decoder for files with restart markers at short intervals: the descriptors the host
// writes and the kernels that read them (segment_decoder.cu), in plain CUDA with no torch headers.
//
// A restart marker resets the DC predictors and byte-aligns the data, so each restart segment can be
// Huffman-decoded by its own GPU thread. A batch (or each part of one, segment_executor.cpp) runs as
// a fixed number of launches, whatever its size:
//   1. find_segments: one thread block per image finds the restart markers of its entropy-coded
//      data through the last segment decoded and records each segment's byte range, checking that
//      the markers are exactly those of a valid file (RST0..7 in turn, EOI last) as
//      jpeg_core/segments.h's walk does on the host;
//   2. decode_segments: one thread per segment the window needs (listed as runs of consecutive
//      segments, decode_runs.h) Huffman-decodes it into coefficient blocks in zigzag order
//      (jpeg_core/huffman.h), which idct_blocks reorders. Neighbouring
//      threads take neighbouring segments of one image, so that the threads of a warp look codes up
//      in the same tables, which then stay in the L1 cache: faster than dealing the longest segments
//      out to warps of their own, although a launch lasts as long as its slowest thread;
//   3. idct_blocks: one thread per block of the decoded rectangle: dequantisation and libjpeg's islow
//      IDCT (jpeg_core/idct_islow.h), or at a reduced DCT scale the IDCT of the size libjpeg gives the
//      component (jpeg_core/scaling.h, idct_reduced.h), idct_size x idct_size samples a block;
//   4. write_windows: one thread per four pixels of an output row: fancy upsampling at the image's scale
//      and colour conversion (jpeg_core/upsample.h, color.h), EXIF orientation, straight into the output
//      tensor.
// Files without restart markers, or with segments too long for a thread each, are decoded in chunks
// instead of step 2 (jpeg_core/sync_decode.h: self-synchronising Huffman decoding): find_segments
// only builds their tables; then, one thread per slot of a chunk (jpeg_core's slot_layout: in a
// subsampled file of few chunks a guess at each of the MCU's first places, else one), each chunk
// decoded from a guessed start (decode_chunks), three rounds that decode again the slots whose start
// their neighbour's ends contradict, and, a warp per image, the walk over the slots in chunk order
// (a chunk off the chain decoded again, within a budget) and the chunks' exact starts through the
// rectangle's last MCU row; then, one thread per part of a chunk,
// each part the rectangle needs decoded strictly from its exact start into the rectangle's
// coefficients (in zigzag order, as step 2's), but for the parts without blocks of the rectangle in
// chunks the rounds read without a lenient read (jpeg_core's strict_decode_needed, part_decode_needed).
// A window's first try in a large scan has only the scan's first bytes (window_cut): where the walk's
// chain through the rectangle ends too near their end (jpeg_core's window_cut_short), stage 3 sets
// kWindowCut, and the host decodes the window again with the whole file.
// Every image has a status word. Anything that libjpeg-turbo would warn about or decode differently
// (a damaged segment, a misplaced marker, a block where its SIMD IDCT could differ from the C code)
// sets a bit in it, and the host sends that item to the CPU path, which gives libjpeg's own outcome.
// The arithmetic is jpeg_core's __host__ __device__ code, which CI tests against libjpeg-turbo on the
// CPU (tests/test_jpeg_core.py).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "cuda/decode_runs.h"
#include "jpeg_core/scaling.h"
#include "jpeg_core/sync_decode.h"
#include "jpeg_core/tables.h"

namespace custom_op {
namespace gpu {

// Bits of an image's status word.
enum SegmentDecodeStatus : uint32_t {
  kSegmentDecodeOk = 0,
  kMarkersWrong = 1u << 8,    // a restart marker missing, extra or misnumbered, or no EOI after the last
  kSegmentDamaged = 1u << 9,  // with the jpeg_core::SegmentFlags (or ChunkFlags) in the low bits
  kBlockInexact = 1u << 10,   // libjpeg's SIMD and C IDCTs could differ on a block
  kTableRefused = 1u << 11,   // a Huffman table libjpeg refuses (JERR_BAD_HUFF_TABLE)
  // A window's first try (window_cut) may have read past the bytes it took: decode it again with the whole file.
  kWindowCut = 1u << 12,
};

// At most two Huffman tables (DC and AC) for each component.
constexpr int kMaxImageTables = 2 * jpeg_core::kMaxComponents;
// The chunked decode's stages 1 and 2 name an MCU's tables by 16-bit offsets from the lowest of them
// (jpeg_core::mcu_tables_packable): one image's tables, one array (SegmentImage::tables), always fit.
static_assert(kMaxImageTables * sizeof(jpeg_core::HuffTable) <= 0x10000u, "an image's tables span 64 KB or more");

// One image to decode (a batch item, or the decode that several windows of one file share).
struct SegmentImage {
  jpeg_core::Frame frame;
  // The decode's DCT scale (scaling.scale eighths) and what it makes of each component: its IDCT size,
  // real samples and upsampling.
  jpeg_core::Scaling scaling;
  // Per frame component: its Huffman tables (entries of `tables`, shared by components whose
  // definitions are one) and its quantisation table.
  const jpeg_core::HuffTable* dc[jpeg_core::kMaxComponents];
  const jpeg_core::HuffTable* ac[jpeg_core::kMaxComponents];
  jpeg_core::QuantTable quant[jpeg_core::kMaxComponents];
  // The image's distinct Huffman tables, which find_segments builds from their DHT definitions in
  // the file's bytes: table t's 16 counts start at data + table_at[t], and table_symbols[t] symbol
  // bytes follow them. Built on the GPU because photos carry tables of their own (prepare_jpeg
  // writes optimised ones): a host cache seldom hits, and building on the host cost microseconds a
  // table.
  jpeg_core::HuffTable* tables;
  int32_t num_tables;
  int32_t table_at[kMaxImageTables];
  int32_t table_symbols[kMaxImageTables];
  uint8_t table_is_dc[kMaxImageTables];
  const uint8_t* data;  // the file's bytes on the device: its first `size` bytes (see checked_segments)
  int64_t size;
  int64_t scan_start;  // where the first scan's entropy-coded data starts
  int64_t num_segments;
  // The segments whose markers find_segments finds and checks: every one through the last that is
  // decoded. The bytes uploaded end at or past the marker that ends the last of them (a file's
  // segment index, common/segment_index.h, says where), and the markers after them are not the
  // decode's business: the CPU path does not read them either.
  int64_t checked_segments;
  int64_t mcus_per_segment;  // the restart interval
  int64_t* segment_begin;    // num_segments offsets each, filled by find_segments
  int64_t* segment_end;
  // The rectangle of MCUs decoded: rows [mcu_row0, mcu_row0 + mcu_rows), columns
  // [mcu_col0, mcu_col0 + mcu_cols). Coefficients are kept in planes of its whole rows
  // (the chunked decode writes only the rectangle's blocks in them; the segment decode all of its segments').
  int32_t mcu_row0, mcu_rows, mcu_col0, mcu_cols;
  int16_t* coefficients[jpeg_core::kMaxComponents];  // mcu_rows * mcu_blocks_v * blocks_per_row blocks
  // Samples of the rectangle's blocks, scaling.idct_size[c] x scaling.idct_size[c] a block: rows from
  // the rectangle's first block row, pitch in bytes.
  uint8_t* samples[jpeg_core::kMaxComponents];
  int32_t sample_pitch[jpeg_core::kMaxComponents];
  int32_t idct_components;  // the components the output needs: 1 for grey output, else all
  int32_t blocks;           // blocks of those components in the rectangle (idct_blocks' work)
  uint32_t* status;         // SegmentDecodeStatus bits, zeroed by find_segments
  // A file decoded in chunks (chunked != 0; num_segments and checked_segments are then 0): its scan in
  // num_chunks chunks of chunk_bytes, which stage 4 decodes in chunk_parts parts each (1 to
  // kMaxChunkParts, dividing chunk_bytes), each chunk with chunk_slots records; records[0] and [1], and the
  // slots' part_ends[0] and [1], which the rounds fill in turn, as their fields say; starts: num_chunks + 1; *needed:
  // the chunks through the rectangle's last block (last_block, by scan index), written with the starts, and
  // *strict_from the first of them stage 4 decodes (jpeg_core's strict_decode_needed from the rectangle's first row),
  // *whole_from the first whose every part it decodes (before it, only the parts part_decode_needed names).
  int32_t chunked;
  // 1: `size` ends the file's bytes early, at jpeg_core's window_scan_bytes (a window's first try): stage 3 sets
  // kWindowCut where window_cut_short says the decode may rest on bytes past them.
  int32_t window_cut;
  int32_t chunk_parts;
  int32_t chunk_slots;    // records a chunk (jpeg_core's slot_layout), 1 to kMaxSlots
  int32_t chunk_guesses;  // of them stage 1 guesses (slot_layout), 1 to chunk_slots
  int64_t chunk_bytes, num_chunks, last_block;
  jpeg_core::ChunkRecord* records[2];    // num_chunks * chunk_slots each, chunk by chunk
  jpeg_core::ChunkRecord* part_ends[2];  // chunk_slots * num_chunks * (chunk_parts - 1) each, slot by slot
  int32_t* chosen_slot;                  // num_chunks: the slot stage 3 chose for each chunk
  jpeg_core::ChunkStart* starts;
  int64_t* needed;
  int64_t* strict_from;
  int64_t* whole_from;
};

// Stage 4's parts a chunk at most (the write launch's threads per chunk).
constexpr int kMaxChunkParts = 4;

// One output window, written by write_windows.
struct WindowWrite {
  int32_t image;
  int32_t region_top, region_left, region_height, region_width;  // stored-frame pixels at the image's scale
  uint8_t* dst;                                                  // [channels, H, W]; swapped for 5..8
  int32_t channels;                                              // 1 or 3
  int32_t orientation;                                           // EXIF 1..8
  int32_t color;  // kWindowGray (Y), kWindowRgb (YCbCr -> RGB), kWindowGrayToRgb
};

enum WindowColor : int32_t { kWindowGray = 0, kWindowRgb = 1, kWindowGrayToRgb = 2 };

// Each launch returns its error code. Counts are those of the arrays (device memory); max_* bound the
// work of one element, which sizes the grids.
cudaError_t launch_find_segments(SegmentImage* images, int count, cudaStream_t stream);
// `runs`: the segments to decode, in task order (decode_runs.h), those of one image after another, in
// the order they are decoded (see decode_segments above); `tasks`: their segments in all.
cudaError_t launch_decode_segments(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks,
                                   cudaStream_t stream);
// The chunked decode of the images that have `chunked` set, in all six launches: `runs` list each such
// image's chunks (every chunk, first 0) among the other images' runs of segments, as decode_segments'
// do; `count`: the images; `slots`: the most chunk_slots among them (stages 1 and 2 run a thread a slot);
// `slot_work`: the slots that have a decode in stage 1, each such image's chunks times its guesses
// (jpeg_core's slot_layout), summed (it sets how many slots a warp takes).
cudaError_t launch_decode_chunks(const SegmentImage* images, int count, const DecodeRun* runs, int run_count, int tasks,
                                 int slots, int64_t slot_work, cudaStream_t stream);
cudaError_t launch_idct_blocks(const SegmentImage* images, int count, int max_blocks, cudaStream_t stream);
cudaError_t launch_write_windows(const SegmentImage* images, const WindowWrite* windows, int count, int64_t max_pixels,
                                 cudaStream_t stream);

}  // namespace gpu
}  // namespace custom_op
