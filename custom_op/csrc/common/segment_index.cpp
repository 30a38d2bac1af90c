#include "common/segment_index.h"

#include <algorithm>
#include <cstring>

#include "common/int_math.h"

namespace custom_op {
namespace {

constexpr char kId[kSegmentIndexIdBytes] = "custom_op.index";  // with its terminating NUL: 16 bytes
constexpr size_t kMaxSegmentPayload = 65535 - 2;               // a segment's length field counts itself

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

void put_be32(uint8_t* p, uint64_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Segments per entry: a row's, doubled until the entries fit one segment.
int64_t segments_per_entry(int64_t segments, int64_t segments_per_row) {
  int64_t per_entry = std::max<int64_t>(1, segments_per_row);
  while (kSegmentIndexFixedBytes + 4 * static_cast<size_t>(ceil_div(segments, per_entry)) > kMaxSegmentPayload)
    per_entry *= 2;
  return per_entry;
}

bool starts_with_soi(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0xFF && data[1] == 0xD8; }

// The header segment at *pos (a marker with a length; fill bytes are not expected in a file libjpeg
// wrote): its marker and length, *pos moved past it. False where the bytes are not such a segment.
bool next_header_segment(const uint8_t* data, size_t size, size_t* pos, size_t* marker, size_t* length) {
  const size_t at = *pos;
  if (at + 4 > size || data[at] != 0xFF) return false;
  *marker = data[at + 1];
  *length = (size_t(data[at + 2]) << 8) | data[at + 3];
  if (*length < 2 || at + 2 + *length > size) return false;
  *pos = at + 2 + *length;
  return true;
}

}  // namespace

size_t segment_index_bytes(int64_t segments, int64_t segments_per_row) {
  return 4 + kSegmentIndexFixedBytes +
         4 * static_cast<size_t>(ceil_div(segments, segments_per_entry(segments, segments_per_row)));
}

bool is_segment_index(int marker, const uint8_t* payload, size_t size) {
  return marker == kSegmentIndexMarker && size >= kSegmentIndexIdBytes &&
         std::memcmp(payload, kId, kSegmentIndexIdBytes) == 0;
}

bool read_segment_index(const uint8_t* payload, size_t size, size_t file_size, size_t scan_start, int64_t segments,
                        SegmentIndex* out) {
  *out = SegmentIndex();
  if (size < kSegmentIndexFixedBytes || std::memcmp(payload, kId, kSegmentIndexIdBytes) != 0) return false;
  const uint8_t* p = payload + kSegmentIndexIdBytes;
  if (p[0] != kSegmentIndexVersion) return false;
  if (be32(p + 1) != file_size || be32(p + 5) != scan_start) return false;
  const int64_t per_entry = be32(p + 9), count = be32(p + 13);
  if (per_entry < 1 || segments < 1 || count != ceil_div(segments, per_entry)) return false;
  if (size - kSegmentIndexFixedBytes < static_cast<size_t>(count) * 4) return false;
  out->entries = payload + kSegmentIndexFixedBytes;
  out->count = count;
  out->per_entry = per_entry;
  return true;
}

size_t segment_index_upload_end(const SegmentIndex& index, int64_t last_segment, size_t scan_start, size_t file_size) {
  if (index.entries == nullptr || last_segment < 0) return file_size;
  const int64_t entry = last_segment / index.per_entry;
  if (entry >= index.count) return file_size;
  const size_t end = be32(index.entries + 4 * entry);
  return std::clamp(end, std::min(scan_start, file_size), file_size);
}

bool written_segment_ends(const uint8_t* data, size_t size, size_t* scan_start, std::vector<size_t>* ends) {
  ends->clear();
  if (!starts_with_soi(data, size)) return false;
  size_t pos = 2, marker = 0, length = 0;
  while (marker != 0xDA)
    if (!next_header_segment(data, size, &pos, &marker, &length)) return false;
  *scan_start = pos;
  for (size_t p = pos; p + 1 < size; ++p) {
    if (data[p] != 0xFF || data[p + 1] == 0x00) continue;
    const uint8_t code = data[p + 1];
    ends->push_back(p + 2);
    if (code == 0xD9) return true;
    if (code < 0xD0 || code > 0xD7) return false;
    ++p;
  }
  return false;
}

std::vector<uint8_t> segment_index_for(const uint8_t* data, size_t size, int64_t segments_per_row, size_t* insert_at) {
  if (!starts_with_soi(data, size) || size >= (uint64_t{1} << 32)) return {};
  // After the leading APPn segments; none where the file has one already.
  *insert_at = 0;
  size_t pos = 2, marker = 0, length = 0;
  while (marker != 0xDA) {
    const size_t at = pos;
    if (!next_header_segment(data, size, &pos, &marker, &length)) return {};
    if (is_segment_index(static_cast<int>(marker), data + at + 4, length - 2)) return {};
    if (*insert_at == 0 && (marker < 0xE0 || marker > 0xEF)) *insert_at = at;
  }
  size_t scan_start;
  std::vector<size_t> ends;
  if (!written_segment_ends(data, size, &scan_start, &ends)) return {};

  const int64_t segments = static_cast<int64_t>(ends.size());
  const int64_t per_entry = segments_per_entry(segments, segments_per_row);
  const int64_t count = ceil_div(segments, per_entry);
  const size_t payload = kSegmentIndexFixedBytes + 4 * static_cast<size_t>(count);
  const size_t added = 4 + payload;  // marker, length, payload
  if (size + added >= (uint64_t{1} << 32)) return {};

  std::vector<uint8_t> out(added);
  uint8_t* p = out.data();
  p[0] = 0xFF;
  p[1] = static_cast<uint8_t>(kSegmentIndexMarker);
  p[2] = static_cast<uint8_t>((payload + 2) >> 8);
  p[3] = static_cast<uint8_t>(payload + 2);
  p += 4;
  std::memcpy(p, kId, kSegmentIndexIdBytes);
  p += kSegmentIndexIdBytes;
  *p++ = kSegmentIndexVersion;
  put_be32(p, size + added);
  put_be32(p + 4, scan_start + added);
  put_be32(p + 8, static_cast<uint64_t>(per_entry));
  put_be32(p + 12, static_cast<uint64_t>(count));
  p += 16;
  for (int64_t i = 0; i < count; ++i, p += 4)
    put_be32(p, ends[static_cast<size_t>(std::min((i + 1) * per_entry, segments) - 1)] + added);
  return out;
}

}  // namespace custom_op
