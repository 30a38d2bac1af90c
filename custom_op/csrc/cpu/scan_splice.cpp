#include "scan_splice.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "huffman_skip.h"

namespace custom_op {
namespace {

std::atomic<int64_t> g_spliced_decodes{0};

// Below this many blocks above the window the splice does not pay: parsing a second header and
// rewriting an MCU cost about what the faster walk saved on a couple of hundred blocks, when
// jpeg_skip_scanlines walked with libjpeg's entropy decoder. Deriving the walk's tables, when this
// thread has not seen the file's tables yet, costs about as much again as walking several hundred:
// such files need kUncachedFactor times as many. Since our own entropy decoder (entropy_decoder.h)
// walks jpeg_skip_scanlines' rows with the same walker, the splice saves nothing at any size
// (bench/bench_cpu_crop.py: 1-3% slower than without it, ImageNet to 4000x3000), so it is off by
// default (kNever); set_min_blocks_to_skip turns it on.
constexpr int64_t kNever = -1;
constexpr int64_t kUncachedFactor = 4;

std::atomic<int64_t> g_min_blocks{kNever};

}  // namespace

int64_t set_min_blocks_to_skip(int64_t min_blocks) {
  return g_min_blocks.exchange(min_blocks, std::memory_order_relaxed);
}

bool build_spliced_image(const jpeg_decompress_struct& cinfo, const uint8_t* data, size_t size,
                         size_t scan_start, const Region& region, SplicedImage* out) {
  const int64_t min_blocks = g_min_blocks.load(std::memory_order_relaxed);
  if (min_blocks < 0 || scan_start > size) return false;
  if (cinfo.scale_denom != 8 || cinfo.scale_num < 1 || cinfo.scale_num > 16) return false;
  const int n = cinfo.num_components;
  const int max_v = cinfo.max_v_samp_factor;
  if (n < 1 || n > 4 || cinfo.comp_info == nullptr || max_v < 1 || max_v > MAX_SAMP_FACTOR) return false;
  const int64_t s = cinfo.scale_num;
  const int64_t W = cinfo.image_width, H = cinfo.image_height;
  const int64_t out_w = cinfo.output_width, out_h = cinfo.output_height;
  if (W < 1 || H < 1 || out_w != (W * s + 7) / 8 || out_h != (H * s + 7) / 8) return false;
  if (region.top < 0 || region.left < 0 || region.height < 1 || region.width < 1 ||
      region.height > out_h - region.top || region.width > out_w - region.left)
    return false;

  // Rows of output above the window that vertical chroma upsampling reads: keep them inside the new
  // image rather than on its top edge, where libjpeg would replicate instead.
  bool subsampled_v = false;
  for (int i = 0; i < n; ++i) subsampled_v |= cinfo.comp_info[i].v_samp_factor < max_v;
  const int64_t margin_y = n > 1 && subsampled_v ? max_v : 0;
  const int64_t mcu_height = n == 1 ? DCTSIZE : DCTSIZE * max_v;  // full-size pixels
  const int64_t mcu_out_h = mcu_height * s / 8;
  const int64_t rows_to_skip = std::max<int64_t>(0, region.top - margin_y) / mcu_out_h;
  if (rows_to_skip < 1) return false;
  // A decode that reaches the last MCU rows reads to the end of the data, where the outcome must be
  // libjpeg's own (decode_region_spliced redoes it): do not start what would be redone.
  const int64_t mcu_rows = (H + mcu_height - 1) / mcu_height;
  const int64_t last_row_read = (int64_t(region.top) + region.height - 1 + margin_y) / mcu_out_h + 1;
  if (last_row_read + 1 >= mcu_rows) return false;
  int64_t blocks_per_mcu = n == 1 ? 1 : 0;
  for (int i = 0; n > 1 && i < n; ++i)
    blocks_per_mcu += int64_t(cinfo.comp_info[i].h_samp_factor) * cinfo.comp_info[i].v_samp_factor;
  const int64_t mcu_width = n == 1 ? DCTSIZE : DCTSIZE * int64_t(cinfo.max_h_samp_factor);
  const int64_t blocks_to_skip = rows_to_skip * ((W + mcu_width - 1) / mcu_width) * blocks_per_mcu;
  if (blocks_to_skip < min_blocks) return false;
  if (blocks_to_skip < kUncachedFactor * min_blocks && !scan_tables_cached(cinfo)) return false;

  ScanLayout scan;
  if (!scan_layout(cinfo, &scan) || scan.mcu_height != mcu_height || rows_to_skip >= scan.mcu_rows)
    return false;
  BitReader in(data, scan_start, size);
  int32_t pred[4] = {0, 0, 0, 0};
  if (!skip_mcus(in, scan, rows_to_skip * scan.mcus_per_row, pred)) return false;
  int32_t pred_before[4];
  std::memcpy(pred_before, pred, sizeof(pred));
  // The first MCU alone usually has room (blocks that end early) to realign; full blocks (high
  // quality) may not, and each further MCU rewritten adds its blocks' room.
  RecordedBlock blocks[kMaxRewrittenBlocks];
  const int max_mcus = std::min<int64_t>(kMaxRewrittenBlocks / scan.blocks_in_mcu,
                                         scan.mcus_per_row * scan.mcu_rows - rows_to_skip * scan.mcus_per_row);
  const int64_t new_height = H - rows_to_skip * mcu_height;
  out->head.clear();
  out->head.reserve(scan_start + 1024);
  if (!append_sub_header(data, scan_start, static_cast<int>(new_height), static_cast<int>(W), &out->head))
    return false;
  BitWriter writer(&out->head);
  int64_t end_bit = 0;
  int end_in_byte = 0;
  bool written = false;
  for (int mcus = 1; mcus <= max_mcus && !written; ++mcus) {
    if (!record_mcu(in, scan, pred, blocks + (mcus - 1) * scan.blocks_in_mcu)) return false;
    end_bit = in.consumed();
    end_in_byte = static_cast<int>(end_bit % 8);
    written = write_first_mcus(writer, scan, blocks, mcus, pred_before, end_in_byte);
  }
  if (!written || writer.pending_bits() != end_in_byte) return false;
  size_t tail_start;
  if (end_in_byte != 0) {
    // The rewritten MCUs end on the same bit of their last byte as the originals: complete that byte
    // with the original's remaining bits.
    const size_t at = in.offset_of(end_bit / 8);
    if (at >= size) return false;
    const uint8_t byte = data[at];
    writer.put(byte & ((1u << (8 - end_in_byte)) - 1), 8 - end_in_byte);
    tail_start = at + 1 + (byte == 0xFF ? 1 : 0);  // past its stuffed zero too
  } else {
    tail_start = in.offset_of(end_bit / 8);
  }
  if (!writer.aligned() || tail_start > size) return false;
  out->tail = data + tail_start;
  out->tail_size = size - tail_start;
  out->region = {static_cast<int>(region.top - rows_to_skip * mcu_out_h), region.left, region.height,
                 region.width};
  ExpectedFrame& f = out->frame;
  f.height = static_cast<int>(new_height);
  f.width = static_cast<int>(W);
  f.num_components = n;
  f.color_space = cinfo.jpeg_color_space;
  f.restart_interval = 0;
  for (int i = 0; i < n; ++i) {
    f.h_samp[i] = cinfo.comp_info[i].h_samp_factor;
    f.v_samp[i] = cinfo.comp_info[i].v_samp_factor;
  }
  return true;
}

int64_t spliced_decodes() { return g_spliced_decodes.load(std::memory_order_relaxed); }

void count_spliced_decode() { g_spliced_decodes.fetch_add(1, std::memory_order_relaxed); }

}  // namespace custom_op
