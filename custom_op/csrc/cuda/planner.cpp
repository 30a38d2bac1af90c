#include "cuda/planner.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <unordered_map>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/StringUtil.h>

#include "common/random_access.h"
#include "common/scaled_window.h"
#include "cuda/executor.h"

namespace custom_op {
namespace gpu {
namespace {

// Prepared files of at least this many pixels give nvJPEG the sub-image of a window's segments.
// Building it costs host time in proportion to the file, while the JPEG engines' time has a fixed
// part per image: on smaller images the whole file decodes sooner (bench/results/gpu_h100.md).
constexpr int64_t kSegmentsMinPixels = 700000;

int output_channels(ReadMode mode, ColorSpace cs) {
  switch (mode) {
    case ReadMode::kGray: return 1;
    case ReadMode::kRgb: return 3;
    default:
      if (cs == ColorSpace::kGray) return 1;
      if (cs == ColorSpace::kCmyk || cs == ColorSpace::kYcck) return 4;
      if (cs == ColorSpace::kUnknown) return 0;
      return 3;
  }
}

// Whether each component's sampling factors divide the largest ones: the samplings libjpeg upsamples
// (it refuses the others). jpeg_core's upsampling is libjpeg's for every one of them: the CPU harness
// checks the usual ones and a dozen unusual ones, luma subsampled included (tests/test_jpeg_core.py).
bool integral_sampling(const JpegHeader& h) {
  int max_h = 0, max_v = 0;
  for (int c = 0; c < h.components; ++c) {
    max_h = std::max(max_h, h.h[c]);
    max_v = std::max(max_v, h.v[c]);
  }
  for (int c = 0; c < h.components; ++c)
    if (h.h[c] < 1 || h.v[c] < 1 || max_h % h.h[c] != 0 || max_v % h.v[c] != 0) return false;
  return true;
}

// Files a GPU decoder may take: 8-bit sequential or progressive Huffman-coded files with an end, in
// YCbCr of a sampling libjpeg upsamples, or grey. Everything else (CMYK/YCCK, RGB-stored, arithmetic,
// lossless, 12-bit, files cut short, where on_warning="raise" must raise as libjpeg does) goes to the
// CPU path. *nvjpeg: whether nvJPEG may take it too, decoding it like libjpeg up to IDCT and
// upsampling rounding: only 4:4:4, 4:2:2, 4:2:0, 4:4:0 and grey. The other samplings (4:1:1, 4:1:0,
// unusual per-component factors) only our own CUDA decoder takes.
bool gpu_eligible(const JpegHeader& h, ColorSpace cs, bool unsure, bool* nvjpeg) {
  *nvjpeg = false;
  if (unsure || !h.has_eoi || h.precision != 8) return false;
  if (h.sof != 0xC0 && h.sof != 0xC1 && h.sof != 0xC2) return false;
  if (cs == ColorSpace::kGray) return *nvjpeg = h.components == 1;
  if (cs != ColorSpace::kYCbCr || h.components != 3) return false;
  const Subsampling ss = subsampling_of(h);
  *nvjpeg = ss == Subsampling::k444 || ss == Subsampling::k422 || ss == Subsampling::k420 || ss == Subsampling::k440;
  return *nvjpeg || integral_sampling(h);
}

// The bytes of a file that prepare() reads, asked into the cache some items ahead of its turn: the
// header's markers (in its first kPrefetchBytes, for the files prepare_jpeg writes and most photos) and
// the last bytes (the end-of-image marker). A batch's files are seldom in the cache (a DataLoader
// worker wrote them), and the header scans waited for their lines one after another: most of the
// planner's time at large batches. Only a tensor prepare() would read is touched; a prefetch never faults.
constexpr size_t kPrefetchItems = 8;
constexpr int64_t kPrefetchBytes = 1024;
constexpr int64_t kCacheLine = 64;

// Whether `data` is what the header scan reads: a dense, contiguous 1-D uint8 tensor on the CPU.
bool readable_bytes(const at::Tensor& data) {
  return data.layout() == at::kStrided && !data.is_nested() && data.device().is_cpu() &&
         data.scalar_type() == at::kByte && data.dim() == 1 && data.is_contiguous();
}

void prefetch_file(const at::Tensor& data) {
  if (!readable_bytes(data) || !data.has_storage()) return;
  const int64_t size = data.numel();
  if (size <= 0) return;
  const char* bytes = static_cast<const char*>(data.const_data_ptr());
  for (int64_t at = 0; at < std::min(size, kPrefetchBytes); at += kCacheLine) __builtin_prefetch(bytes + at);
  __builtin_prefetch(bytes + std::max<int64_t>(0, size - kCacheLine));
  __builtin_prefetch(bytes + size - 1);
}

// The region a decoder writes for a full-size window (common/scaled_window.h's region_with_margin): with
// the pixel alone around it, windows starting on an odd row or column of a subsampled image differed
// from the whole-image decode in nvJPEG's (tests/test_gpu.py, chroma edge).
Region with_margin(const Region& r, const JpegHeader& h) {
  return region_with_margin(r, scaled_grid(h.width, h.height, mcu_width(h), mcu_height(h), 8));
}

// The CPU path's checks of an item's file (cpu/decode_cpu.cpp), on our own header scan. An item that
// fails one, or that our scan does not understand, goes to the CPU path, whose operator then raises
// its error, so that every message is the CPU operator's own; only a tensor that operator cannot be
// called with fails here, in its words.
void scan_item(Item& it, const CallOptions& options, const TestingOptions& testing) {
  it.path = kCpu;
  const at::Tensor& data = it.data;
  const char* op = options.whole ? "decode_jpeg" : "decode_and_crop_jpeg";
  if (!data.device().is_cpu()) {
    fail_item(it, ItemStatus::kTypeError, c10::str(op, ": data must be a CPU tensor, got one on ", data.device()));
    return;
  }
  // (Python passes a batch's tensors on unchecked: a sparse or nested one must fail here, as the CPU
  // path's checks would throw on its layout rather than report it.)
  if (data.layout() != at::kStrided || data.is_nested()) {
    fail_item(it, ItemStatus::kTypeError, c10::str(op, ": data must be a dense tensor, got a sparse or nested one"));
    return;
  }
  if (!readable_bytes(data)) return;
  it.bytes = data.data_ptr<uint8_t>();
  it.size = static_cast<size_t>(data.numel());
  if (!parse_jpeg_header(it.bytes, it.size, &it.header)) return;
  const JpegHeader& h = it.header;
  it.orientation = options.apply_exif_orientation ? header_orientation(h) : 1;
  if (options.max_pixels > 0 && int64_t(h.width) * int64_t(h.height) > options.max_pixels) return;
  it.header_known = true;
  bool unsure = false;
  const ColorSpace cs = libjpeg_color_space(h, &unsure);
  it.channels = output_channels(options.mode, cs);
  if (!gpu_eligible(h, cs, unsure, &it.nvjpeg_takes) || testing.cpu_only()) return;
  it.path = kPending;
  it.own_decoder =
      own_decoder_allowed(options, testing) && (segment_decoder_takes(h, it.size) || chunk_decoder_takes(h, it.size));
}

// The item's window at its scale: the CPU operator's check that it fits the scaled displayed image,
// and its stored-frame region. A window that does not fit goes to the CPU path, which raises.
void place_window(Item& it, int scale, const CallOptions& options, const TestingOptions& testing) {
  it.scale = scale;
  if (!it.header_known) return;
  const JpegHeader& h = it.header;
  const ScaledGrid grid = scaled_grid(h.width, h.height, mcu_width(h), mcu_height(h), scale);
  const bool swap = swaps_axes(it.orientation);
  const int64_t image_h = swap ? grid.width : grid.height;
  const int64_t image_w = swap ? grid.height : grid.width;
  if (options.whole) {
    it.top = it.left = 0;
    it.height = image_h;
    it.width = image_w;
  } else if (!(it.height > 0 && it.width > 0 && it.top >= 0 && it.left >= 0 && it.top < image_h && it.left < image_w &&
               it.height <= image_h - it.top && it.width <= image_w - it.left)) {
    it.path = kCpu;
    return;
  }
  it.shape_known = true;
  it.region = stored_region(it.orientation, grid.height, grid.width, static_cast<int>(it.top),
                            static_cast<int>(it.left), static_cast<int>(it.height), static_cast<int>(it.width));
  // nvJPEG decodes at full size only: a scaled item that our own decoder does not take goes to the CPU.
  if (scale != 8 && !it.own_decoder) it.path = kCpu;
  it.decoded = testing.no_margin ? it.region : region_with_margin(it.region, grid);
}

// A file repeated in the batch (several windows of one photo) is decoded once, over the bounding box
// of its windows' regions; every window is then cut from that one decode.
// Windows at different scales come from different decodes: one map per scale (1, 2, 4, 8).
void share_repeated_files(std::vector<Item>& items) {
  std::unordered_map<const uint8_t*, size_t> first[4];
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    if (it.path != kPending) continue;
    auto [where, inserted] = first[__builtin_ctz(static_cast<unsigned>(it.scale)) & 3].emplace(it.bytes, i);
    Item& leader = items[where->second];
    if (inserted || leader.size != it.size) continue;
    it.leader = static_cast<int>(where->second);
    leader.decoded = bounding_box(leader.decoded, it.decoded);
  }
}

// Files prepared for random access (custom_op.prepare_jpeg: restart segments of at most an MCU row's
// worth of MCUs, which may run from one row into the next; common/random_access.h) give nvJPEG the
// smaller JPEG of the segments around their windows, the sub-image the CPU path decodes (built by the
// CPU library's _jpeg_sub_image): the JPEG engines' time grows with the bytes they decode. The window
// then lies elsewhere in the sub-image, whose own header (sampling, width) the copy-out reads; the
// sub-image keeps the neighbours chroma upsampling needs, so the pixels are those of the whole file.
// A file repeated in the batch gets one sub-image around all its windows where `shared_allowed`.
// Files our own CUDA decoder takes (where `own_decoder`) get none: it decodes only the segments around
// the windows of the whole file, and building the sub-image would cost host time for nothing.
void use_sub_images(std::vector<Item>& items, SegmentsRule rule, bool shared_allowed, bool own_decoder) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("custom_op::_jpeg_sub_image", "")
          .typed<std::tuple<at::Tensor, std::vector<int64_t>>(const at::Tensor&, int64_t, int64_t, int64_t, int64_t)>();
  std::vector<std::vector<size_t>> followers(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].leader >= 0) followers[static_cast<size_t>(items[i].leader)].push_back(i);
  for (size_t i = 0; i < items.size(); ++i) {
    Item& leader = items[i];
    if (leader.path != kPending || leader.leader >= 0 || !leader.nvjpeg_takes || leader.scale != 8 ||
        !random_access_layout(layout_facts(leader.header)))
      continue;
    if (int64_t(leader.header.width) * leader.header.height < kSegmentsMinPixels && rule != SegmentsRule::kAlways)
      continue;
    if (!followers[i].empty() && !shared_allowed) continue;
    if (own_decoder && segment_decoder_takes(leader.header, leader.size)) continue;
    Region want = leader.region;
    for (size_t j : followers[i]) want = bounding_box(want, items[j].region);
    auto [bytes, where] = op.call(leader.data, want.top, want.left, want.height, want.width);
    if (where.size() != 4 || bytes.numel() == 0) continue;
    JpegHeader sub;
    if (!parse_jpeg_header(bytes.data_ptr<uint8_t>(), static_cast<size_t>(bytes.numel()), &sub) ||
        sub.height != where[2] || sub.width != where[3] || sub.components != leader.header.components ||
        sub.sof != leader.header.sof || !sub.has_eoi)
      continue;
    leader.segments = bytes;
    leader.bytes = bytes.data_ptr<uint8_t>();
    leader.size = static_cast<size_t>(bytes.numel());
    auto move_into = [&](Item& it) {
      it.header = sub;
      it.region.top -= static_cast<int>(where[0]);
      it.region.left -= static_cast<int>(where[1]);
      it.decoded = with_margin(it.region, sub);
    };
    move_into(leader);
    for (size_t j : followers[i]) {
      move_into(items[j]);
      leader.decoded = bounding_box(leader.decoded, items[j].decoded);
    }
  }
}

}  // namespace

GpuDecoder checked_gpu_decoder(int64_t code) {
  CUSTOM_OP_CHECK_VALUE(code >= 0 && code <= static_cast<int64_t>(GpuDecoder::kNvjpeg), kMessagePrefix,
                        "gpu_decoder must be 0 (auto), 1 (cuda) or 2 (nvjpeg), got ", code);
  return static_cast<GpuDecoder>(code);
}

std::vector<Item> scan_items(at::TensorList data, const CallOptions& options, const TestingOptions& testing) {
  std::vector<Item> items(data.size());
  for (size_t i = 0; i < std::min(items.size(), kPrefetchItems); ++i) prefetch_file(data[i]);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i + kPrefetchItems < items.size()) prefetch_file(data[i + kPrefetchItems]);
    Item& it = items[i];
    it.data = data[i];
    scan_item(it, options, testing);
  }
  return items;
}

void plan_windows(std::vector<Item>& items, c10::IntArrayRef tops, c10::IntArrayRef lefts, c10::IntArrayRef heights,
                  c10::IntArrayRef widths, c10::IntArrayRef scales, const CallOptions& options,
                  const TestingOptions& testing) {
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    if (!options.whole) {
      it.top = tops[i];
      it.left = lefts[i];
      it.height = heights[i];
      it.width = widths[i];
    }
    place_window(it, scales.empty() ? 8 : static_cast<int>(scales[i]), options, testing);
  }
  if (!testing.no_dedupe) share_repeated_files(items);
  // A whole image has no smaller sub-image; and a sub-image's region gets margins, which no_margin
  // leaves out.
  if (!options.whole && !testing.no_margin && testing.segments != SegmentsRule::kNever)
    // One sub-image shared by several windows may leave out a segment that one window's own CPU decode
    // reads (its sub-image's filler, or the rows from the top): our CUDA decoder and check_entropy, which
    // must see every segment the CPU path reads, get the whole file for a repeated one.
    use_sub_images(items, testing.segments, !nvjpeg_files_checked(options, testing),
                   own_decoder_allowed(options, testing));
}

std::vector<Item> plan_items(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                             c10::IntArrayRef heights, c10::IntArrayRef widths, c10::IntArrayRef scales,
                             const CallOptions& options, const TestingOptions& testing) {
  std::vector<Item> items = scan_items(data, options, testing);
  plan_windows(items, tops, lefts, heights, widths, scales, options, testing);
  return items;
}

void scaled_image_size(const Item& it, int scale, int64_t* height, int64_t* width) {
  const ScaledGrid grid =
      scaled_grid(it.header.width, it.header.height, mcu_width(it.header), mcu_height(it.header), scale);
  const bool swap = swaps_axes(it.orientation);
  *height = swap ? grid.width : grid.height;
  *width = swap ? grid.height : grid.width;
}

void leave_to_cpu_what_nvjpeg_cannot_take(std::vector<Item>& items, const TestingOptions& testing) {
  // (A repeated file's other items follow their leader's path: share_leader_decodes.)
  for (Item& it : items)
    if (it.path == kPending && it.leader < 0 && (!it.nvjpeg_takes || it.scale != 8 || !testing.nvjpeg_allowed()))
      it.path = kCpu;
}

// nvJPEG decodes damaged entropy-coded data without a word (a bad code, a missing restart marker, a
// file cut short and ended with an end-of-image marker...), where libjpeg warns or raises. So each
// file nvJPEG would get (its sub-image, where it has one) is walked on the CPU first, in one call
// through the dispatcher, in parallel on the intra-op pool; any file the check does not pass (damage,
// a libjpeg warning or error in its headers, or a scan the walk does not take, such as a progressive
// one) goes to the CPU path, with the other windows of that file.
void send_unchecked_files_to_cpu(std::vector<Item>& items) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("custom_op::_check_entropy_data", "")
                       .typed<std::vector<int64_t>(at::TensorList)>();
  std::vector<size_t> leaders;
  std::vector<at::Tensor> files;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (it.path != kPending || it.leader >= 0) continue;
    leaders.push_back(i);
    files.push_back(it.segments.defined() ? it.segments : it.data);
  }
  if (files.empty()) return;
  const std::vector<int64_t> found = op.call(files);
  std::vector<bool> to_cpu(items.size(), false);
  for (size_t k = 0; k < leaders.size(); ++k) to_cpu[leaders[k]] = found[k] != 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    if (it.path != kPending || !to_cpu[it.leader >= 0 ? static_cast<size_t>(it.leader) : i]) continue;
    it.path = kCpu;
    it.leader = -1;
  }
}

}  // namespace gpu
}  // namespace custom_op
