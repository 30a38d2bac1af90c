#include "jpeg_header.h"

#include <algorithm>
#include <cstring>

#include "common/exif_orientation.h"
#include "common/segment_index.h"

namespace custom_op {
namespace gpu {
namespace {

inline int be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

bool is_sof(int marker) {
  // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

// In entropy-coded data a 0xFF byte is always followed by 0x00 or a restart marker, so FF D9 near the
// end can only be the EOI marker. Some writers append a few bytes after it; allow a short tail.
bool ends_with_eoi(const uint8_t* data, size_t size) {
  constexpr size_t kTail = 64;
  const size_t start = size > kTail ? size - kTail : 0;
  for (size_t i = size; i >= start + 2; --i) {
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return true;
  }
  return false;
}

int max_factor(const int* factors, int components) {
  return components > 0 ? *std::max_element(factors, factors + components) : 0;
}

}  // namespace

bool parse_jpeg_header(const uint8_t* data, size_t size, JpegHeader* out) {
  *out = JpegHeader();
  if (data == nullptr || size < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;
  size_t pos = 2;
  bool saw_sof = false;
  while (true) {
    // Markers may be preceded by any number of 0xFF fill bytes; anything else between segments is
    // garbage that libjpeg warns about, so leave such files to it.
    if (pos >= size || data[pos] != 0xFF) return false;
    while (pos < size && data[pos] == 0xFF) ++pos;
    if (pos >= size) return false;
    const int marker = data[pos++];
    if (marker == 0xDA) {  // SOS: the header is complete
      if (!saw_sof) return false;
      out->has_eoi = ends_with_eoi(data, size);
      if (size - pos >= 3) {
        const size_t length = static_cast<size_t>(be16(data + pos));
        if (length >= 3 && length <= size - pos) {
          out->scan_components = data[pos + 2];
          out->header_end = pos + length;
        }
      }
      return true;
    }
    // Stand-alone markers have no length; none belongs before the first scan.
    if (marker == 0x00 || marker == 0x01 || marker == 0xD8 || marker == 0xD9 || (marker >= 0xD0 && marker <= 0xD7))
      return false;
    if (size - pos < 2) return false;
    const size_t length = static_cast<size_t>(be16(data + pos));
    if (length < 2 || length > size - pos) return false;
    const uint8_t* seg = data + pos + 2;
    const size_t n = length - 2;
    if (is_sof(marker)) {
      if (saw_sof || n < 6) return false;
      saw_sof = true;
      out->sof = marker;
      out->precision = seg[0];
      out->height = be16(seg + 1);
      out->width = be16(seg + 3);
      out->components = seg[5];
      if (out->components < 1 || out->components > 4 || n != 6 + 3 * static_cast<size_t>(out->components)) return false;
      for (int c = 0; c < out->components; ++c) {
        const uint8_t* comp = seg + 6 + 3 * c;
        out->id[c] = comp[0];
        out->h[c] = comp[1] >> 4;
        out->v[c] = comp[1] & 15;
        if (out->h[c] < 1 || out->h[c] > 4 || out->v[c] < 1 || out->v[c] > 4) return false;
      }
      if (out->width == 0 || out->height == 0) return false;  // DNL-defined height: leave to libjpeg
    } else if (marker == 0xDD) {
      if (n != 2) return false;
      out->restart_interval = be16(seg);
    } else if (marker == 0xE0) {
      // libjpeg: APP0_DATA_LEN (14) bytes at least, starting with "JFIF\0".
      if (n >= 14 && std::memcmp(seg, "JFIF\0", 5) == 0) out->jfif = true;
    } else if (marker == 0xEE) {
      // libjpeg: APP14_DATA_LEN (12) bytes at least, starting with "Adobe"; the transform is byte 11.
      if (n >= 12 && std::memcmp(seg, "Adobe", 5) == 0) {
        out->adobe = true;
        out->adobe_transform = seg[11];
      }
    } else if (is_segment_index(marker, seg, n)) {
      if (out->segment_index == nullptr) {
        out->segment_index = seg;
        out->segment_index_length = n;
      }
    } else if (marker == 0xE1) {
      if (out->exif == nullptr && n >= 6 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
        out->exif = seg;
        out->exif_length = n;
      }
    }
    pos += length;
  }
}

ColorSpace libjpeg_color_space(const JpegHeader& header, bool* unsure) {
  *unsure = false;
  switch (header.components) {
    case 1: return ColorSpace::kGray;
    case 3:
      if (header.jfif) return ColorSpace::kYCbCr;
      if (header.adobe) {
        if (header.adobe_transform == 0) return ColorSpace::kRgb;
        if (header.adobe_transform != 1) *unsure = true;
        return ColorSpace::kYCbCr;
      }
      if (header.id[0] == 82 && header.id[1] == 71 && header.id[2] == 66) return ColorSpace::kRgb;
      return ColorSpace::kYCbCr;
    case 4:
      if (!header.adobe || header.adobe_transform == 0) return ColorSpace::kCmyk;
      if (header.adobe_transform != 2) *unsure = true;
      return ColorSpace::kYcck;
    default: return ColorSpace::kUnknown;
  }
}

Subsampling subsampling_of(const JpegHeader& header) {
  if (header.components == 1) return Subsampling::kGray;
  if (header.components != 3) return Subsampling::kOther;
  for (int c = 1; c < 3; ++c)
    if (header.h[c] != 1 || header.v[c] != 1) return Subsampling::kOther;
  const int h = header.h[0], v = header.v[0];
  if (h == 1 && v == 1) return Subsampling::k444;
  if (h == 2 && v == 1) return Subsampling::k422;
  if (h == 2 && v == 2) return Subsampling::k420;
  if (h == 1 && v == 2) return Subsampling::k440;
  if (h == 4 && v == 1) return Subsampling::k411;
  if (h == 4 && v == 2) return Subsampling::k410;
  return Subsampling::kOther;
}

int header_orientation(const JpegHeader& header) {
  if (header.exif == nullptr) return 1;
  return custom_op::exif_orientation(header.exif, header.exif_length);
}

int mcu_width(const JpegHeader& header) {
  return 8 * (header.components > 1 ? max_factor(header.h, header.components) : 1);
}

int mcu_height(const JpegHeader& header) {
  return 8 * (header.components > 1 ? max_factor(header.v, header.components) : 1);
}

LayoutFacts layout_facts(const JpegHeader& header) {
  LayoutFacts f;
  f.sequential_huffman = header.sof == 0xC0 || header.sof == 0xC1;
  f.precision = header.precision;
  f.components = header.components;
  f.scan_components = header.scan_components;
  f.max_h = max_factor(header.h, header.components);
  f.max_v = max_factor(header.v, header.components);
  f.width = header.width;
  f.height = header.height;
  f.restart_interval = header.restart_interval;
  return f;
}

FrameFacts frame_facts(const JpegHeader& header) {
  FrameFacts f;
  f.layout = layout_facts(header);
  for (int c = 0; c < header.components && c < 4; ++c) {
    f.h_samp[c] = header.h[c];
    f.v_samp[c] = header.v[c];
  }
  return f;
}

}  // namespace gpu
}  // namespace custom_op
