#include "common/segment_index.h"

#include <algorithm>
#include <cstring>

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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Segments per entry: a row's, doubled until the entries fit one segment.
int64_t segments_per_entry(int64_t segments, int64_t segments_per_row) {
  int64_t per_entry = std::max<int64_t>(1, segments_per_row);
  while (kSegmentIndexFixedBytes + 4 * static_cast<size_t>(ceil_div(segments, per_entry)) > kMaxSegmentPayload)
    per_entry *= 2;
  return per_entry;
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

std::vector<uint8_t> with_segment_index(const uint8_t* data, size_t size, int64_t segments_per_row) {
  std::vector<uint8_t> unchanged(data, data + size);
  if (size < 4 || size >= (uint64_t{1} << 32) || data[0] != 0xFF || data[1] != 0xD8) return unchanged;
  // The header: where its leading APPn segments end (the index goes there), and where the scan starts.
  size_t pos = 2, insert_at = 0, scan_start = 0;
  while (scan_start == 0) {
    if (pos + 4 > size || data[pos] != 0xFF) return unchanged;
    const int marker = data[pos + 1];
    const size_t length = (size_t(data[pos + 2]) << 8) | data[pos + 3];
    if (length < 2 || pos + 2 + length > size) return unchanged;
    if (insert_at == 0 && (marker < 0xE0 || marker > 0xEF)) insert_at = pos;
    if (is_segment_index(marker, data + pos + 4, length - 2)) return unchanged;  // one index is enough
    pos += 2 + length;
    if (marker == 0xDA) scan_start = pos;
  }
  // Where each segment's terminating marker ends. libjpeg writes no fill bytes before its markers.
  std::vector<size_t> ends;
  for (size_t p = scan_start; p + 1 < size; ++p) {
    if (data[p] != 0xFF || data[p + 1] == 0x00) continue;
    const uint8_t code = data[p + 1];
    if (code == 0xD9) {
      ends.push_back(p + 2);
      break;
    }
    if (code < 0xD0 || code > 0xD7) return unchanged;
    ends.push_back(p + 2);
    ++p;
  }
  if (ends.empty() || data[ends.back() - 1] != 0xD9) return unchanged;

  const int64_t segments = static_cast<int64_t>(ends.size());
  const int64_t per_entry = segments_per_entry(segments, segments_per_row);
  const int64_t count = ceil_div(segments, per_entry);
  const size_t payload = kSegmentIndexFixedBytes + 4 * static_cast<size_t>(count);
  const size_t added = 4 + payload;  // marker, length, payload
  if (size + added >= (uint64_t{1} << 32)) return unchanged;

  std::vector<uint8_t> out;
  out.reserve(size + added);
  out.insert(out.end(), data, data + insert_at);
  const size_t at = out.size();
  out.resize(at + added);
  uint8_t* s = out.data() + at;
  s[0] = 0xFF;
  s[1] = static_cast<uint8_t>(kSegmentIndexMarker);
  s[2] = static_cast<uint8_t>((payload + 2) >> 8);
  s[3] = static_cast<uint8_t>(payload + 2);
  uint8_t* p = s + 4;
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
  out.insert(out.end(), data + insert_at, data + size);
  return out;
}

}  // namespace custom_op
