#include "cuda/segment_decoder.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "cuda/orientation.h"
#include "jpeg_core/jpeg_core.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

constexpr int kScanThreads = 512;
constexpr int kScanBytes = 32;
constexpr int kThreads = 128;
// The thread blocks of stages 1 and 2 that an SM must hold at once (__launch_bounds__), which caps their threads
// at 64 registers (a few spill to the L1 cache): a thread decodes its chunk's codes one after the other, each
// waiting on the last, and an SM with more warps to switch between hides more of that wait. Not stage 4, whose
// stores of coefficients ran slower so capped (CHANGELOG.md has the measurements).
constexpr int kChunkBlocksPerSM = 8;
constexpr int kMaxBlocksPerImage = 1024;
constexpr int kMaxImagesPerLaunch = 65535;  // gridDim.y

// ---- 1. restart markers -----------------------------------------------------------------------

// The block's exclusive prefix sum of `value`, and the block's total.
__device__ __forceinline__ int block_exclusive_sum(int value, int* total) {
  __shared__ int warp_sums[kScanThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = value;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < kScanThreads / 32; ++w) {
    const int s = warp_sums[w];
    before += w < warp ? s : 0;
    all += s;
  }
  __syncthreads();  // warp_sums is reused by the next call
  *total = all;
  return before + inclusive - value;
}

// Which of the 32 bytes at `p` (a multiple of 16, as every file's place in the device buffer is) start
// a marker: an FF whose next byte is neither 00 (stuffing) nor FF (fill), bit i for byte p + i. Only
// bytes in [from, size) count, and a marker's second byte must lie before `size` too. Loads: two of
// 16 bytes and one byte where the 33 bytes lie inside the file, else one byte at a time.
__device__ __forceinline__ uint32_t markers_at(const uint8_t* d, int64_t p, int64_t from, int64_t size) {
  uint32_t w[9];  // bytes p .. p + 35, little-endian words; only byte 32 of the last word is used
  if (p + 33 <= size && (reinterpret_cast<uintptr_t>(d) & 15) == 0) {
    const uint4 lo = *reinterpret_cast<const uint4*>(d + p);
    const uint4 hi = *reinterpret_cast<const uint4*>(d + p + 16);
    w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w;
    w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
    w[8] = d[p + 32];
  } else {
    for (int i = 0; i < 9; ++i) w[i] = 0;
    for (int i = 0; i < 33; ++i)
      if (p + i < size) w[i >> 2] |= static_cast<uint32_t>(d[p + i]) << (8 * (i & 3));
  }
  // Per byte: FF, and 00 (bytes past `size` read as 00, so an FF there starts no marker).
  uint64_t ff = 0, zero = 0;
#pragma unroll
  for (int i = 0; i < 9; ++i) {
    const uint32_t is_ff = __vcmpeq4(w[i], 0xFFFFFFFFu), is_zero = __vcmpeq4(w[i], 0u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ff |= static_cast<uint64_t>((is_ff >> (8 * j)) & 1u) << (4 * i + j);
      zero |= static_cast<uint64_t>((is_zero >> (8 * j)) & 1u) << (4 * i + j);
    }
  }
  uint32_t marks = static_cast<uint32_t>(ff & ~(ff >> 1) & ~(zero >> 1));
  if (p < from) marks &= from - p >= 32 ? 0u : ~0u << (from - p);
  return marks;
}

// The image's Huffman tables, from their definitions in its bytes, built in shared memory and then
// copied out: the definitions copied in by the whole thread block, each table's codes by a thread of
// its own, the lookup entries and then the AC tables' step entries by the whole block. (In global memory, the builder's
// thread waited for each symbol it read and the entries for each field they read.) A table libjpeg refuses sets
// kTableRefused (the item goes to the CPU path, which reports it).
__device__ void build_tables(const SegmentImage& im, uint32_t* bad) {
  constexpr int kDefinitionBytes = 16 + 256;  // counts, then at most 256 symbols
  __shared__ uint8_t definitions[kMaxImageTables][kDefinitionBytes];
  __shared__ alignas(16) jc::HuffTable built[kMaxImageTables];
  __shared__ int refused;
  static_assert(sizeof(jc::HuffTable) % sizeof(uint4) == 0, "tables are copied out 16 bytes at a time");
  const int tables = min(im.num_tables, kMaxImageTables);
  if (threadIdx.x == 0) refused = 0;
  for (int i = threadIdx.x; i < tables * kDefinitionBytes; i += blockDim.x) {
    const int t = i / kDefinitionBytes, j = i % kDefinitionBytes;
    if (j < 16 + min(im.table_symbols[t], 256)) definitions[t][j] = im.data[im.table_at[t] + j];
  }
  __syncthreads();
  if (threadIdx.x < tables) {
    const int t = threadIdx.x;
    const uint8_t* counts = definitions[t];
    if (!jc::build_huffman_codes(counts, counts + 16, min(im.table_symbols[t], 256), im.table_is_dc[t] != 0, &built[t]))
      atomicOr(&refused, 1);
  }
  __syncthreads();
  if (refused != 0) {
    *bad |= kTableRefused;
    return;
  }
  constexpr int kEntries = 1 << jc::kHuffLookBits, kSteps = 2 << jc::kPairBits;
  for (int i = threadIdx.x; i < tables * kEntries; i += blockDim.x)
    built[i / kEntries].lookup[i % kEntries] = jc::huffman_lookup_entry(built[i / kEntries], i % kEntries);
  __syncthreads();  // the step entries read the lookup entries
  for (int i = threadIdx.x; i < tables * kSteps; i += blockDim.x) {
    jc::HuffTable& t = built[i / kSteps];
    t.steps[i % kSteps] = im.table_is_dc[i / kSteps] != 0 ? jc::huffman_dc_step_entry(t, i % kSteps)
                                                          : jc::huffman_step_entry(t, i % kSteps);
  }
  __syncthreads();
  constexpr int kVectors = sizeof(jc::HuffTable) / sizeof(uint4);
  for (int i = threadIdx.x; i < tables * kVectors; i += blockDim.x)
    reinterpret_cast<uint4*>(im.tables)[i] = reinterpret_cast<const uint4*>(built)[i];
}

// One thread block per image builds its tables, then walks its entropy-coded data in tiles, each thread kScanBytes
// consecutive bytes (neighbouring threads read neighbouring runs: the loads coalesce), numbering the
// markers in file order with a block-wide prefix sum per tile.
__global__ void find_segments_kernel(SegmentImage* images) {
  SegmentImage& im = images[blockIdx.x];
  const uint8_t* d = im.data;
  const int64_t begin = im.scan_start, size = im.size;
  uint32_t bad = 0;
  build_tables(im, &bad);
  if (im.chunked) {  // no segments: the tables and the status only
    if (threadIdx.x == 0) *im.status = 0;
    __syncthreads();
    if (bad != 0) atomicOr(im.status, bad);
    return;
  }
  int64_t base = 0;  // markers before this tile
  for (int64_t tile = begin & ~int64_t{15}; tile < size; tile += int64_t{kScanThreads} * kScanBytes) {
    const int64_t a = tile + int64_t{threadIdx.x} * kScanBytes;
    uint32_t marks = a < size ? markers_at(d, a, begin, size) : 0u;
    int total;
    int64_t k = base + block_exclusive_sum(__popc(marks), &total);
    base += total;
    for (; marks != 0; marks &= marks - 1, ++k) {
      const int64_t p = a + __ffs(static_cast<int>(marks)) - 1;
      // Markers past the last segment decoded are not checked (nor past the EOI that ends the last
      // segment: they are not the scan's, and libjpeg stops reading).
      if (k >= im.checked_segments) continue;
      const uint8_t code = d[p + 1];
      const bool last = k == im.num_segments - 1;
      if (last ? code != 0xD9 : code != 0xD0 + (k & 7)) bad |= kMarkersWrong;
      // The segment before a marker ends at the first FF of the fill run that precedes it.
      int64_t end = p;
      while (end > begin && d[end - 1] == 0xFF) --end;
      im.segment_end[k] = end;
      if (!last) im.segment_begin[k + 1] = p + 2;
    }
  }
  if (threadIdx.x == 0) {
    im.segment_begin[0] = begin;
    // Fewer markers than the segments checked: the data ends early (libjpeg: premature end of data),
    // or a segment index lied short.
    if (base < im.checked_segments) bad |= kMarkersWrong;
    *im.status = 0;
  }
  __syncthreads();
  if (bad != 0) atomicOr(im.status, bad);
}

// ---- 2. Huffman decoding ----------------------------------------------------------------------

// The image's tables for jpeg_core's decoders, coefficients in zigzag order: no table read per
// coefficient (idct_blocks puts them in natural order).
__device__ jc::SegmentTables image_tables(const SegmentImage& im) {
  jc::SegmentTables tables;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    tables.dc[c] = im.dc[c];
    tables.ac[c] = im.ac[c];
  }
  tables.order = nullptr;
  return tables;
}

__global__ void decode_segments_kernel(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tasks) return;
  const DecodeRun run = runs[run_of_task(runs, run_count, t)];
  const int64_t segment = int64_t{run.first} + (t - run.before);
  const SegmentImage& im = images[run.image];
  if (im.chunked) return;                                    // decode_chunks' task
  if (*im.status & (kMarkersWrong | kTableRefused)) return;  // segment ranges or tables not to be trusted
  if (segment >= im.checked_segments) {                      // no range was found for it (not expected: see plan())
    atomicOr(im.status, kMarkersWrong);
    return;
  }
  const jc::Frame& f = im.frame;
  const jc::SegmentTables tables = image_tables(im);
  const int64_t first = segment * im.mcus_per_segment;
  const int64_t total = jc::frame_total_mcus(f);
  const int64_t n = total - first < im.mcus_per_segment ? total - first : im.mcus_per_segment;
  const int64_t b = im.segment_begin[segment], e = im.segment_end[segment];
  if (b < im.scan_start || e < b || e > im.size) {
    atomicOr(im.status, kMarkersWrong);
    return;
  }
  // The segment's bytes are asked into this multiprocessor's L1 cache before decoding starts, a line
  // of 128 bytes per request and no register waiting for it: the thread then reads them from L1. Read
  // four bytes at a time as decoding needs them, each new line made the thread wait for L2.
  // (The first line may begin before the file, still inside the device buffer that holds it: the
  // caching allocator's blocks are 512-byte aligned.)
  const uintptr_t last = reinterpret_cast<uintptr_t>(im.data + e);
  for (uintptr_t line = reinterpret_cast<uintptr_t>(im.data + b) & ~uintptr_t{127}; line < last; line += 128)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(line));
  alignas(16) int16_t scratch[jc::kBlockSize];
  int16_t* planes[jc::kMaxComponents];
  for (int c = 0; c < jc::kMaxComponents; ++c) planes[c] = im.coefficients[c];
  const uint32_t flags =
      jc::decode_segment_rows(im.data + b, im.data + e, f, tables, first, n, planes, im.mcu_row0, im.mcu_rows, scratch);
  if (flags != jc::kSegmentOk) atomicOr(im.status, kSegmentDamaged | flags);
}

// ---- 2'. Chunked Huffman decoding (files without short restart segments) ------------------------

// Three rounds of sync_slot after the guesses bring nearly every photo's chunks of 512 bytes in step
// (segment_executor.cpp's kChunkBytes), and the walk over the slots puts right the few left within its budget
// of chunks decoded again; an image it cannot bring in step goes to the CPU path. The rounds are as many as
// ImageNet photos as they come need for the rare one whose decoders fall in step late to stay on the GPU
// (bench/results/chunk_sync_rounds.md: none over the walk's budget after three rounds, a few after two, each
// a decode on the CPU path after the GPU's, which costs a batch more than the third round does). A larger
// budget of the walk, whose decodes are one thread's in turn, made a batch slower than the CPU path's decode
// of one or two of its photos.
constexpr int kSyncRounds = 3;
constexpr int kSweepBudget = 8;

// The image's scan as its chunks, and as stage 4's parts of them (split_scan; the chunks themselves where
// chunk_parts is 1). False for a descriptor no chunking or split exists for, or with slots or guesses out of range.
__device__ bool image_scan(const SegmentImage& im, jc::ChunkedScan* s, jc::ChunkedScan* fine) {
  return jc::make_chunked_scan(im.data, im.size, im.scan_start, im.chunk_bytes, im.mcus_per_segment, s) &&
         im.chunk_parts >= 1 && im.chunk_parts <= kMaxChunkParts && jc::split_scan(*s, im.chunk_parts, fine) &&
         im.chunk_slots >= 1 && im.chunk_slots <= jc::kMaxSlots && im.chunk_guesses >= 1 &&
         im.chunk_guesses <= im.chunk_slots;
}

// The chunk task t stands for, where its image is decoded in chunks and its tables are good: the chunk, its
// image's scan, and the scan of stage 4's parts (split_scan; the chunks themselves where parts is 1).
struct ChunkTask {
  const SegmentImage* im;
  int64_t chunk;
  jc::ChunkedScan scan;
  int64_t parts;
  jc::ChunkedScan fine;
  int slots;  // records a chunk (jpeg_core's slots)
};

__device__ bool chunk_task(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks, int t,
                           ChunkTask* c) {
  if (t >= tasks) return false;
  const DecodeRun run = runs[run_of_task(runs, run_count, t)];
  c->im = &images[run.image];
  const SegmentImage& im = *c->im;
  if (!im.chunked || (*im.status & kTableRefused)) return false;
  c->chunk = int64_t{run.first} + (t - run.before);
  c->parts = im.chunk_parts;
  c->slots = im.chunk_slots;
  if (!image_scan(im, &c->scan, &c->fine) || c->chunk >= c->scan.num_chunks) {
    atomicOr(im.status, kSegmentDamaged | jc::kBadArguments);
    return false;
  }
  return true;
}

// Where slot h of chunk j records its part ends (jpeg_core's slot_part_ends), as walk_slots asks for them.
struct SlotPartEnds {
  const jc::ChunkedScan* fine;
  int64_t parts, num_chunks;
  jc::ChunkRecord* part_ends;
  __device__ jc::PartEnds* operator()(int64_t j, int h, jc::PartEnds* storage) const {
    *storage = jc::slot_part_ends(*fine, parts, num_chunks, j, h, part_ends);
    return storage;
  }
};

// In part_ends[buffer]: 0 for stage 1, the buffer each round writes after it (a round reads the last one's
// part ends in the other), kSyncRounds % 2 after the rounds.
__device__ SlotPartEnds slot_part_ends(const ChunkTask& c, int buffer) {
  return SlotPartEnds{&c.fine, c.parts, c.scan.num_chunks, c.im->part_ends[buffer]};
}

// The task the thread stands for, `lanes` of them a warp (task_lanes); false for the warp's other lanes.
__device__ bool lane_task(int lanes, int64_t* t) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = static_cast<int>(thread & 31);
  *t = (thread >> 5) * lanes + lane;
  return lane < lanes;
}

// The chunk task and slot the thread stands for: slot h of every task, then slot h + 1 of every task (`slots`
// in all), `lanes` of them a warp, so that a warp's threads are neighbouring chunks, and the threads of slots
// an image lacks fill warps that end at once. False for those, and for the warp's other lanes.
__device__ bool slot_task(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks, int slots,
                          int lanes, ChunkTask* c, int* h) {
  int64_t t = 0;
  if (!lane_task(lanes, &t) || t >= int64_t{tasks} * slots) return false;
  *h = static_cast<int>(t / tasks);
  return chunk_task(images, runs, run_count, tasks, static_cast<int>(t % tasks), c) && *h < c->slots;
}

// Stage 1: each slot of each chunk from its guess at its MCU place, into records[0].
__global__ void __launch_bounds__(kThreads, kChunkBlocksPerSM)
    guess_chunks_kernel(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks, int slots,
                        int lanes) {
  ChunkTask c;
  int h;
  if (!slot_task(images, runs, run_count, tasks, slots, lanes, &c, &h)) return;
  const SegmentImage& im = *c.im;
  jc::PartEnds storage;
  jc::guess_slot(c.scan, im.frame, image_tables(im), c.chunk, h, im.chunk_guesses,
                 &im.records[0][c.chunk * c.slots + h], slot_part_ends(c, 0)(c.chunk, h, &storage));
}

// Stage 2, one round: records[from] and part_ends[from] read, records[from ^ 1] and part_ends[from ^ 1]
// written, a thread a slot. A slot decoded again stops where it meets one of the chunk's decodes of the last
// round (jpeg_core's EarlierDecodes), which keeps most of a round's decodes to the start of their chunk.
__global__ void __launch_bounds__(kThreads, kChunkBlocksPerSM)
    sync_chunks_kernel(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks, int slots,
                       int lanes, int from) {
  ChunkTask c;
  int h;
  if (!slot_task(images, runs, run_count, tasks, slots, lanes, &c, &h)) return;
  const SegmentImage& im = *c.im;
  const int k = c.slots;
  const jc::ChunkRecord* in = im.records[from];
  jc::ChunkRecord* out = im.records[from ^ 1];
  const jc::EarlierDecodes earlier = jc::earlier_slots(c.parts, c.scan.num_chunks, c.chunk, k, in, im.part_ends[from]);
  jc::PartEnds storage;
  jc::PartEnds* ends = slot_part_ends(c, from ^ 1)(c.chunk, h, &storage);
  if (c.chunk == 0) {
    jc::keep_slot(in, h, out + h, ends, &earlier);
    return;
  }
  jc::sync_slot(c.scan, im.frame, image_tables(im), c.chunk, in + (c.chunk - 1) * k, in + c.chunk * k, k, h,
                out + c.chunk * k + h, ends, &earlier);
}

// Stage 3's records in shared memory: an image whose slots number at most `staged_records` has them copied
// there by its warp before the walks read them, several times over (a chunk decoded again by lane_repair goes
// into the copy: stage 4 reads the part ends, not the records). Read from global memory,
// each record a walk read made its thread wait for it; larger images' walks read them there. At most this
// many (128 KB, past the 48 KB a launch gets without asking), fewer where the GPU gives a block less
// (launch_decode_chunks).
constexpr int kStagedRecords = 2048;

// Stage 3's lanes (jpeg_core's lane steps): a warp per image.
constexpr int kStartLanes = 32;

// Stage 3, a warp per image: the walk over the slots in chunk order through the chunks the rectangle needs
// into chosen_slot, then the chunks' exact starts into starts, *needed and *strict_from, the warp's lanes sharing both
// (jpeg_core's lane steps, a barrier between two). Where the walk reaches a chunk with no slot on the chain,
// the first lane decodes it again into its slot 0 (lane_repair) and the lanes walk again, at most kSweepBudget
// times; an image that needs more goes to the CPU path.
__global__ void chunk_starts_kernel(const SegmentImage* images, int64_t staged_records) {
  extern __shared__ __align__(16) unsigned char stage3_shared[];
  __shared__ jc::ChunkRecord repair_ends[kMaxChunkParts - 1];  // lane_repair's part ends until its decode ends
  jc::LaneChain* lanes = reinterpret_cast<jc::LaneChain*>(stage3_shared);
  jc::ChunkRecord* staged = reinterpret_cast<jc::ChunkRecord*>(stage3_shared + kStartLanes * sizeof(jc::LaneChain));
  const SegmentImage& im = images[blockIdx.x];
  if (!im.chunked) return;
  if (threadIdx.x == 0) *im.needed = *im.strict_from = *im.whole_from = 0;
  if (*im.status != 0) return;
  jc::ChunkedScan s, fine;
  const int k = im.chunk_slots;
  if (!image_scan(im, &s, &fine) || !jc::starts_arguments_ok(s, im.frame, im.last_block)) {
    if (threadIdx.x == 0) atomicOr(im.status, kSegmentDamaged | jc::kBadArguments);
    return;
  }
  const jc::Frame& f = im.frame;
  jc::ChunkRecord* records = im.records[kSyncRounds % 2];
  if (s.num_chunks * k <= staged_records) {
    for (int64_t j = threadIdx.x; j < s.num_chunks * k; j += blockDim.x) staged[j] = records[j];
    __syncwarp();
    records = staged;
  }
  const int lane = static_cast<int>(threadIdx.x);
  const jc::LaneRange r = jc::lane_chunks(s.num_chunks, lane, kStartLanes);
  jc::LaneChain* mine = &lanes[lane];
  const SlotPartEnds ends{&fine, im.chunk_parts, s.num_chunks, im.part_ends[kSyncRounds % 2]};
  jc::lane_chain_map(records, k, r, mine);
  __syncwarp();
  int64_t end = 0;
  for (int repairs = 0;; ++repairs) {
    jc::lane_chain_walk(records, k, r, lanes, lane, im.chosen_slot, mine);
    __syncwarp();
    jc::lane_walk_stop(records, k, r, lanes, lane, im.chosen_slot, im.last_block, mine);
    __syncwarp();
    if (jc::lanes_walk_end(lanes, kStartLanes, s.num_chunks, &end)) break;  // the same in every lane
    const int64_t broken = jc::lanes_first_broken(lanes, kStartLanes);
    if (repairs == kSweepBudget) {
      // In a first try, a chain broken where the cut may have changed the records is the cut's doing.
      const int64_t reached = records[(broken - 1) * k + im.chosen_slot[broken - 1]].end.bit;
      if (lane == 0)
        atomicOr(im.status,
                 im.window_cut != 0 && jc::window_cut_short(s, reached) ? kWindowCut : kSegmentDamaged | jc::kUnsynced);
      return;
    }
    // A repair that fails (arguments no valid descriptor gives) flags the image and ends the walk, as the
    // harness's walk_slots does.
    const bool failed =
        __shfl_sync(0xffffffffu,
                    lane == 0 && jc::lane_repair(s, f, image_tables(im), records, k, broken, im.chosen_slot, ends,
                                                 repair_ends, kMaxChunkParts - 1) != 0,
                    0);
    if (failed) {
      if (lane == 0) atomicOr(im.status, kSegmentDamaged | jc::kBadArguments);
      return;
    }
    if (jc::lane_map_stale(r, broken)) jc::lane_chain_map(records, k, r, mine);
    __syncwarp();
  }
  jc::lane_chain_join(records, k, r, end, im.chosen_slot, mine);
  __syncwarp();
  const int64_t first_block = jc::row_first_block(f, im.mcu_row0);
  jc::lane_starts(s, f, records, k, r, lanes, lane, im.chosen_slot, im.last_block, first_block, im.starts, mine);
  __syncwarp();
  if (lane == 0) {
    const uint32_t flags =
        jc::lanes_starts_result(lanes, kStartLanes, im.starts, im.last_block, im.needed, im.strict_from, im.whole_from);
    if (flags != 0) atomicOr(im.status, kSegmentDamaged | flags);
    if (im.window_cut != 0 && jc::window_cut_short(s, im.starts[*im.needed].bit)) atomicOr(im.status, kWindowCut);
  }
}

// Stage 4: each part of each chunk the rectangle needs from *strict_from on (the chunks above the rectangle that
// the rounds read without a lenient read need no decode: jpeg_core's strict_decode_needed) that stage4_part
// names (before *whole_from, those holding blocks of the rectangle), strictly from its exact start (part_start);
// the rectangle's blocks stored. kMaxChunkParts tasks a chunk task, `lanes` of them a warp;
// those past the image's parts do nothing.
__global__ void write_chunks_kernel(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks,
                                    int lanes) {
  int64_t t = 0;
  if (!lane_task(lanes, &t) || t >= int64_t{tasks} * kMaxChunkParts) return;
  ChunkTask c;
  if (!chunk_task(images, runs, run_count, tasks, static_cast<int>(t / kMaxChunkParts), &c)) return;
  const SegmentImage& im = *c.im;
  const int64_t part = t % kMaxChunkParts, m = c.chunk * c.parts + part;
  if (*im.status != 0 || c.chunk < *im.strict_from || c.chunk >= *im.needed || part >= c.parts ||
      m >= c.fine.num_chunks)
    return;
  int16_t* planes[jc::kMaxComponents];
  for (int k = 0; k < jc::kMaxComponents; ++k) planes[k] = im.coefficients[k];
  const jc::ChunkRecord* part_ends = im.part_ends[kSyncRounds % 2];
  jc::ChunkStart from, to;
  if (!jc::stage4_part(im.frame, im.starts, part_ends, c.parts, m, im.chosen_slot, c.scan.num_chunks, *im.whole_from,
                       im.mcu_row0, im.mcu_rows, im.mcu_col0, im.mcu_cols, &from, &to))
    return;
  const uint32_t flags = jc::decode_chunk_rect(c.fine, im.frame, image_tables(im), m, from, to, planes, im.mcu_row0,
                                               im.mcu_rows, im.mcu_col0, im.mcu_cols);
  if (flags != jc::kSegmentOk) atomicOr(im.status, kSegmentDamaged | flags);
}

// ---- 3. IDCT ----------------------------------------------------------------------------------

__global__ void idct_blocks_kernel(const SegmentImage* images) {
  const SegmentImage& im = images[blockIdx.y];
  // The image's status is read once for the whole thread block (other blocks may set bits meanwhile),
  // and its quantisation tables are shared by every transform of the block.
  __shared__ uint32_t status;
  __shared__ jc::QuantTable quant[jc::kMaxComponents];
  if (threadIdx.x == 0) status = *im.status;
  for (int i = threadIdx.x; i < im.idct_components * jc::kBlockSize; i += blockDim.x)
    quant[i / jc::kBlockSize].value[i % jc::kBlockSize] = im.quant[i / jc::kBlockSize].value[i % jc::kBlockSize];
  __syncthreads();
  if (status != 0) return;
  const jc::Frame& f = im.frame;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < im.blocks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    for (int c = 0; c < im.idct_components; ++c) {
      const int64_t rows = static_cast<int64_t>(im.mcu_rows) * f.mcu_blocks_v[c];
      const int64_t cols = static_cast<int64_t>(im.mcu_cols) * f.mcu_blocks_h[c];
      if (rest >= rows * cols) {
        rest -= rows * cols;
        continue;
      }
      // In 32 bits (rest < im.blocks, an int32): a 64-bit division is a long subroutine on the GPU.
      const int64_t r = static_cast<uint32_t>(rest) / static_cast<uint32_t>(cols), col = rest - r * cols;
      const int64_t plane_col = static_cast<int64_t>(im.mcu_col0) * f.mcu_blocks_h[c] + col;
      // The block's 128 bytes in eight 16-byte loads (blocks are 16-byte aligned) rather than 64 of two,
      // in zigzag order (decode_segments), put in natural order with constant indices (registers).
      const uint4* coef =
          reinterpret_cast<const uint4*>(im.coefficients[c] + (r * f.blocks_per_row[c] + plane_col) * jc::kBlockSize);
      alignas(16) int16_t zigzag[jc::kBlockSize];
#pragma unroll
      for (int v = 0; v < jc::kBlockSize / 8; ++v) reinterpret_cast<uint4*>(zigzag)[v] = coef[v];
      int16_t block[jc::kBlockSize];
#pragma unroll
      for (int p = 0; p < jc::kBlockSize; ++p) block[p] = zigzag[jc::zigzag_index(p / 8, p % 8)];
      const int size = im.scaling.idct_size[c];
      uint8_t* out = im.samples[c] + r * size * im.sample_pitch[c] + col * size;
      if (!jc::idct_scaled(size, block, quant[c], out, im.sample_pitch[c])) atomicOr(im.status, kBlockInexact);
      break;
    }
  }
}

// ---- 4. Upsampling, colour, orientation ---------------------------------------------------------

// Component c's samples as jpeg_core's upsampler reads them at the image's scale: indexed from the
// image's first sample, though only the rectangle's are held (the upsampler never reads outside it:
// the rectangle reaches one MCU beyond every window, or the image's edge, where it clamps;
// common/scaled_window.h).
__device__ jc::SamplePlane sample_plane(const SegmentImage& im, int c) {
  const jc::Frame& f = im.frame;
  const int size = im.scaling.idct_size[c];
  const int64_t row0 = static_cast<int64_t>(im.mcu_row0) * f.mcu_blocks_v[c] * size;
  const int64_t col0 = static_cast<int64_t>(im.mcu_col0) * f.mcu_blocks_h[c] * size;
  const uintptr_t origin =
      reinterpret_cast<uintptr_t>(im.samples[c]) - static_cast<uintptr_t>(row0 * im.sample_pitch[c] + col0);
  return jc::scaled_plane(im.scaling, c, reinterpret_cast<const uint8_t*>(origin), im.sample_pitch[c]);
}

// Output pixels per thread of write_windows: consecutive pixels of one output row, so that the row is found once for
// all of them and each plane gets one 4-byte store where the window's rows are 4-byte aligned. With a pixel per
// thread, finding each pixel's row (a 64-bit division) and its single-byte stores took a sixth to a third of the
// kernel's time; eight pixels a thread gained less than four (CHANGELOG).
constexpr int kWindowPixels = 4;
static_assert(kWindowPixels % 4 == 0, "write_windows stores a plane's pixels in 4-byte words");

__global__ void write_windows_kernel(const SegmentImage* images, const WindowWrite* windows) {
  const WindowWrite w = windows[blockIdx.y];
  const SegmentImage& im = images[w.image];
  if (*im.status != 0) return;
  jc::SamplePlane planes[3];
  const bool rgb = w.color == kWindowRgb;
  for (int c = 0; c < (rgb ? 3 : 1); ++c) planes[c] = sample_plane(im, c);
  const bool swap = w.orientation >= 5;
  const int out_h = swap ? w.region_width : w.region_height;
  const int out_w = swap ? w.region_height : w.region_width;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  const int groups = (out_w + kWindowPixels - 1) / kWindowPixels;  // per output row
  const int64_t work = static_cast<int64_t>(out_h) * groups;
  const int out_planes = rgb ? 3 : w.channels;
  const bool words = out_w % kWindowPixels == 0 && (reinterpret_cast<uintptr_t>(w.dst) & 3) == 0;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < work;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int y = work <= UINT32_MAX ? static_cast<int>(static_cast<uint32_t>(g) / static_cast<uint32_t>(groups))
                                     : static_cast<int>(g / groups);
    const int x0 = static_cast<int>(g - static_cast<int64_t>(y) * groups) * kWindowPixels;
    const int n = min(kWindowPixels, out_w - x0);
    // Every value first, then the stores: the planes' loads of neighbouring pixels are then shared.
    uint8_t v[3][kWindowPixels] = {};
#pragma unroll
    for (int i = 0; i < kWindowPixels; ++i) {
      if (i >= n) break;
      int r, s;
      stored_position(w.orientation, y, x0 + i, w.region_height - 1, w.region_width - 1, &r, &s);
      const int iy = w.region_top + r, ix = w.region_left + s;
      if (rgb) {
        uint8_t out[3];
        jc::ycc_to_rgb(jc::upsampled_sample(planes[0], iy, ix), jc::upsampled_sample(planes[1], iy, ix),
                       jc::upsampled_sample(planes[2], iy, ix), out);
        v[0][i] = out[0];
        v[1][i] = out[1];
        v[2][i] = out[2];
      } else {
        v[0][i] = v[1][i] = v[2][i] = static_cast<uint8_t>(jc::upsampled_sample(planes[0], iy, ix));
      }
    }
    uint8_t* const dst = w.dst + static_cast<int64_t>(y) * out_w + x0;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      if (c >= out_planes) break;
      if (words) {
#pragma unroll
        for (int i = 0; i < kWindowPixels; i += 4)
          *reinterpret_cast<uint32_t*>(dst + c * plane + i) =
              v[c][i] | (v[c][i + 1] << 8) | (v[c][i + 2] << 16) | (static_cast<uint32_t>(v[c][i + 3]) << 24);
        continue;
      }
#pragma unroll
      for (int i = 0; i < kWindowPixels; ++i)
        if (i < n) dst[c * plane + i] = v[c][i];
    }
  }
}

int grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks > kMaxBlocksPerImage) blocks = kMaxBlocksPerImage;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

}  // namespace

cudaError_t launch_find_segments(SegmentImage* images, int count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  find_segments_kernel<<<count, kScanThreads, 0, stream>>>(images);
  return cudaGetLastError();
}

cudaError_t launch_decode_segments(const SegmentImage* images, const DecodeRun* runs, int run_count, int tasks,
                                   cudaStream_t stream) {
  if (tasks <= 0 || run_count <= 0) return cudaSuccess;
  decode_segments_kernel<<<(tasks + kThreads - 1) / kThreads, kThreads, 0, stream>>>(images, runs, run_count, tasks);
  return cudaGetLastError();
}

namespace {

constexpr int64_t kLaneBytes = kStartLanes * sizeof(jc::LaneChain);

// Stage 3's shared memory for `staged` records: the lanes', then the records'.
int stage3_shared_bytes(int64_t staged) { return static_cast<int>(kLaneBytes + staged * sizeof(jc::ChunkRecord)); }

// What the chunked decode's launches need to know of a device, asked once per device (launch_setup).
struct LaunchSetup {
  int64_t staged;          // the records stage 3 stages in shared memory
  int64_t resident_warps;  // the warps of stage 1's kernel the whole GPU holds at once
};

// Stage 3's staged records on `device`: what its blocks' shared memory holds beside the kernel's own (lane_repair's
// part ends) and the lanes' (kStagedRecords at most), its kernel allowed that much; and stage 1's resident warps.
cudaError_t set_up_launches(int device, LaunchSetup* setup) {
  int optin = 0, multiprocessors = 0, blocks = 0;
  cudaFuncAttributes stage3{};
  cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, guess_chunks_kernel, kThreads, 0);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&stage3, chunk_starts_kernel);
  if (e != cudaSuccess) return e;
  setup->resident_warps = std::max<int64_t>(1, int64_t{multiprocessors} * blocks * (kThreads / 32));
  const int64_t room = int64_t{optin} - static_cast<int64_t>(stage3.sharedSizeBytes) - kLaneBytes;
  setup->staged = std::min<int64_t>(kStagedRecords, room / static_cast<int64_t>(sizeof(jc::ChunkRecord)));
  if (setup->staged < 0) return cudaErrorInvalidConfiguration;
  return cudaFuncSetAttribute(chunk_starts_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              stage3_shared_bytes(setup->staged));
}

// set_up_launches on the current device, once per device: asked and set on every call, the queries and the
// attribute cost the host more than the launches.
cudaError_t launch_setup(LaunchSetup* setup) {
  constexpr int kDevices = 128;
  static std::mutex mutex;
  static LaunchSetup known[kDevices] = {};
  static bool ready[kDevices] = {};
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  if (device < 0 || device >= kDevices) return set_up_launches(device, setup);
  std::lock_guard<std::mutex> lock(mutex);
  if (!ready[device]) {
    e = set_up_launches(device, &known[device]);
    if (e != cudaSuccess) return e;
    ready[device] = true;
  }
  *setup = known[device];
  return cudaSuccess;
}

// The tasks each warp of stages 1, 2 and 4 takes (lane_task), of `work` tasks with a decode: 32, 16, 8 or 4,
// whichever puts the number of warps with a decode nearest (by ratio) to 0.6 of the warps the GPU holds at
// once. A warp's threads decode their chunks' blocks in lockstep (bench/chunk_time_probe), each round of
// blocks as long as the longest of them, so fewer tasks a warp shorten its rounds; but warps past what the
// GPU holds wait for a place, and a batch's parts run their launches side by side. With 32, 16, 8 and 4
// lanes tried for stages 1 and 2, batches of 64 and 256 ImageNet photos, as they come and at 4:2:0, decoded
// fastest at the lanes this picks for them; stage 4 at its picked lanes too, against 32 (CHANGELOG.md has
// the measurements).
int task_lanes(int64_t work, int64_t resident_warps) {
  const double target = 0.6 * static_cast<double>(resident_warps);
  auto warps = [work](int lanes) { return static_cast<double>((work + lanes - 1) / lanes); };
  int lanes = 32;
  // Half the lanes are nearer by ratio while the geometric mean of the two warp counts is below the target.
  while (lanes > 4 && warps(lanes) * warps(lanes / 2) < target * target) lanes /= 2;
  return lanes;
}

// The thread blocks of a launch whose warps take `lanes` of `tasks` each.
int lane_grid(int64_t tasks, int lanes) {
  const int64_t threads = (tasks + lanes - 1) / lanes * 32;
  return static_cast<int>((threads + kThreads - 1) / kThreads);
}

}  // namespace

cudaError_t launch_decode_chunks(const SegmentImage* images, int count, const DecodeRun* runs, int run_count, int tasks,
                                 int slots, int64_t slot_work, cudaStream_t stream) {
  if (tasks <= 0 || run_count <= 0 || count <= 0 || slots < 1 || slots > jc::kMaxSlots) return cudaSuccess;
  LaunchSetup setup{};
  const cudaError_t e = launch_setup(&setup);
  if (e != cudaSuccess) return e;
  const int lanes = task_lanes(slot_work, setup.resident_warps);
  const int grid = lane_grid(int64_t{tasks} * slots, lanes);
  guess_chunks_kernel<<<grid, kThreads, 0, stream>>>(images, runs, run_count, tasks, slots, lanes);
  for (int round = 0; round < kSyncRounds; ++round)
    sync_chunks_kernel<<<grid, kThreads, 0, stream>>>(images, runs, run_count, tasks, slots, lanes, round % 2);
  chunk_starts_kernel<<<count, kStartLanes, stage3_shared_bytes(setup.staged), stream>>>(images, setup.staged);
  // Stage 4's tasks with a decode are known only on the GPU (the chunks through the window's last row): all of
  // them stand in.
  const int64_t part_tasks = int64_t{tasks} * kMaxChunkParts;
  const int part_lanes = task_lanes(part_tasks, setup.resident_warps);
  write_chunks_kernel<<<lane_grid(part_tasks, part_lanes), kThreads, 0, stream>>>(images, runs, run_count, tasks,
                                                                                  part_lanes);
  return cudaGetLastError();
}

cudaError_t launch_idct_blocks(const SegmentImage* images, int count, int max_blocks, cudaStream_t stream) {
  const int blocks = grid_for(max_blocks, kThreads);
  for (int first = 0; first < count; first += kMaxImagesPerLaunch) {
    const int n = count - first < kMaxImagesPerLaunch ? count - first : kMaxImagesPerLaunch;
    idct_blocks_kernel<<<dim3(blocks, n), kThreads, 0, stream>>>(images + first);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t launch_write_windows(const SegmentImage* images, const WindowWrite* windows, int count, int64_t max_pixels,
                                 cudaStream_t stream) {
  const int blocks = grid_for((max_pixels + kWindowPixels - 1) / kWindowPixels, 256);
  for (int first = 0; first < count; first += kMaxImagesPerLaunch) {
    const int n = count - first < kMaxImagesPerLaunch ? count - first : kMaxImagesPerLaunch;
    write_windows_kernel<<<dim3(blocks, n), 256, 0, stream>>>(images, windows + first);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace custom_op
