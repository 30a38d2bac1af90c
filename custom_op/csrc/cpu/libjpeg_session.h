// One libjpeg decompressor, with errors turned into return values instead of process exits.
//
// libjpeg reports errors by calling error_exit, which must not return. We longjmp out of it
// (libjpeg_errors.h). Each member below that calls into libjpeg sets its own jump point and holds no
// object with a destructor, so a longjmp only ever unwinds libjpeg's C frames back into that member: no
// C++ destructor is skipped. The caller turns `false` into a Python exception after the session has
// cleaned up.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <vector>

#include <jpeglib.h>

#include "common/options.h"
#include "common/region.h"
#include "entropy_decoder.h"
#include "libjpeg_errors.h"

namespace custom_op {

// What walk_scan found.
enum class ScanWalk : int64_t {
  kClean = 0,      // libjpeg read the headers without a warning, and the scan is what a valid one holds
  kRefused = 1,    // libjpeg warned or raised an error while setting the decode up (headers, tables)
  kNotWalked = 2,  // a scan our decoder does not walk (progressive, arithmetic, several scans, ...)
  kDamaged = 3,    // the walk gave up: the entropy-coded data holds what a valid scan does not
};

class JpegSession {
 public:
  explicit JpegSession(WarningPolicy on_warning);
  ~JpegSession();
  JpegSession(const JpegSession&) = delete;
  JpegSession& operator=(const JpegSession&) = delete;

  // Parses markers up to the first scan. save_app1 keeps APP1 payloads so EXIF can be read.
  bool read_header(const uint8_t* data, size_t size, bool save_app1);

  // Drops the current image and parses the header of another datastream, which then replaces it
  // (restart_index.h decodes a rewritten file this way). Warnings keep adding up.
  bool reopen(const uint8_t* data, size_t size);

  // Forgets the warnings counted after the first `count` (from an attempt that is being redone).
  void forget_warnings_after(int count) {
    if (err_.num_warnings > count) err_.num_warnings = count;
  }

  // The bytes given to the last read_header or reopen.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Orientation (1..8) from the first EXIF APP1 marker; 1 when there is none. After read_header.
  int exif_orientation() const;

  // Decode at scale_num/8 of the full size; output_height/output_width become the scaled size.
  bool set_scale(unsigned int scale_num);

  // After read_header: sets the decode up and walks the whole scan with our entropy decoder
  // (walk_whole_scan), decoding no pixel. A session made with WarningPolicy::kRaise turns any libjpeg
  // warning into kRefused.
  ScanWalk walk_scan();

  // Decodes `region` with out_color_space and hands each of its rows to sink(row_pixels, row_index):
  // row_pixels points at the region's first pixel, interleaved. Stops reading the file once the
  // region's last row is out. A row may be handed over twice (when the decode is redone); the sink
  // must write each row to the same place each time.
  template <class Sink>
  bool decode_region(J_COLOR_SPACE out_color_space, const Region& region, Sink& sink);

  const char* error_message() const { return err_.message; }
  int num_warnings() const { return err_.num_warnings; }
  const char* first_warning() const { return err_.first_warning; }

  jpeg_decompress_struct cinfo;

 private:
  // Chooses the column span handed to jpeg_crop_scanline: the region plus the margin that fancy
  // upsampling needs to see real neighbours rather than the crop's own edges.
  void crop_span(const Region& region, JDIMENSION* xoffset, JDIMENSION* width) const;

  template <class Sink>
  bool decode_region_once(J_COLOR_SPACE out_color_space, const Region& region, Sink& sink, bool own_entropy);

  // Puts our entropy decoder in libjpeg's place (entropy_decoder.h), after jpeg_crop_scanline
  // (when cropped) moved the crop's start to xoffset.
  void install_own_entropy(bool cropped, JDIMENSION xoffset);

  // Parses the current datastream's header again, from its start, for a second attempt at a decode.
  bool rewind(unsigned int scale_num, unsigned int scale_denom);

  // Sets message after jpeg_create_decompress failed in the constructor.
  void creation_failed();

  // jpeg_read_header for reopen; may longjmp to its jump point.
  void read_header_again();

  ErrorState err_;
  std::vector<uint8_t> row_buffer_;  // decode_region's output rows
  OwnEntropyDecoder entropy_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  static constexpr int kRowsPerRead = 4;
};

template <class Sink>
bool JpegSession::decode_region(J_COLOR_SPACE out_color_space, const Region& region, Sink& sink) {
  const int warnings = err_.num_warnings;
  const unsigned int scale_num = cinfo.scale_num, scale_denom = cinfo.scale_denom;
  err_.entropy_gave_up = false;
  if (decode_region_once(out_color_space, region, sink, /*own_entropy=*/true)) return true;
  if (!err_.entropy_gave_up) return false;
  // Our entropy decoder met something a valid scan does not contain. libjpeg's own decoder does it
  // all again, so that damaged data gives libjpeg's warnings, errors and pixels, whatever the path.
  count_entropy_give_up();
  err_.entropy_gave_up = false;
  forget_warnings_after(warnings);
  return rewind(scale_num, scale_denom) && decode_region_once(out_color_space, region, sink, false);
}

template <class Sink>
bool JpegSession::decode_region_once(J_COLOR_SPACE out_color_space, const Region& region, Sink& sink,
                                     bool own_entropy) {
  if (setjmp(err_.jump)) return false;
  cinfo.out_color_space = out_color_space;
  // The defaults of Pillow and torchvision: the result must equal theirs pixel for pixel.
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);

  JDIMENSION xoffset = 0, width = cinfo.output_width;
  crop_span(region, &xoffset, &width);
  const bool cropped = width < cinfo.output_width;
  if (cropped) jpeg_crop_scanline(&cinfo, &xoffset, &width);
  if (own_entropy) install_own_entropy(cropped, xoffset);

  // Owned by the session rather than taken from libjpeg's image pool: rows from that pool made the
  // same decode slower on libjpeg-turbo 2.1.5. No row starts on a 16-byte boundary: libjpeg-turbo's
  // SIMD colour conversion writes aligned rows with non-temporal stores, which send them past the
  // cache, and the sink, which reads each row right after, then waited for memory.
  const size_t stride = (static_cast<size_t>(width) * static_cast<size_t>(cinfo.output_components) + 63) / 64 * 64;
  row_buffer_.resize(stride * kRowsPerRead + 64);
  const uintptr_t base = reinterpret_cast<uintptr_t>(row_buffer_.data());
  uint8_t* const first_row = row_buffer_.data() + ((64 - base % 64) % 64) + 1;
  JSAMPROW rows[kRowsPerRead];
  for (int i = 0; i < kRowsPerRead; ++i) rows[i] = first_row + i * stride;
  const size_t first_column =
      static_cast<size_t>(region.left - static_cast<int>(xoffset)) * static_cast<size_t>(cinfo.output_components);

  if (region.top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(region.top));
  int done = 0;
  while (done < region.height) {
    const int want = region.height - done < kRowsPerRead ? region.height - done : kRowsPerRead;
    const JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(want));
    if (got == 0) {
      // Only a suspending data source returns no rows, and ours never suspends.
      std::snprintf(err_.message, sizeof(err_.message), "libjpeg returned no scanlines");
      return false;
    }
    for (JDIMENSION i = 0; i < got; ++i) sink(rows[i] + first_column, done + static_cast<int>(i));
    done += static_cast<int>(got);
  }
  if (cinfo.entropy == reinterpret_cast<jpeg_entropy_decoder*>(&entropy_.pub)) check_entropy_read_ahead(&cinfo);
  // Stop here: the rows below the region are neither read nor skipped.
  jpeg_abort_decompress(&cinfo);
  return true;
}

}  // namespace custom_op
