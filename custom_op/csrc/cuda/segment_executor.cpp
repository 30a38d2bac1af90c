// Our own CUDA decoder as an executor (segment_decoder.h says how it decodes): it takes the files
// whose restart segments are short enough for one GPU thread each, and writes their windows straight
// into the outputs, in the caller's stream order (a batch in parts on streams of their own, which the
// caller's stream waits for). Items whose decode the kernels report as not exactly libjpeg's go to the
// CPU path once the kernels have finished (finish()).
//
// A call's steps, in order, each a function of one BatchPlan that it hands on to the next:
//   claim():  list_regions     the windows each decode serves;
//             plan_images      per file we take, an ImagePlan (plan_image): its tables, the rectangle
//                              of MCUs it decodes, its segments' mean length, whether it lies in
//                              pinned memory;
//   decode(): order_images     longest segments first;
//             list_windows     the window writes, grouped by image;
//             split_into_parts the parts, each queued on its own stream;
//             lay_out_buffer   one device buffer: each part's uploaded region, then the kernels' own
//                              arrays (tables, segment ranges, statuses, coefficients, samples);
//             take_buffers     the slot's device buffer and its pinned host side;
//             queue_parts      prepare_image on this thread and helpers (runs of segments, file copy,
//                              descriptor) while queue_part uploads and launches each part in turn;
//   finish():                  the statuses read back: the items to send to the CPU path, and the windows
//                              whose first try fell short (kWindowCut), decoded again with the whole
//                              files by a second plan (decode_again).
// The steps are separate so that a second entropy decoder (a chunked Huffman decoder for files
// without restart markers, say) joins at named places rather than inside one long function: its files
// are its claim in plan_images, its arrays another stretch in lay_out_buffer, its work list written in
// prepare_image in place of the runs of segments, and its launch in queue_part in place of
// decode_segments (it still needs what find_segments does besides finding markers: building the
// Huffman tables and clearing the statuses). The rest (parts, uploads, IDCT, window kernel, statuses)
// does not depend on how the coefficients were decoded, so both decoders would share it.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <numeric>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAException.h>

#include "common/restart_plan.h"
#include "common/scaled_window.h"
#include "common/segment_index.h"
#include "cuda/executor.h"
#include "cuda/helper_threads.h"
#include "cuda/scan_tables.h"
#include "cuda/segment_decoder.h"
#include "cuda/upload_copy.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

// Files whose restart segments hold more than this many bytes on average are left to the other
// decoders: a thread decodes its segment sequentially, and a launch lasts as long as the longest one.
constexpr int64_t kMaxMeanSegmentBytes = 4096;

std::atomic<int64_t> g_fallbacks{0};
std::atomic<int64_t> g_retries{0};  // images decoded again after their first try (kWindowCut)

// Whether our decoder can take the file whatever its restart segments: baseline, one scan of every
// component, a header within 2 GiB (SegmentImage::table_at holds the tables' places in 32 bits), ...
bool decodable_layout(const JpegHeader& h, size_t size) {
  return (h.sof == 0xC0 || h.sof == 0xC1) && h.precision == 8 && h.scan_components == h.components &&
         h.header_end != 0 && h.header_end < size && h.header_end <= static_cast<size_t>(INT32_MAX) && h.width > 0 &&
         h.height > 0;
}

// A file's entropy-coded bytes per restart segment, on average; -1 for a file our decoder cannot take
// segment by segment (no restart interval, or not decodable_layout).
int64_t mean_segment_bytes(const JpegHeader& h, size_t size) {
  if (h.restart_interval <= 0 || !decodable_layout(h, size)) return -1;
  const int mcu_w = mcu_width(h), mcu_h = mcu_height(h);
  const int64_t mcus = ((int64_t(h.width) + mcu_w - 1) / mcu_w) * ((int64_t(h.height) + mcu_h - 1) / mcu_h);
  const int64_t segments = (mcus + h.restart_interval - 1) / h.restart_interval;
  if (segments > (int64_t{1} << 30)) return -1;
  return (static_cast<int64_t>(size) - static_cast<int64_t>(h.header_end)) / segments;
}

// The chunk size of files decoded in chunks: the threads of a batch's chunks decode in parallel, and
// smaller chunks make more of them, but more chunks start out of step (segment_decoder.cu's rounds
// and sweep). Of 256, 512, 1024, 2048 and 4096 bytes, 512 decoded batches of ImageNet photos fastest, and
// still did against 256 and 384 with the warps' lanes picked by segment_decoder.cu's task_lanes.
// Stage 4, which knows where each chunk starts, decodes them in kMaxChunkParts parts of 128 bytes.
// A scan of jpeg_core's kLargeScanBytes or more (a photo of several megapixels: one guess a chunk, its
// slot_layout) is decoded in chunks of kLargeChunkBytes: its batches keep the whole GPU busy, so the
// threads a launch has matter less than the work, and each round decodes each of its chunks again from
// its true start up to the first part end where that decode meets the chunk's guess, a part or so of
// every chunk, which fewer chunks make fewer (bench/results/chunk_sync_rounds.md's large photos).
constexpr int64_t kChunkBytes = 512;
constexpr int64_t kLargeChunkBytes = 2048;

// Bytes per upload call while the host copies the files (see queue_part()).
constexpr size_t kUploadPart = size_t{4} << 20;

size_t round_up(size_t value, size_t granule) { return (value + granule - 1) / granule * granule; }

// The deleter of the blocks PyTorch's CUDA host allocator hands out (pin_memory(), a DataLoader with
// pin_memory=True): a tensor whose storage has it lies in page-locked memory.
c10::DeleterFnPtr torch_pinned_deleter() {
  static const c10::DeleterFnPtr deleter = [] {
    const at::Tensor block = at::empty({1}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    return block.storage().data_ptr().get_deleter();
  }();
  return deleter;
}

// Whether a file's bytes lie in page-locked memory from PyTorch's CUDA host allocator, told by its
// storage's deleter. Asking the CUDA runtime instead (cudaPointerGetAttributes) takes a driver call
// per file, which was a large share of the host's work before a batch's first part could start.
// Page-locked memory from elsewhere counts as ordinary memory: its files are copied on the host,
// which is only slower.
bool in_torch_pinned_memory(const at::Tensor& t) {
  if (!t.has_storage()) return false;
  const c10::DeleterFnPtr deleter = t.storage().data_ptr().get_deleter();
  return deleter != nullptr && deleter == torch_pinned_deleter();
}

// Copies files in pinned host memory into the device buffer, in stream order: one batch of copies for
// the copy engines (cudaMemcpyBatchAsync, CUDA 12.8 and later; one call per file where the runtime
// or driver lacks it), not a kernel reading the files through the unified address space: such a
// kernel holds multiprocessors while it waits for the PCIe bus, and the parts' decode kernels beside
// it run slower.
void upload_pinned(const std::vector<void*>& dst, const std::vector<const void*>& src, const std::vector<size_t>& size,
                   cudaStream_t stream) {
  if (dst.empty()) return;
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t first = 0;
#if CUDART_VERSION >= 13000
  const cudaError_t err =
      cudaMemcpyBatchAsync(dst.data(), src.data(), size.data(), dst.size(), &attributes, &first, 1, stream);
#else
  size_t failed = 0;
  const cudaError_t err =
      cudaMemcpyBatchAsync(const_cast<void**>(dst.data()), const_cast<void**>(src.data()),
                           const_cast<size_t*>(size.data()), dst.size(), &attributes, &first, 1, &failed, stream);
#endif
  if (err == cudaSuccess) return;
  // A driver older than the runtime: the copies one by one (the error is not sticky).
  if (err != cudaErrorNotSupported && err != cudaErrorCallRequiresNewerDriver && err != cudaErrorInvalidValue)
    C10_CUDA_CHECK(err);
  (void)cudaGetLastError();
#endif
  for (size_t i = 0; i < dst.size(); ++i)
    C10_CUDA_CHECK(cudaMemcpyAsync(dst[i], src[i], size[i], cudaMemcpyHostToDevice, stream));
}

// One file the decoder takes, as claim() plans it (plan_image).
struct ImagePlan {
  size_t item;
  SegmentImage image;  // pointers filled in prepare_image()
  // Per component: its tables' places in image.tables.
  int8_t dc_table[jc::kMaxComponents];
  int8_t ac_table[jc::kMaxComponents];
  int32_t color;
  // It decodes every segment from the first through the rectangle's last row (a whole image, or a
  // sub-image the planner built), not decoder_segments' choice.
  bool from_first;
  bool pinned;                 // its bytes are in pinned host memory: copied from there (upload_pinned)
  int64_t mean_segment_bytes;  // entropy-coded bytes per restart segment: decode() orders the parts by it
};

// Where a part's uploaded region holds each of its arrays (offsets into the device buffer and its
// pinned host side): its files in ordinary memory, its images' descriptors, its windows, room for as
// many runs of segments as its images could have (they are listed only when the part is prepared), and
// its files in pinned memory. The host copies the first four in that order and sends the last piece
// of them in one upload, up to the runs it has listed; the GPU copies the files in pinned memory.
struct PartLayout {
  size_t files_at, images_at, windows_at, runs_at, pinned_files_at;
};

// What the steps of a call hand each other (the file's opening comment lists them), in the order they
// fill it: each step writes its arrays here in place and the later ones read them here, so nothing is
// copied from step to step. An executor serves one call (decode_cuda.cpp makes them per call), so its
// plan starts empty.
struct BatchPlan {
  // claim(): the images (in the order of their items, then longest segments first: order_images),
  // and the windows each item's decode serves, in one array (one list per item cost an allocation
  // for each): item i's are regions[regions_begin[i] .. regions_begin[i + 1] - 1].
  std::vector<ImagePlan> images;
  std::vector<Region> regions;
  std::vector<size_t> regions_begin;
  // list_windows(): the windows, grouped by image.
  std::vector<WindowWrite> windows;
  std::vector<size_t> windows_begin;  // image k's windows: windows_begin[k] .. windows_begin[k + 1] - 1
  std::vector<int64_t> max_pixels;    // per image: its largest window
  // split_into_parts(): part c is images part_begin[c] .. part_begin[c + 1] - 1.
  size_t parts = 0;
  std::vector<size_t> part_begin;
  // lay_out_buffer(): where things lie in the device buffer (and, up to upload_bytes, in its pinned
  // host side).
  std::vector<PartLayout> part_layout;
  std::vector<size_t> tables_at, ranges_at;  // per image
  std::vector<size_t> chunks_at;             // per image decoded in chunks: its records, starts and count
  std::vector<size_t> coef_at, samples_at;   // per image and component: [k * jc::kMaxComponents + c]
  size_t status_at = 0;
  std::vector<size_t> bytes_at;       // per image: where its file lies
  std::vector<size_t> descriptor_at;  // per image: where its SegmentImage lies
  size_t upload_bytes = 0;            // the parts' regions, which the host writes and uploads
  size_t total_bytes = 0;
  // take_buffers(): the slot's buffers.
  uint8_t* device = nullptr;
  uint8_t* host = nullptr;
  uint32_t* status_host = nullptr;  // where the statuses are read back, past the parts' regions
  // prepare_image(): per image, the segments it decodes.
  std::vector<std::vector<SegmentRun>> segment_runs;
  // queue_part()'s list of the part's files in pinned memory, for upload_pinned().
  std::vector<void*> pinned_dst;
  std::vector<const void*> pinned_src;
  std::vector<size_t> pinned_size;
  bool queued = false;  // decode() queued the decodes
};

// The arrays of an image decoded in chunks (SegmentImage::records, part_ends, starts, needed, strict_from, whole_from,
// chosen_slot), one after the other.
size_t chunk_arrays_bytes(int64_t chunks, int32_t parts, int32_t slots) {
  const auto n = static_cast<size_t>(chunks), k = static_cast<size_t>(slots);
  return 2 * (k + k * static_cast<size_t>(parts - 1)) * n * sizeof(jc::ChunkRecord) + (n + 1) * sizeof(jc::ChunkStart) +
         3 * sizeof(int64_t) + n * sizeof(int32_t);
}

// The most runs decoder_segments can give for an image of `segments` restart segments: its runs never
// touch, so at least one segment lies between two of them. lay_out_buffer() makes room for that many.
size_t most_runs(int64_t segments) { return static_cast<size_t>(segments + 1) / 2; }

int32_t window_color(const Item& it) {
  if (it.header.components == 3 && it.channels == 3) return kWindowRgb;
  return it.channels == 3 ? kWindowGrayToRgb : kWindowGray;
}

// A batch is decoded in parts of at least this many images (at most kDecoderParts of them), each
// on its own stream: the host prepares and uploads one part while the GPU decodes the
// parts before it, and the parts' kernels run side by side. The parts are not smaller because a
// decode launch lasts as long as its longest segment whatever its size, and each part costs a few
// launches of host time (a batch of 64 in two parts costs the host less than in four, at the same
// speed).
constexpr size_t kMinPartImages = 32;

// Images per chunk of the host work shared with the helper threads (helper_threads.h): a few
// microseconds of work each, against a few hundred nanoseconds to take a chunk.
constexpr size_t kImagesPerChunk = 4;

// The windows each decode serves: its item's, and those of the items sharing it.
void list_regions(BatchPlan& plan, const std::vector<Item>& items) {
  const size_t count = items.size();
  auto leader_of = [&items](size_t i) { return items[i].leader >= 0 ? static_cast<size_t>(items[i].leader) : i; };
  plan.regions_begin.assign(count + 1, 0);
  for (size_t i = 0; i < count; ++i)
    if (items[i].path == kPending) ++plan.regions_begin[leader_of(i) + 1];
  for (size_t i = 0; i < count; ++i) plan.regions_begin[i + 1] += plan.regions_begin[i];
  plan.regions.resize(plan.regions_begin[count]);
  std::vector<size_t> next(plan.regions_begin.begin(), plan.regions_begin.end() - 1);
  for (size_t i = 0; i < count; ++i)
    if (items[i].path == kPending) plan.regions[next[leader_of(i)]++] = items[i].region;
}

// `first_try`: a window in a large scan decoded in chunks takes only the scan's bytes jpeg_core's window_scan_bytes
// gives (its window's first try; finish() decodes again with the whole file where that falls short).
bool plan_image(const DecodeCall& call, Item& it, ImagePlan* p, bool first_try) {
  const JpegHeader& h = it.header;
  const bool chunked = !segment_decoder_takes(h, it.size);
  if (chunked && !(own_decoder_allowed(call.options, call.testing) && chunk_decoder_takes(h, it.size))) return false;
  ScanTables st;
  if (!read_scan_tables(it.bytes, h.header_end, h.components, &st)) return false;
  SegmentImage& im = p->image;
  std::memset(&im, 0, sizeof(im));
  jc::Frame& f = im.frame;
  if (!jc::make_frame(h.width, h.height, h.components, h.h, h.v, st.scan_order, &f)) return false;
  if (!jc::make_scaling(f, it.scale, &im.scaling)) return false;
  for (int c = 0; c < f.num_components; ++c)
    if (im.scaling.upsample[c] == jc::kUpsampleNone) return false;  // libjpeg refuses it: the CPU path says so
  const int64_t total = jc::frame_total_mcus(f);
  const int64_t interval = h.restart_interval;
  im.num_segments = chunked ? 0 : (total + interval - 1) / interval;
  // Files decoded in chunks go first (order_images): their launches are the longest.
  p->mean_segment_bytes = chunked ? INT64_MAX : mean_segment_bytes(h, it.size);
  // The Huffman tables: where each distinct definition lies in the file, for find_segments to build
  // (components that name the same table, Cb and Cr as a rule, share it).
  auto table_of = [&](const TableBytes& t, bool is_dc) {
    const int32_t at = static_cast<int32_t>(t.data - it.bytes);
    for (int j = 0; j < im.num_tables; ++j)
      if (im.table_at[j] == at && (im.table_is_dc[j] != 0) == is_dc) return static_cast<int8_t>(j);
    const int j = im.num_tables++;
    im.table_at[j] = at;
    im.table_symbols[j] = static_cast<int32_t>(t.size) - 16;
    im.table_is_dc[j] = is_dc ? 1 : 0;
    return static_cast<int8_t>(j);
  };
  for (int c = 0; c < h.components; ++c) {
    if (st.dc[c].size < 16 || st.ac[c].size < 16) {
      it.path = kCpu;  // a table libjpeg refuses too: its error comes from the CPU path
      return false;
    }
    p->dc_table[c] = table_of(st.dc[c], true);
    p->ac_table[c] = table_of(st.ac[c], false);
    im.quant[c] = st.quant[c];
  }
  im.size = static_cast<int64_t>(it.size);
  im.scan_start = static_cast<int64_t>(h.header_end);
  im.mcus_per_segment = interval;
  p->color = window_color(it);
  im.idct_components = p->color == kWindowRgb ? f.num_components : 1;

  // The MCUs decoded: those of the region the planner chose (the windows with the margins chroma
  // upsampling reads), and one more all round, so that the upsampler finds every neighbour it reads;
  // in output pixels at the item's scale.
  const McuRect rect =
      decode_rectangle(it.decoded, scaled_grid(h.width, h.height, mcu_width(h), mcu_height(h), it.scale));
  if (rect.rows <= 0 || rect.cols <= 0) return false;
  const int r1 = rect.row0 + rect.rows;
  im.mcu_row0 = rect.row0;
  im.mcu_rows = rect.rows;
  im.mcu_col0 = rect.col0;
  im.mcu_cols = rect.cols;
  // The segments decoded (prepare_image lists them): every segment the CPU path reads for any of the
  // windows, so that damage it would report is found here too (and the items go to it). It reads a
  // whole image, or a sub-image the planner built (the CPU path builds the same one for the window it
  // was built around, and libjpeg reads it as any file), from the first segment down to the window:
  // here, every segment through the rectangle's last row. For other windows decoder_segments
  // (common/restart_plan.h) adds to the segments holding the rectangle what the CPU path reads beyond
  // them: a sub-image's filler, or every row from the top where no sub-image saves work.
  p->from_first = call.options.whole || it.segments.defined();
  // A sub-image the planner built (it.segments) lives in ordinary memory; the caller's tensor may be
  // pinned.
  p->pinned = !it.segments.defined() && in_torch_pinned_memory(it.data);
  if (chunked) {
    // The chunks through the rectangle's last row are decoded, of the whole file; or, in a window's first try,
    // of the file's first bytes (window_scan_bytes), in a scan of kLargeScanBytes or more only: there the bytes
    // past a window are most of the upload and of stages 1 and 2, and windows high in a photo of several
    // megapixels leave out half the scan and more, while a batch of small photos' windows mostly reach their
    // last rows' quarter, where the estimate takes the whole scan, and a first try that falls short costs the
    // call a wait for its statuses and a second decode.
    im.chunked = 1;
    const int64_t scan_bytes = im.size - im.scan_start;
    im.chunk_bytes = call.testing.chunk_bytes > 0        ? call.testing.chunk_bytes
                     : scan_bytes >= jc::kLargeScanBytes ? kLargeChunkBytes
                                                         : kChunkBytes;
    if (first_try && !call.options.whole) {
      const int64_t taken = call.testing.window_bytes > 0 ? std::min(call.testing.window_bytes, scan_bytes)
                            : scan_bytes >= jc::kLargeScanBytes
                                ? jc::window_scan_bytes(scan_bytes, r1, f.mcu_rows, im.chunk_bytes)
                                : scan_bytes;
      if (taken < scan_bytes) {
        im.size = im.scan_start + taken;
        im.window_cut = 1;
      }
    }
    im.num_chunks = (im.size - im.scan_start + im.chunk_bytes - 1) / im.chunk_bytes;
    im.chunk_parts = im.chunk_bytes % kMaxChunkParts == 0 ? kMaxChunkParts : 1;
    const jc::SlotLayout layout = jc::slot_layout(f, scan_bytes);
    im.chunk_slots = layout.slots;
    im.chunk_guesses = layout.guesses;
    im.last_block = jc::row_first_block(f, r1) - 1;
    return true;
  }
  // The last segment decoded holds an MCU of the rectangle's last row at the latest (decoder_segments
  // reads no further: the rectangle covers the CPU path's context row), and the file is uploaded as
  // far as the marker that ends it, where its segment index says so.
  const int64_t last_segment =
      std::min<int64_t>(last_segment_of_row(r1 - 1, f.mcus_per_row, interval), im.num_segments - 1);
  im.checked_segments = last_segment + 1;
  SegmentIndex index;
  if (h.segment_index != nullptr &&
      read_segment_index(h.segment_index, h.segment_index_length, it.size, h.header_end, im.num_segments, &index))
    im.size = static_cast<int64_t>(segment_index_upload_end(index, last_segment, h.header_end, it.size));
  return true;
}

// The items the decoder takes (never one with a leader: that one shares its leader's decode).
void plan_images(BatchPlan& plan, const DecodeCall& call, std::vector<Item>& items) {
  const size_t count = items.size();
  plan.images.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Item& it = items[i];
    if (it.path != kPending || it.leader >= 0) continue;
    ImagePlan p;
    p.item = i;
    if (plan_image(call, it, &p, true)) {
      it.path = kCudaDecoder;
      plan.images.push_back(p);
    }
  }
}

// Longest segments first. A part's decode launch lasts as long as its longest segment, and the
// host queues the parts in order, the last one as it finishes its own work: so the images whose
// segments are longest (on average: their lengths are only known on the GPU) go in the first
// part, whose decode overlaps the host's work on the others, and the last part, which the call
// then waits for, decodes the shortest.
// (An order of indices, then one copy of each plan: sorting the plans themselves moved a kilobyte
// per comparison.)
void order_images(BatchPlan& plan) {
  const size_t n = plan.images.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&plan](size_t a, size_t b) {
    return plan.images[a].mean_segment_bytes > plan.images[b].mean_segment_bytes;
  });
  std::vector<ImagePlan> sorted;
  sorted.reserve(n);
  for (const size_t k : order) sorted.push_back(plan.images[k]);
  plan.images.swap(sorted);
}

// The windows, grouped by the decode they come from (so that each part's are together).
void list_windows(BatchPlan& plan, const std::vector<Item>& items, const std::vector<at::Tensor>& outputs) {
  const size_t n = plan.images.size();
  std::vector<int> plan_of(items.size(), -1);
  for (size_t k = 0; k < n; ++k) plan_of[plan.images[k].item] = static_cast<int>(k);
  std::vector<int> window_plan(items.size(), -1);
  plan.windows_begin.assign(n + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const int k = items[i].leader >= 0 ? plan_of[static_cast<size_t>(items[i].leader)] : plan_of[i];
    if (k < 0) continue;
    window_plan[i] = k;
    ++plan.windows_begin[static_cast<size_t>(k) + 1];
  }
  for (size_t k = 0; k < n; ++k) plan.windows_begin[k + 1] += plan.windows_begin[k];
  plan.windows.resize(plan.windows_begin[n]);
  plan.max_pixels.assign(n, 0);
  std::vector<size_t> next(plan.windows_begin.begin(), plan.windows_begin.end() - 1);
  for (size_t i = 0; i < items.size(); ++i) {
    const int k = window_plan[i];
    if (k < 0) continue;
    const Item& it = items[i];
    WindowWrite& w = plan.windows[next[static_cast<size_t>(k)]++];
    w.image = k;  // made relative to its part by queue_part()
    w.region_top = it.region.top;
    w.region_left = it.region.left;
    w.region_height = it.region.height;
    w.region_width = it.region.width;
    w.dst = outputs[i].data_ptr<uint8_t>();
    w.channels = it.channels;
    w.orientation = it.orientation;
    w.color = plan.images[static_cast<size_t>(k)].color;
    int64_t& most = plan.max_pixels[static_cast<size_t>(k)];
    most = std::max<int64_t>(most, int64_t(it.region.height) * it.region.width);
  }
}

// The parts: runs of consecutive images.
void split_into_parts(BatchPlan& plan) {
  const size_t n = plan.images.size();
  plan.parts = std::clamp<size_t>(n / kMinPartImages, 1, static_cast<size_t>(kDecoderParts));
  plan.part_begin.resize(plan.parts + 1);
  for (size_t c = 0; c <= plan.parts; ++c) plan.part_begin[c] = n * c / plan.parts;
}

// One device buffer: each part's uploaded region (its images, windows, runs of segments and files),
// then what only the kernels use (the tables find_segments builds, the segments' ranges, the
// statuses, the coefficients and samples). A part's runs are not known before it is prepared: its
// region has room for the most its images could have. Also sets each image's sample pitches and
// blocks, which follow from the same sizes.
void lay_out_buffer(BatchPlan& plan) {
  const size_t n = plan.images.size(), parts = plan.parts;
  const std::vector<size_t>& part_begin = plan.part_begin;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    at = round_up(at, 256);
    const size_t here = at;
    at += bytes;
    return here;
  };
  plan.part_layout.resize(parts);
  for (size_t c = 0; c < parts; ++c) {
    const size_t k0 = part_begin[c], k1 = part_begin[c + 1];
    size_t runs = 0, files = 0, pinned_files = 0;
    for (size_t k = k0; k < k1; ++k) {
      runs += plan.images[k].image.chunked ? 1 : most_runs(plan.images[k].image.num_segments);
      (plan.images[k].pinned ? pinned_files : files) +=
          round_up(static_cast<size_t>(plan.images[k].image.size), kUploadAlignment);
    }
    PartLayout& L = plan.part_layout[c];
    L.files_at = take(files);
    L.images_at = take((k1 - k0) * sizeof(SegmentImage));
    L.windows_at = take((plan.windows_begin[k1] - plan.windows_begin[k0]) * sizeof(WindowWrite));
    L.runs_at = take(runs * sizeof(DecodeRun));
    L.pinned_files_at = take(pinned_files);
  }
  plan.upload_bytes = at;
  plan.tables_at.assign(n, 0);
  for (size_t k = 0; k < n; ++k) plan.tables_at[k] = take(plan.images[k].image.num_tables * sizeof(jc::HuffTable));
  plan.ranges_at.assign(n, 0);
  plan.coef_at.assign(n * jc::kMaxComponents, 0);
  plan.samples_at.assign(n * jc::kMaxComponents, 0);
  for (size_t k = 0; k < n; ++k) plan.ranges_at[k] = take(2 * sizeof(int64_t) * plan.images[k].image.num_segments);
  plan.chunks_at.assign(n, 0);
  for (size_t k = 0; k < n; ++k)
    if (plan.images[k].image.chunked)
      plan.chunks_at[k] = take(chunk_arrays_bytes(plan.images[k].image.num_chunks, plan.images[k].image.chunk_parts,
                                                  plan.images[k].image.chunk_slots));
  plan.status_at = take(n * sizeof(uint32_t));
  for (size_t k = 0; k < n; ++k) {
    SegmentImage& im = plan.images[k].image;
    const jc::Frame& f = im.frame;
    int64_t blocks = 0;
    for (int c = 0; c < f.num_components; ++c) {
      const int64_t block_rows = int64_t(im.mcu_rows) * f.mcu_blocks_v[c];
      plan.coef_at[k * jc::kMaxComponents + c] =
          take(block_rows * f.blocks_per_row[c] * jc::kBlockSize * sizeof(int16_t));
      if (c >= im.idct_components) continue;
      const int64_t block_cols = int64_t(im.mcu_cols) * f.mcu_blocks_h[c];
      const int64_t size = im.scaling.idct_size[c];  // samples per block side
      im.sample_pitch[c] = static_cast<int32_t>(block_cols * size);
      plan.samples_at[k * jc::kMaxComponents + c] = take(block_rows * size * block_cols * size);
      blocks += block_rows * block_cols;
    }
    im.blocks = static_cast<int32_t>(blocks);
  }
  plan.total_bytes = at;

  // Where each file and descriptor goes in its part's region (PartLayout), in image order.
  plan.bytes_at.assign(n, 0);
  plan.descriptor_at.resize(n);
  for (size_t c = 0; c < parts; ++c) {
    const PartLayout& L = plan.part_layout[c];
    size_t file_at = L.files_at, pinned_file_at = L.pinned_files_at;
    for (size_t k = part_begin[c]; k < part_begin[c + 1]; ++k) {
      plan.descriptor_at[k] = L.images_at + (k - part_begin[c]) * sizeof(SegmentImage);
      size_t& next = plan.images[k].pinned ? pinned_file_at : file_at;
      plan.bytes_at[k] = next;
      next += round_up(static_cast<size_t>(plan.images[k].image.size), kUploadAlignment);
    }
  }
}

// The slot's device buffer, and its pinned host side: the parts' regions, then the statuses read back.
void take_buffers(BatchPlan& plan, DecodeCall& call) {
  Slot& slot = call.slot;
  slot.segments.reserve(plan.total_bytes, call.context.tag_stream);
  plan.device = slot.segments.data();
  const size_t host_bytes = round_up(plan.upload_bytes, 256) + plan.images.size() * sizeof(uint32_t);
  at::Tensor& pinned = slot.pinned_segments;
  if (!pinned.defined() || static_cast<size_t>(pinned.numel()) < host_bytes)
    pinned = at::empty({static_cast<int64_t>(host_bytes + host_bytes / 2)},
                       at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  plan.host = pinned.data_ptr<uint8_t>();
  plan.status_host = reinterpret_cast<uint32_t*>(plan.host + round_up(plan.upload_bytes, 256));
}

// Image k's share of the host work, which may run on a helper thread: the segments it decodes, the
// copy of its file into the upload buffer where it lies in ordinary memory, and its descriptor.
void prepare_image(BatchPlan& plan, const std::vector<Item>& items, size_t k) {
  const ImagePlan& p = plan.images[k];
  const Item& it = items[p.item];
  const SegmentImage& im = p.image;
  std::vector<SegmentRun>& runs = plan.segment_runs[k];
  if (im.chunked) {
    runs.assign(1, SegmentRun{0, im.num_chunks});  // decode_chunks' tasks: every chunk
  } else if (p.from_first) {
    runs.assign(1, SegmentRun{0, im.checked_segments});
  } else {
    const size_t w0 = plan.regions_begin[p.item], w1 = plan.regions_begin[p.item + 1];
    runs = decoder_segments(frame_facts(it.header), im.mcu_row0, im.mcu_row0 + im.mcu_rows, im.mcu_col0,
                            im.mcu_col0 + im.mcu_cols, plan.regions.data() + w0, w1 - w0, im.scaling.scale);
  }
  TORCH_INTERNAL_ASSERT(im.chunked || runs.size() <= most_runs(im.num_segments),
                        "more runs than decode() has room for");
  if (!p.pinned) copy_to_upload(plan.host + plan.bytes_at[k], it.bytes, static_cast<size_t>(im.size));

  // Its descriptor, with the places of its arrays in the device buffer.
  uint8_t* const device = plan.device;
  SegmentImage d = im;
  d.tables = reinterpret_cast<jc::HuffTable*>(device + plan.tables_at[k]);
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    const bool present = c < d.frame.num_components;
    d.dc[c] = present ? d.tables + p.dc_table[c] : nullptr;
    d.ac[c] = present ? d.tables + p.ac_table[c] : nullptr;
    d.coefficients[c] =
        present ? reinterpret_cast<int16_t*>(device + plan.coef_at[k * jc::kMaxComponents + c]) : nullptr;
    d.samples[c] = c < d.idct_components ? device + plan.samples_at[k * jc::kMaxComponents + c] : nullptr;
  }
  d.data = device + plan.bytes_at[k];
  d.segment_begin = reinterpret_cast<int64_t*>(device + plan.ranges_at[k]);
  d.segment_end = d.segment_begin + d.num_segments;
  d.status = reinterpret_cast<uint32_t*>(device + plan.status_at) + k;
  if (im.chunked) {
    uint8_t* at = device + plan.chunks_at[k];
    const auto n = static_cast<size_t>(im.num_chunks);
    d.records[0] = reinterpret_cast<jc::ChunkRecord*>(at);
    const auto k = static_cast<size_t>(im.chunk_slots);
    d.records[1] = d.records[0] + n * k;
    const size_t part_ends = k * n * static_cast<size_t>(im.chunk_parts - 1);
    d.part_ends[0] = d.records[1] + n * k;
    d.part_ends[1] = d.part_ends[0] + part_ends;
    d.starts = reinterpret_cast<jc::ChunkStart*>(d.part_ends[1] + part_ends);
    d.needed = reinterpret_cast<int64_t*>(d.starts + n + 1);
    d.strict_from = d.needed + 1;
    d.whole_from = d.strict_from + 1;
    d.chosen_slot = reinterpret_cast<int32_t*>(d.whole_from + 1);
  }
  std::memcpy(plan.host + plan.descriptor_at[k], &d, sizeof(d));
}

// Records the point the window kernels wait for: the work queued on the caller's stream so far.
// Only they wait. The uploads and the decode kernels write the slot's own buffers, which no other
// work uses (Slot::wait), and read files the host has read already, so they overlap the caller's
// queued work (a training step's compute): in a loop that decodes between steps, a call then waits
// only for its own decodes, not for the step queued before it.
void record_caller_point(DecodeCall& call) { C10_CUDA_CHECK(cudaEventRecord(call.state.caller_point, call.caller)); }

// Queues part c (images k0 .. k1 - 1, its region of the device buffer and of the pinned buffer as
// lay_out_buffer() placed it) on its stream: uploads its files in ordinary memory as their copies are
// ready (`per_image`), a few megabytes at a time, so that the transfer of one piece overlaps the
// copying of the next, the last piece with its descriptors, windows and runs of segments; copies its
// files in pinned memory; then its kernels, with the read-back of its statuses before its window
// kernel, so that finish() waits only for the decodes, and the window kernel after the caller's
// earlier work (record_caller_point). Indices in its runs and windows count from its
// first image.
void queue_part(BatchPlan& plan, DecodeCall& call, const std::vector<Item>& items, size_t c, ChunkedWork& per_image) {
  const size_t k0 = plan.part_begin[c], k1 = plan.part_begin[c + 1];
  const PartLayout& layout = plan.part_layout[c];
  const cudaStream_t stream = call.state.part_streams[c];
  uint8_t* const device = plan.device;
  uint8_t* const host = plan.host;
  const size_t count = k1 - k0;
  auto send = [&](size_t from, size_t to) {
    C10_CUDA_CHECK(cudaMemcpyAsync(device + from, host + from, to - from, cudaMemcpyHostToDevice, stream));
  };

  // The files in ordinary memory lie first in the part's region (PartLayout), in image order.
  auto* runs = reinterpret_cast<DecodeRun*>(host + layout.runs_at);
  size_t nruns = 0, ntasks = 0, sent = layout.files_at, copied = layout.files_at;
  plan.pinned_dst.clear();
  plan.pinned_src.clear();
  plan.pinned_size.clear();
  for (size_t k = k0; k < k1; ++k) {
    per_image.ready(k);
    const ImagePlan& p = plan.images[k];
    const SegmentImage& im = p.image;
    const int32_t image = static_cast<int32_t>(k - k0);
    for (const SegmentRun& run : plan.segment_runs[k]) {
      runs[nruns++] = {image, static_cast<int32_t>(run.first), static_cast<int32_t>(run.count),
                       static_cast<int32_t>(ntasks)};
      ntasks += static_cast<size_t>(run.count);
    }
    if (p.pinned) {
      plan.pinned_dst.push_back(device + plan.bytes_at[k]);
      plan.pinned_src.push_back(items[p.item].bytes);
      plan.pinned_size.push_back(static_cast<size_t>(im.size));
      continue;
    }
    copied = plan.bytes_at[k] + static_cast<size_t>(im.size);
    if (copied - sent >= kUploadPart) {
      send(sent, copied);
      sent = copied;
    }
  }

  const size_t w0 = plan.windows_begin[k0], w1 = plan.windows_begin[k1];
  auto* windows = reinterpret_cast<WindowWrite*>(host + layout.windows_at);
  int64_t part_pixels = 0;
  for (size_t w = w0; w < w1; ++w) {
    WindowWrite& out = windows[w - w0];
    out = plan.windows[w];
    part_pixels = std::max(part_pixels, plan.max_pixels[static_cast<size_t>(out.image)]);
    out.image -= static_cast<int32_t>(k0);
  }
  int max_blocks = 0;
  for (size_t k = k0; k < k1; ++k) max_blocks = std::max(max_blocks, plan.images[k].image.blocks);
  send(sent, layout.runs_at + nruns * sizeof(DecodeRun));  // the files' last piece, descriptors, windows and runs
  upload_pinned(plan.pinned_dst, plan.pinned_src, plan.pinned_size, stream);

  auto* d_images = reinterpret_cast<SegmentImage*>(device + layout.images_at);
  C10_CUDA_CHECK(launch_find_segments(d_images, static_cast<int>(count), stream));
  const auto* d_runs = reinterpret_cast<const DecodeRun*>(device + layout.runs_at);
  C10_CUDA_CHECK(launch_decode_segments(d_images, d_runs, static_cast<int>(nruns), static_cast<int>(ntasks), stream));
  int slots = 0;          // the most slots of the part's images decoded in chunks
  int64_t slot_work = 0;  // their slots with a decode in stage 1
  for (size_t k = k0; k < k1; ++k) {
    const SegmentImage& im = plan.images[k].image;
    if (!im.chunked) continue;
    slots = std::max(slots, static_cast<int>(im.chunk_slots));
    slot_work += static_cast<int64_t>(im.num_chunks) * im.chunk_guesses;
  }
  if (slots > 0)
    C10_CUDA_CHECK(launch_decode_chunks(d_images, static_cast<int>(count), d_runs, static_cast<int>(nruns),
                                        static_cast<int>(ntasks), slots, slot_work, stream));
  C10_CUDA_CHECK(launch_idct_blocks(d_images, static_cast<int>(count), max_blocks, stream));
  Slot& slot = call.slot;
  C10_CUDA_CHECK(cudaMemcpyAsync(plan.status_host + k0, device + plan.status_at + k0 * sizeof(uint32_t),
                                 count * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
  if (slot.statuses_read[c] == nullptr)
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&slot.statuses_read[c], cudaEventDisableTiming | cudaEventBlockingSync));
  C10_CUDA_CHECK(cudaEventRecord(slot.statuses_read[c], stream));
  C10_CUDA_CHECK(cudaStreamWaitEvent(stream, call.state.caller_point, 0));  // the outputs' memory is free
  C10_CUDA_CHECK(launch_write_windows(d_images, reinterpret_cast<const WindowWrite*>(device + layout.windows_at),
                                      static_cast<int>(w1 - w0), part_pixels, stream));
  C10_CUDA_CHECK(cudaEventRecord(call.state.part_done[c], stream));
  C10_CUDA_CHECK(cudaStreamWaitEvent(call.caller, call.state.part_done[c], 0));
}

// Each image's segments (common/restart_plan.h says which), and the copy of each file in ordinary
// memory into the upload buffer, in image order on this thread and the helpers, while this one
// queues each part's uploads and kernels once its images are ready; with more helpers where files
// are copied (helper_threads.h says why).
void queue_parts(BatchPlan& plan, DecodeCall& call, const std::vector<Item>& items) {
  const size_t n = plan.images.size();
  plan.segment_runs.resize(n);
  const bool host_copies =
      std::any_of(plan.images.begin(), plan.images.end(), [](const ImagePlan& p) { return !p.pinned; });
  ChunkedWork per_image(
      n, kImagesPerChunk,
      [&plan, &items](size_t begin, size_t end) {
        for (size_t k = begin; k < end; ++k) prepare_image(plan, items, k);
      },
      host_copies ? kCopyHelpers : kFewHelpers);
  // Each part's window kernel runs after the caller's earlier work (such as what used the outputs'
  // memory before), and the caller's stream waits for each part's last kernel.
  record_caller_point(call);
  for (size_t c = 0; c < plan.parts; ++c) {
    RECORD_FUNCTION("custom_op::gpu_segments_part", std::vector<c10::IValue>());
    queue_part(plan, call, items, c, per_image);
  }
}

// The items of the images whose statuses are not kSegmentDecodeOk, once every part's are read back: in *again
// those whose first try fell short (kWindowCut), in *failed the others.
void read_statuses(const BatchPlan& plan, DecodeCall& call, std::vector<size_t>* again, std::vector<size_t>* failed) {
  for (size_t c = 0; c < plan.parts; ++c) C10_CUDA_CHECK(cudaEventSynchronize(call.slot.statuses_read[c]));
  for (size_t k = 0; k < plan.images.size(); ++k) {
    const uint32_t status = plan.status_host[k];
    if (status == kSegmentDecodeOk) continue;
    ((status & kWindowCut) != 0 ? again : failed)->push_back(plan.images[k].item);
  }
}

// Items whose decode (a leader's, for the items sharing it) failed go to the CPU path.
void send_failed_to_cpu(std::vector<Item>& items, const std::vector<size_t>& failed) {
  if (failed.empty()) return;
  std::vector<char> is_failed(items.size(), 0);
  for (const size_t i : failed) is_failed[i] = 1;
  g_fallbacks.fetch_add(static_cast<int64_t>(failed.size()), std::memory_order_relaxed);
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    const size_t leader = it.leader >= 0 ? static_cast<size_t>(it.leader) : i;
    if (it.path == kCudaDecoder && is_failed[leader]) it.path = kCpu;
  }
}

// The steps of decode() on a plan whose images are planned.
void queue_plan(BatchPlan& plan, DecodeCall& call, const std::vector<Item>& items) {
  order_images(plan);
  list_windows(plan, items, call.outputs);
  split_into_parts(plan);
  lay_out_buffer(plan);
  take_buffers(plan, call);
  queue_parts(plan, call, items);
  plan.queued = true;
}

class SegmentExecutor : public Executor {
 public:
  void claim(DecodeCall& call, std::vector<Item>& items) override {
    if (!own_decoder_allowed(call.options, call.testing)) return;
    list_regions(plan_, items);
    plan_images(plan_, call, items);
  }

  void decode(DecodeCall& call, std::vector<Item>& items) override {
    if (plan_.images.empty()) return;
    // For torch.profiler, as decode_cuda.cpp's phases: this call, and within it each part's queueing
    // (the rest is the layout).
    RECORD_FUNCTION("custom_op::gpu_segments_decode", std::vector<c10::IValue>());
    queue_plan(plan_, call, items);
  }

  // Waits for each part's statuses (its window kernel may still run: the caller's stream waits for it); decodes
  // again with the whole file the windows whose first try fell short.
  void finish(DecodeCall& call, std::vector<Item>& items) override {
    if (!plan_.queued) return;
    std::vector<size_t> again, failed;
    read_statuses(plan_, call, &again, &failed);
    send_failed_to_cpu(items, failed);
    if (!again.empty()) decode_again(call, items, again);
  }

 private:
  // A second plan over the slot's buffers, once the first plan's window kernels are done with them (a rare wait:
  // window_scan_bytes seldom falls short), with the whole files; the caller's stream waits for its window kernels
  // as for the first plan's, and the slot's `done` event is recorded again after them.
  void decode_again(DecodeCall& call, std::vector<Item>& items, const std::vector<size_t>& again) {
    RECORD_FUNCTION("custom_op::gpu_segments_again", std::vector<c10::IValue>());
    g_retries.fetch_add(static_cast<int64_t>(again.size()), std::memory_order_relaxed);
    for (size_t c = 0; c < plan_.parts; ++c) C10_CUDA_CHECK(cudaEventSynchronize(call.state.part_done[c]));
    BatchPlan retry;
    retry.regions = plan_.regions;
    retry.regions_begin = plan_.regions_begin;
    std::vector<size_t> failed;
    for (const size_t i : again) {
      ImagePlan p;
      p.item = i;
      if (plan_image(call, items[i], &p, false)) retry.images.push_back(p);
      else failed.push_back(i);
    }
    if (!retry.images.empty()) {
      queue_plan(retry, call, items);
      std::vector<size_t> short_again;
      read_statuses(retry, call, &short_again, &failed);
      TORCH_INTERNAL_ASSERT(short_again.empty(), "a decode of the whole file reported a first try's cut");
      C10_CUDA_CHECK(cudaEventRecord(call.slot.done, call.caller));
    }
    send_failed_to_cpu(items, failed);
  }

  BatchPlan plan_;
};

}  // namespace

bool segment_decoder_takes(const JpegHeader& h, size_t size) {
  const int64_t mean = mean_segment_bytes(h, size);
  return mean >= 0 && mean <= kMaxMeanSegmentBytes;
}

bool chunk_decoder_takes(const JpegHeader& h, size_t size) { return decodable_layout(h, size); }

bool own_decoder_allowed(const CallOptions& options, const TestingOptions& testing) {
  return testing.force_path != -1 ? testing.own_decoder_forced() : options.decoder != GpuDecoder::kNvjpeg;
}

bool nvjpeg_files_checked(const CallOptions& options, const TestingOptions& testing) {
  return options.check_entropy || own_decoder_allowed(options, testing);
}

std::unique_ptr<Executor> segment_executor() { return std::make_unique<SegmentExecutor>(); }

int64_t segment_decoder_fallbacks() { return g_fallbacks.load(std::memory_order_relaxed); }

int64_t segment_decoder_retries() { return g_retries.load(std::memory_order_relaxed); }

}  // namespace gpu
}  // namespace custom_op
