#include "cuda/scan_tables.h"

#include <cstring>

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

inline int be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }

struct Defined {
  bool quant[4] = {false, false, false, false};
  jc::QuantTable quant_table[4];
  bool dc[4] = {false, false, false, false}, ac[4] = {false, false, false, false};
  TableBytes dc_table[4], ac_table[4];
};

// DQT as libjpeg's get_dqt reads it; partial tables (which it zero-fills) are left to it.
bool read_dqt(const uint8_t* seg, size_t n, Defined* d) {
  size_t pos = 0;
  while (pos < n) {
    const int precision = seg[pos] >> 4, index = seg[pos] & 15;
    ++pos;
    if (precision > 1 || index >= 4) return false;
    const size_t bytes = 64 * static_cast<size_t>(precision + 1);
    if (n - pos < bytes) return false;
    // Stored in zigzag order; kept in natural order, each value read from its zigzag place (constant
    // indices once the loop is unrolled, rather than a table of positions built for every file).
    uint16_t* value = d->quant_table[index].value;
    const uint8_t* src = seg + pos;
    if (precision) {
      for (int p = 0; p < 64; ++p) value[p] = static_cast<uint16_t>(be16(src + 2 * jc::zigzag_index(p / 8, p % 8)));
    } else {
      for (int p = 0; p < 64; ++p) value[p] = src[jc::zigzag_index(p / 8, p % 8)];
    }
    d->quant[index] = true;
    pos += bytes;
  }
  return true;
}

// DHT as libjpeg's get_dht reads it.
bool read_dht(const uint8_t* seg, size_t n, Defined* d) {
  size_t pos = 0;
  while (n - pos > 16) {
    const int index = seg[pos];
    const uint8_t* counts = seg + pos + 1;
    size_t count = 0;
    for (int i = 0; i < 16; ++i) count += counts[i];
    pos += 17;
    if (count > 256 || count > n - pos) return false;
    const bool ac = (index & 0x10) != 0;
    const int number = ac ? index - 0x10 : index;
    if (number < 0 || number >= 4) return false;
    (ac ? d->ac_table : d->dc_table)[number] = {counts, 16 + count};
    (ac ? d->ac : d->dc)[number] = true;
    pos += count;
  }
  return pos == n;
}

}  // namespace

bool read_scan_tables(const uint8_t* data, size_t header_end, int components, ScanTables* out) {
  if (data == nullptr || header_end < 4 || components < 1 || components > 4) return false;
  if (data[0] != 0xFF || data[1] != 0xD8) return false;
  Defined d;
  int ids[4] = {-1, -1, -1, -1}, quant_of[4] = {0, 0, 0, 0};
  bool saw_frame = false;
  size_t pos = 2;
  while (pos < header_end) {
    if (data[pos] != 0xFF) return false;
    while (pos < header_end && data[pos] == 0xFF) ++pos;
    if (header_end - pos < 3) return false;
    const int marker = data[pos++];
    const size_t length = static_cast<size_t>(be16(data + pos));
    if (length < 2 || length > header_end - pos) return false;
    const uint8_t* seg = data + pos + 2;
    const size_t n = length - 2;
    pos += length;
    switch (marker) {
      case 0xC0:
      case 0xC1:
        if (saw_frame || n != 6 + 3 * static_cast<size_t>(components) || seg[5] != components) return false;
        saw_frame = true;
        for (int c = 0; c < components; ++c) {
          ids[c] = seg[6 + 3 * c];
          quant_of[c] = seg[8 + 3 * c];
          if (quant_of[c] >= 4) return false;
        }
        break;
      case 0xDB:
        if (!read_dqt(seg, n, &d)) return false;
        break;
      case 0xC4:
        if (!read_dht(seg, n, &d)) return false;
        break;
      case 0xE0:
        // libjpeg warns about a JFIF marker whose major version is not 1.
        if (n >= 14 && std::memcmp(seg, "JFIF\0", 5) == 0 && seg[5] != 1) return false;
        break;
      case 0xDD:
      case 0xCC:
      case 0xFE: break;
      case 0xDA: {
        if (!saw_frame || pos != header_end || n < 1) return false;
        const int count = seg[0];
        if (count != components || n != 4 + 2 * static_cast<size_t>(count)) return false;
        bool used[4] = {false, false, false, false};
        for (int i = 0; i < count; ++i) {
          const int id = seg[1 + 2 * i], selectors = seg[2 + 2 * i];
          int c = 0;
          while (c < components && ids[c] != id) ++c;
          if (c == components || used[c]) return false;
          used[c] = true;
          out->scan_order[i] = c;
          const int dc = selectors >> 4, ac = selectors & 15;
          if (dc >= 4 || ac >= 4 || !d.dc[dc] || !d.ac[ac] || !d.quant[quant_of[c]]) return false;
          out->dc[c] = d.dc_table[dc];
          out->ac[c] = d.ac_table[ac];
          out->quant[c] = d.quant_table[quant_of[c]];
        }
        const uint8_t* tail = seg + 1 + 2 * count;  // Ss, Se, Ah/Al of a sequential scan
        return tail[0] == 0 && tail[1] == 63 && tail[2] == 0;
      }
      default:
        if (marker >= 0xE0 && marker <= 0xEF) break;  // other APPn
        return false;
    }
  }
  return false;
}

}  // namespace gpu
}  // namespace custom_op
