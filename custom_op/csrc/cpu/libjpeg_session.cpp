#include "libjpeg_session.h"

#include <algorithm>
#include <cstring>

#include "common/exif_orientation.h"

namespace custom_op {
namespace {

// The libjpeg 6b API (libjpeg62-turbo, Debian) and the libjpeg 7/8 APIs (libjpeg-turbo8, Ubuntu) name
// the scaled block size differently.
int min_dct_scaled_width(const jpeg_decompress_struct& cinfo) {
#if JPEG_LIB_VERSION >= 70
  return cinfo.min_DCT_h_scaled_size;
#else
  return cinfo.min_DCT_scaled_size;
#endif
}

int component_scaled_width(const jpeg_component_info& c) {
#if JPEG_LIB_VERSION >= 70
  return c.DCT_h_scaled_size;
#else
  return c.DCT_scaled_size;
#endif
}

// Whether a component is both enlarged by its IDCT and upsampled after it (4x2 sampling, 4:1:0, at
// 2/8 and 4/8: chroma IDCT at twice the scale, then h2v1). jpeg_crop_scanline gets such a component's
// upsampling wrong all along a crop, not only at its edges: the crop's output then differs from the
// whole decode's columns.
bool idct_scaled_and_upsampled(const jpeg_decompress_struct& cinfo) {
  if (cinfo.num_components < 2) return false;
  const int min_size = min_dct_scaled_width(cinfo);
  for (int i = 0; i < cinfo.num_components; ++i) {
    const jpeg_component_info& c = cinfo.comp_info[i];
    const int size = component_scaled_width(c);
    if (size != min_size && (c.h_samp_factor * size != cinfo.max_h_samp_factor * min_size ||
                             c.v_samp_factor * size != cinfo.max_v_samp_factor * min_size))
      return true;
  }
  return false;
}

}  // namespace

JpegSession::JpegSession(WarningPolicy on_warning) {
  cinfo.err = err_.init(on_warning);
  // jpeg_create_decompress only fails when out of memory; it then calls error_exit.
  if (setjmp(err_.jump)) {
    cinfo.mem = nullptr;
    return;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &err_.progress;
}

void JpegSession::creation_failed() {
  // The error exit (libjpeg_errors.h) left libjpeg's reason in message (for example a library version
  // other than the headers': "Wrong JPEG library version: library is 80, caller expects 62").
  char reason[JMSG_LENGTH_MAX];
  std::snprintf(reason, sizeof(reason), "%s", err_.message[0] != '\0' ? err_.message : "out of memory");
  std::snprintf(err_.message, sizeof(err_.message), "cannot create the decoder: %s", reason);
}

JpegSession::~JpegSession() {
  if (cinfo.mem != nullptr) jpeg_destroy_decompress(&cinfo);
}

bool JpegSession::read_header(const uint8_t* data, size_t size, bool save_app1) {
  if (setjmp(err_.jump)) return false;
  if (cinfo.mem == nullptr) {
    creation_failed();
    return false;
  }
  data_ = data;
  size_ = size;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  if (save_app1) jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  // require_image=TRUE: a tables-only datastream is an error, not an empty image.
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

bool JpegSession::reopen(const uint8_t* data, size_t size) {
  if (setjmp(err_.jump)) return false;
  if (cinfo.mem == nullptr) {
    creation_failed();
    return false;
  }
  // Back to the state before any header was read; the permanent objects (source manager, marker
  // reader and its save settings) are reused.
  jpeg_abort_decompress(&cinfo);
  data_ = data;
  size_ = size;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  read_header_again();
  return true;
}

bool JpegSession::rewind(unsigned int scale_num, unsigned int scale_denom) {
  if (!reopen(data_, size_)) return false;
  cinfo.scale_num = scale_num;
  cinfo.scale_denom = scale_denom;
  return true;
}

void JpegSession::install_own_entropy(bool cropped, JDIMENSION xoffset) {
  JDIMENSION first = 0, last = cinfo.MCUs_per_row - 1;
  if (cropped) {
    // The iMCU columns jpeg_crop_scanline told libjpeg to transform, computed as it does.
    const bool one_component = cinfo.comps_in_scan == 1 && cinfo.num_components == 1;
    const JDIMENSION align =
        static_cast<JDIMENSION>(min_dct_scaled_width(cinfo) * (one_component ? 1 : cinfo.max_h_samp_factor));
    first = xoffset / align;
    last = (xoffset + cinfo.output_width + align - 1) / align - 1;
  }
  install_entropy_decoder(&cinfo, &entropy_, first, last);
}

void JpegSession::read_header_again() {
  // The headers read again are the first file's (or a subset of its segments): whatever they warn
  // about was counted when it was first read.
  const int warnings = err_.num_warnings;
  jpeg_read_header(&cinfo, TRUE);
  err_.num_warnings = warnings;
}

bool JpegSession::set_scale(unsigned int scale_num) {
  if (setjmp(err_.jump)) return false;
  cinfo.scale_num = scale_num;
  cinfo.scale_denom = 8;
  jpeg_calc_output_dimensions(&cinfo);
  return true;
}

ScanWalk JpegSession::walk_scan() {
  err_.entropy_gave_up = false;
  if (setjmp(err_.jump)) return err_.entropy_gave_up ? ScanWalk::kDamaged : ScanWalk::kRefused;
  if (cinfo.progressive_mode || cinfo.arith_code || cinfo.comps_in_scan != cinfo.num_components)
    return ScanWalk::kNotWalked;
  // The smallest output: jpeg_start_decompress then only derives the tables and lays the scan out
  // (a file with a single scan is not read any further), with row buffers of an eighth of the size.
  cinfo.scale_num = 1;
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  if (!walk_whole_scan(&cinfo, &entropy_)) return ScanWalk::kNotWalked;
  jpeg_abort_decompress(&cinfo);
  return ScanWalk::kClean;
}

int JpegSession::exif_orientation() const {
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || m->data_length < 6) continue;
    if (std::memcmp(m->data, "Exif\0\0", 6) != 0) continue;  // XMP lives in APP1 too
    return custom_op::exif_orientation(m->data, m->data_length);
  }
  return 1;
}

void JpegSession::crop_span(const Region& region, JDIMENSION* xoffset, JDIMENSION* width) const {
  const int image_width = static_cast<int>(cinfo.output_width);
  if (idct_scaled_and_upsampled(cinfo)) {
    *xoffset = 0;
    *width = static_cast<JDIMENSION>(image_width);
    return;
  }
  const int imcu_width = min_dct_scaled_width(cinfo) * (cinfo.num_components > 1 ? cinfo.max_h_samp_factor : 1);
  // Fancy upsampling of a 2x subsampled plane gets only the outermost output column of a crop wrong
  // (it replicates the crop's edge sample instead of reading its real neighbour): one column suffices.
  // A progressive file whose coefficients are incomplete (scans missing) is block-smoothed, which
  // reads the DC values of blocks up to two block columns away, and the crop's edges cut those off
  // too: there, keep three iMCUs (at least two blocks of every component, plus the upsampling column).
  const int margin = cinfo.progressive_mode ? 3 * imcu_width : 1;
  int first = std::max(0, region.left - margin);
  int last = std::min(image_width, region.left + region.width + margin);
  // jpeg_crop_scanline moves the start down to an iMCU boundary. Keep the crop at least one iMCU
  // wide: libjpeg falls back to plain (non-fancy) upsampling for planes of 2 samples or fewer.
  int aligned_first = first / imcu_width * imcu_width;
  last = std::min(image_width, std::max(last, aligned_first + imcu_width));
  // At the right edge the last iMCU may be only a few pixels wide (an 83x130 4:2:0 image ends with
  // 2 columns): start one iMCU earlier so that the plane stays wide enough for the fancy filter.
  if (last - aligned_first < imcu_width && aligned_first > 0) {
    aligned_first -= imcu_width;
    first = aligned_first;
  }
  *xoffset = static_cast<JDIMENSION>(first);
  *width = static_cast<JDIMENSION>(last - first);
}

}  // namespace custom_op
