// prepare_jpeg: a lossless transcode into a random-access layout (see restart_index.h), through
// libjpeg's coefficient API. The DCT coefficients and quantization tables are copied unchanged, so any
// decoder gives the same pixels as from the original; only the entropy coding is rewritten: one
// sequential scan with all components interleaved, optimized Huffman tables, and a restart marker
// every k MCUs with k dividing the MCUs per row.
//
// As in JpegSession, each function that calls libjpeg (read_input, encode) sets its own jump point and
// holds no object with a destructor, so a libjpeg error longjmps back into it and no C++ frame is
// skipped; the Transcoder that owns the libjpeg structs and the output buffers lives in the caller's
// frame and cleans up whatever happened.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "libjpeg_session.h"
#include "restart_index.h"

namespace custom_op {
namespace {

struct TranscodeError {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a jpeg_error_mgr* that we cast back
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

TranscodeError* state_of(j_common_ptr cinfo) { return reinterpret_cast<TranscodeError*>(cinfo->err); }

[[noreturn]] void on_error(j_common_ptr cinfo) {
  TranscodeError* err = state_of(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// A warning means corrupt data that libjpeg would patch over (gray blocks, dropped bytes). Writing
// that out as a clean file would hide the damage, so every warning is an error here.
void on_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level == -1) on_error(cinfo);
}

void print_nothing(j_common_ptr) {}

void limit_scans(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number <= kMaxScans) return;
  TranscodeError* err = state_of(cinfo);
  std::snprintf(err->message, sizeof(err->message), "the file has more than %d scans; refusing it as hostile",
                kMaxScans);
  std::longjmp(err->jump, 1);
}

struct Options {
  int64_t restart_mcus;  // largest interval allowed; 0 chooses by size (max_growth)
  bool keep_exif, keep_icc, optimize;
  int64_t max_pixels;  // 0: no limit
  double max_growth;   // for restart_mcus == 0
};

struct Transcoder {
  TranscodeError err;
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  jvirt_barray_ptr* coefficients = nullptr;
  // The output being written (jpeg_mem_dest mallocs it and keeps these two current) and the best
  // finished one so far.
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  unsigned char* kept = nullptr;
  unsigned long kept_size = 0;
  bool too_large = false;

  Transcoder() {
    std::memset(&err, 0, sizeof(err));
    std::memset(&src, 0, sizeof(src));
    std::memset(&dst, 0, sizeof(dst));
    src.err = jpeg_std_error(&err.pub);
    dst.err = &err.pub;
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.pub.output_message = print_nothing;
    err.progress.progress_monitor = limit_scans;
  }
  ~Transcoder() {
    jpeg_destroy_compress(&dst);  // both do nothing when their create never finished (mem == NULL)
    jpeg_destroy_decompress(&src);
    std::free(out);
    std::free(kept);
  }
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;

  void keep_output() {
    std::free(kept);
    kept = out;
    kept_size = out_size;
    out = nullptr;
    out_size = 0;
  }
};

// Reads the input's coefficients. False with err.message set (too_large for the pixel limit).
bool read_input(Transcoder* t, const uint8_t* data, size_t size, const Options& o) {
  if (setjmp(t->err.jump)) return false;
  jpeg_create_decompress(&t->src);
  t->src.progress = &t->err.progress;
  jpeg_create_compress(&t->dst);

  jpeg_mem_src(&t->src, data, static_cast<unsigned long>(size));
  if (o.keep_exif) jpeg_save_markers(&t->src, JPEG_APP0 + 1, 0xFFFF);
  if (o.keep_icc) jpeg_save_markers(&t->src, JPEG_APP0 + 2, 0xFFFF);
  jpeg_read_header(&t->src, TRUE);
  const int64_t pixels = int64_t(t->src.image_width) * int64_t(t->src.image_height);
  if (o.max_pixels > 0 && pixels > o.max_pixels) {
    t->too_large = true;
    std::snprintf(t->err.message, sizeof(t->err.message),
                  "the JPEG header declares %ux%u = %lld pixels, more than max_pixels=%lld (a "
                  "decompression bomb guard; pass a larger max_pixels, or None)",
                  t->src.image_width, t->src.image_height, static_cast<long long>(pixels),
                  static_cast<long long>(o.max_pixels));
    return false;
  }
  t->coefficients = jpeg_read_coefficients(&t->src);
  if (t->src.progressive_mode) {
    // A progressive file missing refinement scans is decoded with block smoothing, which guesses the
    // missing coefficients; a sequential copy would not be smoothed and would decode differently.
    for (int c = 0; c < t->src.num_components; ++c)
      for (int i = 0; i < DCTSIZE2; ++i)
        if (t->src.coef_bits[c][i] != 0) {
          std::snprintf(t->err.message, sizeof(t->err.message),
                        "progressive file with incomplete scans (component %d coefficient %d); a "
                        "sequential copy would decode to other pixels",
                        c, i);
          return false;
        }
  }
  // Everything that defines the coefficients; the scan script (one sequential scan, all components
  // interleaved) and the entropy coder (Huffman, even for arithmetic-coded input) are
  // jpeg_set_defaults' ones.
  jpeg_copy_critical_parameters(&t->src, &t->dst);
  return true;
}

// Writes the coefficients with a restart marker every `interval` MCUs into t->out.
bool encode(Transcoder* t, const Options& o, int64_t interval) {
  if (setjmp(t->err.jump)) return false;
  std::free(t->out);
  t->out = nullptr;
  t->out_size = 0;
  t->dst.restart_interval = static_cast<unsigned int>(interval);
  t->dst.restart_in_rows = 0;
  t->dst.optimize_coding = o.optimize ? TRUE : FALSE;
  jpeg_mem_dest(&t->dst, &t->out, &t->out_size);
  jpeg_write_coefficients(&t->dst, t->coefficients);
  // The JFIF / Adobe markers jpeg_copy_critical_parameters asked for come first; the kept ones follow.
  for (jpeg_saved_marker_ptr m = t->src.marker_list; m != nullptr; m = m->next) {
    const bool exif = m->marker == JPEG_APP0 + 1 && o.keep_exif;
    const bool icc = m->marker == JPEG_APP0 + 2 && o.keep_icc && m->data_length >= 12 &&
                     std::memcmp(m->data, "ICC_PROFILE\0", 12) == 0;
    if (exif || icc) jpeg_write_marker(&t->dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&t->dst);
  return true;
}

// The largest divisor of n not above `limit`.
int64_t largest_divisor_up_to(int64_t n, int64_t limit) {
  for (int64_t k = std::min(n, limit); k > 1; --k)
    if (n % k == 0) return k;
  return 1;
}

// How long, in units of one decoded pixel column, decoding a window of a typical width (176 pixels)
// takes with segments `width` pixels wide: the columns beside the window up to the segment edges (half
// a segment on average each side), plus about one column's worth of time per restart marker crossed
// (libjpeg-turbo reads the marker and decodes the segment's last MCU slowly). Smallest at about 13
// pixels and flat around it: 8- to 24-pixel segments decode 224x224 windows of photos equally fast,
// wider ones more slowly, one segment per row much more slowly.
double window_cost(double width) {
  constexpr double kWindow = 176.0, kPerMarker = 1.0;
  return width + kPerMarker * (kWindow + width) / width;
}

// Chooses the restart interval: the one with the lowest window_cost among those whose file is within
// max_growth of the input (or of the one-segment-per-row layout, when that is larger already, as for
// most progressive inputs). Each marker costs about 4 bytes (the marker, padding to a byte, DC values
// coded in full), so detailed photos can afford narrower segments than flat ones. The size only falls
// as the interval grows, so the answer is the cheapest interval or, when it does not fit, the
// smallest that does. Encodes two to four times.
bool encode_within_budget(Transcoder* t, const Options& o, size_t input_size, int64_t per_row, int64_t rows,
                          int mcu_width) {
  std::vector<int64_t> divisors;
  for (int64_t k = 1; k <= per_row; ++k)
    if (per_row % k == 0) divisors.push_back(k);
  auto segments = [&](int64_t k) { return static_cast<double>(per_row / k * rows); };

  if (!encode(t, o, per_row)) return false;
  const double row_size = static_cast<double>(t->out_size);
  t->keep_output();
  const double target = std::max(static_cast<double>(input_size), row_size) * (1.0 + o.max_growth);

  int64_t pick = per_row;
  for (int64_t k : divisors)
    if (window_cost(double(k * mcu_width)) < window_cost(double(pick * mcu_width))) pick = k;
  for (int attempt = 0; attempt < 4 && pick < per_row; ++attempt) {
    if (!encode(t, o, pick)) return false;
    const double size = static_cast<double>(t->out_size);
    if (size <= target) {
      t->keep_output();
      return true;
    }
    // Too large: the next try is the smallest coarser interval predicted to fit at this image's cost
    // per marker.
    const double per_marker = (size - row_size) / (segments(pick) - static_cast<double>(rows));
    int64_t next = per_row;
    for (int64_t k : divisors) {
      if (k > pick && row_size + per_marker * (segments(k) - static_cast<double>(rows)) <= target) {
        next = k;
        break;
      }
    }
    pick = next;
  }
  return true;
}

at::Tensor prepare_jpeg_cpu(const at::Tensor& data, int64_t restart_mcus, bool keep_exif, bool keep_icc, bool optimize,
                            int64_t max_pixels, double max_growth) {
  TORCH_CHECK_TYPE(data.device().is_cpu(), "prepare_jpeg: data must be a CPU tensor, got one on ", data.device());
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "prepare_jpeg: data must be a uint8 tensor, got ",
                   data.scalar_type());
  TORCH_CHECK_TYPE(data.dim() == 1, "prepare_jpeg: data must be 1-D, got ", data.dim(), " dimensions");
  TORCH_CHECK_TYPE(data.is_contiguous(), "prepare_jpeg: data must be contiguous");
  TORCH_CHECK_VALUE(restart_mcus >= 0 && restart_mcus <= 65535,
                    "restart_mcus must be in 1..65535 (or None to choose), got ", restart_mcus);
  TORCH_CHECK_VALUE(max_growth >= 0.0 && max_growth <= 10.0, "max_growth must be in [0, 10], got ", max_growth);
  const Options o{restart_mcus, keep_exif, keep_icc, optimize, max_pixels, max_growth};
  const size_t size = static_cast<size_t>(data.numel());
  Transcoder t;
  bool ok = read_input(&t, data.data_ptr<uint8_t>(), size, o);
  TORCH_CHECK_VALUE(ok || !t.too_large, "custom_op: ", t.err.message);
  if (ok) {
    const int n = t.dst.num_components;
    int max_h = 1, max_v = 1;
    for (int c = 0; c < n; ++c) {
      max_h = std::max(max_h, t.dst.comp_info[c].h_samp_factor);
      max_v = std::max(max_v, t.dst.comp_info[c].v_samp_factor);
    }
    // One interleaved scan: an MCU is max_h x max_v blocks of the full-size grid (one block for gray).
    const int mcu_width = n == 1 ? DCTSIZE : DCTSIZE * max_h;
    const int mcu_height = n == 1 ? DCTSIZE : DCTSIZE * max_v;
    const int64_t per_row = (int64_t(t.dst.image_width) + mcu_width - 1) / mcu_width;
    const int64_t rows = (int64_t(t.dst.image_height) + mcu_height - 1) / mcu_height;
    if (restart_mcus > 0) {
      ok = encode(&t, o, largest_divisor_up_to(per_row, restart_mcus));
      if (ok) t.keep_output();
    } else {
      ok = encode_within_budget(&t, o, size, per_row, rows, mcu_width);
    }
  }
  TORCH_CHECK(ok, "custom_op: cannot prepare JPEG: ", t.err.message);
  at::Tensor out = at::empty({static_cast<int64_t>(t.kept_size)}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(out.data_ptr<uint8_t>(), t.kept, t.kept_size);
  return out;
}

int64_t random_access_decodes_cpu() { return random_access_decodes(); }

}  // namespace

TORCH_LIBRARY_IMPL(custom_op, CPU, m) { m.impl("prepare_jpeg", &prepare_jpeg_cpu); }

// No tensor argument to dispatch on.
TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("_random_access_decodes", &random_access_decodes_cpu);
}

}  // namespace custom_op
