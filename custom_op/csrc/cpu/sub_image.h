// Smaller JPEG datastreams made from a file's own headers, for decoding part of it.
//
// The random-access path (restart_index.h) hands libjpeg a rewritten file: the original tables and
// colour hints, a frame header with another size, then the restart segments it chose. These are the
// pieces that build and check such a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "libjpeg_session.h"

namespace custom_op {

// Appends to *out the header segments a decoder needs (tables, the frame with size
// sub_height x sub_width, restart interval, JFIF/Adobe colour hints, the scan header) from
// data[0, scan_start), which must end with the first SOS. Other APPn and COM segments carry nothing
// the decode depends on and are left out. False for anything unexpected: the caller then leaves the
// file to libjpeg's own path.
bool append_sub_header(const uint8_t* data, size_t scan_start, int sub_height, int sub_width,
                       std::vector<uint8_t>* out);

// What must be true of the rewritten file's header, checked after it has been parsed.
struct ExpectedFrame {
  int height, width;
  int num_components;
  J_COLOR_SPACE color_space;
  unsigned int restart_interval;
  int h_samp[MAX_COMPONENTS], v_samp[MAX_COMPONENTS];
};

// What a fast path did: nothing (the session is as it was, for the ordinary path), the whole
// decode, or a failure that the session's error message explains.
enum class FastPath { kNotApplicable, kDecoded, kFailed };

// Whether the header just parsed (scale set) is the one `frame` describes, with `region` inside its
// output.
bool frame_matches(const jpeg_decompress_struct& cinfo, const ExpectedFrame& frame, const Region& region);

// Where the first scan's entropy-coded data starts in the session's buffer: after jpeg_read_header
// the memory source stands on the first byte after the SOS segment. False when the session is not
// reading a buffer of its own (a rewritten datastream is never rewritten again).
inline bool entropy_start(const JpegSession& session, size_t* offset) {
  const uint8_t* data = session.data();
  if (data == nullptr || session.cinfo.src == nullptr) return false;
  const uint8_t* at = session.cinfo.src->next_input_byte;
  if (at < data || at > data + session.size()) return false;
  *offset = static_cast<size_t>(at - data);
  return true;
}

// After a rewritten datastream was opened (opened: its header parsed and scale_num set): true when
// its frame is the one meant. Otherwise the session goes back to the original file, at that scale,
// for the ordinary path, and *result says kNotApplicable (or kFailed when even that went wrong).
inline bool rewritten_frame_ok(JpegSession& session, bool opened, const ExpectedFrame& frame, const Region& region,
                               const uint8_t* data, size_t size, unsigned int scale_num, FastPath* result) {
  if (opened && frame_matches(session.cinfo, frame, region)) return true;
  // Not expected with a header copied from one libjpeg accepted.
  *result = session.reopen(data, size) && session.set_scale(scale_num) ? FastPath::kNotApplicable : FastPath::kFailed;
  return false;
}

}  // namespace custom_op
