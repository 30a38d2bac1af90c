// One item of a GPU batch, as the planner, the executors, the copy-out and the CPU fallback share it,
// and what a call asks of every item.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <nvjpeg.h>

#include "common/decode_path.h"
#include "common/item_status.h"
#include "common/options.h"
#include "common/region.h"
#include "cuda/jpeg_header.h"

namespace custom_op {
namespace gpu {

// Which GPU decoder takes the baseline files both can (the public gpu_decoder option; its codes are
// custom_op/_args.py's GPU_DECODERS): kAuto, the default, is kCuda on every GPU, since our decoder in
// chunks outruns the JPEG engines from batch 64 up (bench/results/gpu_h200.md) and gives every item the
// CPU path's outcome; kCuda our CUDA decoder every file it takes (the others in chunks), and nvJPEG only a
// file it leaves that the CPU-side check passes (progressive files never do); kNvjpeg nvJPEG every file it
// takes.
enum class GpuDecoder : int64_t { kAuto = 0, kCuda = 1, kNvjpeg = 2 };

// The decoding options (common/options.h: mode, apply_exif_orientation, on_warning, max_pixels), and
// what only a GPU call asks.
struct CallOptions : DecodeOptions {
  bool whole = false;          // every item decoded whole (the displayed image); the windows are ignored
  bool check_entropy = false;  // nvJPEG gets only files the CPU-side check finds nothing wrong with (planner.h)
  GpuDecoder decoder = GpuDecoder::kAuto;
};

// The operators' decoder argument, checked (ValueError for a code that names none).
GpuDecoder checked_gpu_decoder(int64_t code);

struct Item {
  at::Tensor data;                 // the encoded bytes (CPU)
  at::Tensor segments;             // when defined: the sub-image nvJPEG decodes instead of data (planner.h)
  const uint8_t* bytes = nullptr;  // what nvJPEG decodes: the bytes of data, or of segments
  size_t size = 0;
  JpegHeader header;          // of `bytes`
  bool header_known = false;  // our header scan understood the file, and max_pixels allows it (scan_items)
  bool shape_known = false;   // header_known, and the window fits the image at the item's scale
  int orientation = 1;
  // The DCT scale in eighths (1, 2, 4 or 8): the item is decoded at scale / 8 of the image's size each
  // way, as the CPU operator's scale_num gives it, and its window is in that output's pixels.
  int scale = 8;
  int64_t top = 0, left = 0, height = 0, width = 0;  // the displayed-frame window; with `whole`, the image's
  Region region{0, 0, 0, 0};  // the same window in the stored frame of `bytes`, in output pixels at `scale`
  // What the decoder writes (to staging, or our own decoder's rectangle is made from): the region with
  // margins, or the whole image; output pixels at `scale`.
  Region decoded{0, 0, 0, 0};
  int channels = 0;  // output channels; 0 while only the CPU path can tell
  DecodePath path = kCpu;
  bool nvjpeg_takes = false;  // nvJPEG may decode it too, not only our own CUDA decoder (planner.h)
  bool own_decoder = false;   // our own CUDA decoder takes the file, as far as the host can tell (planner.h)
  int leader = -1;  // an earlier item with the same bytes and scale, whose decode this one takes its window from
  nvjpegOutputFormat_t staged_format = NVJPEG_OUTPUT_RGB;  // what the decoder writes (staged_planes)
  size_t staging_offset = 0;
  int64_t staging_pitch = 0;
  ItemStatus status = ItemStatus::kOk;
  std::string message;  // why it failed, or libjpeg's warnings (kWarned)
};

// The planes a decoder writes in staging: Y alone, or three (RGB, or YCbCr as stored: files staged so
// have three components).
inline int staged_planes(nvjpegOutputFormat_t format) { return format == NVJPEG_OUTPUT_Y ? 1 : 3; }

inline void fail_item(Item& it, ItemStatus status, std::string message) {
  it.status = status;
  it.message = prefixed(message);
  it.path = kFailed;
}

}  // namespace gpu
}  // namespace custom_op
