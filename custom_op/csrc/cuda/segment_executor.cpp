// Our own CUDA decoder as an executor (segment_decoder.h says how it decodes): it takes the files
// whose restart segments are short enough for one GPU thread each, and writes their windows straight
// into the outputs on the caller's stream. Items whose decode the kernels report as not exactly
// libjpeg's go to the CPU path once the kernels have finished (finish()).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "common/restart_plan.h"
#include "cuda/executor.h"
#include "cuda/scan_tables.h"
#include "cuda/segment_decoder.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

// Files whose restart segments hold more than this many bytes on average are left to the other
// decoders: a thread decodes its segment sequentially, and a launch lasts as long as the longest one.
constexpr int64_t kMaxMeanSegmentBytes = 4096;

std::atomic<int64_t> g_fallbacks{0};

// Bytes per upload call while the host copies the files (see decode()).
constexpr size_t kUploadPart = size_t{4} << 20;

size_t round_up(size_t value, size_t granule) { return (value + granule - 1) / granule * granule; }

// Whether p lies in page-locked host memory (a DataLoader with pin_memory=True delivers files so),
// asked of the CUDA runtime directly: Tensor::is_pinned() adds the dispatcher and torch's CUDA hooks
// (a device guard, a primary-context check) to the question, several times its cost, for every file
// of a batch.
bool in_pinned_memory(const void* p) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an address the runtime does not know: ordinary memory
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

struct Plan {
  size_t item;
  SegmentImage image;  // pointers filled in decode()
  const jc::HuffTable* dc[jc::kMaxComponents];
  const jc::HuffTable* ac[jc::kMaxComponents];
  int32_t color;
  bool pinned;  // its bytes are in pinned host memory: the GPU copies them itself
};

int32_t window_color(const Item& it) {
  if (it.header.components == 3 && it.channels == 3) return kWindowRgb;
  return it.channels == 3 ? kWindowGrayToRgb : kWindowGray;
}

class SegmentExecutor : public Executor {
 public:
  void claim(DecodeCall& call, std::vector<Item>& items) override {
    if (!call.testing.own_decoder_allowed()) return;
    trim_table_cache();
    // The windows each decode serves: its item's, and those of the items sharing it.
    std::vector<std::vector<Region>> windows(items.size());
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].path == kPending)
        windows[items[i].leader >= 0 ? size_t(items[i].leader) : i].push_back(items[i].region);
    for (size_t i = 0; i < items.size(); ++i) {
      Item& it = items[i];
      if (it.path != kPending || it.leader >= 0) continue;
      Plan p;
      p.item = i;
      if (plan(call, it, windows[i], &p)) {
        it.path = kCudaDecoder;
        plans_.push_back(p);
      }
    }
  }

  void decode(DecodeCall& call, std::vector<Item>& items) override {
    if (plans_.empty()) return;
    std::vector<int> plan_of(items.size(), -1);
    for (size_t k = 0; k < plans_.size(); ++k) plan_of[plans_[k].item] = static_cast<int>(k);
    std::vector<WindowWrite> windows;
    int64_t max_pixels = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      const int k = it.leader >= 0 ? plan_of[static_cast<size_t>(it.leader)] : plan_of[i];
      if (k < 0) continue;
      WindowWrite w;
      w.image = k;
      w.region_top = it.region.top;
      w.region_left = it.region.left;
      w.region_height = it.region.height;
      w.region_width = it.region.width;
      w.dst = call.outputs[i].data_ptr<uint8_t>();
      w.channels = it.channels;
      w.orientation = it.orientation;
      w.color = plans_[static_cast<size_t>(k)].color;
      windows.push_back(w);
      max_pixels = std::max<int64_t>(max_pixels, int64_t(it.region.height) * it.region.width);
    }

    // Huffman tables shared by several images are uploaded once.
    std::vector<const jc::HuffTable*> tables;
    std::unordered_map<const jc::HuffTable*, int> table_index;
    std::vector<int> dc_index(plans_.size() * jc::kMaxComponents), ac_index(plans_.size() * jc::kMaxComponents);
    auto index_of = [&](const jc::HuffTable* t) {
      const auto [at, added] = table_index.emplace(t, static_cast<int>(tables.size()));
      if (added) tables.push_back(t);
      return at->second;
    };
    for (size_t k = 0; k < plans_.size(); ++k) {
      for (int c = 0; c < plans_[k].image.frame.num_components; ++c) {
        dc_index[k * jc::kMaxComponents + c] = index_of(plans_[k].dc[c]);
        ac_index[k * jc::kMaxComponents + c] = index_of(plans_[k].ac[c]);
      }
    }

    // One device buffer: what is uploaded first, then what only the kernels use.
    const size_t n = plans_.size();
    size_t at = 0;
    auto take = [&at](size_t bytes) {
      at = round_up(at, 256);
      const size_t here = at;
      at += bytes;
      return here;
    };
    const size_t images_at = take(n * sizeof(SegmentImage));
    const size_t tasks_at = take(tasks_.size() * sizeof(SegmentTask));
    const size_t windows_at = take(windows.size() * sizeof(WindowWrite));
    const size_t tables_at = take(tables.size() * sizeof(jc::HuffTable));
    size_t pinned_files = 0;
    int64_t max_pinned = 0;
    for (const Plan& p : plans_) {
      if (!p.pinned) continue;
      ++pinned_files;
      max_pinned = std::max<int64_t>(max_pinned, static_cast<int64_t>(items[p.item].size));
    }
    const size_t copies_at = take(pinned_files * sizeof(ByteCopy));
    std::vector<size_t> bytes_at(n);
    for (size_t k = 0; k < n; ++k)
      if (!plans_[k].pinned) bytes_at[k] = take(items[plans_[k].item].size);
    const size_t upload = at;
    for (size_t k = 0; k < n; ++k)
      if (plans_[k].pinned) bytes_at[k] = take(items[plans_[k].item].size);
    std::vector<size_t> ranges_at(n), coef_at(n * jc::kMaxComponents), samples_at(n * jc::kMaxComponents);
    for (size_t k = 0; k < n; ++k) ranges_at[k] = take(2 * sizeof(int64_t) * plans_[k].image.num_segments);
    const size_t status_at = take(n * sizeof(uint32_t));
    int max_blocks = 0;
    for (size_t k = 0; k < n; ++k) {
      SegmentImage& im = plans_[k].image;
      const jc::Frame& f = im.frame;
      int64_t blocks = 0;
      for (int c = 0; c < f.num_components; ++c) {
        const int64_t block_rows = int64_t(im.mcu_rows) * f.mcu_blocks_v[c];
        coef_at[k * jc::kMaxComponents + c] = take(block_rows * f.blocks_per_row[c] * jc::kBlockSize * sizeof(int16_t));
        if (c >= im.idct_components) continue;
        const int64_t block_cols = int64_t(im.mcu_cols) * f.mcu_blocks_h[c];
        im.sample_pitch[c] = static_cast<int32_t>(block_cols * 8);
        samples_at[k * jc::kMaxComponents + c] = take(block_rows * 8 * block_cols * 8);
        blocks += block_rows * block_cols;
      }
      im.blocks = static_cast<int32_t>(blocks);
      max_blocks = std::max(max_blocks, im.blocks);
    }
    const size_t total = at;

    Slot& slot = call.slot;
    slot.segments.reserve(total, call.context.tag_stream);
    uint8_t* device = slot.segments.data();
    const size_t host_bytes = round_up(upload, 256) + n * sizeof(uint32_t);
    at::Tensor& pinned = slot.pinned_segments;
    if (!pinned.defined() || static_cast<size_t>(pinned.numel()) < host_bytes)
      pinned = at::empty({static_cast<int64_t>(host_bytes + host_bytes / 2)},
                         at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    uint8_t* host = pinned.data_ptr<uint8_t>();
    status_host_ = reinterpret_cast<uint32_t*>(host + round_up(upload, 256));

    auto* images = reinterpret_cast<SegmentImage*>(host + images_at);
    for (size_t k = 0; k < n; ++k) {
      SegmentImage im = plans_[k].image;
      for (int c = 0; c < jc::kMaxComponents; ++c) {
        const bool present = c < im.frame.num_components;
        im.dc[c] =
            present ? reinterpret_cast<const jc::HuffTable*>(device + tables_at) + dc_index[k * jc::kMaxComponents + c]
                    : nullptr;
        im.ac[c] =
            present ? reinterpret_cast<const jc::HuffTable*>(device + tables_at) + ac_index[k * jc::kMaxComponents + c]
                    : nullptr;
        im.coefficients[c] =
            present ? reinterpret_cast<int16_t*>(device + coef_at[k * jc::kMaxComponents + c]) : nullptr;
        im.samples[c] = c < im.idct_components ? device + samples_at[k * jc::kMaxComponents + c] : nullptr;
      }
      im.data = device + bytes_at[k];
      im.segment_begin = reinterpret_cast<int64_t*>(device + ranges_at[k]);
      im.segment_end = im.segment_begin + im.num_segments;
      im.status = reinterpret_cast<uint32_t*>(device + status_at) + k;
      std::memcpy(images + k, &im, sizeof(im));
    }
    auto* copies = reinterpret_cast<ByteCopy*>(host + copies_at);
    for (size_t k = 0, j = 0; k < n; ++k)
      if (plans_[k].pinned) copies[j++] = {items[plans_[k].item].bytes, device + bytes_at[k], plans_[k].image.size};
    std::memcpy(host + tasks_at, tasks_.data(), tasks_.size() * sizeof(SegmentTask));
    std::memcpy(host + windows_at, windows.data(), windows.size() * sizeof(WindowWrite));
    for (size_t t = 0; t < tables.size(); ++t)
      std::memcpy(host + tables_at + t * sizeof(jc::HuffTable), tables[t], sizeof(jc::HuffTable));

    // The descriptors, then the files in ordinary memory, uploaded as the host copies them, a few
    // megabytes at a time: the transfer of one part overlaps the copying of the next.
    const cudaStream_t stream = call.caller;
    size_t sent = 0;
    auto send = [&](size_t end) {
      C10_CUDA_CHECK(cudaMemcpyAsync(device + sent, host + sent, end - sent, cudaMemcpyHostToDevice, stream));
      sent = end;
    };
    for (size_t k = 0; k < n; ++k) {
      if (plans_[k].pinned) continue;
      const Item& it = items[plans_[k].item];
      std::memcpy(host + bytes_at[k], it.bytes, it.size);
      if (bytes_at[k] + it.size - sent >= kUploadPart) send(bytes_at[k] + it.size);
    }
    if (upload > sent) send(upload);
    auto* d_images = reinterpret_cast<SegmentImage*>(device + images_at);
    C10_CUDA_CHECK(launch_copy_bytes(reinterpret_cast<const ByteCopy*>(device + copies_at),
                                     static_cast<int>(pinned_files), max_pinned, stream));
    C10_CUDA_CHECK(launch_find_segments(d_images, static_cast<int>(n), stream));
    C10_CUDA_CHECK(launch_decode_segments(d_images, reinterpret_cast<const SegmentTask*>(device + tasks_at),
                                          static_cast<int>(tasks_.size()), stream));
    C10_CUDA_CHECK(launch_idct_blocks(d_images, static_cast<int>(n), max_blocks, stream));
    C10_CUDA_CHECK(launch_write_windows(d_images, reinterpret_cast<const WindowWrite*>(device + windows_at),
                                        static_cast<int>(windows.size()), max_pixels, stream));
    C10_CUDA_CHECK(
        cudaMemcpyAsync(status_host_, device + status_at, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    if (slot.segments_read == nullptr)
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&slot.segments_read, cudaEventDisableTiming | cudaEventBlockingSync));
    C10_CUDA_CHECK(cudaEventRecord(slot.segments_read, stream));
    launched_ = true;
  }

  void finish(DecodeCall& call, std::vector<Item>& items) override {
    if (!launched_) return;
    C10_CUDA_CHECK(cudaEventSynchronize(call.slot.segments_read));
    std::vector<char> failed(items.size(), 0);
    for (size_t k = 0; k < plans_.size(); ++k) {
      if (status_host_[k] == kSegmentDecodeOk) continue;
      failed[plans_[k].item] = 1;
      g_fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Item& it = items[i];
      const size_t leader = it.leader >= 0 ? static_cast<size_t>(it.leader) : i;
      if (it.path == kCudaDecoder && failed[leader]) it.path = kCpu;
    }
  }

 private:
  bool plan(const DecodeCall& call, Item& it, const std::vector<Region>& windows, Plan* p) {
    const JpegHeader& h = it.header;
    if (h.restart_interval <= 0 || (h.sof != 0xC0 && h.sof != 0xC1) || h.precision != 8 ||
        h.scan_components != h.components || h.header_end == 0)
      return false;
    ScanTables st;
    if (!read_scan_tables(it.bytes, h.header_end, h.components, &st)) return false;
    SegmentImage& im = p->image;
    std::memset(&im, 0, sizeof(im));
    jc::Frame& f = im.frame;
    if (!jc::make_frame(h.width, h.height, h.components, h.h, h.v, st.scan_order, &f)) return false;
    const int64_t total = jc::frame_total_mcus(f);
    const int64_t interval = h.restart_interval;
    im.num_segments = (total + interval - 1) / interval;
    if (im.num_segments > (int64_t{1} << 30)) return false;
    if ((static_cast<int64_t>(it.size) - static_cast<int64_t>(h.header_end)) / im.num_segments > kMaxMeanSegmentBytes)
      return false;
    for (int c = 0; c < h.components; ++c) {
      p->dc[c] = built_huffman_table(st.dc[c], true);
      p->ac[c] = built_huffman_table(st.ac[c], false);
      if (p->dc[c] == nullptr || p->ac[c] == nullptr) {
        it.path = kCpu;  // a table libjpeg refuses too: its error comes from the CPU path
        return false;
      }
      im.quant[c] = st.quant[c];
    }
    im.size = static_cast<int64_t>(it.size);
    // A sub-image the planner built (it.segments) lives in ordinary memory; the caller's tensor may be
    // pinned.
    p->pinned = !it.segments.defined() && in_pinned_memory(it.bytes);
    im.scan_start = static_cast<int64_t>(h.header_end);
    im.mcus_per_segment = interval;
    p->color = window_color(it);
    im.idct_components = p->color == kWindowRgb ? f.num_components : 1;

    // The MCUs decoded: those of the region the planner chose (the windows with the margins chroma
    // upsampling reads), and one more all round, so that the upsampler finds every neighbour it reads.
    const int mcu_w = mcu_width(h), mcu_h = mcu_height(h);
    const Region& d = it.decoded;
    const int c0 = std::max(0, d.left / mcu_w - 1), r0 = std::max(0, d.top / mcu_h - 1);
    const int c1 = std::min(f.mcus_per_row, (d.left + d.width + mcu_w - 1) / mcu_w + 1);
    const int r1 = std::min(f.mcu_rows, (d.top + d.height + mcu_h - 1) / mcu_h + 1);
    if (c1 <= c0 || r1 <= r0) return false;
    im.mcu_row0 = r0;
    im.mcu_rows = r1 - r0;
    im.mcu_col0 = c0;
    im.mcu_cols = c1 - c0;

    // The segments decoded: every segment the CPU path reads for any of the windows, so that damage it
    // would report is found here too (and the items go to it). It reads a whole image, or a sub-image
    // the planner built (the CPU path builds the same one for the window it was built around, and
    // libjpeg reads it as any file), from the first segment down to the window: here, every segment
    // through the rectangle's last row. For other windows decoder_segments (common/restart_plan.h)
    // adds to the segments holding the rectangle what the CPU path reads beyond them: a sub-image's
    // filler, or every row from the top where no sub-image saves work.
    const int32_t image = static_cast<int32_t>(plans_.size());
    if (call.options.whole || it.segments.defined()) {
      const int64_t last = (int64_t(r1) * f.mcus_per_row - 1) / interval;
      for (int64_t s = 0; s <= last; ++s) tasks_.push_back({image, static_cast<int32_t>(s)});
    } else {
      for (const int64_t s : decoder_segments(frame_facts(h), r0, r1, c0, c1, windows.data(), windows.size()))
        tasks_.push_back({image, static_cast<int32_t>(s)});
    }
    return true;
  }

  std::vector<Plan> plans_;
  std::vector<SegmentTask> tasks_;
  uint32_t* status_host_ = nullptr;
  bool launched_ = false;
};

}  // namespace

std::unique_ptr<Executor> segment_executor() { return std::make_unique<SegmentExecutor>(); }

int64_t segment_decoder_fallbacks() { return g_fallbacks.load(std::memory_order_relaxed); }

}  // namespace gpu
}  // namespace custom_op
