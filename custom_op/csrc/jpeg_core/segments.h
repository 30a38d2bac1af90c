// Finds the byte range of every restart segment of a scan, checking the markers between them.
//
// Why the markers are checked here and not per segment: libjpeg resynchronises on a missing, extra
// or misnumbered restart marker (jpeg_resync_to_restart), and depending on the marker it may treat
// the following segments as shifted by one or two, so a wrong marker can change which pixels EVERY
// later segment lands on. A per-segment decoder cannot reproduce that; it must refuse the whole
// scan. So the walk requires exactly what a valid file has: segment i ends with RST(i mod 8), the
// last segment ends with EOI, and no other marker comes between. Anything else (including the data
// ending without EOI, which libjpeg reports as "Premature end of JPEG file") is a ScanError, and the
// caller decodes the file on the CPU path.
//
// Bytes are read as libjpeg reads them: FF 00 is a stuffed data byte, FF FF .. FF before a marker is
// fill (the segment ends at the first FF), and FF FF .. FF 00 is data (the segment's bit reader then
// reports it, since valid encoders never write it). Every read is checked against `size`.
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

enum ScanError : int {
  kScanOk = 0,
  kScanTruncated = 1,         // the data ends before the last segment's EOI
  kScanBadRestart = 2,        // a restart marker missing, misnumbered or extra
  kScanUnexpectedMarker = 3,  // another marker inside the scan, or after it something else than EOI
  kScanBadArguments = 4,
};

struct SegmentScan {
  int error;        // ScanError
  int64_t found;    // segments whose both ends were found (their ranges are valid even on error)
  size_t error_at;  // offset of the byte where the walk stopped with an error
};

// Walks the entropy-coded data from scan_start for num_segments segments and writes segment i's
// range to [begin[i], end[i]) (offsets into data) for each one found.
CUSTOM_OP_HD inline SegmentScan find_segments(const uint8_t* data, size_t size, size_t scan_start, int64_t num_segments,
                                              size_t* begin, size_t* end) {
  SegmentScan result = {kScanOk, 0, 0};
  if (data == nullptr || scan_start > size || num_segments < 1 || begin == nullptr || end == nullptr) {
    result.error = kScanBadArguments;
    return result;
  }
  size_t pos = scan_start;
  for (int64_t seg = 0; seg < num_segments; ++seg) {
    const size_t segment_begin = pos;
    size_t p = pos;
    uint8_t code = 0;
    size_t marker_at = 0;
    for (;;) {
      while (p < size && data[p] != 0xFF) ++p;
      if (p >= size) {
        result.error = kScanTruncated;
        result.error_at = size;
        return result;
      }
      size_t q = p + 1;
      while (q < size && data[q] == 0xFF) ++q;
      if (q >= size) {
        result.error = kScanTruncated;
        result.error_at = size;
        return result;
      }
      if (data[q] == 0x00) {  // stuffed (or FF FF .. FF 00, which libjpeg also reads as data)
        p = q + 1;
        continue;
      }
      code = data[q];
      marker_at = p;
      pos = q + 1;
      break;
    }
    const bool last = seg == num_segments - 1;
    const bool is_rst = code >= 0xD0 && code <= 0xD7;
    if (last ? code != 0xD9 : !(is_rst && code == 0xD0 + (seg & 7))) {
      result.error = (is_rst || code == 0xD9) ? kScanBadRestart : kScanUnexpectedMarker;
      result.error_at = marker_at;
      return result;
    }
    begin[seg] = segment_begin;
    end[seg] = marker_at;
    result.found = seg + 1;
  }
  return result;
}

}  // namespace jpeg_core
}  // namespace custom_op
