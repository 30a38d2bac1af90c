// The GPU operator: decode the windows of a batch of JPEGs into CUDA tensors with nvJPEG.
//
// Per call: (1) on the host, read each header (jpeg_header.h) and check its window exactly as the CPU
// path does; files nvJPEG should not get (CMYK, arithmetic coding, 12-bit, RGB-stored, truncated, ...)
// go to the CPU path. (2) Ask the hardware decoder which of the rest it takes with their region of
// interest (or, failing that, whole), and decode those in one batched call; the rest go one by one to
// the GPU-hybrid or hybrid decoder, also with their region of interest. Each region is decoded with a
// one-pixel margin where the image has one, so that interpolated chroma upsampling sees real
// neighbours at the window's edges. (3) One kernel on the caller's stream copies every window from
// staging into its output, applying the EXIF orientation. (4) The CPU path decodes its files and
// copies them to the device. Anything nvJPEG rejects at run time also goes to the CPU path, which
// then decodes it or raises libjpeg's error, naming the item.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cpu/window.h"
#include "cuda/jpeg_header.h"
#include "cuda/nvjpeg_context.h"
#include "cuda/window_copy.h"

namespace custom_op {
namespace gpu {
namespace {

// Where each item was decoded; returned to Python for tests and benchmarks.
enum Path : int64_t {
  kHardwareRoi = 0,   // hardware decoder, region of interest
  kHardwareFull = 1,  // hardware decoder, whole image (it declined the region); the copy crops
  kGpuHybrid = 2,     // nvJPEG GPU-hybrid decoder (Huffman on the GPU), region of interest
  kCpuHybrid = 3,     // nvJPEG hybrid decoder (Huffman on the CPU), region of interest
  kCpu = 4,           // the CPU path (libjpeg-turbo), copied to the device
  kFailed = 5,        // error (returned in place, with return_errors)
  kPending = 6,       // internal: GPU candidate not yet assigned
  kGpuBatched = 7,    // nvJPEG GPU-hybrid batched decoder (Huffman on the GPU), whole image; the copy crops
};
// Added to an item's path when nvJPEG was given the sub-image of its restart segments (use_sub_images).
constexpr int64_t kSegmentsFlag = 16;

// Options for tests and benchmarks, never needed in normal use.
constexpr int64_t kNoMargin = 1;       // decode exactly the window: shows nvJPEG's chroma edge at ROI borders
constexpr int64_t kUnguarded = 2;      // the hardware decoder writes straight into the outputs: shows the stream-order bug
constexpr int64_t kNoHardware = 4;     // skip the hardware decoder
constexpr int64_t kNoRoi = 8;          // the hardware decoder decodes whole images; the copy crops
constexpr int64_t kForceCpu = 16;      // every item through the CPU path
constexpr int64_t kNoGpuHybrid = 32;   // single images through the hybrid (CPU Huffman) decoder only
constexpr int64_t kSingle = 64;        // a single-image call: errors keep the CPU path's wording, no index
constexpr int64_t kPinnedInputs = 128; // stage the encoded bytes in pinned memory for the hardware decoder
constexpr int64_t kNoDedupe = 256;     // decode a file repeated in the batch once per window
constexpr int64_t kWhole = 512;        // decode_jpeg: every window is the whole (displayed) image
constexpr int64_t kGpuBatchedAll = 1024;  // every item the hardware decoder takes goes to the GPU-hybrid batched decoder
constexpr int64_t kNoSegments = 2048;  // files prepared for random access: nvJPEG gets the whole file, not the sub-image
constexpr int64_t kAlwaysSegments = 4096;  // ... the sub-image whatever the image's size (see kSegmentsMinPixels)

// Prepared files of at least this many pixels give nvJPEG the sub-image of a window's segments
// (use_sub_images). Building it costs host time in proportion to the file (walking its restart
// markers up to the window), and the JPEG engines' time has a fixed part per image. Measured on the
// H100 (bench/results/gpu_h100.md, session 4), 224x224 windows, batches of 64, against the whole
// prepared file: the ImageNet sample (about 0.2 Mpixel) 17% slower; 1000x750 1.08x, 1600x1200 1.35x,
// 2000x1500 2.07x, 3000x2250 and 4000x3000 2.8x faster, with a third of the host time at 12 Mpixel.
constexpr int64_t kSegmentsMinPixels = 700000;

// Larger images go to the GPU-hybrid decoder (Huffman decoding on the GPU pays off there), smaller to
// the hybrid one (CPU Huffman decoding, less launch overhead).
constexpr int64_t kGpuHybridMinPixels = 1 << 20;

enum class ReadMode : int64_t { kUnchanged = 0, kGray = 1, kRgb = 2 };
enum class ErrorKind { kNone, kValue, kType, kRuntime };

struct Item {
  at::Tensor data;
  at::Tensor segments;  // when defined, the sub-image nvJPEG decodes instead of data (use_sub_images)
  const uint8_t* bytes = nullptr;  // what nvJPEG decodes: the bytes of data, or of segments
  size_t size = 0;
  JpegHeader header;
  bool parsed = false;
  bool full = false;      // decode_jpeg: the window is the whole (displayed) image
  int orientation = 1;
  int64_t top = 0, left = 0, height = 0, width = 0;  // displayed-frame window
  Region region{0, 0, 0, 0};   // the same window in the stored frame (of the sub-image, with segments)
  Region decoded{0, 0, 0, 0};  // what nvJPEG decodes: region plus margins, or the whole image
  int channels = 0;            // output channels; 0 while only the CPU path can tell
  int64_t path = kCpu;
  int hw_index = -1;
  nvjpegOutputFormat_t hw_format = NVJPEG_OUTPUT_RGB;  // what the hardware decoder returns for it
  int leader = -1;  // the earlier item with the same bytes, whose decode this one reads its window from
  size_t staging_offset = 0;
  int64_t staging_pitch = 0;
  bool direct = false;  // kUnguarded: nvJPEG wrote into the output itself
  ErrorKind error = ErrorKind::kNone;
  std::string message;
  std::string warnings;  // libjpeg's, from the CPU path with on_warning "warn"
};

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

// Files whose decode by nvJPEG matches libjpeg's up to IDCT and upsampling rounding. Everything else
// (CMYK/YCCK, RGB-stored, arithmetic, lossless, 12-bit, 4:1:1 and odd samplings, files cut short,
// where on_warning="raise" must raise as libjpeg does) goes to the CPU path.
bool gpu_eligible(const JpegHeader& h, ColorSpace cs, bool unsure) {
  if (unsure || !h.has_eoi || h.precision != 8) return false;
  if (h.sof != 0xC0 && h.sof != 0xC1 && h.sof != 0xC2) return false;
  if (cs == ColorSpace::kGray) return h.components == 1;
  if (cs != ColorSpace::kYCbCr) return false;
  const Subsampling ss = subsampling_of(h);
  return ss == Subsampling::k444 || ss == Subsampling::k422 || ss == Subsampling::k420 || ss == Subsampling::k440;
}

// The region nvJPEG decodes for a window: one more pixel on each side (interpolated chroma
// upsampling reads the neighbours of the window's edge pixels), rounded out to whole MCUs, so that
// the region starts on the same chroma sample phase as the whole image. Measured on nvJPEG 13.0.1
// (tests/test_gpu.py, chroma edge): a one-pixel margin alone left windows whose region started on an
// odd row or column of a subsampled image different from the whole-image decode.
Region with_margin(const Region& r, const JpegHeader& h) {
  const int mcu_h = 8 * (h.components > 1 ? *std::max_element(h.v, h.v + h.components) : 1);
  const int mcu_w = 8 * (h.components > 1 ? *std::max_element(h.h, h.h + h.components) : 1);
  const int top = std::max(0, r.top - 1) / mcu_h * mcu_h;
  const int left = std::max(0, r.left - 1) / mcu_w * mcu_w;
  const int bottom = std::min(h.height, (r.top + r.height + 1 + mcu_h - 1) / mcu_h * mcu_h);
  const int right = std::min(h.width, (r.left + r.width + 1 + mcu_w - 1) / mcu_w * mcu_w);
  return {top, left, bottom - top, right - left};
}

Region bounding_box(const Region& a, const Region& b) {
  const int top = std::min(a.top, b.top), left = std::min(a.left, b.left);
  const int bottom = std::max(a.top + a.height, b.top + b.height);
  const int right = std::max(a.left + a.width, b.left + b.width);
  return {top, left, bottom - top, right - left};
}

// What cpu/restart_index.h's restart_layout asks of a header, from our own scan: sequential, every
// component in the first scan, a restart interval dividing the MCUs per row. Files that fail it (camera
// photos often declare an interval that does not divide the row) never cost a libjpeg header read.
bool random_access_layout(const JpegHeader& h) {
  if (h.restart_interval == 0 || (h.sof != 0xC0 && h.sof != 0xC1) || h.scan_components != h.components) return false;
  const int max_h = h.components > 1 ? *std::max_element(h.h, h.h + h.components) : 1;
  const int mcus_per_row = (h.width + 8 * max_h - 1) / (8 * max_h);
  return mcus_per_row % h.restart_interval == 0;
}

// Files prepared for random access (custom_op.prepare_jpeg: restart segments tiling the image) give
// nvJPEG the smaller JPEG of the segments around the windows, the sub-image the CPU path decodes
// (cpu/restart_index.h, built by the CPU library's _jpeg_sub_image). The JPEG engines' time grows with
// the bytes they decode, and a 224x224 window of an ImageNet photo needs about a third of them. The
// window then lies elsewhere in the sub-image, whose own header (sampling, width) the copy-out reads;
// the sub-image keeps the neighbours chroma upsampling needs, so the pixels are those of the whole
// file. A file repeated in the batch gets one sub-image around all its windows.
void use_sub_images(std::vector<Item>& items, int64_t debug) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("custom_op::_jpeg_sub_image", "")
                       .typed<std::tuple<at::Tensor, std::vector<int64_t>>(const at::Tensor&, int64_t, int64_t,
                                                                           int64_t, int64_t)>();
  std::vector<std::vector<size_t>> followers(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].leader >= 0) followers[static_cast<size_t>(items[i].leader)].push_back(i);
  for (size_t i = 0; i < items.size(); ++i) {
    Item& leader = items[i];
    if (leader.path != kPending || leader.leader >= 0 || !random_access_layout(leader.header)) continue;
    if (int64_t(leader.header.width) * leader.header.height < kSegmentsMinPixels && !(debug & kAlwaysSegments))
      continue;
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

void check_data(const at::Tensor& data) {
  TORCH_CHECK_TYPE(data.device().is_cpu(), "custom_op: data must be a CPU tensor of the encoded bytes, got one on ",
                   data.device());
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "custom_op: data must be a uint8 tensor, got ", data.scalar_type());
  TORCH_CHECK_TYPE(data.dim() == 1, "custom_op: data must be 1-D, got ", data.dim(), " dimensions");
  TORCH_CHECK_TYPE(data.is_contiguous(), "custom_op: data must be contiguous");
}

// The header checks of the CPU path (decode_cpu.cpp), with the same messages.
void prepare(Item& it, int64_t top, int64_t left, int64_t height, int64_t width, ReadMode mode, bool exif,
             int64_t max_pixels, int64_t debug) {
  check_data(it.data);
  it.bytes = it.data.data_ptr<uint8_t>();
  it.size = static_cast<size_t>(it.data.numel());
  it.full = (debug & kWhole) != 0;
  it.top = top;
  it.left = left;
  it.height = height;
  it.width = width;
  it.parsed = parse_jpeg_header(it.bytes, it.size, &it.header);
  if (!it.parsed) {
    it.path = kCpu;
    return;
  }
  const JpegHeader& h = it.header;
  it.orientation = exif ? header_orientation(h) : 1;
  const bool swap = swaps_axes(it.orientation);
  const int64_t image_h = swap ? h.width : h.height;
  const int64_t image_w = swap ? h.height : h.width;
  if (it.full) {
    top = left = 0;
    height = image_h;
    width = image_w;
  } else {
    TORCH_CHECK_VALUE(height > 0 && width > 0 && top >= 0 && left >= 0 && top < image_h && left < image_w &&
                          height <= image_h - top && width <= image_w - left,
                      "custom_op: crop window (top=", top, ", left=", left, ", height=", height, ", width=", width,
                      ") does not fit in the image of height ", image_h, " and width ", image_w,
                      exif && it.orientation != 1 ? " (after EXIF orientation)" : "");
  }
  const int64_t pixels = int64_t(h.width) * int64_t(h.height);
  TORCH_CHECK_VALUE(max_pixels <= 0 || pixels <= max_pixels, "custom_op: the JPEG header declares ", h.width, "x",
                    h.height, " = ", pixels, " pixels, more than max_pixels=", max_pixels,
                    " (a decompression bomb guard; pass a larger max_pixels, or None, to decode it)");
  it.top = top;
  it.left = left;
  it.height = height;
  it.width = width;
  it.region = stored_region(it.orientation, h.height, h.width, static_cast<int>(top), static_cast<int>(left),
                            static_cast<int>(height), static_cast<int>(width));
  bool unsure = false;
  const ColorSpace cs = libjpeg_color_space(h, &unsure);
  it.channels = output_channels(mode, cs);
  it.path = (gpu_eligible(h, cs, unsure) && !(debug & kForceCpu)) ? kPending : kCpu;
  it.decoded = (debug & kNoMargin) ? it.region : with_margin(it.region, h);
}

void record_error(Item& it, ErrorKind kind, const char* what) {
  it.error = kind;
  it.message = what;
  it.path = kFailed;
}

template <class F>
void capture_errors(Item& it, F&& f) {
  try {
    f();
  } catch (const c10::ValueError& e) {
    record_error(it, ErrorKind::kValue, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    record_error(it, ErrorKind::kType, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    record_error(it, ErrorKind::kRuntime, e.what_without_backtrace());
  }
}

std::string item_message(const Item& it, size_t index, bool single) {
  if (single) return it.message;
  static const std::string prefix = "custom_op: ";
  const std::string inner = it.message.compare(0, prefix.size(), prefix) == 0 ? it.message.substr(prefix.size())
                                                                              : it.message;
  return prefix + "batch item " + std::to_string(index) + ": " + inner;
}

[[noreturn]] void raise_item(const Item& it, size_t index, bool single) {
  const std::string message = item_message(it, index, single);
  switch (it.error) {
    case ErrorKind::kValue: TORCH_CHECK_VALUE(false, message);
    case ErrorKind::kType: TORCH_CHECK_TYPE(false, message);
    default: TORCH_CHECK(false, message);
  }
  __builtin_unreachable();
}

std::string error_text(const Item& it, size_t index, bool single) {
  // Python turns the one-letter kind back into the exception class.
  const char kind = it.error == ErrorKind::kValue ? 'V' : it.error == ErrorKind::kType ? 'T' : 'R';
  return std::string(1, kind) + ":" + item_message(it, index, single);
}

// The CPU operators, through the dispatcher (the CPU library is loaded before this one). With
// on_warning "warn", libjpeg's warnings come back as text, which Python raises as a UserWarning.
struct CpuDecoded {
  at::Tensor image;
  std::string warnings;
};

CpuDecoded decode_on_cpu(const Item& it, int64_t mode, bool exif, int64_t on_warning, int64_t max_pixels) {
  constexpr int64_t kWarn = 1;
  constexpr int64_t kFullScale = 8;
  auto& dispatcher = c10::Dispatcher::singleton();
  if (on_warning == kWarn) {
    if (it.full) {
      static auto op = dispatcher.findSchemaOrThrow("custom_op::decode_jpeg_with_warnings", "")
                           .typed<std::tuple<at::Tensor, std::string>(const at::Tensor&, int64_t, bool, int64_t)>();
      auto [image, warnings] = op.call(it.data, mode, exif, max_pixels);
      return {image, warnings};
    }
    static auto op = dispatcher.findSchemaOrThrow("custom_op::decode_and_crop_jpeg_with_warnings", "")
                         .typed<std::tuple<at::Tensor, std::string>(const at::Tensor&, int64_t, int64_t, int64_t,
                                                                    int64_t, int64_t, bool, int64_t, int64_t)>();
    auto [image, warnings] = op.call(it.data, it.top, it.left, it.height, it.width, mode, exif, max_pixels, kFullScale);
    return {image, warnings};
  }
  if (it.full) {
    static auto op = dispatcher.findSchemaOrThrow("custom_op::decode_jpeg", "")
                         .typed<at::Tensor(const at::Tensor&, int64_t, bool, int64_t, int64_t)>();
    return {op.call(it.data, mode, exif, on_warning, max_pixels), {}};
  }
  static auto op = dispatcher.findSchemaOrThrow("custom_op::decode_and_crop_jpeg", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                                         int64_t, int64_t, int64_t)>();
  return {op.call(it.data, it.top, it.left, it.height, it.width, mode, exif, on_warning, max_pixels, kFullScale), {}};
}

// CUSTOM_OP_NVJPEG_TRACE=2: one line per call with the host time of each phase, in microseconds.
class PhaseClock {
 public:
  PhaseClock() : on_(timing_on()), last_(now()) {}
  void lap(const char* name) {
    if (!on_) return;
    const auto t = now();
    line_ += std::string(" ") + name + "=" + std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(t - last_).count());
    last_ = t;
  }
  ~PhaseClock() {
    if (on_) std::fprintf(stderr, "custom_op phases (us):%s\n", line_.c_str());
  }
  // A part of the last lap, timed elsewhere.
  void note(const char* name, int64_t microseconds) {
    if (on_) line_ += std::string(" [") + name + "=" + std::to_string(microseconds) + "]";
  }
  static bool timing_on() {
    static const bool on = [] {
      const char* v = std::getenv("CUSTOM_OP_NVJPEG_TRACE");
      return v != nullptr && v[0] == '2';
    }();
    return on;
  }
  static std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
  std::string line_;
};

int64_t round_up(int64_t value, int64_t granule) { return (value + granule - 1) / granule * granule; }

struct Batch {
  DeviceContext& context;
  DecodeState& state;
  Slot& slot;
  cudaStream_t caller;
  nvjpegOutputFormat_t format;  // the single-image decoders': planar RGB, or Y for GRAY
  bool gray;                    // mode GRAY: every decoder returns Y
  bool hardware_rgb;            // the hardware decoder returns RGB for every file (see hardware_format)
  int planes;
  int64_t debug;
  int parse_mode;      // Tuning, read once per call
  int hardware_jobs;
  int gpu_percent;
  int gpu_min_items;
  bool one_format;
  int64_t parse_us = 0, supported_us = 0;  // parts of assign_hardware, with CUSTOM_OP_NVJPEG_TRACE=2
};

enum class HardwareColor { kExact, kRgb };

// How the hardware decoder returns colour. Its RGB output is exact for 4:4:4 (no upsampling), but
// for subsampled chroma it replicates samples (up to 84 levels from libjpeg at colour edges), and its
// interpolating upsampling ran 3x slower and was wrong at region-of-interest edges of vertically
// subsampled images on nvJPEG 13.0.1. So by default subsampled files come back as the planes stored
// (YCbCr), and the copy-out kernel upsamples and converts them with libjpeg-turbo's arithmetic:
// bit-exact, at the cost of nvJPEG's slower YCbCr output (measured on an H100: about 4,000 images/s
// when every file is 4:2:0, against 14,000 to 17,000 with RGB). 4:4:4 and gray files, which need no
// upsampling, still come back as RGB. CUSTOM_OP_NVJPEG_HW_COLOR=rgb: RGB from the hardware for every
// file (fastest, not exact). The GPU-hybrid batched decoder is asked for the same formats.
//
// A batched call takes one output format, so a batch mixing 4:4:4 and subsampled files makes two
// hardware calls. Measured on the H100 with nvJPEG 13.0.1 (bench/results/gpu_h100.md, session 3),
// none of the one-call ways is both exact and faster:
//   - Tuning::one_format=1 (YCbCr planes of every file; NVJPEG_OUTPUT_UNCHANGED the same): 3x slower
//     (4,300-4,600 against 14,000-15,000 images/s at batch 64). YCbCr output itself is not slow (the
//     4:4:4 files alone: 18,100 against 19,200 as RGB): one call mixing 4:4:4 and 4:2:0 files in it is.
//   - each image's output format in its nvjpegDecodeParams: the batched hardware call ignores it and
//     writes the format it was initialized with. NVJPEG_OUTPUT_NV12 for 4:2:0 files with an ROI: the
//     call of its own failed (the files went to the CPU path); mixed into an RGB call, it faulted.
//   - RGB for every file (CUSTOM_OP_NVJPEG_HW_COLOR=rgb): 17,000-17,900 images/s at batch 64, but
//     4:2:0 windows differ from libjpeg by mean 0.60-0.63 (PSNR 44 dB, max 53), above the 0.5 bound.
HardwareColor hardware_color() {
  static const HardwareColor color = [] {
    const char* v = std::getenv("CUSTOM_OP_NVJPEG_HW_COLOR");
    return (v != nullptr && std::strcmp(v, "rgb") == 0) ? HardwareColor::kRgb : HardwareColor::kExact;
  }();
  return color;
}

const char* hardware_color_name() {
  return hardware_color() == HardwareColor::kRgb ? "rgb (hardware upsampling, not exact)"
                                                 : "exact (subsampled files as YCbCr, upsampled like libjpeg)";
}

nvjpegOutputFormat_t hardware_format(const Batch& b, const JpegHeader& h) {
  if (b.gray) return NVJPEG_OUTPUT_Y;
  if (b.hardware_rgb) return NVJPEG_OUTPUT_RGB;
  if (b.one_format) return NVJPEG_OUTPUT_YUV;
  const Subsampling ss = subsampling_of(h);
  if (ss == Subsampling::kGray || ss == Subsampling::k444) return NVJPEG_OUTPUT_RGB;
  return NVJPEG_OUTPUT_YUV;
}

int hardware_group(nvjpegOutputFormat_t format) { return format == NVJPEG_OUTPUT_YUV ? 1 : 0; }

bool batched_path(int64_t path) { return path == kHardwareRoi || path == kHardwareFull || path == kGpuBatched; }

// Baseline files with one scan holding every component, in a sampling the JPEG engines decode: with
// parse mode 2 the hardware decoder is not asked about these (a file it then refuses sends its job's
// items to the CPU path, as a corrupt file does).
bool plainly_hardware(const JpegHeader& h) {
  if (h.sof != 0xC0 || h.precision != 8 || h.scan_components != h.components || h.header_end == 0) return false;
  const Subsampling ss = subsampling_of(h);
  return ss == Subsampling::kGray || ss == Subsampling::k444 || ss == Subsampling::k422 || ss == Subsampling::k420 ||
         ss == Subsampling::k440;
}

// Which candidates the hardware decoder takes, with their region or whole.
//
// nvjpegDecodeBatchedSupportedEx needs a stream parsed by nvjpegJpegStreamParseHeader, which reads
// through the whole file (20-50 us per ImageNet photo) although the answer depends on the headers
// only; the batched decode then parses every file again itself. With parse mode 1 the parse is given
// the bytes up to the end of the first scan header (the whole file again if that fails, or when the
// first scan does not hold every component: then only the later scans say whether the file is one
// the engines take).
void assign_hardware(Batch& b, std::vector<Item>& items) {
  std::vector<size_t> candidates;
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].path == kPending && items[i].leader < 0) candidates.push_back(i);
  reserve_hardware_items(b.context, b.slot, candidates.size());
  const bool timing = PhaseClock::timing_on();
  const auto t0 = timing ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  // 0: not parsed (nvJPEG failed); 1: parsed; 2: taken without asking (parse mode 2).
  std::vector<char> parsed(candidates.size(), 0);
  auto parse = [&](size_t j) {
    const Item& it = items[candidates[j]];
    const JpegHeader& h = it.header;
    if (b.parse_mode == 2 && plainly_hardware(h) && !(b.debug & kNoRoi)) {
      parsed[j] = 2;
      return;
    }
    nvjpegJpegStream_t stream = b.slot.hw_streams[j];
    if (b.parse_mode >= 1 && h.header_end > 0 && h.scan_components == h.components &&
        nvjpegJpegStreamParseHeader(b.context.hardware, it.bytes, h.header_end, stream) == NVJPEG_STATUS_SUCCESS) {
      parsed[j] = 1;
      return;
    }
    parsed[j] = nvjpegJpegStreamParseHeader(b.context.hardware, it.bytes, it.size, stream) == NVJPEG_STATUS_SUCCESS;
  };
  // The files are independent (one stream object each): a batch parses them on several threads.
  if (b.parse_mode == 0) {
    if (!b.state.parse_pool) b.state.parse_pool = std::make_unique<HostPool>(parse_workers());
    b.state.parse_pool->parallel_for(candidates.size(), parse);
  } else {
    for (size_t j = 0; j < candidates.size(); ++j) parse(j);  // a few microseconds each
  }
  const auto t1 = timing ? std::chrono::steady_clock::now() : t0;
  if (timing) b.parse_us += std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
  // The stream objects are indexed by candidate; hw_index must point at the item's own.
  for (size_t j = 0; j < candidates.size(); ++j) {
    if (!parsed[j]) continue;
    Item& it = items[candidates[j]];
    nvjpegJpegStream_t stream = b.slot.hw_streams[j];
    nvjpegDecodeParams_t params = b.slot.hw_params[j];
    it.hw_format = hardware_format(b, it.header);
    if (nvjpegDecodeParamsSetOutputFormat(params, it.hw_format) != NVJPEG_STATUS_SUCCESS) continue;
    const Region& d = it.decoded;
    if (parsed[j] == 2) {
      if (nvjpegDecodeParamsSetROI(params, d.left, d.top, d.width, d.height) == NVJPEG_STATUS_SUCCESS) {
        it.path = kHardwareRoi;
        it.hw_index = static_cast<int>(j);
      }
      continue;
    }
    int unsupported = 1;
    if (!(b.debug & kNoRoi)) {
      if (nvjpegDecodeParamsSetROI(params, d.left, d.top, d.width, d.height) == NVJPEG_STATUS_SUCCESS &&
          nvjpegDecodeBatchedSupportedEx(b.context.hardware, stream, params, &unsupported) == NVJPEG_STATUS_SUCCESS &&
          unsupported == 0) {
        it.path = kHardwareRoi;
      }
    }
    if (it.path == kPending) {
      unsupported = 1;
      if (nvjpegDecodeParamsSetROI(params, 0, 0, -1, -1) == NVJPEG_STATUS_SUCCESS &&
          nvjpegDecodeBatchedSupportedEx(b.context.hardware, stream, params, &unsupported) == NVJPEG_STATUS_SUCCESS &&
          unsupported == 0) {
        it.path = kHardwareFull;
        it.decoded = {0, 0, it.header.height, it.header.width};
      }
    }
    if (it.path != kPending) it.hw_index = static_cast<int>(j);
  }
  if (timing) b.supported_us += std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t1).count();
}

// Moves a share of the hardware decoder's items to the GPU-hybrid batched decoder, which decodes on
// the CUDA cores while the JPEG engines work (the two run at once, see decode_batched). It decodes
// whole images (nvJPEG's batched call takes regions of interest on the hardware backend only), so
// the smallest images go there. Its IDCT is not libjpeg's: within a few levels, not bit-exact.
void share_with_gpu(Batch& b, std::vector<Item>& items) {
  if (b.context.gpu_batched == nullptr || (b.debug & kUnguarded)) return;
  std::vector<size_t> hardware;
  for (size_t i = 0; i < items.size(); ++i)
    if ((items[i].path == kHardwareRoi || items[i].path == kHardwareFull) && items[i].leader < 0) hardware.push_back(i);
  size_t share = (b.debug & kGpuBatchedAll) ? hardware.size()
                                            : (hardware.size() * static_cast<size_t>(b.gpu_percent) + 50) / 100;
  if (!(b.debug & kGpuBatchedAll) && share < static_cast<size_t>(std::max(b.gpu_min_items, 1))) return;
  share = std::min(share, hardware.size());
  auto pixels = [&](size_t i) { return int64_t(items[i].header.width) * items[i].header.height; };
  std::stable_sort(hardware.begin(), hardware.end(), [&](size_t x, size_t y) { return pixels(x) < pixels(y); });
  for (size_t k = 0; k < share; ++k) {
    Item& it = items[hardware[k]];
    it.path = kGpuBatched;
    it.decoded = {0, 0, it.header.height, it.header.width};
  }
}

// Staging offsets for every GPU item; returns the bytes needed.
size_t lay_out_staging(const Batch& b, std::vector<Item>& items) {
  size_t offset = 0;
  for (Item& it : items) {
    if (it.path == kCpu || it.path == kFailed || it.direct || it.leader >= 0) continue;
    it.staging_pitch = round_up(it.decoded.width, 64);
    it.staging_offset = offset;
    offset += static_cast<size_t>(round_up(b.planes * it.staging_pitch * it.decoded.height, 256));
  }
  return offset;
}

nvjpegImage_t destination(const Batch& b, const Item& it, const at::Tensor& out) {
  nvjpegImage_t image;
  std::memset(&image, 0, sizeof(image));
  if (it.direct) {
    const int64_t plane = it.height * it.width;
    for (int c = 0; c < b.planes; ++c) {
      image.channel[c] = out.data_ptr<uint8_t>() + c * plane;
      image.pitch[c] = static_cast<size_t>(it.width);
    }
    return image;
  }
  uint8_t* base = b.slot.staging.data() + it.staging_offset;
  const int64_t plane = it.staging_pitch * it.decoded.height;
  for (int c = 0; c < b.planes; ++c) {
    image.channel[c] = base + c * plane;
    image.pitch[c] = static_cast<size_t>(it.staging_pitch);
  }
  return image;
}

// One batched nvJPEG call: the hardware decoder's (with regions of interest) or the GPU-hybrid one's.
struct Job {
  bool gpu = false;
  int index = 0;  // the hardware job's number within its format group (its state)
  nvjpegOutputFormat_t format = NVJPEG_OUTPUT_RGB;
  std::vector<size_t> which;  // item indices
  size_t bytes = 0;
  nvjpegJpegState_t state = nullptr;
  cudaStream_t stream = nullptr;
  at::Tensor* pinned = nullptr;  // kPinnedInputs
  bool ok = false;
};

void run_job(const Batch& b, Job& job, const std::vector<Item>& items, const std::vector<at::Tensor>& outputs) {
  // On a pool thread too: nvJPEG works on the current device.
  if (cudaSetDevice(b.context.device) != cudaSuccess) return;
  const size_t n = job.which.size();
  std::vector<const unsigned char*> data(n);
  std::vector<size_t> lengths(n);
  std::vector<nvjpegImage_t> images(n);
  std::vector<nvjpegDecodeParams_t> params(n);
  int& initialized = b.slot.initialized[job.gpu ? Slot::kMaxHardwareJobs : job.index][hardware_group(job.format)];
  for (size_t k = 0; k < n; ++k) {
    const Item& it = items[job.which[k]];
    data[k] = it.bytes;
    lengths[k] = it.size;
    images[k] = destination(b, it, outputs[job.which[k]]);
    if (!job.gpu) params[k] = b.slot.hw_params[it.hw_index];
  }
  if (job.pinned != nullptr) {
    // The hardware decoder copies each file to the device itself; from pinned memory that copy is
    // a direct DMA rather than a staged one.
    uint8_t* dst = job.pinned->data_ptr<uint8_t>();
    for (size_t k = 0; k < n; ++k) {
      std::memcpy(dst, data[k], lengths[k]);
      data[k] = dst;
      dst += lengths[k];
    }
  }
  const nvjpegHandle_t handle = job.gpu ? b.context.gpu_batched : b.context.hardware;
  // Initialized again only when the batch size or the output format (RGB or Y share a state) changes.
  const int setup = static_cast<int>(n) * 64 + static_cast<int>(job.format);
  nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
  if (initialized != setup) {
    initialized = 0;
    s = nvjpegDecodeBatchedInitialize(handle, job.state, static_cast<int>(n), 1, job.format);
  }
  if (s == NVJPEG_STATUS_SUCCESS) {
    s = job.gpu ? nvjpegDecodeBatched(handle, job.state, data.data(), lengths.data(), images.data(), job.stream)
                : nvjpegDecodeBatchedEx(handle, job.state, data.data(), lengths.data(), images.data(), params.data(),
                                        job.stream);
  }
  job.ok = s == NVJPEG_STATUS_SUCCESS;
  initialized = job.ok ? setup : 0;  // a failed batch needs a new initialization
}

// The batched decodes of a call. One job per output format for the GPU-hybrid decoder's share, and up
// to hardware_jobs per format for the JPEG engines (files dealt out by size). With several jobs they
// run at once on the state's pool, each on its own stream: the hardware decoder's call returns only
// when its images are written, and its host side (it parses every file again) is single-threaded.
void decode_batched(Batch& b, std::vector<Item>& items, const std::vector<at::Tensor>& outputs) {
  std::vector<Job> jobs;
  for (int gpu = 1; gpu >= 0; --gpu) {  // the GPU-hybrid jobs first: their kernels overlap the engines' work
    for (int group = 0; group < Slot::kHardwareGroups; ++group) {
      std::vector<size_t> which;
      size_t total = 0;
      nvjpegOutputFormat_t format = NVJPEG_OUTPUT_RGB;
      for (size_t i = 0; i < items.size(); ++i) {
        const Item& it = items[i];
        const bool mine = gpu ? it.path == kGpuBatched : (it.path == kHardwareRoi || it.path == kHardwareFull);
        if (!mine || it.leader >= 0 || hardware_group(it.hw_format) != group) continue;
        format = it.hw_format;
        which.push_back(i);
        total += it.size;
      }
      if (which.empty()) continue;
      // Hardware jobs of at least 8 files each, dealt largest first to the job with the fewest bytes.
      const size_t count = gpu ? 1 : std::max<size_t>(1, std::min<size_t>(b.hardware_jobs, which.size() / 8));
      const size_t first = jobs.size();
      for (size_t k = 0; k < count; ++k) {
        Job job;
        job.gpu = gpu;
        job.index = static_cast<int>(k);
        job.format = format;
        job.state = batched_state(b.context, b.slot, gpu, static_cast<int>(k), group);
        jobs.push_back(std::move(job));
      }
      std::stable_sort(which.begin(), which.end(), [&](size_t x, size_t y) { return items[x].size > items[y].size; });
      for (size_t i : which) {
        Job* least = &jobs[first];
        for (size_t k = first; k < jobs.size(); ++k)
          if (jobs[k].bytes < least->bytes) least = &jobs[k];
        least->which.push_back(i);
        least->bytes += items[i].size;
      }
      (void)total;
    }
  }
  if (jobs.empty()) return;
  reserve_job_streams(b.state, jobs.size());
  if (b.debug & kPinnedInputs) {
    if (b.slot.pinned_inputs.size() < jobs.size()) b.slot.pinned_inputs.resize(jobs.size());
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    jobs[k].stream = k == 0 ? b.state.decode_stream : b.state.job_streams[k - 1];
    if ((b.debug & kPinnedInputs) && !jobs[k].gpu) {
      at::Tensor& pinned = b.slot.pinned_inputs[k];
      if (!pinned.defined() || static_cast<size_t>(pinned.numel()) < jobs[k].bytes) {
        pinned = at::empty({static_cast<int64_t>(jobs[k].bytes + jobs[k].bytes / 2 + 1)},
                           at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      }
      jobs[k].pinned = &pinned;
    }
  }
  if (jobs.size() == 1) {
    run_job(b, jobs[0], items, outputs);
  } else {
    if (!b.state.parse_pool) b.state.parse_pool = std::make_unique<HostPool>(parse_workers());
    b.state.parse_pool->parallel_for(jobs.size(), [&](size_t k) { run_job(b, jobs[k], items, outputs); },
                                     /*min_parallel=*/2);
    // The main stream (decode_stream) is the one the caller's stream waits on: the others join it.
    for (size_t k = 1; k < jobs.size(); ++k) {
      C10_CUDA_CHECK(cudaEventRecord(b.state.job_events[k - 1], jobs[k].stream));
      C10_CUDA_CHECK(cudaStreamWaitEvent(b.state.decode_stream, b.state.job_events[k - 1], 0));
    }
  }
  for (Job& job : jobs) {
    if (job.ok) continue;
    // The batch call does not say which file it choked on: the CPU path redoes them all and names
    // the bad one. The state is re-initialized by the next call.
    for (size_t i : job.which) {
      items[i].path = kCpu;
      items[i].direct = false;
    }
  }
}

void decode_hybrid(Batch& b, Item& it, const at::Tensor& out) {
  DeviceContext& c = b.context;
  DecodeState& st = b.state;
  HybridStage& stage = st.stages[st.next_stage];
  st.next_stage ^= 1;
  if (stage.in_flight) {
    C10_CUDA_CHECK(cudaEventSynchronize(stage.transferred));
    stage.in_flight = false;
  }
  auto fallback = [&] { it.path = kCpu; };
  if (nvjpegJpegStreamParse(c.hybrid, it.bytes, it.size, 0, 0, st.hybrid_stream) != NVJPEG_STATUS_SUCCESS)
    return fallback();
  const Region& d = it.decoded;
  if (nvjpegDecodeParamsSetOutputFormat(st.hybrid_params, b.format) != NVJPEG_STATUS_SUCCESS ||
      nvjpegDecodeParamsSetROI(st.hybrid_params, d.left, d.top, d.width, d.height) != NVJPEG_STATUS_SUCCESS)
    return fallback();
  bool on_gpu = !(b.debug & kNoGpuHybrid) && int64_t(it.header.width) * it.header.height >= kGpuHybridMinPixels;
  if (on_gpu) {
    int unsupported = 1;
    on_gpu = nvjpegDecoderJpegSupported(c.gpu_hybrid_decoder, st.hybrid_stream, st.hybrid_params, &unsupported) ==
                 NVJPEG_STATUS_SUCCESS &&
             unsupported == 0;
  }
  nvjpegJpegDecoder_t decoder = on_gpu ? c.gpu_hybrid_decoder : c.cpu_hybrid_decoder;
  nvjpegJpegState_t state = on_gpu ? stage.gpu_state : stage.cpu_state;
  if (nvjpegDecodeJpegHost(c.hybrid, decoder, state, st.hybrid_params, st.hybrid_stream) != NVJPEG_STATUS_SUCCESS)
    return fallback();
  if (nvjpegDecodeJpegTransferToDevice(c.hybrid, decoder, state, st.hybrid_stream, st.decode_stream) !=
      NVJPEG_STATUS_SUCCESS)
    return fallback();
  C10_CUDA_CHECK(cudaEventRecord(stage.transferred, st.decode_stream));
  stage.in_flight = true;
  nvjpegImage_t image = destination(b, it, out);
  if (nvjpegDecodeJpegDevice(c.hybrid, decoder, state, &image, st.decode_stream) != NVJPEG_STATUS_SUCCESS)
    return fallback();
  it.path = on_gpu ? kGpuHybrid : kCpuHybrid;
}

void copy_out(Batch& b, const std::vector<Item>& items, const std::vector<at::Tensor>& outputs) {
  std::vector<WindowCopy> copies;
  int64_t max_pixels = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (it.path == kCpu || it.path == kFailed || it.path == kPending || it.direct) continue;
    const bool stored_planes = batched_path(it.path) && it.hw_format == NVJPEG_OUTPUT_YUV;
    const JpegHeader& h = it.header;
    WindowCopy w;
    std::memset(&w, 0, sizeof(w));
    w.src = b.slot.staging.data() + it.staging_offset;
    w.src_plane = it.staging_pitch * it.decoded.height;
    w.src_pitch = static_cast<int32_t>(it.staging_pitch);
    w.src_top = it.region.top - it.decoded.top;
    w.src_left = it.region.left - it.decoded.left;
    w.src_planes = (stored_planes && h.components == 1) ? 1 : b.planes;  // nvJPEG fills only Y for gray files
    w.region_height = it.region.height;
    w.region_width = it.region.width;
    w.dst = outputs[i].data_ptr<uint8_t>();
    w.channels = it.channels;
    w.orientation = it.orientation;
    if (stored_planes && h.components == 3 && it.channels == 3) {
      // Eligible files have 1x1 chroma, so the luma factors are the subsampling factors. The region
      // starts on an MCU boundary, so its chroma starts on a whole sample.
      w.ycc = 1;
      w.h_factor = h.h[0];
      w.v_factor = h.v[0];
      // libjpeg upsamples by replication where the whole image has 2 chroma columns or fewer.
      w.fancy = !(h.h[0] == 2 && (h.width + 1) / 2 <= 2);
      w.chroma_width = (it.decoded.width + h.h[0] - 1) / h.h[0];
      w.chroma_height = (it.decoded.height + h.v[0] - 1) / h.v[0];
    }
    copies.push_back(w);
    max_pixels = std::max<int64_t>(max_pixels, int64_t(it.region.height) * it.region.width);
  }
  if (copies.empty()) return;
  const size_t bytes = copies.size() * sizeof(WindowCopy);
  at::Tensor& pinned = b.slot.pinned_descriptors;
  if (!pinned.defined() || static_cast<size_t>(pinned.numel()) < bytes) {
    pinned = at::empty({static_cast<int64_t>(bytes * 2)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  }
  std::memcpy(pinned.data_ptr(), copies.data(), bytes);
  b.slot.descriptors.reserve(bytes, b.context.tag_stream);
  C10_CUDA_CHECK(cudaMemcpyAsync(b.slot.descriptors.data(), pinned.data_ptr(), bytes, cudaMemcpyHostToDevice, b.caller));
  C10_CUDA_CHECK(launch_window_copies(reinterpret_cast<const WindowCopy*>(b.slot.descriptors.data()),
                                      static_cast<int>(copies.size()), max_pixels, b.caller));
}

std::tuple<std::vector<at::Tensor>, std::vector<std::string>, std::vector<int64_t>> decode_jpegs_cuda(
    at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts, c10::IntArrayRef heights,
    c10::IntArrayRef widths, int64_t mode, bool apply_exif_orientation, int64_t on_warning, int64_t max_pixels,
    int64_t device_index, bool stack, bool return_errors, int64_t debug) {
  const size_t n = data.size();
  TORCH_CHECK_VALUE(tops.size() == n && lefts.size() == n && heights.size() == n && widths.size() == n,
                    "custom_op: tops, lefts, heights and widths must each have one entry per image (", n, ")");
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "mode code must be 0 (UNCHANGED), 1 (GRAY) or 2 (RGB), got ", mode);
  TORCH_CHECK_VALUE(on_warning >= 0 && on_warning <= 2, "on_warning code must be 0, 1 or 2, got ", on_warning);
  TORCH_CHECK_VALUE(device_index >= 0, "custom_op: device index must be >= 0, got ", device_index);
  const bool single = (debug & kSingle) != 0;
  const ReadMode read_mode = static_cast<ReadMode>(mode);
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::CUDAGuard guard(device);
  const cudaStream_t caller = c10::cuda::getCurrentCUDAStream(device.index()).stream();

  trace("decode call");
  PhaseClock clock;
  std::vector<Item> items(n);
  for (size_t i = 0; i < n; ++i) {
    items[i].data = data[i];
    capture_errors(items[i], [&] {
      prepare(items[i], tops[i], lefts[i], heights[i], widths[i], read_mode, apply_exif_orientation, max_pixels, debug);
    });
    if (items[i].error != ErrorKind::kNone && !return_errors) raise_item(items[i], i, single);
  }

  // Outputs: one stacked tensor, or one tensor per item (CPU-path items get theirs from the CPU).
  const auto options = at::TensorOptions().dtype(at::kByte).device(device);
  std::vector<at::Tensor> outputs(n);
  at::Tensor stacked;
  int stack_channels = 0;
  if (stack) {
    const Item* first = nullptr;
    for (const Item& it : items) {
      if (it.error != ErrorKind::kNone || !it.parsed) continue;
      if (first == nullptr) first = &it;
      TORCH_CHECK_VALUE(it.height == first->height && it.width == first->width,
                        "custom_op: stack=True needs windows of one size; got ", first->height, "x", first->width,
                        " and ", it.height, "x", it.width);
      if (stack_channels == 0) stack_channels = it.channels;
      TORCH_CHECK_VALUE(it.channels == 0 || it.channels == stack_channels,
                        "custom_op: stack=True needs one channel count; mode=UNCHANGED gives ", stack_channels,
                        " channels for one file and ", it.channels,
                        " for another (use mode=RGB or GRAY, or stack=False)");
    }
    if (first != nullptr && stack_channels > 0) {
      stacked = at::empty({static_cast<int64_t>(n), stack_channels, first->height, first->width}, options);
      for (size_t i = 0; i < n; ++i) outputs[i] = stacked[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (!outputs[i].defined() && it.path == kPending) outputs[i] = at::empty({it.channels, it.height, it.width}, options);
  }

  // A file repeated in the batch (several windows of one photo) is decoded once, over the bounding
  // box of its windows' regions; every window is then cut from that one decode.
  if (!(debug & (kNoDedupe | kUnguarded))) {
    std::unordered_map<const uint8_t*, size_t> first;
    for (size_t i = 0; i < n; ++i) {
      Item& it = items[i];
      if (it.path != kPending) continue;
      auto [where, inserted] = first.emplace(it.bytes, i);
      Item& leader = items[where->second];
      if (inserted || leader.size != it.size) continue;
      it.leader = static_cast<int>(where->second);
      leader.decoded = bounding_box(leader.decoded, it.decoded);
    }
  }
  if (!(debug & (kNoSegments | kNoMargin | kUnguarded | kWhole))) use_sub_images(items, debug);
  clock.lap("headers");
  trace("headers read");
  bool any_gpu = false;
  for (const Item& it : items) any_gpu |= it.path == kPending;
  if (any_gpu) {
    DeviceContext& context = device_context(static_cast<int>(device_index));
    trace("lease state");
    StateLease lease(context);
    Slot& slot = lease->slots[lease->next_slot];
    lease->next_slot ^= 1;
    clock.lap("outputs+lease");
    slot.wait();
    clock.lap("slot_wait");
    slot.inputs.assign(data.begin(), data.end());
    for (const Item& it : items)
      if (it.segments.defined()) slot.inputs.push_back(it.segments);
    const bool gray = read_mode == ReadMode::kGray;
    // The diagnostics that bypass the margin or the staging buffer see nvJPEG's own RGB output.
    const bool hardware_rgb = hardware_color() == HardwareColor::kRgb || (debug & (kUnguarded | kNoMargin));
    Tuning& t = tuning();
    Batch b{context, *lease, slot, caller, gray ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGB, gray, hardware_rgb,
            gray ? 1 : 3, debug, t.parse_mode.load(), t.hardware_jobs.load(), t.gpu_percent.load(),
            t.gpu_min_items.load(), t.one_format.load() != 0};

    trace("assign hardware");
    if (context.hardware != nullptr && !(debug & kNoHardware)) {
      assign_hardware(b, items);
      share_with_gpu(b, items);
    }
    clock.lap("assign_hardware");
    clock.note("parse_header", b.parse_us);
    clock.note("supported", b.supported_us);
    if (debug & kUnguarded) {
      for (Item& it : items) {
        const bool exact = it.decoded.top == it.region.top && it.decoded.left == it.region.left &&
                           it.decoded.height == it.region.height && it.decoded.width == it.region.width;
        it.direct = it.path == kHardwareRoi && exact && it.orientation == 1 && it.channels == b.planes;
      }
    }
    for (Item& it : items)
      if (it.path == kPending && it.leader < 0) it.path = kCpuHybrid;  // provisional: decode_hybrid settles it
    slot.staging.reserve(std::max<size_t>(lay_out_staging(b, items), 1), context.tag_stream);

    trace("batched decodes");
    decode_batched(b, items, outputs);
    clock.lap("hardware_batch");
    trace("hybrid items");
    for (size_t i = 0; i < n; ++i)
      if (items[i].path == kCpuHybrid && items[i].leader < 0) decode_hybrid(b, items[i], outputs[i]);
    for (Item& it : items) {
      if (it.leader < 0) continue;
      const Item& leader = items[it.leader];
      it.path = leader.path;  // kCpu when nvJPEG declined the file: then decoded on its own there
      it.hw_format = leader.hw_format;  // how the shared decode's planes are to be read
      it.decoded = leader.decoded;
      it.staging_offset = leader.staging_offset;
      it.staging_pitch = leader.staging_pitch;
    }

    C10_CUDA_CHECK(cudaEventRecord(lease->decoded, lease->decode_stream));
    C10_CUDA_CHECK(cudaStreamWaitEvent(caller, lease->decoded, 0));
    clock.lap("hybrid");
    trace("copy out");
    copy_out(b, items, outputs);
    trace("gpu part queued");
    clock.lap("copy_out");
    C10_CUDA_CHECK(cudaEventRecord(slot.done, caller));
    slot.in_flight = true;
  }

  // The CPU path: its own decode and errors; the result goes to the device on the caller's stream.
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    if (it.path != kCpu) continue;
    at::Tensor host;
    capture_errors(it, [&] {
      CpuDecoded decoded = decode_on_cpu(it, mode, apply_exif_orientation, on_warning, max_pixels);
      host = std::move(decoded.image);
      it.warnings = std::move(decoded.warnings);
    });
    if (it.error == ErrorKind::kNone && outputs[i].defined() && outputs[i].sizes() != host.sizes()) {
      std::ostringstream message;
      message << "custom_op: stack=True needs one output shape; this file decodes to " << host.sizes()
              << ", the stack holds " << outputs[i].sizes();
      record_error(it, ErrorKind::kValue, message.str().c_str());
    }
    if (it.error != ErrorKind::kNone) {
      if (!return_errors) raise_item(it, i, single);
      continue;
    }
    if (outputs[i].defined()) {
      outputs[i].copy_(host, /*non_blocking=*/true);
    } else {
      outputs[i] = host.to(options, /*non_blocking=*/true);
    }
  }

  clock.lap("cpu_items");
  trace("cpu items done");
  std::vector<std::string> errors(n);
  std::vector<int64_t> paths(n);
  for (size_t i = 0; i < n; ++i) {
    Item& it = items[i];
    paths[i] = it.path;
    const Item& decoder = it.leader >= 0 ? items[it.leader] : it;
    if (decoder.segments.defined() && it.path != kCpu && it.path != kFailed) paths[i] |= kSegmentsFlag;
    if (it.error == ErrorKind::kNone) {
      if (!it.warnings.empty()) errors[i] = "W:" + it.warnings;  // Python warns; the image is fine
      continue;
    }
    errors[i] = error_text(it, i, single);
    if (outputs[i].defined()) {
      outputs[i].zero_();  // a failed item's place in a stack reads as black, never as stale memory
    } else {
      outputs[i] = at::empty({0}, options);
    }
  }
  if (stacked.defined()) return std::make_tuple(std::vector<at::Tensor>{stacked}, errors, paths);
  if (stack) {
    // No window could be checked before decoding (every file went to the CPU path): stack now.
    std::vector<at::Tensor> good;
    for (size_t i = 0; i < n; ++i)
      if (items[i].error == ErrorKind::kNone) good.push_back(outputs[i]);
    for (size_t i = 1; i < good.size(); ++i)
      TORCH_CHECK_VALUE(good[i].sizes() == good[0].sizes(), "custom_op: stack=True needs one output shape; got ",
                        good[0].sizes(), " and ", good[i].sizes());
    if (good.size() == n && n > 0) return std::make_tuple(std::vector<at::Tensor>{at::stack(outputs)}, errors, paths);
  }
  return std::make_tuple(outputs, errors, paths);
}

std::string backend_info(int64_t device_index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_index));
  DeviceContext& c = device_context(static_cast<int>(device_index));
  using std::to_string;
  return "nvjpeg_version=" + to_string(c.nvjpeg_version[0]) + "." + to_string(c.nvjpeg_version[1]) + "." +
         to_string(c.nvjpeg_version[2]) + ";hardware=" + (c.hardware != nullptr ? "1" : "0") +
         ";hardware_engines=" + to_string(c.hardware_engines) + ";hardware_cores=" + to_string(c.hardware_cores) +
         ";hardware_note=" + c.hardware_note + ";torch_allocators=" + (c.torch_allocators ? "1" : "0") +
         ";interpolation=" + (c.interpolation ? "1" : "0") +
         ";hardware_interpolation=" + (c.hardware_interpolation ? "1" : "0") +
         ";hardware_color=" + hardware_color_name() + ";gpu_batched=" + (c.gpu_batched != nullptr ? "1" : "0") +
         ";parse_mode=" + to_string(tuning().parse_mode.load()) +
         ";hardware_jobs=" + to_string(tuning().hardware_jobs.load()) +
         ";gpu_percent=" + to_string(tuning().gpu_percent.load()) +
         ";gpu_min_items=" + to_string(tuning().gpu_min_items.load()) +
         ";one_format=" + to_string(tuning().one_format.load()) +
         ";states=" + to_string(c.states_created);
}

// Sets the tuning (a negative value leaves that setting as it is); returns the settings before.
std::vector<int64_t> set_tuning(int64_t parse_mode, int64_t hardware_jobs, int64_t gpu_percent, int64_t gpu_min_items,
                                int64_t one_format) {
  Tuning& t = tuning();
  std::vector<int64_t> before{t.parse_mode.load(), t.hardware_jobs.load(), t.gpu_percent.load(), t.gpu_min_items.load(),
                              t.one_format.load()};
  TORCH_CHECK_VALUE(one_format <= 1, "custom_op: one_format must be 0 or 1, got ", one_format);
  TORCH_CHECK_VALUE(parse_mode <= 2, "custom_op: parse_mode must be 0, 1 or 2, got ", parse_mode);
  TORCH_CHECK_VALUE(hardware_jobs <= Slot::kMaxHardwareJobs && hardware_jobs != 0,
                    "custom_op: hardware_jobs must be 1 to ", Slot::kMaxHardwareJobs, ", got ", hardware_jobs);
  TORCH_CHECK_VALUE(gpu_percent <= 100, "custom_op: gpu_percent must be 0 to 100, got ", gpu_percent);
  if (parse_mode >= 0) t.parse_mode.store(static_cast<int>(parse_mode));
  if (hardware_jobs >= 0) t.hardware_jobs.store(static_cast<int>(hardware_jobs));
  if (gpu_percent >= 0) t.gpu_percent.store(static_cast<int>(gpu_percent));
  if (gpu_min_items >= 0) t.gpu_min_items.store(static_cast<int>(std::min<int64_t>(gpu_min_items, 1 << 20)));
  if (one_format >= 0) t.one_format.store(static_cast<int>(one_format));
  return before;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(custom_op, m) {
  // data: encoded bytes (CPU). debug bit 512: whole images (decode_jpeg), the windows are ignored. Returns the outputs (one
  // stacked tensor with stack=True), per-item error texts ("" when fine; "V:", "T:" or "R:" + message;
  // "W:" + libjpeg's warnings for an item decoded fine with on_warning "warn") and per-item paths (see
  // Path in decode_cuda.cpp). Its fake kernel is in custom_op/_ops.py.
  m.def(
      "_decode_jpegs_cuda(Tensor[] data, int[] tops, int[] lefts, int[] heights, int[] widths, int mode, "
      "bool apply_exif_orientation, int on_warning, int max_pixels, int device, bool stack, bool return_errors, "
      "int debug) -> (Tensor[], str[], int[])");
  m.def("_gpu_backend_info(int device) -> str", &backend_info);
  m.def("_gpu_set_tuning(int parse_mode, int hardware_jobs, int gpu_percent, int gpu_min_items, int one_format) -> int[]", &set_tuning);
}

// Not a kernel given with the schema: that one would be CompositeImplicitAutograd, which FakeTensor
// tracing decomposes (calling this function on fake tensors) and which cannot take a fake kernel.
// CompositeExplicitAutograd serves the CPU tensors of the encoded bytes, and an empty batch, which
// has no tensor to dispatch on.
TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) { m.impl("_decode_jpegs_cuda", &decode_jpegs_cuda); }

}  // namespace gpu
}  // namespace custom_op
