// Decoding a window of an ordinary sequential JPEG from the MCU row above it.
//
// On a large photo, crop + skip + stop spends most of its time skipping the rows above the window,
// which libjpeg does by running its full entropy decoder over them. huffman_skip.h walks those rows
// faster, but libjpeg cannot be handed a position in the middle of a scan. So the walk's result
// becomes a datastream of its own:
//   - the file's headers, with the frame shortened to the rows from MCU row R on;
//   - row R's first MCU (or first few) written again: its DC differences made absolute (a new
//     scan's predictors start at zero), and zero-run codes added before end-of-block codes so that
//     the rewritten MCUs end on the same bit of a byte as the originals did;
//   - the rest of the original byte there, then the file's own bytes to the end, neither copied nor
//     changed.
// Every coefficient of the new scan equals the original's, so libjpeg decodes the rows below R to
// exactly the pixels of a full decode, given the one row of context that chroma upsampling reads
// above the window.
//
// Anything the walk does not expect (progressive or arithmetic coding, restart markers, a bad code, a
// marker or the end of the data among the skipped rows, a DC value the tables cannot write) leaves
// the file to the ordinary path, which reports any damage as it always does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "libjpeg_session.h"
#include "sub_image.h"

namespace custom_op {

// libjpeg reads at most a few bytes ahead of the bits it decodes.
constexpr size_t kEndSlack = 32;

struct SplicedImage {
  std::vector<uint8_t> head;  // headers and the rewritten first MCUs (and the byte they end in)
  const uint8_t* tail;        // the rest, inside the original buffer
  size_t tail_size;
  Region region;              // the window in the spliced image's (scaled) output
  ExpectedFrame frame;
};

// Builds the spliced image for `region` (in the scaled output of the parsed header `cinfo`, whose
// first scan's entropy-coded data starts at data[scan_start]). False when the file or the window
// does not allow it, or when there are no whole MCU rows to skip.
bool build_spliced_image(const jpeg_decompress_struct& cinfo, const uint8_t* data, size_t size,
                         size_t scan_start, const Region& region, SplicedImage* out);

// Sets the fewest blocks above a window for which splicing is tried (smaller skips are left to
// libjpeg; negative: never splice), process-wide, and returns the previous value. For tests, which
// need small images spliced, and for benchmarks, which compare both paths in one run.
int64_t set_min_blocks_to_skip(int64_t min_blocks);

// Number of windows decoded through a spliced image in this process (for tests and benchmarks).
int64_t spliced_decodes();
void count_spliced_decode();

// Decodes `region` of the session's image (header read, scale set) through a spliced image when the
// file allows it, handing rows to `sink` exactly as JpegSession::decode_region would.
template <class Sink>
FastPath decode_region_spliced(JpegSession& session, J_COLOR_SPACE out_color_space, const Region& region,
                               Sink& sink) {
  const uint8_t* data = session.data();
  const size_t size = session.size();
  size_t scan_start;
  if (!entropy_start(session, &scan_start)) return FastPath::kNotApplicable;
  const unsigned int scale_num = session.cinfo.scale_num;
  SplicedImage spliced;
  if (!build_spliced_image(session.cinfo, data, size, scan_start, region, &spliced)) return FastPath::kNotApplicable;
  FastPath result;
  const bool opened = session.reopen_spliced(spliced.head.data(), spliced.head.size(), spliced.tail,
                                             spliced.tail_size) &&
                      session.set_scale(scale_num);
  if (!rewritten_frame_ok(session, opened, spliced.frame, spliced.region, data, size, scale_num, &result))
    return result;
  const int warnings_before = session.num_warnings();
  const bool ok = session.decode_region(out_color_space, spliced.region, sink);
  if (session.spliced_read_near_end(kEndSlack)) {
    // Whether libjpeg warns of a premature end depends on how far it reads ahead of the bits it
    // needs, which differs by a few bytes between the two datastreams. Near the end (windows at the
    // bottom of a file, truncated files) redo the decode the ordinary way, so that the outcome never
    // depends on the path.
    session.forget_warnings_after(warnings_before);
    if (!session.reopen(data, size) || !session.set_scale(scale_num)) return FastPath::kFailed;
    return FastPath::kNotApplicable;
  }
  count_spliced_decode();
  return ok ? FastPath::kDecoded : FastPath::kFailed;
}

}  // namespace custom_op
