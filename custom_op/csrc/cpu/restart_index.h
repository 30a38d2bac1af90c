// Random access into JPEGs with short restart segments.
//
// A restart marker resets the DC predictors and byte-aligns the entropy-coded data, so the segment
// after it decodes without anything before it. When every segment holds at most an MCU row's worth of
// MCUs (restart interval k <= MCUs per row), the segments holding the MCUs around a window make a
// smaller JPEG of their own: the original tables, a frame header with the smaller size, those
// segments with their markers renumbered, and EOI. Decoding that sub-image and taking the window out
// of it gives exactly the pixels of the full decode, provided the sub-image keeps the neighbours that
// chroma upsampling reads around the window. Huffman decoding, most of a decode's time, then costs in
// proportion to the window instead of to everything above and beside it.
//
// When k divides the MCUs per row, the segments tile the image and the sub-image is a rectangle of
// them. Otherwise a segment may run from the end of one MCU row into the next, and where segments
// start moves from row to row. The sub-image declares the same interval k, so libjpeg expects a
// marker after every k of its MCUs counted in its own raster order: for its MCU t to be the
// original's MCU o, both must lie at the same place in their segments (t = o modulo k). A sub-image
// that starts at a segment boundary and whose width is the MCUs per row modulo k keeps that true on
// every row. The MCUs beside the window whose segment also holds MCUs of another sub-image row are
// decoded and not used; plan_sub_image (common/restart_plan.h) plans which segment fills each k-MCU
// slot of the sub-image (filler slots repeat a segment the window needs, and nothing is read that a
// decode of the whole file down to the window would not read).
//
// The segment boundaries come from untrusted bytes. Anything that does not match the header's layout
// (a marker missing, extra or misnumbered, data ending early, a header this code does not expect)
// makes build_sub_image refuse, and the caller takes the ordinary path, which reports the damage as it
// always does. Every read is bounds-checked against the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/restart_plan.h"
#include "libjpeg_session.h"
#include "sub_image.h"

namespace custom_op {

// The facts common/restart_plan.h plans with, from a parsed header. False when its first scan does not
// hold each of at most four components once (a hostile header may repeat one).
bool frame_facts(const jpeg_decompress_struct& cinfo, FrameFacts* facts);

// True (and *layout filled) when a parsed header declares a random-access layout: sequential
// Huffman coding, 8-bit samples, every component in the first scan, and a restart interval of at most
// the MCUs per row. Reads header fields only; the entropy-coded data is checked when used.
bool restart_layout(const jpeg_decompress_struct& cinfo, RestartLayout* layout);

// The rewritten file: its bytes, and where the window lies in its (scaled) output.
struct SubImage {
  std::vector<uint8_t> bytes;
  Region region;
  ExpectedFrame frame;
};

// Builds the sub-image holding `region` (in the scaled output of the parsed header `cinfo`; the
// scale must be n/8) from the file `data`, whose first scan's entropy-coded data starts at
// scan_start, as plan_sub_image plans it. False when the file is not random-access, there is no plan,
// or the restart markers or headers are not what the plan needs.
bool build_sub_image(const jpeg_decompress_struct& cinfo, const uint8_t* data, size_t size, size_t scan_start,
                     const Region& region, SubImage* sub);

// Number of windows decoded through a sub-image in this process (for tests and benchmarks).
int64_t random_access_decodes();
void count_random_access_decode();

// Decodes `region` of the session's image (header read, scale set) through a sub-image when the file
// allows it, handing rows to `sink` exactly as JpegSession::decode_region would. kNotApplicable
// leaves the session as it was, for the ordinary path; kFailed means the session's error message
// says what went wrong.
template <class Sink>
FastPath decode_region_random_access(JpegSession& session, J_COLOR_SPACE out_color_space, const Region& region,
                                     Sink& sink) {
  const uint8_t* data = session.data();
  const size_t size = session.size();
  size_t scan_start;
  if (!entropy_start(session, &scan_start)) return FastPath::kNotApplicable;
  const unsigned int scale_num = session.cinfo.scale_num;
  SubImage sub;
  if (!build_sub_image(session.cinfo, data, size, scan_start, region, &sub)) return FastPath::kNotApplicable;
  FastPath result;
  const bool opened = session.reopen(sub.bytes.data(), sub.bytes.size()) && session.set_scale(scale_num);
  if (!rewritten_frame_ok(session, opened, sub.frame, sub.region, data, size, scale_num, &result)) return result;
  count_random_access_decode();
  return session.decode_region(out_color_space, sub.region, sink) ? FastPath::kDecoded : FastPath::kFailed;
}

}  // namespace custom_op
