#include "exif_orientation.h"

#include <cstring>

namespace custom_op {
namespace {

struct TiffReader {
  const uint8_t* base;  // start of the TIFF header
  size_t size;
  bool little_endian;

  bool u16(size_t offset, uint32_t* out) const {
    if (offset > size || size - offset < 2) return false;
    const uint8_t* p = base + offset;
    *out = little_endian ? (p[0] | (p[1] << 8)) : ((p[0] << 8) | p[1]);
    return true;
  }
  bool u32(size_t offset, uint32_t* out) const {
    if (offset > size || size - offset < 4) return false;
    const uint8_t* p = base + offset;
    *out = little_endian ? (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24)
                         : (uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]));
    return true;
  }
};

constexpr uint32_t kOrientationTag = 0x0112;
constexpr uint32_t kTypeShort = 3;

}  // namespace

int exif_orientation(const uint8_t* app1, size_t length) {
  static const char kExifId[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1 == nullptr || length < sizeof(kExifId) + 8 || std::memcmp(app1, kExifId, 6) != 0) return 1;
  TiffReader tiff{app1 + 6, length - 6, false};
  if (tiff.base[0] == 'I' && tiff.base[1] == 'I') {
    tiff.little_endian = true;
  } else if (!(tiff.base[0] == 'M' && tiff.base[1] == 'M')) {
    return 1;
  }
  uint32_t magic = 0, ifd = 0, count = 0;
  if (!tiff.u16(2, &magic) || magic != 42 || !tiff.u32(4, &ifd) || !tiff.u16(ifd, &count)) return 1;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t(ifd) + 2 + size_t(i) * 12;
    uint32_t tag = 0, type = 0, value = 0;
    if (!tiff.u16(entry, &tag) || !tiff.u16(entry + 2, &type)) return 1;
    if (tag != kOrientationTag) continue;
    if (type != kTypeShort || !tiff.u16(entry + 8, &value)) return 1;
    return (value >= 1 && value <= 8) ? int(value) : 1;
  }
  return 1;
}

}  // namespace custom_op
