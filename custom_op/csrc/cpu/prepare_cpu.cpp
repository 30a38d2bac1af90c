// prepare_jpeg: a lossless transcode into a random-access layout (see restart_index.h), through
// libjpeg's coefficient API. The DCT coefficients and quantization tables are copied unchanged, so any
// decoder gives the same pixels as from the original; only the entropy coding is rewritten: one
// sequential scan with all components interleaved, optimized Huffman tables, and a restart marker
// every k MCUs, k at most the MCUs per row.
//
// As in JpegSession, each function that calls libjpeg (read_input, encode) sets its own jump point and
// holds no object with a destructor, so a libjpeg error longjmps back into it (libjpeg_errors.h) and no
// C++ frame is skipped; the Transcoder that owns the libjpeg structs and the output buffers lives in the
// caller's frame and cleans up whatever happened.
#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/item_status.h"
#include "common/segment_index.h"
#include "libjpeg_errors.h"
#include "restart_index.h"
#include "tensors.h"

namespace custom_op {
namespace {

struct Options {
  int64_t restart_mcus;  // the interval (capped at the MCUs per row); 0 chooses one
  bool keep_exif, keep_icc, optimize;
  int64_t max_pixels;         // 0: no limit
  double max_growth;          // for restart_mcus == 0
  int64_t max_segment_bytes;  // for restart_mcus == 0; 0: no bound
};

struct Transcoder {
  ErrorState err;  // libjpeg_errors.h; shared by src and dst
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  jvirt_barray_ptr* coefficients = nullptr;
  // The output being written (jpeg_mem_dest mallocs it and keeps these two current) and the best
  // finished one so far.
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  unsigned char* kept = nullptr;
  unsigned long kept_size = 0;
  unsigned int kept_interval = 0;  // the kept output's restart interval
  bool too_large = false;

  Transcoder() {
    std::memset(&src, 0, sizeof(src));
    std::memset(&dst, 0, sizeof(dst));
    // A warning means corrupt data that libjpeg would patch over (gray blocks, dropped bytes). Writing
    // that out as a clean file would hide the damage, so every warning is an error here.
    src.err = err.init(WarningPolicy::kRaise);
    dst.err = &err.pub;
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
    kept_interval = dst.restart_interval;
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

// The length in bytes of each restart segment's entropy-coded data in a file libjpeg just wrote:
// from the end of the SOS segment, or of a restart marker, to the next marker. Stuffed zero bytes
// count; the markers do not. Empty when the markers are not what libjpeg writes.
std::vector<int64_t> segment_lengths(const uint8_t* data, size_t size) {
  size_t begin;
  std::vector<size_t> ends;
  if (!written_segment_ends(data, size, &begin, &ends)) return {};
  std::vector<int64_t> out;
  out.reserve(ends.size());
  for (const size_t end : ends) {
    out.push_back(static_cast<int64_t>(end - 2 - begin));
    begin = end;
  }
  return out;
}

// Restart segments in an MCU row's worth of MCUs, for an interval of k MCUs (at least one): how the
// segment index groups its entries.
int64_t segments_per_row(int64_t per_row, int64_t k) { return std::max<int64_t>(1, per_row / k); }

int64_t longest(const std::vector<int64_t>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

// How long decoding a window of a typical size (176x176 pixels) takes with a restart interval of k
// MCUs, in units of one decoded pixel column of it: the columns decoded beside the window, plus about
// one column's worth of time per restart marker crossed (libjpeg-turbo reads the marker and decodes
// the segment's last MCU slowly), times the rows decoded. When k divides the MCUs per row, the columns
// beside the window are those of the segments it touches (half a segment on average each side).
// Otherwise the sub-image is a little wider (a segment that also holds MCUs of the next row is decoded
// beside the window, about half a segment more), and it holds a whole number of segments: filler rows
// below the window unless its rows are a multiple of k / gcd(per_row, k). libjpeg decodes one of them
// when chroma is subsampled down the rows (the upsampler reads a row ahead), so there (`context`) the
// window costs one MCU row more in (q - 1) / q of the cases. Smallest at segments of about 13 pixels
// and flat around it: 8- to 24-pixel segments decode 224x224 windows of photos equally fast, wider ones
// more slowly, whole rows much more slowly.
double window_cost(int64_t k, int64_t per_row, int mcu_width, int mcu_height, bool context) {
  constexpr double kWindow = 176.0, kPerMarker = 1.0;
  const bool divides = per_row % k == 0;
  const double beside = (divides ? double(k) : 1.5 * double(k) - 0.5) * mcu_width;
  const double columns = kWindow + beside + kPerMarker * (kWindow + beside) / double(k * mcu_width);
  const double q = double(k / std::gcd(per_row, k));
  const double rows = kWindow + (context && !divides ? mcu_height * (q - 1.0) / q : 0.0);
  return columns * rows / kWindow;
}

// What an interval is predicted to give, from the encodes with one segment per row and one per MCU.
struct Prediction {
  double size;     // bytes of the file
  double longest;  // bytes of its longest segment
};

// Chooses the restart interval and writes the file with it (into t->kept). Among the intervals of 1
// to per_row MCUs whose longest segment is within max_segment_bytes, the one with the lowest
// window_cost whose file is within max_growth of the input (or of the one-segment-per-row layout,
// when that is larger already, as for most progressive inputs); when none is, the coarsest interval
// within max_segment_bytes (the smallest file); when no interval is, one MCU per segment.
//
// The sizes and segment lengths of every interval are predicted from two encodes: one segment per
// row, and one per MCU, whose segments give each MCU's bytes (a segment of k MCUs is their sum, plus
// the byte padding and the DC values coded in full that every segment has), and whose size gives
// what each marker costs (about 4 bytes: the marker, the padding, the DC values; optimized Huffman
// tables pay some of it back). The choice is then encoded and measured; when it misses the budget or
// the bound, the predictions are corrected by what was measured and the choice made again (twice at
// most). Three to five encodes in all.
bool encode_by_choice(Transcoder* t, const Options& o, size_t input_size, int64_t per_row, int64_t rows, int mcu_width,
                      int mcu_height, bool context) {
  const double bound = o.max_segment_bytes > 0 ? double(o.max_segment_bytes) : HUGE_VAL;
  // Sizes count the segment index each file gets (common/segment_index.h).
  const int64_t mcus = per_row * rows;
  auto index_bytes = [&](int64_t k) {
    return static_cast<double>(segment_index_bytes((mcus + k - 1) / k, segments_per_row(per_row, k)));
  };
  if (!encode(t, o, per_row)) return false;
  const double raw_row_size = static_cast<double>(t->out_size);
  const double row_size = raw_row_size + index_bytes(per_row);
  const int64_t row_longest = longest(segment_lengths(t->out, t->out_size));
  t->keep_output();
  const double target = std::max(static_cast<double>(input_size), row_size) * (1.0 + o.max_growth);
  if (per_row == 1) return true;  // one MCU per row: the only interval there is

  if (!encode(t, o, 1)) return false;
  const std::vector<int64_t> per_mcu = segment_lengths(t->out, t->out_size);
  if (static_cast<int64_t>(per_mcu.size()) != mcus) return true;  // not expected: keep one segment per row
  const double raw_one_size = static_cast<double>(t->out_size);
  const double one_size = raw_one_size + index_bytes(1);
  const double per_marker = (raw_one_size - raw_row_size) / static_cast<double>(mcus - rows);
  // Each one-MCU segment's own share of the bytes; a segment adds per_marker - 2 to its MCUs'.
  const double overhead = per_marker - 2.0;
  std::vector<double> sums(static_cast<size_t>(mcus) + 1, 0.0);
  for (int64_t i = 0; i < mcus; ++i) sums[size_t(i) + 1] = sums[size_t(i)] + double(per_mcu[size_t(i)]) - overhead;

  std::vector<Prediction> predicted(static_cast<size_t>(per_row) + 1);
  for (int64_t k = 1; k <= per_row; ++k) {
    double most = 0.0;
    for (int64_t a = 0; a < mcus; a += k) most = std::max(most, sums[size_t(std::min(mcus, a + k))] - sums[size_t(a)]);
    const double markers = static_cast<double>((mcus + k - 1) / k - rows);
    predicted[size_t(k)] = {raw_row_size + per_marker * markers + index_bytes(k), most + overhead};
  }
  predicted[1] = {one_size, static_cast<double>(longest(per_mcu))};
  predicted[size_t(per_row)] = {row_size, static_cast<double>(row_longest)};

  // Outputs measured so far: interval 1 is in t->out, one segment per row in t->kept.
  struct Measured {
    int64_t k;
    double size, longest;
  };
  std::vector<Measured> measured = {{per_row, row_size, double(row_longest)}, {1, one_size, predicted[1].longest}};
  auto choose = [&]() {
    int64_t best = 0, coarsest = 0;
    for (int64_t k = 1; k <= per_row; ++k) {
      const Prediction& p = predicted[size_t(k)];
      if (p.longest > bound) continue;
      if (coarsest == 0 || p.size < predicted[size_t(coarsest)].size) coarsest = k;
      if (p.size <= target && (best == 0 || window_cost(k, per_row, mcu_width, mcu_height, context) <
                                                window_cost(best, per_row, mcu_width, mcu_height, context)))
        best = k;
    }
    return best != 0 ? best : coarsest != 0 ? coarsest : int64_t(1);
  };
  // The better of two measured outputs: within the bound first (or else the shorter segments), then
  // within the budget (or else the smaller), then the lower window cost.
  auto better = [&](const Measured& a, const Measured& b) {
    if ((a.longest <= bound) != (b.longest <= bound)) return a.longest <= bound;
    if (a.longest > bound && a.longest != b.longest) return a.longest < b.longest;
    if ((a.size <= target) != (b.size <= target)) return a.size <= target;
    if (a.size > target) return a.size < b.size;
    return window_cost(a.k, per_row, mcu_width, mcu_height, context) <
           window_cost(b.k, per_row, mcu_width, mcu_height, context);
  };
  Measured kept = measured[0];
  if (better(measured[1], kept)) {
    t->keep_output();
    kept = measured[1];
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int64_t k = choose();
    const bool seen = std::any_of(measured.begin(), measured.end(), [&](const Measured& m) { return m.k == k; });
    if (seen) break;
    if (!encode(t, o, k)) return false;
    const Measured now{k, static_cast<double>(t->out_size) + index_bytes(k),
                       double(longest(segment_lengths(t->out, t->out_size)))};
    measured.push_back(now);
    if (better(now, kept)) {
      t->keep_output();
      kept = now;
    }
    if (now.longest <= bound && now.size <= target) break;
    // Off the prediction: shift the sizes and scale the segment lengths by what this encode measured.
    const double size_error = now.size - predicted[size_t(k)].size;
    const double length_ratio = predicted[size_t(k)].longest > 0 ? now.longest / predicted[size_t(k)].longest : 1.0;
    for (int64_t j = 2; j < per_row; ++j) {
      predicted[size_t(j)].size += size_error;
      predicted[size_t(j)].longest *= length_ratio;
    }
    for (const Measured& m : measured) predicted[size_t(m.k)] = {m.size, m.longest};
  }
  return true;
}

Tensor prepare_jpeg_cpu(const Tensor& data, int64_t restart_mcus, bool keep_exif, bool keep_icc, bool optimize,
                        int64_t max_pixels, double max_growth, int64_t max_segment_bytes) {
  CUSTOM_OP_CHECK_TYPE(data.is_cpu(), "prepare_jpeg: data must be a CPU tensor, got one on ",
                       device_text(data.device()));
  CUSTOM_OP_CHECK_TYPE(data.scalar_type() == ScalarType::Byte, "prepare_jpeg: data must be a uint8 tensor, got ",
                       data.scalar_type());
  CUSTOM_OP_CHECK_TYPE(data.dim() == 1, "prepare_jpeg: data must be 1-D, got ", data.dim(), " dimensions");
  CUSTOM_OP_CHECK_TYPE(data.is_contiguous(), "prepare_jpeg: data must be contiguous");
  CUSTOM_OP_CHECK_VALUE(restart_mcus >= 0 && restart_mcus <= 65535,
                        "restart_mcus must be in 1..65535 (or None to choose), got ", restart_mcus);
  CUSTOM_OP_CHECK_VALUE(max_growth >= 0.0 && max_growth <= 10.0, "max_growth must be in [0, 10], got ", max_growth);
  CUSTOM_OP_CHECK_VALUE(max_segment_bytes >= 0, "max_segment_bytes must be at least 1 (or None for no bound), got ",
                        max_segment_bytes);
  const Options o{restart_mcus, keep_exif, keep_icc, optimize, max_pixels, max_growth, max_segment_bytes};
  const size_t size = static_cast<size_t>(data.numel());
  Transcoder t;
  bool ok = read_input(&t, data.const_data_ptr<uint8_t>(), size, o);
  CUSTOM_OP_CHECK_VALUE(ok || !t.too_large, "custom_op: ", t.err.message);
  int64_t row_segments = 1;
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
    bool context = false;  // chroma subsampled down the rows: libjpeg's upsampler reads a row ahead
    for (int c = 0; c < n && n > 1; ++c) context |= t.dst.comp_info[c].v_samp_factor < max_v;
    if (restart_mcus > 0) {
      ok = encode(&t, o, std::min(per_row, restart_mcus));
      if (ok) t.keep_output();
    } else {
      ok = encode_by_choice(&t, o, size, per_row, rows, mcu_width, mcu_height, context);
    }
    if (t.kept_interval > 0) row_segments = segments_per_row(per_row, t.kept_interval);
  }
  CUSTOM_OP_CHECK(ok, "custom_op: cannot prepare JPEG: ", t.err.message);
  // With the segment index (common/segment_index.h), an entry for each MCU row's segments, inserted
  // as the file is copied out.
  size_t at = 0;
  const std::vector<uint8_t> index = segment_index_for(t.kept, t.kept_size, row_segments, &at);
  Tensor out = new_cpu_tensor({static_cast<int64_t>(t.kept_size + index.size())});
  uint8_t* bytes = out.mutable_data_ptr<uint8_t>();
  std::memcpy(bytes, t.kept, at);
  std::memcpy(bytes + at, index.data(), index.size());
  std::memcpy(bytes + at + index.size(), t.kept + at, t.kept_size - at);
  return out;
}

int64_t random_access_decodes_cpu() { return random_access_decodes(); }

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(custom_op, CPU, m) { m.impl("prepare_jpeg", TORCH_BOX(&prepare_jpeg_cpu)); }

// No tensor argument to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("_random_access_decodes", TORCH_BOX(&random_access_decodes_cpu));
}

}  // namespace custom_op
