// The segment index that prepare_jpeg writes into its files: an APP9 segment saying where each run of
// restart segments ends, so that our CUDA decoder uploads a file only as far as the last segment a
// window needs instead of whole: the rows below the window are not sent.
//
// The index is only ever an upper bound on what is uploaded. The GPU still finds the restart markers
// itself in the bytes it gets and checks those of the segments it decodes (cuda/segment_decoder.h):
// an index that lies short leaves it too few markers, and the item goes to the CPU path, which decodes the file as
// libjpeg does; one that lies long uploads more. An index whose recorded file size or scan start differs from the
// file's (a file edited after it was prepared) is not used at all. Decoders that do not know APP9 skip it, as they skip
// any application segment.
//
// Payload, after the APP9 marker and its length, numbers big-endian:
//   "custom_op.index\0"  16 bytes
//   version              1 byte (kSegmentIndexVersion)
//   file size            u32: the whole file's bytes
//   scan start           u32: where the first scan's entropy-coded data starts
//   segments per entry   u32, at least 1
//   entries              u32: ceil(restart segments / segments per entry)
//   entry[i]             u32 each: the offset just past the marker (RSTn, or EOI) that ends segment
//                        min((i + 1) * segments per entry, segments) - 1
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace custom_op {

constexpr int kSegmentIndexMarker = 0xE9;  // APP9
constexpr uint8_t kSegmentIndexVersion = 1;
constexpr size_t kSegmentIndexIdBytes = 16;  // "custom_op.index\0"
constexpr size_t kSegmentIndexFixedBytes = kSegmentIndexIdBytes + 1 + 4 * 4;

// True when an APPn payload starts with the index's identifier (its other fields unchecked).
bool is_segment_index(int marker, const uint8_t* payload, size_t size);

// A checked index: entry i ends segment min((i + 1) * per_entry, segments) - 1.
struct SegmentIndex {
  const uint8_t* entries = nullptr;  // `count` big-endian u32s
  int64_t count = 0;
  int64_t per_entry = 0;
};

// Reads the index payload of a file of `file_size` bytes whose entropy-coded data starts at
// scan_start and holds `segments` restart segments. False when anything disagrees (the version, the
// recorded size or scan start, the number of entries): the file is then uploaded whole.
bool read_segment_index(const uint8_t* payload, size_t size, size_t file_size, size_t scan_start, int64_t segments,
                        SegmentIndex* out);

// How many of the file's bytes to upload for a decode whose last segment is `last_segment`: the entry
// covering it, within [scan_start, file_size].
size_t segment_index_upload_end(const SegmentIndex& index, int64_t last_segment, size_t scan_start, size_t file_size);

// The bytes an index adds to a file of `segments` restart segments, `segments_per_row` an MCU row
// (marker and length included): what segment_index_for makes.
size_t segment_index_bytes(int64_t segments, int64_t segments_per_row);

// The restart segments of a file libjpeg just wrote (one sequential scan; no fill bytes before its
// markers): where its entropy-coded data starts, and for each segment the offset just past the marker
// (RSTn, or the EOI) that ends it. False when its markers are not those of such a file.
bool written_segment_ends(const uint8_t* data, size_t size, size_t* scan_start, std::vector<size_t>* ends);

// The index segment (marker and length included) for such a file, to be inserted at *insert_at (after
// its leading APPn segments). Entries hold about an MCU row's segments each (`segments_per_row`), more
// where the index would not fit a segment. Empty when the file has one already, its markers are not
// those written_segment_ends expects, or it would be 4 GiB or larger.
std::vector<uint8_t> segment_index_for(const uint8_t* data, size_t size, int64_t segments_per_row, size_t* insert_at);

}  // namespace custom_op
