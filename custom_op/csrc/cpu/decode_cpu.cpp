// CPU kernels of the single-image JPEG operators, on libjpeg-turbo (schemas in csrc/ops.cpp).
#include "decode_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/checked_options.h"
#include "common/item_status.h"
#include "common/restart_plan.h"
#include "deinterleave.h"
#include "entropy_decoder.h"
#include "libjpeg_session.h"
#include "restart_index.h"
#include "tensors.h"
#include "window.h"

namespace custom_op {
namespace {

// How the decoder's interleaved pixels become output channels.
enum class Conversion {
  kCopy,        // output channels are the decoder's channels
  kGrayToRgb,   // one decoded channel replicated three times
  kCmykInvert,  // libjpeg's CMYK is Adobe-inverted; Pillow and users expect ink amounts
  kCmykToRgb,   // Pillow's CMYK -> RGB formula, so results match Image.convert("RGB")
  kCmykToGray,  // the above, then Pillow's ITU-R 601 luma
};

struct OutputFormat {
  J_COLOR_SPACE libjpeg_space;
  int channels;
  Conversion conversion;
};

OutputFormat output_format(const jpeg_decompress_struct& cinfo, ReadMode mode) {
  const J_COLOR_SPACE in = cinfo.jpeg_color_space;
  const bool cmyk = in == JCS_CMYK || in == JCS_YCCK;
  const bool gray = in == JCS_GRAYSCALE;
  switch (mode) {
    case ReadMode::kGray:
      // For color files this is the stored luma plane (what libjpeg, torchvision and Pillow's
      // draft("L") give), not luma recomputed from RGB.
      if (cmyk) return {JCS_CMYK, 1, Conversion::kCmykToGray};
      return {JCS_GRAYSCALE, 1, Conversion::kCopy};
    case ReadMode::kRgb:
      if (cmyk) return {JCS_CMYK, 3, Conversion::kCmykToRgb};
      if (gray) return {JCS_GRAYSCALE, 3, Conversion::kGrayToRgb};
      return {JCS_RGB, 3, Conversion::kCopy};
    case ReadMode::kUnchanged:
    default:
      if (cmyk) return {JCS_CMYK, 4, Conversion::kCmykInvert};
      if (gray) return {JCS_GRAYSCALE, 1, Conversion::kCopy};
      return {JCS_RGB, 3, Conversion::kCopy};
  }
}

// Pillow's rounding of a * b / 255.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// Writes the decoded rows of a region into a [C, H, W] output, converting colour and applying the
// EXIF orientation on the way, so the pixels are touched once while they are still in cache.
struct PlanarSink {
  uint8_t* out;
  std::ptrdiff_t plane;  // H * W of the output
  int out_width;
  int orientation;
  Region region;
  Conversion conversion;
  int channels;

  void operator()(const uint8_t* src, int r) const {
    const RowPlacement at = place_row(orientation, r, region, out_width);
    uint8_t* dst = out + at.start;
    const int n = region.width;
    const std::ptrdiff_t step = at.step;
    switch (conversion) {
      case Conversion::kCopy:
        if (channels == 3 && step == 1) {
          deinterleave_rgb(src, dst, dst + plane, dst + 2 * plane, n);
        } else if (channels == 1 && step == 1) {
          std::memcpy(dst, src, static_cast<size_t>(n));
        } else {
          for (int x = 0; x < n; ++x, dst += step)
            for (int c = 0; c < channels; ++c) dst[c * plane] = src[channels * x + c];
        }
        break;
      case Conversion::kGrayToRgb:
        for (int x = 0; x < n; ++x, dst += step) dst[0] = dst[plane] = dst[2 * plane] = src[x];
        break;
      case Conversion::kCmykInvert:
        for (int x = 0; x < n; ++x, dst += step)
          for (int c = 0; c < 4; ++c) dst[c * plane] = static_cast<uint8_t>(255 - src[4 * x + c]);
        break;
      case Conversion::kCmykToRgb:
      case Conversion::kCmykToGray:
        for (int x = 0; x < n; ++x, dst += step) {
          const uint8_t* p = src + 4 * x;
          // Inverted storage: the raw K byte is 255 - ink, which is Pillow's "nk".
          const int nk = p[3];
          const int rgb[3] = {nk - muldiv255(255 - p[0], nk), nk - muldiv255(255 - p[1], nk),
                              nk - muldiv255(255 - p[2], nk)};
          if (conversion == Conversion::kCmykToRgb) {
            for (int c = 0; c < 3; ++c) dst[c * plane] = static_cast<uint8_t>(rgb[c]);
          } else {
            dst[0] = static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
          }
        }
        break;
    }
  }
};

const uint8_t* checked_bytes(const Tensor& data, const char* op) {
  CUSTOM_OP_CHECK_TYPE(data.is_cpu(), kMessagePrefix, op, ": data must be a CPU tensor, got one on ",
                       device_text(data.device()));
  CUSTOM_OP_CHECK_TYPE(data.scalar_type() == ScalarType::Byte, kMessagePrefix, op,
                       ": data must be a uint8 tensor, got ", data.scalar_type());
  CUSTOM_OP_CHECK_TYPE(data.dim() == 1, kMessagePrefix, op, ": data must be 1-D, got ", data.dim(), " dimensions");
  CUSTOM_OP_CHECK_TYPE(data.is_contiguous(), kMessagePrefix, op, ": data must be contiguous");
  return data.const_data_ptr<uint8_t>();
}

[[noreturn]] void fail(const char* what, const JpegSession& session) {
  throw Error(ItemStatus::kRuntimeError, str("custom_op: cannot decode JPEG ", what, ": ", session.error_message()));
}

void open(JpegSession& session, const Tensor& data, bool save_app1, const char* op) {
  const uint8_t* bytes = checked_bytes(data, op);
  if (!session.read_header(bytes, static_cast<size_t>(data.numel()), save_app1)) fail("header", session);
}

void check_pixel_limit(const jpeg_decompress_struct& cinfo, int64_t max_pixels) {
  const int64_t pixels = int64_t(cinfo.image_width) * int64_t(cinfo.image_height);
  CUSTOM_OP_CHECK_VALUE(max_pixels <= 0 || pixels <= max_pixels, "custom_op: the JPEG header declares ",
                        cinfo.image_width, "x", cinfo.image_height, " = ", pixels,
                        " pixels, more than max_pixels=", max_pixels,
                        " (a decompression bomb guard; pass a larger max_pixels, or None, to decode it)");
}

std::string warning_text(const JpegSession& session) {
  if (session.num_warnings() == 0) return {};
  return str(kMessagePrefix, "corrupt JPEG data (", session.num_warnings(), " libjpeg warning",
             session.num_warnings() > 1 ? "s" : "", "; first: ", session.first_warning(), ")");
}

// out when it is a [C, height, width] contiguous uint8 CPU tensor, else a new one.
Tensor output_for(const Tensor* out, int channels, int64_t height, int64_t width) {
  if (out != nullptr && out->defined() && out->is_contiguous() && out->scalar_type() == ScalarType::Byte &&
      out->is_cpu() && out->dim() == 3 && out->size(0) == channels && out->size(1) == height && out->size(2) == width)
    return *out;
  return new_cpu_tensor({channels, height, width});
}

// Decodes the displayed-frame window of an opened session into a [C, height, width] tensor.
Decoded decode_window(JpegSession& session, ReadMode mode, int orientation, int64_t top, int64_t left, int64_t height,
                      int64_t width, const Tensor* into) {
  const jpeg_decompress_struct& cinfo = session.cinfo;
  const int stored_h = static_cast<int>(cinfo.output_height);
  const int stored_w = static_cast<int>(cinfo.output_width);
  const Region region = stored_region(orientation, stored_h, stored_w, static_cast<int>(top), static_cast<int>(left),
                                      static_cast<int>(height), static_cast<int>(width));
  const OutputFormat format = output_format(cinfo, mode);
  Tensor out = output_for(into, format.channels, height, width);
  PlanarSink sink{out.mutable_data_ptr<uint8_t>(),
                  height * width,
                  static_cast<int>(width),
                  orientation,
                  region,
                  format.conversion,
                  format.channels};
  // Files prepared for random access decode only the restart segments around the window; the others
  // go through libjpeg's crop + skip, with our entropy decoder in libjpeg's (entropy_decoder.h).
  const FastPath fast = decode_region_random_access(session, format.libjpeg_space, region, sink);
  const bool ok = fast == FastPath::kNotApplicable ? session.decode_region(format.libjpeg_space, region, sink)
                                                   : fast == FastPath::kDecoded;
  if (!ok) fail("data", session);
  return {out, warning_text(session)};
}

}  // namespace

void check_window(int64_t top, int64_t left, int64_t height, int64_t width, int64_t image_h, int64_t image_w,
                  bool oriented) {
  // Written so that no sum can overflow, whatever the caller passed.
  CUSTOM_OP_CHECK_VALUE(
      top >= 0 && left >= 0 && top < image_h && left < image_w && height <= image_h - top && width <= image_w - left,
      "custom_op: crop window (top=", top, ", left=", left, ", height=", height, ", width=", width,
      ") does not fit in the image of height ", image_h, " and width ", image_w,
      oriented ? " (after EXIF orientation)" : "");
}

namespace {

// The window of an opened session's image decoded at scale_num / 8, in the displayed frame of
// `orientation` (1 when EXIF orientation is not applied).
Decoded decode_scaled(JpegSession& session, const DecodeOptions& options, int orientation, int64_t scale_num,
                      int64_t top, int64_t left, int64_t height, int64_t width, const Tensor* into) {
  if (!session.set_scale(static_cast<unsigned int>(scale_num))) fail("header", session);
  // output_* is the (possibly scaled) size the window refers to.
  const int64_t image_h = swaps_axes(orientation) ? session.cinfo.output_width : session.cinfo.output_height;
  const int64_t image_w = swaps_axes(orientation) ? session.cinfo.output_height : session.cinfo.output_width;
  check_window(top, left, height, width, image_h, image_w, orientation != 1);
  check_pixel_limit(session.cinfo, options.max_pixels);
  Decoded decoded = decode_window(session, options.mode, orientation, top, left, height, width, into);
  if (options.on_warning != WarningPolicy::kWarn) decoded.warnings.clear();
  return decoded;
}

}  // namespace

Decoded decode_and_crop(const Tensor& data, int64_t top, int64_t left, int64_t height, int64_t width,
                        const DecodeOptions& options, int64_t scale_num, const Tensor* into) {
  CUSTOM_OP_CHECK_VALUE(scale_num >= 1 && scale_num <= 16, kMessagePrefix, "scale_num must be in 1..16 (eighths), got ",
                        scale_num);
  CUSTOM_OP_CHECK_VALUE(height > 0 && width > 0, kMessagePrefix,
                        "the crop window's height and width must be at least 1, got ", "height=", height,
                        " and width=", width);
  const bool exif = options.apply_exif_orientation;
  JpegSession session(options.on_warning);
  open(session, data, exif, "decode_and_crop_jpeg");
  const int orientation = exif ? session.exif_orientation() : 1;
  return decode_scaled(session, options, orientation, scale_num, top, left, height, width, into);
}

Decoded decode_planned(const Tensor& data, const DecodeOptions& options, const WindowPlanner& plan, const char* op) {
  JpegSession session(options.on_warning);
  open(session, data, options.apply_exif_orientation, op);
  const int orientation = options.apply_exif_orientation ? session.exif_orientation() : 1;
  const jpeg_decompress_struct& cinfo = session.cinfo;
  const bool swap = swaps_axes(orientation);
  const ImageFrame frame{swap ? cinfo.image_width : cinfo.image_height, swap ? cinfo.image_height : cinfo.image_width,
                         orientation != 1};
  const ScaledWindow w = plan(frame);
  CUSTOM_OP_CHECK_VALUE(w.scale_num >= 1 && w.scale_num <= 16 && w.height > 0 && w.width > 0, kMessagePrefix, op,
                        ": planned an empty window or a scale outside 1..16");
  return decode_scaled(session, options, orientation, w.scale_num, w.top, w.left, w.height, w.width, nullptr);
}

Decoded decode_whole(const Tensor& data, const DecodeOptions& options) {
  JpegSession session(options.on_warning);
  open(session, data, options.apply_exif_orientation, "decode_jpeg");
  const int orientation = options.apply_exif_orientation ? session.exif_orientation() : 1;
  check_pixel_limit(session.cinfo, options.max_pixels);
  if (!session.set_scale(8)) fail("header", session);
  const int64_t h = session.cinfo.output_height, w = session.cinfo.output_width;
  Decoded decoded = swaps_axes(orientation) ? decode_window(session, options.mode, orientation, 0, 0, w, h, nullptr)
                                            : decode_window(session, options.mode, orientation, 0, 0, h, w, nullptr);
  if (options.on_warning != WarningPolicy::kWarn) decoded.warnings.clear();
  return decoded;
}

namespace {

// Text as the 1-D uint8 tensor the single-image operators return it in.
Tensor text_tensor(const std::string& text) {
  Tensor out = new_cpu_tensor({static_cast<int64_t>(text.size())});
  if (!text.empty()) std::memcpy(out.mutable_data_ptr<uint8_t>(), text.data(), text.size());
  return out;
}

std::tuple<Tensor, Tensor> decode_and_crop_jpeg_cpu(const Tensor& data, int64_t top, int64_t left, int64_t height,
                                                    int64_t width, int64_t mode, bool apply_exif_orientation,
                                                    int64_t on_warning, int64_t max_pixels, int64_t scale_num) {
  const auto options = checked_decode_options(mode, apply_exif_orientation, on_warning, max_pixels);
  Decoded decoded = decode_and_crop(data, top, left, height, width, options, scale_num, nullptr);
  return {std::move(decoded.image), text_tensor(decoded.warnings)};
}

std::tuple<Tensor, Tensor> decode_jpeg_cpu(const Tensor& data, int64_t mode, bool apply_exif_orientation,
                                           int64_t on_warning, int64_t max_pixels) {
  Decoded decoded = decode_whole(data, checked_decode_options(mode, apply_exif_orientation, on_warning, max_pixels));
  return {std::move(decoded.image), text_tensor(decoded.warnings)};
}

using HeaderInfo = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, int64_t, std::vector<int64_t>, bool>;

HeaderInfo read_jpeg_header_cpu(const Tensor& data, bool apply_exif_orientation) {
  JpegSession session(WarningPolicy::kRaise);
  // EXIF is always read: the orientation is part of what the header reports.
  open(session, data, /*save_app1=*/true, "read_jpeg_header");
  const jpeg_decompress_struct& cinfo = session.cinfo;
  const int orientation = session.exif_orientation();
  const bool swap = apply_exif_orientation && swaps_axes(orientation);
  std::vector<int64_t> sampling;
  for (int c = 0; c < cinfo.num_components; ++c) {
    sampling.push_back(cinfo.comp_info[c].h_samp_factor);
    sampling.push_back(cinfo.comp_info[c].v_samp_factor);
  }
  RestartLayout layout;
  return {swap ? cinfo.image_width : cinfo.image_height,
          swap ? cinfo.image_height : cinfo.image_width,
          cinfo.num_components,
          static_cast<int64_t>(cinfo.jpeg_color_space),
          static_cast<bool>(cinfo.progressive_mode),
          static_cast<bool>(cinfo.arith_code),
          orientation,
          std::move(sampling),
          restart_layout(cinfo, &layout)};
}

// For the GPU path (cuda/decode_cuda.cpp): the smaller JPEG of the restart segments around a
// stored-frame region of a file prepared for random access (restart_index.h), and where that
// sub-image lies in the image, [top, left, height, width] (filler MCUs may take it past the image's
// right or bottom edge). An empty tensor when the file has no such layout or anything about it is
// unexpected (never an error: the GPU path then decodes the file itself, and reports its damage the
// usual way).
std::tuple<Tensor, std::vector<int64_t>> jpeg_sub_image_cpu(const Tensor& data, int64_t top, int64_t left,
                                                            int64_t height, int64_t width) {
  std::tuple<Tensor, std::vector<int64_t>> none{new_cpu_tensor({0}), {}};
  if (!data.is_cpu() || data.scalar_type() != ScalarType::Byte || data.dim() != 1 || !data.is_contiguous()) return none;
  constexpr int64_t kMax = 1 << 16;  // JPEG dimensions are 16-bit
  if (top < 0 || left < 0 || height < 1 || width < 1 || top >= kMax || left >= kMax || height > kMax || width > kMax)
    return none;
  const uint8_t* bytes = data.const_data_ptr<uint8_t>();
  const size_t size = static_cast<size_t>(data.numel());
  JpegSession session(WarningPolicy::kIgnore);
  if (!session.read_header(bytes, size, /*save_app1=*/false) || !session.set_scale(8)) return none;
  size_t scan_start;
  if (!entropy_start(session, &scan_start)) return none;
  const Region region{static_cast<int>(top), static_cast<int>(left), static_cast<int>(height), static_cast<int>(width)};
  SubImage sub;
  if (!build_sub_image(session.cinfo, bytes, size, scan_start, region, &sub)) return none;
  Tensor out = new_cpu_tensor({static_cast<int64_t>(sub.bytes.size())});
  std::memcpy(out.mutable_data_ptr<uint8_t>(), sub.bytes.data(), sub.bytes.size());
  return {out, {top - sub.region.top, left - sub.region.left, sub.frame.height, sub.frame.width}};
}

// The testing operators below answer for a file's header and the GPU path's kind of window (a
// stored-frame region at full scale), as common/restart_plan.h plans with them; a header it cannot
// plan with is an error there.
FrameFacts checked_frame_facts(JpegSession& session, const Tensor& data, const char* op) {
  open(session, data, /*save_app1=*/false, op);
  FrameFacts facts;
  CUSTOM_OP_CHECK_VALUE(frame_facts(session.cinfo, &facts), kMessagePrefix, op,
                        ": the first scan does not hold each of at most four components once");
  return facts;
}

// Segment numbers as an int64 tensor: its length is known only from the file, which a fake kernel can
// say of a tensor but not of an int[].
Tensor index_tensor(const std::vector<int64_t>& values) {
  Tensor out = new_cpu_tensor({static_cast<int64_t>(values.size())}, ScalarType::Long);
  if (!values.empty()) std::memcpy(out.mutable_data_ptr<int64_t>(), values.data(), values.size() * sizeof(int64_t));
  return out;
}

Region checked_region(int64_t top, int64_t left, int64_t height, int64_t width, const char* op) {
  constexpr int64_t kMax = 1 << 16;  // JPEG dimensions are 16-bit
  CUSTOM_OP_CHECK_VALUE(top >= 0 && left >= 0 && height >= 1 && width >= 1 && top < kMax && left < kMax &&
                            height <= kMax && width <= kMax,
                        kMessagePrefix, op, ": window out of range");
  return {static_cast<int>(top), static_cast<int>(left), static_cast<int>(height), static_cast<int>(width)};
}

// What the CPU path's decode of a stored-frame window at full scale reads (cpu_segments_read): the
// last MCU row of an ordinary decode (every segment from the first through that row's last), with no
// segments; or -1 and the segments the sub-image's slots hold.
std::tuple<int64_t, Tensor> jpeg_segments_read_cpu(const Tensor& data, int64_t top, int64_t left, int64_t height,
                                                   int64_t width) {
  JpegSession session(WarningPolicy::kIgnore);
  const FrameFacts facts = checked_frame_facts(session, data, "_jpeg_segments_read");
  const SegmentsRead read = cpu_segments_read(facts, checked_region(top, left, height, width, "_jpeg_segments_read"));
  if (read.ordinary) return {read.last_row, index_tensor({})};
  return {-1, index_tensor(read.segments)};
}

// The segments our CUDA decoder decodes when one decode serves these stored-frame windows
// (decoder_segments' runs, one after another), for the smallest rectangle it could decode: the
// windows' own MCUs (the one it decodes holds margins around them, and a larger rectangle only adds
// segments).
Tensor cuda_decoder_segments_cpu(const Tensor& data, IntArrayRef tops, IntArrayRef lefts, IntArrayRef heights,
                                 IntArrayRef widths) {
  const size_t n = tops.size();
  CUSTOM_OP_CHECK_VALUE(n >= 1 && lefts.size() == n && heights.size() == n && widths.size() == n, kMessagePrefix,
                        "_cuda_decoder_segments: one or more windows, each with a top, left, height and width");
  JpegSession session(WarningPolicy::kIgnore);
  const FrameFacts facts = checked_frame_facts(session, data, "_cuda_decoder_segments");
  const LayoutFacts& f = facts.layout;
  const int64_t mcu_w = 8 * (f.components == 1 ? 1 : f.max_h), mcu_h = 8 * (f.components == 1 ? 1 : f.max_v);
  std::vector<Region> windows;
  int64_t r0 = INT64_MAX, r1 = 0, c0 = INT64_MAX, c1 = 0;
  for (size_t i = 0; i < n; ++i) {
    const Region r = checked_region(tops[i], lefts[i], heights[i], widths[i], "_cuda_decoder_segments");
    windows.push_back(r);
    r0 = std::min<int64_t>(r0, r.top / mcu_h);
    r1 = std::max<int64_t>(r1, (int64_t(r.top) + r.height + mcu_h - 1) / mcu_h);
    c0 = std::min<int64_t>(c0, r.left / mcu_w);
    c1 = std::max<int64_t>(c1, (int64_t(r.left) + r.width + mcu_w - 1) / mcu_w);
  }
  std::vector<int64_t> segments;
  for (const SegmentRun& run : decoder_segments(facts, r0, r1, c0, c1, windows.data(), windows.size()))
    for (int64_t s = run.first; s < run.first + run.count; ++s) segments.push_back(s);
  return index_tensor(segments);
}

bool set_own_entropy_decoder_cpu(bool on) { return set_own_entropy_decoder(on); }

int64_t entropy_decoder_give_ups_cpu() { return entropy_decoder_give_ups(); }

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(custom_op, CPU, m) {
  m.impl("decode_and_crop_jpeg", TORCH_BOX(&decode_and_crop_jpeg_cpu));
  m.impl("decode_jpeg", TORCH_BOX(&decode_jpeg_cpu));
  m.impl("read_jpeg_header", TORCH_BOX(&read_jpeg_header_cpu));
  m.impl("_jpeg_sub_image", TORCH_BOX(&jpeg_sub_image_cpu));
  m.impl("_jpeg_segments_read", TORCH_BOX(&jpeg_segments_read_cpu));
  m.impl("_cuda_decoder_segments", TORCH_BOX(&cuda_decoder_segments_cpu));
}

// No tensor argument to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("_set_own_entropy_decoder", TORCH_BOX(&set_own_entropy_decoder_cpu));
  m.impl("_entropy_decoder_give_ups", TORCH_BOX(&entropy_decoder_give_ups_cpu));
}

}  // namespace custom_op
