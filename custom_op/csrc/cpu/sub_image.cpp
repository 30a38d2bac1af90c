#include "sub_image.h"

namespace custom_op {
namespace {

constexpr uint8_t kFF = 0xFF;
constexpr uint8_t kSOI = 0xD8, kSOS = 0xDA;

}  // namespace

bool append_sub_header(const uint8_t* data, size_t scan_start, int sub_height, int sub_width,
                       std::vector<uint8_t>* out) {
  if (scan_start < 4 || data[0] != kFF || data[1] != kSOI) return false;
  out->push_back(kFF);
  out->push_back(kSOI);
  size_t p = 2;
  bool saw_frame = false, ended_with_scan = false;
  while (p < scan_start) {
    if (data[p] != kFF) return false;  // garbage between markers: leave it to libjpeg's own path
    size_t q = p + 1;
    while (q < scan_start && data[q] == kFF) ++q;  // fill bytes
    if (q + 2 >= scan_start) return false;
    const uint8_t marker = data[q];
    const size_t length = (static_cast<size_t>(data[q + 1]) << 8) | data[q + 2];
    if (length < 2 || length > scan_start - q - 1) return false;
    const size_t end = q + 1 + length;
    ended_with_scan = false;
    bool copy = false;
    switch (marker) {
      case 0xC0:  // SOF0 baseline
      case 0xC1:  // SOF1 extended sequential, Huffman
        if (saw_frame || length < 8) return false;
        saw_frame = copy = true;
        break;
      case 0xC4:  // DHT
      case 0xCC:  // DAC
      case 0xDB:  // DQT
      case 0xDD:  // DRI
      case 0xE0:  // APP0: JFIF says YCbCr
      case 0xEE:  // APP14: Adobe's colour transform flag
        copy = true;
        break;
      case kSOS: copy = ended_with_scan = true; break;
      case 0xFE:  // COM
        break;
      default:
        if (marker > 0xE0 && marker <= 0xEF) break;  // other APPn
        return false;
    }
    if (copy) {
      const size_t at = out->size();
      out->push_back(kFF);
      out->insert(out->end(), data + q, data + end);
      if (marker == 0xC0 || marker == 0xC1) {
        // FF Cn, length (2), precision (1), height (2), width (2)
        uint8_t* frame = out->data() + at;
        frame[5] = static_cast<uint8_t>(sub_height >> 8);
        frame[6] = static_cast<uint8_t>(sub_height & 0xFF);
        frame[7] = static_cast<uint8_t>(sub_width >> 8);
        frame[8] = static_cast<uint8_t>(sub_width & 0xFF);
      }
    }
    p = end;
  }
  return p == scan_start && saw_frame && ended_with_scan;
}

bool frame_matches(const jpeg_decompress_struct& cinfo, const ExpectedFrame& f, const Region& r) {
  if (static_cast<int64_t>(cinfo.image_height) != f.height || static_cast<int64_t>(cinfo.image_width) != f.width ||
      cinfo.num_components != f.num_components || cinfo.jpeg_color_space != f.color_space ||
      cinfo.restart_interval != f.restart_interval || cinfo.progressive_mode || cinfo.arith_code ||
      cinfo.comps_in_scan != f.num_components)
    return false;
  for (int i = 0; i < f.num_components; ++i)
    if (cinfo.comp_info[i].h_samp_factor != f.h_samp[i] || cinfo.comp_info[i].v_samp_factor != f.v_samp[i])
      return false;
  const int64_t out_h = cinfo.output_height, out_w = cinfo.output_width;
  return r.top >= 0 && r.left >= 0 && r.height <= out_h - r.top && r.width <= out_w - r.left;
}

}  // namespace custom_op
