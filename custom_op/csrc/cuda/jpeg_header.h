// A bounds-checked scan of a JPEG's markers up to its first scan, on the host, without libjpeg.
//
// The GPU path needs, per file and before any decoding: the frame size, the components and their
// sampling factors, the colour space libjpeg would infer, the coding process and the EXIF orientation.
// It also needs them cheaply: this reads only marker headers (a few hundred bytes for a typical photo).
// It never decides an error: any file it does not fully understand goes to the CPU path, which then
// gives libjpeg's own verdict and message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/restart_plan.h"

namespace custom_op {
namespace gpu {

enum class ColorSpace { kGray, kYCbCr, kRgb, kCmyk, kYcck, kUnknown };

// The usual chroma subsamplings of 3-component files (chroma components 1x1); kOther for the rest.
enum class Subsampling { k444, k422, k420, k440, k411, k410, kGray, kOther };

struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  int precision = 0;
  int sof = -1;  // the SOFn marker's second byte: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ...
  int id[4] = {0, 0, 0, 0};
  int h[4] = {0, 0, 0, 0};
  int v[4] = {0, 0, 0, 0};
  bool jfif = false;
  bool adobe = false;
  int adobe_transform = -1;
  const uint8_t* exif = nullptr;  // payload of the first APP1 that starts with "Exif\0\0"
  size_t exif_length = 0;
  const uint8_t* segment_index = nullptr;  // payload of prepare_jpeg's segment index (common/segment_index.h)
  size_t segment_index_length = 0;
  bool has_eoi = false;      // an EOI marker in the file's last bytes: the file was not cut short
  int restart_interval = 0;  // from a DRI before the first scan (MCUs per restart segment; 0: none)
  // The first scan's header: how many components it interleaves, and the offset just past it (where
  // the entropy-coded data starts); 0 when the SOS segment is malformed. nvJPEG's header parse for
  // the hardware decoder is given only these bytes (nvjpeg_hardware.cpp).
  int scan_components = 0;
  size_t header_end = 0;
};

// False when the bytes are not a JPEG header this scanner fully understands (the CPU path decides).
bool parse_jpeg_header(const uint8_t* data, size_t size, JpegHeader* out);

// The colour space libjpeg-turbo infers from the markers (jdapimin.c: default_decompress_parms).
// `unsure` is set where libjpeg would emit a warning while choosing (an Adobe transform it does not
// know), so that on_warning="raise" keeps its meaning there.
ColorSpace libjpeg_color_space(const JpegHeader& header, bool* unsure);

Subsampling subsampling_of(const JpegHeader& header);

// EXIF orientation 1..8 (1 when absent or invalid), read the same way as the CPU path.
int header_orientation(const JpegHeader& header);

// An MCU's size in pixels (a single-component file has 8x8 MCUs whatever its sampling factors say).
int mcu_width(const JpegHeader& header);
int mcu_height(const JpegHeader& header);

// The facts of common/random_access.h's layout test.
LayoutFacts layout_facts(const JpegHeader& header);

// The facts of common/restart_plan.h's plans: the layout facts and each component's sampling.
FrameFacts frame_facts(const JpegHeader& header);

}  // namespace gpu
}  // namespace custom_op
