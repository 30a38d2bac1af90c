// CPU harness for custom_op/csrc/jpeg_core: runs the decoding core the CUDA kernels will run, on the
// CPU, and compares it with libjpeg-turbo. Built and driven by tests/jpeg_core_build.py for
// tests/test_jpeg_core.py; the harness may use libjpeg (only jpeg_core/ must not).
//
// Why an executable over stdin/stdout rather than a library loaded into Python: libjpeg-turbo reads
// JSIMD_FORCENONE once per process, and the tests compare with both its SIMD and its C code, so each
// reference needs a fresh process anyway; and the fuzz run builds this file with AddressSanitizer
// and UBSan, which is simple for an executable and awkward inside a Python process.
//
// Input: records, each a 4-byte little-endian length and that many bytes (a JPEG file).
//
//   jpeg_core_harness check      one JSON line per record: the core's decode compared with libjpeg's
//                                (coefficients from jpeg_read_coefficients, pixels from a full decode
//                                with JDCT_ISLOW and fancy upsampling), restricted to the segments the
//                                core accepted (and, for pixels, when libjpeg runs with SIMD, to blocks
//                                the core marks as SIMD-exact; with JSIMD_FORCENONE=1 every block)
//   jpeg_core_harness check --gray-output
//                                the same, with YCbCr files decoded to grayscale on both sides (libjpeg's
//                                JCS_GRAYSCALE output: the luma alone, upsampled where the luma is
//                                subsampled; what mode=GRAY gives, and what the GPU decoder's window
//                                kernel writes for it); also for dump
//   jpeg_core_harness check --scale N
//                                the same decoded at N/8 of the size (N = 1, 2, 4, 8): the core with the
//                                IDCT size and upsampling scaling.h gives each component, libjpeg with
//                                scale_num = N, scale_denom = 8; the JSON also holds both sides' geometry
//                                (output size, each component's IDCT size and real sample size); also for
//                                dump, and with --gray-output
//   jpeg_core_harness dump       per record: the same JSON line, then the core's coefficient planes
//                                (int16, one per component), its pixels (uint8, H x W x C at the output
//                                size), libjpeg's coefficient planes and pixels (same shapes, zero where
//                                unavailable), and the per-segment flags (uint32)
//   jpeg_core_harness selftest   unit checks of single functions against libjpeg's definitions (its range
//                                limit table, its colour tables, the islow and reduced IDCTs' 32- and
//                                64-bit paths, the Huffman table rules, the bit reader), then for each
//                                record: zigzag-order decoding equals natural-order decoding, keeping a
//                                band of MCU rows equals the full decode's rows, and scaling.h's geometry
//                                equals jpeg_calc_output_dimensions's for every sampling factor and scale;
//                                prints {"failures": N, ...}
//   jpeg_core_harness chunked    [--chunk N[,N...]] [--rounds N] [--no-sweep] [--band [--cut N]] [--parts P]
//                                [--slots K [--guesses G]] [--walk-budget B]
//                                per record: the scan decoded by sync_decode.h's chunked stages with
//                                chunks of N bytes (each size in turn; default 256), every stage run for
//                                every chunk on its own as GPU threads would: stage 1, then up to
//                                --rounds rounds of sync_chunk (default 2; -1: until none changes), then one
//                                sweep in chunk order unless --no-sweep, then chunk_starts and stage 4, in
//                                P parts a chunk (split_scan, part_start; default 1) where N allows; with
//                                K >= 1, K slots a chunk (at most the MCU's blocks: guess_slot, rounds of
//                                sync_slot, walk_slots) in place of one record, G of them guessed (all
//                                where G is 0, the default); with K = -1,
//                                the GPU decoder's slots (slot_layout); stage 3 on lanes (as the GPU runs
//                                it, with B chunks decoded again at most, default 8) checked against
//                                walk_slots with that budget;
//                                one JSON line with each run's flags (all stages', and stage 4's alone)
//                                and, where stage 4 flagged nothing, its coefficients compared with
//                                jpeg_read_coefficients'; with --band, only the middle third of the MCU
//                                rows is decoded, and the middle third of their columns stored and
//                                compared (chunk_starts_through, decode_chunk_rect); with --band --cut N, a
//                                window's first try: the stages run on the file's bytes up to N bytes of
//                                its scan (N = 0: window_scan_bytes's estimate for the band), and the JSON
//                                says whether window_cut_short holds
//   jpeg_core_harness transcode  [--interval N | --rows N] [--optimize] [--hostile SEED]
//                                [--long-codes SEED [--one-table]]
//                                per record: one output record, the same coefficients re-encoded by
//                                libjpeg (jpeg_read_coefficients + jpeg_write_coefficients, so
//                                lossless) as a baseline file with that restart interval (MCUs) or one
//                                segment per N MCU rows; --hostile randomises coefficients (within what
//                                libjpeg's encoder accepts) and the quantisation tables (up to 65535,
//                                16-bit DQT) to drive the IDCT outside the range valid files reach;
//                                --long-codes writes Huffman tables of 16-bit codes that start with
//                                eight ones (set_long_code_tables), --one-table one table for every
//                                component. An empty record when libjpeg refuses.
//
// Exit status: 0, or 2 on bad usage / broken input framing. Per-file problems are reported in JSON.
#include <algorithm>
#include <climits>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "custom_op/csrc/jpeg_core/jpeg_core.h"

namespace jc = custom_op::jpeg_core;

namespace {

constexpr uint32_t kSegmentNotFound = 1u << 31;   // harness flag: the scan walk never reached it
constexpr uint32_t kScanDisagrees = 1u << 30;     // harness flag: join_records' scan differs from chunk_starts
constexpr uint32_t kLanesDisagree = 1u << 29;     // harness flag: stage 3 on lanes differs from the one thread's
constexpr uint32_t kMeetingsDisagree = 1u << 28;  // harness flag: rounds that meet earlier decodes differ

// ---- Records on stdin / stdout ------------------------------------------------------------------

bool read_exact(void* out, size_t n) { return n == 0 || std::fread(out, 1, n, stdin) == n; }

// False at a clean end of input; exits on a torn record.
bool read_record(std::vector<uint8_t>* out) {
  uint8_t head[4];
  const size_t got = std::fread(head, 1, 4, stdin);
  if (got == 0) return false;
  if (got != 4) {
    std::fprintf(stderr, "jpeg_core_harness: torn record header\n");
    std::exit(2);
  }
  const uint32_t n = uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 | uint32_t(head[3]) << 24;
  out->resize(n);
  if (!read_exact(out->data(), n)) {
    std::fprintf(stderr, "jpeg_core_harness: torn record\n");
    std::exit(2);
  }
  return true;
}

void write_bytes(const void* data, size_t n) {
  if (n != 0 && std::fwrite(data, 1, n, stdout) != n) std::exit(2);
}

void write_record(const void* data, size_t n) {
  const uint32_t len = static_cast<uint32_t>(n);
  const uint8_t head[4] = {uint8_t(len), uint8_t(len >> 8), uint8_t(len >> 16), uint8_t(len >> 24)};
  write_bytes(head, 4);
  write_bytes(data, n);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

// ---- libjpeg error handling ---------------------------------------------------------------------

struct ErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  std::string* message;
  int warnings;
  std::string* first_warning;
};

void on_error_exit(j_common_ptr cinfo) {
  ErrorManager* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  char buf[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, buf);
  *err->message = buf;
  std::longjmp(err->jump, 1);
}

void on_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  ErrorManager* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (err->warnings++ == 0) {
    char buf[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buf);
    *err->first_warning = buf;
  }
}

void install_errors(ErrorManager* err, std::string* message, std::string* first_warning) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = on_error_exit;
  err->pub.emit_message = on_emit_message;
  err->message = message;
  err->warnings = 0;
  err->first_warning = first_warning;
}

// ---- The core's decode --------------------------------------------------------------------------

enum ColorKind { kGray = 0, kYcc = 1, kRgb = 2 };

struct CoreDecode {
  std::string error;           // non-empty: the core does not decode this file (header, layout, support)
  bool table_refused = false;  // error: build_huffman_table refused a table libjpeg's header reader took
  jc::Frame frame{};
  int color = kGray;
  int out_components = 1;
  int restart_interval = 0;
  int64_t mcus_per_segment = 0;
  int64_t segments = 0;
  jc::SegmentScan scan{};
  std::vector<uint32_t> seg_flags;
  std::vector<int16_t> coef[jc::kMaxComponents];
  std::vector<uint8_t> samples[jc::kMaxComponents];
  int pitch[jc::kMaxComponents] = {0, 0, 0, 0};
  std::vector<uint8_t> block_exact[jc::kMaxComponents];
  int64_t inexact_blocks = 0;
  jc::Scaling scaling{};        // the output scale's geometry: IDCT sizes, upsampling, output size
  std::vector<uint8_t> pixels;  // scaling.height x scaling.width; empty when the sampling cannot be upsampled
};

// What the header says, read with libjpeg (the GPU path will have its own parser).
struct HeaderInfo {
  int width, height, components;
  int h[4], v[4];
  int scan_order[4];
  int color;
  int restart_interval;
  size_t scan_start;
  jc::HuffTable dc[4], ac[4];  // per component
  jc::QuantTable quant[4];     // per component
};

// The libjpeg part, with no C++ object of its own alive across setjmp: false with *reason set, or
// with *reason null after a libjpeg error (its message in *message).
bool read_header_libjpeg(const uint8_t* data, size_t size, HeaderInfo* info, const char** reason, bool* table_refused,
                         std::string* message, std::string* warning) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install_errors(&err, message, warning);
  cinfo.err = &err.pub;
  *reason = nullptr;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  bool ok = false;
  const char* reason_text = "";
  if (cinfo.progressive_mode || cinfo.arith_code || cinfo.data_precision != 8) {
    reason_text = "not sequential Huffman 8-bit";
  } else if (cinfo.comps_in_scan != cinfo.num_components) {
    reason_text = "first scan does not hold every component";
  } else if (!((cinfo.num_components == 1 && cinfo.jpeg_color_space == JCS_GRAYSCALE) ||
               (cinfo.num_components == 3 &&
                (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_RGB)))) {
    reason_text = "colour space not gray, YCbCr or RGB";
  } else {
    ok = true;
    info->width = static_cast<int>(cinfo.image_width);
    info->height = static_cast<int>(cinfo.image_height);
    info->components = cinfo.num_components;
    info->color = cinfo.jpeg_color_space == JCS_GRAYSCALE ? kGray : (cinfo.jpeg_color_space == JCS_YCbCr ? kYcc : kRgb);
    info->restart_interval = static_cast<int>(cinfo.restart_interval);
    info->scan_start = static_cast<size_t>(cinfo.src->next_input_byte - data);
    for (int i = 0; i < cinfo.num_components && ok; ++i) {
      const jpeg_component_info* comp = &cinfo.comp_info[i];
      info->h[i] = comp->h_samp_factor;
      info->v[i] = comp->v_samp_factor;
      info->scan_order[i] = static_cast<int>(cinfo.cur_comp_info[i] - cinfo.comp_info);
      // The SOS's selectors are 4 bits; libjpeg checks them only when decoding starts.
      const bool selectors_ok = comp->dc_tbl_no >= 0 && comp->dc_tbl_no < NUM_HUFF_TBLS && comp->ac_tbl_no >= 0 &&
                                comp->ac_tbl_no < NUM_HUFF_TBLS;
      const JHUFF_TBL* dc = selectors_ok ? cinfo.dc_huff_tbl_ptrs[comp->dc_tbl_no] : nullptr;
      const JHUFF_TBL* ac = selectors_ok ? cinfo.ac_huff_tbl_ptrs[comp->ac_tbl_no] : nullptr;
      const JQUANT_TBL* q = comp->quant_tbl_no >= 0 && comp->quant_tbl_no < NUM_QUANT_TBLS
                                ? cinfo.quant_tbl_ptrs[comp->quant_tbl_no]
                                : nullptr;
      if (!selectors_ok) {
        reason_text = "Huffman table selector out of range";
        ok = false;
      } else if (dc == nullptr || ac == nullptr) {
        reason_text = "no Huffman table (libjpeg would use the standard ones)";
        ok = false;
      } else if (q == nullptr) {
        reason_text = "no quantisation table";
        ok = false;
      } else if (!jc::build_huffman_table(&dc->bits[1], dc->huffval, 256, true, &info->dc[i]) ||
                 !jc::build_huffman_table(&ac->bits[1], ac->huffval, 256, false, &info->ac[i])) {
        reason_text = "Huffman table refused";
        *table_refused = true;
        ok = false;
      } else {
        for (int k = 0; k < 64; ++k) info->quant[i].value[k] = q->quantval[k];
      }
    }
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok) *reason = reason_text;
  return ok;
}

bool read_header_for_core(const uint8_t* data, size_t size, HeaderInfo* info, std::string* why,
                          bool* table_refused = nullptr) {
  std::string message, warning;
  const char* reason = nullptr;
  bool refused = false;
  const bool ok = read_header_libjpeg(data, size, info, &reason, &refused, &message, &warning);
  if (table_refused != nullptr) *table_refused = refused;
  if (!ok) *why = reason != nullptr ? std::string(reason) : "libjpeg: " + message;
  return ok;
}

// Everything the stages need, read from the header and the scan's markers.
struct Prepared {
  std::string error;
  bool table_refused = false;
  HeaderInfo info;
  jc::Frame frame{};
  jc::CoefOrder order;
  int64_t mcus_per_segment = 0, segments = 0;
  std::vector<size_t> begins, ends;
  jc::SegmentScan scan{};
};

void prepare(const uint8_t* data, size_t size, Prepared* p) {
  if (!read_header_for_core(data, size, &p->info, &p->error, &p->table_refused)) return;
  jc::Frame& f = p->frame;
  if (!jc::make_frame(p->info.width, p->info.height, p->info.components, p->info.h, p->info.v, p->info.scan_order,
                      &f)) {
    p->error = "frame refused by make_frame";
    return;
  }
  const int64_t total = jc::frame_total_mcus(f);
  p->mcus_per_segment = p->info.restart_interval > 0 ? p->info.restart_interval : total;
  p->segments = (total + p->mcus_per_segment - 1) / p->mcus_per_segment;
  p->begins.assign(static_cast<size_t>(p->segments), 0);
  p->ends.assign(static_cast<size_t>(p->segments), 0);
  p->scan = jc::find_segments(data, size, p->info.scan_start, p->segments, p->begins.data(), p->ends.data());
  jc::make_natural_order(&p->order);
}

// The tables of every component, natural order.
jc::SegmentTables segment_tables(const Prepared& p) {
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = c < p.frame.num_components ? &p.info.dc[c] : nullptr;
    t.ac[c] = c < p.frame.num_components ? &p.info.ac[c] : nullptr;
  }
  t.order = &p.order;
  return t;
}

// One output pixel: what a kernel thread does after upsampling.
CUSTOM_OP_HD inline void convert_pixel(int color, const jc::SamplePlane* sp, int y, int x, uint8_t* px) {
  if (color == 0) {
    px[0] = static_cast<uint8_t>(jc::upsampled_sample(sp[0], y, x));
  } else if (color == 1) {
    jc::ycc_to_rgb(jc::upsampled_sample(sp[0], y, x), jc::upsampled_sample(sp[1], y, x),
                   jc::upsampled_sample(sp[2], y, x), px);
  } else {
    for (int c = 0; c < 3; ++c) px[c] = static_cast<uint8_t>(jc::upsampled_sample(sp[c], y, x));
  }
}

// Decodes at `scale` eighths of the image's size (8: unscaled), as libjpeg does with scale_num = scale,
// scale_denom = 8.
void core_decode(const uint8_t* data, size_t size, CoreDecode* out, bool gray_output = false, int scale = 8) {
  Prepared p;
  prepare(data, size, &p);
  if (!p.error.empty()) {
    out->error = p.error;
    out->table_refused = p.table_refused;
    out->color = p.info.components == 1 ? kGray : kYcc;
    return;
  }
  const HeaderInfo& info = p.info;
  jc::Frame& f = out->frame;
  f = p.frame;
  out->color = gray_output && info.color == kYcc ? kGray : info.color;
  out->out_components = out->color == kGray ? 1 : 3;
  out->restart_interval = info.restart_interval;
  const int64_t total = jc::frame_total_mcus(f);
  out->mcus_per_segment = p.mcus_per_segment;
  out->segments = p.segments;
  if (!jc::make_scaling(f, scale, &out->scaling)) {
    out->error = "scale refused by make_scaling";
    return;
  }
  const jc::Scaling& sc = out->scaling;

  int16_t* planes[jc::kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
  for (int c = 0; c < f.num_components; ++c) {
    out->coef[c].assign(static_cast<size_t>(jc::plane_coefficients(f, c)), 0);
    planes[c] = out->coef[c].data();
  }
  out->scan = p.scan;
  const jc::SegmentTables tables = segment_tables(p);
  out->seg_flags.assign(static_cast<size_t>(out->segments), kSegmentNotFound);
  for (int64_t s = 0; s < out->scan.found; ++s) {
    const int64_t first = s * out->mcus_per_segment;
    const int64_t count = std::min<int64_t>(out->mcus_per_segment, total - first);
    out->seg_flags[static_cast<size_t>(s)] =
        jc::decode_segment(data + p.begins[static_cast<size_t>(s)], data + p.ends[static_cast<size_t>(s)], f, tables,
                           first, count, planes);
  }

  // Dequantisation and IDCT of every block, decoded or not (the planes are zero elsewhere), each into
  // idct_size x idct_size samples.
  for (int c = 0; c < f.num_components; ++c) {
    const int bs = sc.idct_size[c];
    out->pitch[c] = f.blocks_per_row[c] * bs;
    out->samples[c].assign(static_cast<size_t>(out->pitch[c]) * static_cast<size_t>(f.block_rows[c] * bs), 0);
    out->block_exact[c].assign(static_cast<size_t>(f.blocks_per_row[c]) * static_cast<size_t>(f.block_rows[c]), 0);
    for (int br = 0; br < f.block_rows[c]; ++br) {
      for (int bc = 0; bc < f.blocks_per_row[c]; ++bc) {
        const size_t b = static_cast<size_t>(br) * static_cast<size_t>(f.blocks_per_row[c]) + static_cast<size_t>(bc);
        uint8_t* dst = out->samples[c].data() + static_cast<size_t>(br * bs) * static_cast<size_t>(out->pitch[c]) +
                       static_cast<size_t>(bc * bs);
        const bool exact = jc::idct_scaled(bs, out->coef[c].data() + b * 64, info.quant[c], dst, out->pitch[c]);
        out->block_exact[c][b] = exact ? 1 : 0;
        if (!exact) ++out->inexact_blocks;
      }
    }
  }

  // Upsampling and colour conversion, one output pixel at a time as a kernel thread would.
  jc::SamplePlane sp[jc::kMaxComponents];
  for (int c = 0; c < f.num_components; ++c) {
    if (sc.upsample[c] == jc::kUpsampleNone) return;  // libjpeg: JERR_FRACT_SAMPLE_NOTIMPL
    sp[c] = jc::scaled_plane(sc, c, out->samples[c].data(), out->pitch[c]);
  }
  const size_t W = static_cast<size_t>(sc.width), H = static_cast<size_t>(sc.height);
  out->pixels.assign(W * H * static_cast<size_t>(out->out_components), 0);
  for (int y = 0; y < sc.height; ++y)
    for (int x = 0; x < sc.width; ++x)
      convert_pixel(out->color, sp, y, x,
                    out->pixels.data() + (static_cast<size_t>(y) * W + static_cast<size_t>(x)) * out->out_components);
}

// ---- libjpeg's decode ---------------------------------------------------------------------------

struct Reference {
  std::string coef_error, pixel_error;
  int coef_warnings = 0, pixel_warnings = 0;
  std::string coef_warning, pixel_warning;
  std::vector<int16_t> coef[jc::kMaxComponents];  // in the core's plane shapes
  std::vector<uint8_t> pixels;
  // libjpeg's geometry for the pixels' decode, after jpeg_start_decompress: output size, then each
  // component's DCT_scaled_size and downsampled width and height ("" when it failed).
  std::string geometry;
};

// The geometry string of Reference, from the core's Scaling.
std::string geometry_string(int width, int height, int components, const int* idct_size, const int* sample_width,
                            const int* sample_height) {
  std::string g = std::to_string(width) + "x" + std::to_string(height);
  for (int c = 0; c < components; ++c)
    g += " " + std::to_string(idct_size[c]) + ":" + std::to_string(sample_width[c]) + "x" +
         std::to_string(sample_height[c]);
  return g;
}

void reference_coefficients(const uint8_t* data, size_t size, const jc::Frame& f, Reference* ref) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install_errors(&err, &ref->coef_error, &ref->coef_warning);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    ref->coef_warnings = err.warnings;
    jpeg_destroy_decompress(&cinfo);
    for (auto& plane : ref->coef) plane.clear();
    if (ref->coef_error.empty()) ref->coef_error = "libjpeg error";
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  jvirt_barray_ptr* arrays = jpeg_read_coefficients(&cinfo);
  for (int c = 0; c < f.num_components && c < cinfo.num_components; ++c) {
    const jpeg_component_info* comp = &cinfo.comp_info[c];
    // libjpeg's arrays are whole MCUs too (jdcoefct.c rounds up to the sampling factors).
    const int rows = static_cast<int>((comp->height_in_blocks + comp->v_samp_factor - 1) / comp->v_samp_factor *
                                      comp->v_samp_factor);
    const int cols =
        static_cast<int>((comp->width_in_blocks + comp->h_samp_factor - 1) / comp->h_samp_factor * comp->h_samp_factor);
    if (rows < f.block_rows[c] || cols < f.blocks_per_row[c]) {
      ref->coef_error = "libjpeg's coefficient arrays are smaller than the core's planes";
      break;
    }
    ref->coef[c].assign(static_cast<size_t>(jc::plane_coefficients(f, c)), 0);
    for (int r = 0; r < f.block_rows[c]; ++r) {
      JBLOCKARRAY row = (*cinfo.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&cinfo), arrays[c],
                                                         static_cast<JDIMENSION>(r), 1, FALSE);
      for (int b = 0; b < f.blocks_per_row[c]; ++b) {
        int16_t* dst =
            ref->coef[c].data() +
            (static_cast<size_t>(r) * static_cast<size_t>(f.blocks_per_row[c]) + static_cast<size_t>(b)) * 64;
        for (int k = 0; k < 64; ++k) dst[k] = row[0][b][k];
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  ref->coef_warnings = err.warnings;
  jpeg_destroy_decompress(&cinfo);
}

// libjpeg's decode with JDCT_ISLOW and fancy upsampling, at scale_num = scale, scale_denom = 8.
void reference_pixels(const uint8_t* data, size_t size, int color, int scale, Reference* ref) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install_errors(&err, &ref->pixel_error, &ref->pixel_warning);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    ref->pixel_warnings = err.warnings;
    jpeg_destroy_decompress(&cinfo);
    ref->pixels.clear();
    if (ref->pixel_error.empty()) ref->pixel_error = "libjpeg error";
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = color == kGray ? JCS_GRAYSCALE : JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  cinfo.scale_num = static_cast<unsigned int>(scale);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  {
    int idct_size[jc::kMaxComponents], sample_width[jc::kMaxComponents], sample_height[jc::kMaxComponents];
    const int n = std::min(cinfo.num_components, jc::kMaxComponents);
    for (int c = 0; c < n; ++c) {
#if JPEG_LIB_VERSION >= 70
      idct_size[c] = cinfo.comp_info[c].DCT_h_scaled_size;
#else
      idct_size[c] = cinfo.comp_info[c].DCT_scaled_size;
#endif
      sample_width[c] = static_cast<int>(cinfo.comp_info[c].downsampled_width);
      sample_height[c] = static_cast<int>(cinfo.comp_info[c].downsampled_height);
    }
    ref->geometry = geometry_string(static_cast<int>(cinfo.output_width), static_cast<int>(cinfo.output_height), n,
                                    idct_size, sample_width, sample_height);
  }
  const size_t row_bytes = static_cast<size_t>(cinfo.output_width) * static_cast<size_t>(cinfo.output_components);
  ref->pixels.assign(row_bytes * cinfo.output_height, 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = ref->pixels.data() + row_bytes * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  ref->pixel_warnings = err.warnings;
  jpeg_destroy_decompress(&cinfo);
}

// libjpeg's warnings (and error) while it decodes the first `rows` pixel rows and no more, as the CPU
// path's window decode stops after its window: what libjpeg has read by then is all it can warn about.
void reference_warnings_through(const uint8_t* data, size_t size, int rows, int* warnings, std::string* error) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  std::string first_warning;
  install_errors(&err, error, &first_warning);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    *warnings = err.warnings;
    jpeg_destroy_decompress(&cinfo);
    if (error->empty()) *error = "libjpeg error";
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  std::vector<uint8_t> row(static_cast<size_t>(cinfo.output_width) * static_cast<size_t>(cinfo.output_components));
  JSAMPROW out = row.data();
  while (cinfo.output_scanline < std::min<JDIMENSION>(cinfo.output_height, static_cast<JDIMENSION>(rows)))
    jpeg_read_scanlines(&cinfo, &out, 1);
  *warnings = err.warnings;
  jpeg_destroy_decompress(&cinfo);  // (no jpeg_finish_decompress: it would read the rest of the scan)
}

// ---- Comparison ---------------------------------------------------------------------------------

struct Comparison {
  bool simd_reference = true;  // libjpeg runs with SIMD (no JSIMD_FORCENONE=1)
  int64_t bad_segments = 0;
  uint32_t flags_seen = 0;
  int64_t blocks = 0, coef_compared_blocks = 0, coef_mismatch_blocks = 0;
  std::string first_coef_mismatch;
  int64_t pixels = 0, pixels_compared = 0, pixel_mismatches = 0;
  int max_diff = 0;
  std::string first_pixel_mismatch;
};

int64_t segment_of_block(const CoreDecode& d, int c, int br, int bc) {
  const jc::Frame& f = d.frame;
  const int64_t mcu = static_cast<int64_t>(br / f.mcu_blocks_v[c]) * f.mcus_per_row + bc / f.mcu_blocks_h[c];
  return mcu / d.mcus_per_segment;
}

Comparison compare(const CoreDecode& d, const Reference& ref) {
  Comparison cmp;
  const char* none = std::getenv("JSIMD_FORCENONE");
  cmp.simd_reference = !(none != nullptr && std::strcmp(none, "1") == 0);
  const jc::Frame& f = d.frame;
  for (uint32_t flags : d.seg_flags) {
    if (flags != 0) ++cmp.bad_segments;
    cmp.flags_seen |= flags;
  }
  const bool accepted = d.scan.error == jc::kScanOk;
  // Per block: usable for coefficients (segment accepted), and for pixels (also exact if SIMD).
  std::vector<uint8_t> good[jc::kMaxComponents], usable[jc::kMaxComponents];
  bool all_usable = accepted;
  for (int c = 0; c < f.num_components; ++c) {
    good[c].assign(d.block_exact[c].size(), 0);
    usable[c].assign(d.block_exact[c].size(), 0);
    for (int br = 0; br < f.block_rows[c]; ++br) {
      for (int bc = 0; bc < f.blocks_per_row[c]; ++bc) {
        const size_t b = static_cast<size_t>(br) * static_cast<size_t>(f.blocks_per_row[c]) + static_cast<size_t>(bc);
        ++cmp.blocks;
        const bool ok = accepted && d.seg_flags[static_cast<size_t>(segment_of_block(d, c, br, bc))] == 0;
        good[c][b] = ok;
        usable[c][b] = ok && (!cmp.simd_reference || d.block_exact[c][b]);
        all_usable = all_usable && usable[c][b];
        if (!ok || ref.coef[c].empty()) continue;
        ++cmp.coef_compared_blocks;
        if (std::memcmp(d.coef[c].data() + b * 64, ref.coef[c].data() + b * 64, 64 * sizeof(int16_t)) != 0) {
          if (cmp.coef_mismatch_blocks++ == 0) {
            int k = 0;
            while (d.coef[c][b * 64 + k] == ref.coef[c][b * 64 + k]) ++k;
            cmp.first_coef_mismatch = "component " + std::to_string(c) + " block row " + std::to_string(br) + " col " +
                                      std::to_string(bc) + " coef " + std::to_string(k) + ": core " +
                                      std::to_string(d.coef[c][b * 64 + k]) + " libjpeg " +
                                      std::to_string(ref.coef[c][b * 64 + k]);
          }
        }
      }
    }
  }
  const int C = d.out_components;
  const jc::Scaling& sc = d.scaling;
  cmp.pixels = static_cast<int64_t>(sc.width) * sc.height * C;
  if (d.pixels.empty() || ref.pixels.size() != d.pixels.size()) return cmp;
  for (int y = 0; y < sc.height; ++y) {
    for (int x = 0; x < sc.width; ++x) {
      bool use = all_usable;
      if (!use && accepted) {
        // Every block holding a sample the upsampler may read for this pixel: the 3x3 neighbourhood
        // of its sample in each component (a superset of what any method reads).
        use = true;
        for (int c = 0; c < f.num_components && use; ++c) {
          const int j = y / sc.v_ratio[c], k = x / sc.h_ratio[c], bs = sc.idct_size[c];
          for (int dj = -1; dj <= 1 && use; ++dj) {
            for (int dk = -1; dk <= 1 && use; ++dk) {
              const int jj = jc::clamp_int(j + dj, 0, sc.sample_height[c] - 1);
              const int kk = jc::clamp_int(k + dk, 0, sc.sample_width[c] - 1);
              use = usable[c][static_cast<size_t>(jj / bs) * static_cast<size_t>(f.blocks_per_row[c]) +
                              static_cast<size_t>(kk / bs)] != 0;
            }
          }
        }
      }
      if (!use) continue;
      const size_t at = (static_cast<size_t>(y) * static_cast<size_t>(sc.width) + static_cast<size_t>(x)) * C;
      for (int ch = 0; ch < C; ++ch) {
        ++cmp.pixels_compared;
        const int diff = std::abs(int(d.pixels[at + ch]) - int(ref.pixels[at + ch]));
        if (diff != 0) {
          if (cmp.pixel_mismatches++ == 0)
            cmp.first_pixel_mismatch = "y " + std::to_string(y) + " x " + std::to_string(x) + " channel " +
                                       std::to_string(ch) + ": core " + std::to_string(d.pixels[at + ch]) +
                                       " libjpeg " + std::to_string(ref.pixels[at + ch]);
          if (diff > cmp.max_diff) cmp.max_diff = diff;
        }
      }
    }
  }
  return cmp;
}

std::string summary_json(const CoreDecode& d, const Reference& ref, const Comparison& cmp) {
  std::string s = "{";
  auto field = [&s](const char* name, const std::string& value, bool quoted) {
    if (s.size() > 1) s += ", ";
    s += "\"";
    s += name;
    s += "\": ";
    if (quoted) s += "\"" + json_escape(value) + "\"";
    else s += value;
  };
  auto num = [&field](const char* name, int64_t v) { field(name, std::to_string(v), false); };
  const jc::Frame& f = d.frame;
  field("core_error", d.error, true);
  if (d.error.empty()) {
    num("width", f.width);
    num("height", f.height);
    num("components", f.num_components);
    std::string sampling;
    for (int c = 0; c < f.num_components; ++c)
      sampling += (c ? "," : "") + std::to_string(f.h[c]) + "x" + std::to_string(f.v[c]);
    field("sampling", sampling, true);
    field("color", d.color == kGray ? "gray" : (d.color == kYcc ? "ycbcr" : "rgb"), true);
    const jc::Scaling& sc = d.scaling;
    std::string methods = "[", sizes = "[", planes = "[";
    for (int c = 0; c < f.num_components; ++c) {
      methods += (c ? "," : "") + std::to_string(sc.upsample[c]);
      sizes += (c ? "," : "") + std::to_string(sc.idct_size[c]);
      planes += std::string(c ? "," : "") + "[" + std::to_string(f.block_rows[c]) + "," +
                std::to_string(f.blocks_per_row[c]) + "]";
    }
    field("upsample", methods + "]", false);
    field("planes", planes + "]", false);
    num("scale", sc.scale);
    num("output_width", sc.width);
    num("output_height", sc.height);
    field("idct_sizes", sizes + "]", false);
    // The core's output size, IDCT sizes and real sample sizes, in the form of libjpeg's ref_geometry.
    field("geometry",
          geometry_string(sc.width, sc.height, f.num_components, sc.idct_size, sc.sample_width, sc.sample_height),
          true);
    num("out_components", d.out_components);
    num("restart_interval", d.restart_interval);
    num("segments", d.segments);
    num("scan_error", d.scan.error);
    num("segments_found", d.scan.found);
    num("bad_segments", cmp.bad_segments);
    num("segment_flags", cmp.flags_seen);
    num("blocks", cmp.blocks);
    num("inexact_blocks", d.inexact_blocks);
    num("coef_compared_blocks", cmp.coef_compared_blocks);
    num("coef_mismatch_blocks", cmp.coef_mismatch_blocks);
    field("first_coef_mismatch", cmp.first_coef_mismatch, true);
    num("pixels", cmp.pixels);
    num("pixels_compared", cmp.pixels_compared);
    num("pixel_mismatches", cmp.pixel_mismatches);
    num("max_diff", cmp.max_diff);
    field("first_pixel_mismatch", cmp.first_pixel_mismatch, true);
    field("simd_reference", cmp.simd_reference ? "true" : "false", false);
  }
  field("ref_coef_error", ref.coef_error, true);
  field("ref_pixel_error", ref.pixel_error, true);
  field("ref_geometry", ref.geometry, true);
  num("ref_warnings", ref.coef_warnings + ref.pixel_warnings);
  field("ref_warning", ref.coef_warning.empty() ? ref.pixel_warning : ref.coef_warning, true);
  return s + "}\n";
}

void run_check(bool dump, bool gray_output, int scale) {
  std::vector<uint8_t> file;
  while (read_record(&file)) {
    CoreDecode d;
    core_decode(file.data(), file.size(), &d, gray_output, scale);
    Reference ref;
    if (d.error.empty()) {
      reference_coefficients(file.data(), file.size(), d.frame, &ref);
      reference_pixels(file.data(), file.size(), d.color, scale, &ref);
    } else if (d.table_refused) {
      reference_pixels(file.data(), file.size(), d.color, scale, &ref);  // does libjpeg refuse the table too?
    }
    const Comparison cmp = d.error.empty() ? compare(d, ref) : Comparison{};
    const std::string line = summary_json(d, ref, cmp);
    write_bytes(line.data(), line.size());
    if (dump && d.error.empty()) {
      const size_t npix = static_cast<size_t>(d.scaling.width) * static_cast<size_t>(d.scaling.height) *
                          static_cast<size_t>(d.out_components);
      for (int c = 0; c < d.frame.num_components; ++c) write_bytes(d.coef[c].data(), d.coef[c].size() * 2);
      std::vector<uint8_t> pixels = d.pixels;
      pixels.resize(npix, 0);
      write_bytes(pixels.data(), npix);
      for (int c = 0; c < d.frame.num_components; ++c) {
        std::vector<int16_t> plane = ref.coef[c];
        plane.resize(d.coef[c].size(), 0);
        write_bytes(plane.data(), plane.size() * 2);
      }
      pixels = ref.pixels;
      pixels.resize(npix, 0);
      write_bytes(pixels.data(), npix);
      write_bytes(d.seg_flags.data(), d.seg_flags.size() * 4);
    }
    std::fflush(stdout);
  }
}

// ---- Chunked decoding (sync_decode.h) ------------------------------------------------------------

struct ChunkedOptions {
  std::vector<int64_t> chunk_bytes{256};
  int64_t rounds = 2;  // rounds of sync_chunk, every chunk reading the last round's records; < 0: until none changes
  bool sweep = true;   // then one sweep in chunk order, as one thread would run it
  bool band = false;   // decode only the band of MCU rows kept_rows() gives, through chunk_starts_through
  int64_t parts = 1;   // stage 4's parts a chunk (split_scan), where the chunk size is a multiple of it
  int slots = 0;       // 0: one record a chunk (decode_chunk, sync_chunk); k >= 1: k slots (guess_slot, sync_slot,
                       // walk_slots), at most the MCU's blocks, all guessed; -1: slot_layout's
  int guesses = 0;     // with slots >= 1: of them guessed in stage 1 (0: all)
  int64_t walk_budget = 8;  // stage 3's chunks decoded again (walk_slots, lane_repair) before it gives up
  int64_t cut = -1;         // with band, >= 0: a window's first try on the scan's first `cut` bytes (0: the estimate)
};

// About the middle third of n (first, count), at least one.
std::pair<int64_t, int64_t> middle_third(int64_t n) {
  const int64_t first = n / 3;
  return {first, std::max<int64_t>(1, std::min<int64_t>(n - first, (n + 2) / 3))};
}

// The MCU rows a run keeps: with --band the middle third (its band), else all.
std::pair<int64_t, int64_t> kept_rows(const jc::Frame& f, bool band) {
  return band ? middle_third(f.mcu_rows) : std::pair<int64_t, int64_t>{0, f.mcu_rows};
}

// The MCU columns a run stores in its rows: with --band the middle third, else all.
std::pair<int64_t, int64_t> kept_cols(const jc::Frame& f, bool band) {
  return band ? middle_third(f.mcus_per_row) : std::pair<int64_t, int64_t>{0, f.mcus_per_row};
}

// The first block (by scan index) of the MCU rows a run keeps.
int64_t first_block_kept(const jc::Frame& f, bool band) { return jc::row_first_block(f, kept_rows(f, band).first); }

// The last block (by scan index) of the MCU rows a run reads: the last of those it keeps (kept_rows).
int64_t last_block_read(const jc::Frame& f, bool band) {
  const auto [first, count] = kept_rows(f, band);
  return jc::row_first_block(f, first + count) - 1;
}

// One decode of a file with one chunk size, each stage run for every chunk on its own as the GPU's
// threads run them (stages 1, 2 and 4 read only what earlier stages wrote).
struct ChunkedRun {
  int64_t chunk_bytes = 0, chunks = 0;
  int64_t parts = 1;             // stage 4's parts a chunk
  int slots = 0;                 // records a chunk (0: the one-record stages)
  int guesses = 1;               // of them stage 1 decodes (guess_slot; decode_chunk from chunk_guess)
  int64_t rounds = 0;            // rounds that decoded some chunk again
  int64_t redone_in_rounds = 0;  // chunk decodes in those rounds
  int64_t redone_in_sweep = 0;
  int64_t unsynced_before_sweep = 0;  // unsynced_chunks_through the scan's last block, after the rounds
  uint32_t flags = 0;                 // every stage's, or'ed: 0 is what a caller takes the decode on
  uint32_t stage4_flags = 0;          // every chunk's decode_chunk_blocks', or'ed: 0 must mean exact on its own
  int64_t flagged_chunks = 0;         // chunks whose stage 4 flagged something
  bool lanes_taken = false;           // stage 3 on 32 lanes went on (lanes_match_one_thread) after the rounds
  int64_t strict_from = 0;            // with --band: the first chunk stage 4 decodes (chunk_starts_through)
  int64_t whole_from = 0;             // with --band: the first chunk whose every part stage 4 decodes
  int64_t parts_decoded = 0;          // stage 4's parts decoded, and (with --band) left out by part_decode_needed
  int64_t parts_skipped = 0;
  int64_t band_first_chunk = 0;  // with --band: the first chunk (by the starts) that holds a block of the band
  int64_t cut_bytes = 0;         // with --cut: the scan's bytes the first try took (all of them: no cut)
  bool cut_short = false;        // with --cut: window_cut_short at the chain's end through the band
  // With slots, the blocks the rounds' decodes read, stopping where they meet an earlier decode and decoding
  // their chunk to its end; and the same summed over the most of 32 neighbouring chunks of a slot (a warp's
  // threads on the GPU, which wait for their slowest).
  int64_t round_blocks = 0, round_blocks_full = 0, round_warp_blocks = 0, round_warp_blocks_full = 0;
  // Of round_blocks, those of the decodes that wrote the records the walk takes (through the scan's end): the
  // rest went into records no chain used.
  int64_t round_blocks_chosen = 0;
  // Stage 3 on 32 lanes: the blocks its repairs decoded (lane_repair, stopping where they meet a slot), and the
  // blocks of the records they gave (what whole decodes would have read).
  int64_t repair_blocks = 0, repair_blocks_full = 0;
  std::vector<int16_t> coef[jc::kMaxComponents];
};

// Stage 3 on `lanes` lanes as the GPU's chunk_starts_kernel runs it (sync_decode.h's lane steps, each run for every
// lane in turn, as a warp runs them between its barriers; where the walk reaches a chunk off the chain, lane_repair
// and the steps again, at most `budget` times) against walk_slots with that budget and chunk_starts_through, each on
// its own copy of the slots' part ends (`part_ends`, the rounds' layout over `fine`'s `parts`): the lanes must go on
// exactly where that walk succeeds, and then give its chosen slots and records, starts, needed, strict_from (from
// first_block) and flags, and the same part ends of the chunks decoded again. Returns whether the lanes went on;
// sets *agree, and adds to *repair_blocks and *repair_blocks_full (ChunkedRun's) where not null.
bool lanes_match_one_thread(const jc::ChunkedScan& s, const jc::ChunkedScan& fine, int64_t parts, const jc::Frame& f,
                            const jc::SegmentTables& t, const jc::ChunkRecord* records,
                            const std::vector<jc::ChunkRecord>& part_ends, int k, int64_t first_block,
                            int64_t last_block, int lanes, int64_t budget, bool* agree,
                            int64_t* repair_blocks = nullptr, int64_t* repair_blocks_full = nullptr) {
  const int64_t n = s.num_chunks;
  std::vector<jc::ChunkRecord> chosen(static_cast<size_t>(n));
  std::vector<int32_t> slot0(static_cast<size_t>(n), -1), slot1(static_cast<size_t>(n), -1);
  std::vector<jc::ChunkStart> starts0(static_cast<size_t>(n + 1)), starts1(static_cast<size_t>(n + 1));
  std::vector<jc::ChunkRecord> ends0 = part_ends, ends1 = part_ends;
  int64_t redone = 0, needed0 = 0, needed1 = 0, strict0 = -1, strict1 = -2, whole0 = -1, whole1 = -2;
  auto ends_in = [&](std::vector<jc::ChunkRecord>& ends) {
    return [&ends, &fine, parts, n](int64_t j, int h, jc::PartEnds* storage) {
      *storage = jc::slot_part_ends(fine, parts, n, j, h, ends.data());
      return storage;
    };
  };
  const bool walked =
      jc::walk_slots(s, f, t, records, k, last_block, budget, ends_in(ends0), chosen.data(), slot0.data(), &redone);
  uint32_t flags0 = 0;
  if (walked)
    flags0 = jc::chunk_starts_through(s, f, chosen.data(), last_block, starts0.data(), &needed0, first_block, &strict0,
                                      &whole0);
  std::vector<jc::ChunkRecord> mine(records, records + n * k);  // the lanes' records, which lane_repair writes
  std::vector<jc::ChunkRecord> scratch(static_cast<size_t>(parts > 1 ? parts - 1 : 0));  // lane_repair's part ends
  std::vector<jc::LaneChain> chain(static_cast<size_t>(lanes));
  auto range = [&](int lane) { return jc::lane_chunks(n, lane, lanes); };
  for (int q = 0; q < lanes; ++q) jc::lane_chain_map(mine.data(), k, range(q), &chain[q]);
  int64_t end = 0;
  bool went_on = false;
  for (int64_t repairs = 0;; ++repairs) {
    for (int q = 0; q < lanes; ++q)
      jc::lane_chain_walk(mine.data(), k, range(q), chain.data(), q, slot1.data(), &chain[q]);
    for (int q = 0; q < lanes; ++q)
      jc::lane_walk_stop(mine.data(), k, range(q), chain.data(), q, slot1.data(), last_block, &chain[q]);
    went_on = jc::lanes_walk_end(chain.data(), lanes, n, &end);
    if (went_on || repairs == budget) break;
    const int64_t broken = jc::lanes_first_broken(chain.data(), lanes);
    int64_t decoded = 0;
    if (jc::lane_repair(s, f, t, mine.data(), k, broken, slot1.data(), ends_in(ends1), scratch.data(),
                        static_cast<int>(scratch.size()), &decoded) != jc::kSegmentOk)
      break;
    if (repair_blocks != nullptr) *repair_blocks += decoded;
    if (repair_blocks_full != nullptr) *repair_blocks_full += mine[broken * k].blocks;
    for (int q = 0; q < lanes; ++q)
      if (jc::lane_map_stale(range(q), broken)) jc::lane_chain_map(mine.data(), k, range(q), &chain[q]);
  }
  *agree = went_on == walked;
  if (!went_on || !walked) return went_on;
  for (int q = 0; q < lanes; ++q) jc::lane_chain_join(mine.data(), k, range(q), end, slot1.data(), &chain[q]);
  for (int q = 0; q < lanes; ++q)
    jc::lane_starts(s, f, mine.data(), k, range(q), chain.data(), q, slot1.data(), last_block, first_block,
                    starts1.data(), &chain[q]);
  const uint32_t flags1 =
      jc::lanes_starts_result(chain.data(), lanes, starts1.data(), last_block, &needed1, &strict1, &whole1);
  bool same_records = true;
  for (int64_t j = 0; j < n; ++j)
    same_records = same_records && std::memcmp(&chosen[j], &mine[j * k + slot1[j]], sizeof(jc::ChunkRecord)) == 0;
  *agree = slot0 == slot1 && flags0 == flags1 && needed0 == needed1 && strict0 == strict1 && whole0 == whole1 &&
           same_records && std::memcmp(starts0.data(), starts1.data(), starts0.size() * sizeof(jc::ChunkStart)) == 0 &&
           (ends0.empty() || std::memcmp(ends0.data(), ends1.data(), ends0.size() * sizeof(jc::ChunkRecord)) == 0);
  return true;
}

void chunked_decode(const uint8_t* data, size_t size, const Prepared& p, int64_t chunk_bytes, const ChunkedOptions& opt,
                    ChunkedRun* out) {
  const jc::Frame& f = p.frame;
  out->chunk_bytes = chunk_bytes;
  // A window's first try (--cut) decodes the file's bytes up to the scan bytes it takes, as the GPU decoder's
  // planner cuts them; the slot layout is the whole scan's, as there.
  const int64_t scan_bytes = static_cast<int64_t>(size) - static_cast<int64_t>(p.info.scan_start);
  out->cut_bytes = scan_bytes;
  if (opt.band && opt.cut >= 0) {
    const auto [band_first, band_count] = kept_rows(f, true);
    out->cut_bytes = opt.cut > 0 ? std::min(opt.cut, scan_bytes)
                                 : jc::window_scan_bytes(scan_bytes, band_first + band_count, f.mcu_rows, chunk_bytes);
    size = static_cast<size_t>(static_cast<int64_t>(p.info.scan_start) + out->cut_bytes);
  }
  jc::ChunkedScan s;
  if (!jc::make_chunked_scan(data, static_cast<int64_t>(size), static_cast<int64_t>(p.info.scan_start), chunk_bytes,
                             p.info.restart_interval, &s)) {
    out->flags = out->stage4_flags = jc::kBadArguments;
    return;
  }
  const jc::SegmentTables t = segment_tables(p);
  const int64_t n = s.num_chunks;
  out->chunks = n;
  // Stage 4's chunks: the parts of the chunks (split_scan), or the chunks themselves.
  jc::ChunkedScan fine = s;
  const int64_t parts = jc::split_scan(s, opt.parts, &fine) ? opt.parts : 1;
  if (parts == 1) fine = s;
  out->parts = parts;
  // Each chunk's part ends, from its latest decode: every stage that decodes a chunk again rewrites them.
  std::vector<jc::ChunkRecord> part_ends(static_cast<size_t>(n * (parts - 1)));
  auto ends_of = [&](int64_t j) { return jc::chunk_part_ends(fine, parts, j, part_ends.data()); };
  std::vector<jc::ChunkRecord> records(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<int32_t> chosen_slot;  // with slots: walk_slots' choice for each chunk
  // Stage 3 on lanes, on the records the rounds leave (k a chunk), through the band's or the scan's last block,
  // on 32 lanes (a warp: empty ranges where the file has fewer chunks) and on 3.
  auto check_lanes = [&](const jc::ChunkRecord* after_rounds, int k) {
    const int64_t last = last_block_read(f, opt.band);
    for (const int lanes : {32, 3}) {
      bool agree = false;
      const bool taken = lanes_match_one_thread(
          s, fine, parts, f, t, after_rounds, part_ends, k, first_block_kept(f, opt.band), last, lanes, opt.walk_budget,
          &agree, lanes == 32 ? &out->repair_blocks : nullptr, lanes == 32 ? &out->repair_blocks_full : nullptr);
      if (lanes == 32) out->lanes_taken = taken;
      if (!agree) out->flags |= kLanesDisagree;
    }
  };
  // Rounds of `round` (one round; it returns the chunks decoded again) until none decodes a chunk again, at
  // most opt.rounds (all where below 0), counted into `out`.
  auto run_rounds = [&](auto round) {
    for (int64_t r = 0; opt.rounds < 0 || r < opt.rounds; ++r) {
      const int64_t redone = round();
      if (redone == 0) break;
      ++out->rounds;
      out->redone_in_rounds += redone;
    }
  };
  if (opt.slots != 0) {
    // --slots -1: the GPU decoder's layout; K: K records a chunk (at most the MCU's blocks), --guesses of them
    // guessed (all where 0).
    const int most = opt.slots < 0 ? 0 : std::min(opt.slots, f.blocks_in_mcu);
    const jc::SlotLayout layout = opt.slots < 0
                                      ? jc::slot_layout(f, scan_bytes)
                                      : jc::SlotLayout{most, opt.guesses > 0 ? std::min(opt.guesses, most) : most};
    const int k = layout.slots;
    out->slots = k;
    out->guesses = layout.guesses;
    part_ends.assign(static_cast<size_t>(k * n * (parts - 1)), jc::ChunkRecord{});
    auto slot_ends_of = [&](int64_t j, int h) { return jc::slot_part_ends(fine, parts, n, j, h, part_ends.data()); };
    std::vector<jc::ChunkRecord> slots(static_cast<size_t>(n * k)), next_slots(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j)
      for (int h = 0; h < k; ++h) {
        jc::PartEnds ends = slot_ends_of(j, h);
        out->flags |= jc::guess_slot(s, f, t, j, h, layout.guesses, &slots[j * k + h], &ends);
      }
    // The rounds as the GPU runs them, each decode stopping where it meets one of the last round's (the part
    // ends in two buffers, as the records), beside rounds whose decodes run to their chunk's end (one buffer of
    // part ends, each slot's rewritten by its own decode alone): after every round, every slot in use and its
    // part ends must be the same in both.
    std::vector<jc::ChunkRecord> next_part_ends(part_ends.size()), full_slots = slots, full_next(slots.size()),
                                                                   full_part_ends = part_ends;
    std::vector<int64_t> met_blocks(static_cast<size_t>(n * k)), full_blocks(static_cast<size_t>(n * k));
    std::vector<int64_t> last_blocks(static_cast<size_t>(n * k));  // each slot's latest round decode's
    auto warp_most = [&](const std::vector<int64_t>& blocks) {
      int64_t sum = 0;
      for (int h = 0; h < k; ++h)
        for (int64_t first = 0; first < n; first += 32) {
          int64_t most = 0;
          for (int64_t j = first; j < std::min(n, first + 32); ++j) most = std::max(most, blocks[j * k + h]);
          sum += most;
        }
      return sum;
    };
    run_rounds([&] {
      int64_t redone = 0;
      for (int h = 0; h < k; ++h) next_slots[h] = slots[h];
      for (int h = 0; h < k; ++h) full_next[h] = full_slots[h];
      for (int h = 0; h < k; ++h)  // chunk 0's part ends, which no round rewrites
        for (int64_t m = 0; m < parts - 1; ++m)
          next_part_ends[jc::slot_part_ends_index(parts, n, 0, h) + m] =
              part_ends[jc::slot_part_ends_index(parts, n, 0, h) + m];
      std::fill(met_blocks.begin(), met_blocks.end(), 0);
      std::fill(full_blocks.begin(), full_blocks.end(), 0);
      for (int64_t j = 1; j < n; ++j) {
        const jc::EarlierDecodes earlier = jc::earlier_slots(parts, n, j, k, slots.data(), part_ends.data());
        for (int h = 0; h < k; ++h) {
          jc::PartEnds ends = jc::slot_part_ends(fine, parts, n, j, h, next_part_ends.data());
          const size_t at = static_cast<size_t>(j * k + h);
          if (jc::sync_slot(s, f, t, j, &slots[(j - 1) * k], &slots[j * k], k, h, &next_slots[at], &ends, &earlier)) {
            ++redone;
            met_blocks[at] = ends.met_slot >= 0 ? ends.out[ends.met_at].blocks : next_slots[at].blocks;
            last_blocks[at] = met_blocks[at];
          }
          jc::PartEnds full_ends = jc::slot_part_ends(fine, parts, n, j, h, full_part_ends.data());
          if (jc::sync_slot(s, f, t, j, &full_slots[(j - 1) * k], &full_slots[j * k], k, h, &full_next[at], &full_ends))
            full_blocks[at] = full_next[at].blocks;
        }
      }
      slots.swap(next_slots);
      part_ends.swap(next_part_ends);
      full_slots.swap(full_next);
      for (int64_t j = 0; j < n; ++j)
        for (int h = 0; h < k; ++h) {
          const jc::ChunkRecord& a = slots[j * k + h];
          const jc::ChunkRecord& b = full_slots[j * k + h];
          bool same = std::memcmp(&a, &b, sizeof(a)) == 0 || (!jc::slot_used(a) && !jc::slot_used(b));
          if (same && jc::slot_used(a) && parts > 1)
            same = std::memcmp(part_ends.data() + jc::slot_part_ends_index(parts, n, j, h),
                               full_part_ends.data() + jc::slot_part_ends_index(parts, n, j, h),
                               static_cast<size_t>(parts - 1) * sizeof(jc::ChunkRecord)) == 0;
          if (!same) out->flags |= kMeetingsDisagree;
        }
      for (const int64_t b : met_blocks) out->round_blocks += b;
      for (const int64_t b : full_blocks) out->round_blocks_full += b;
      out->round_warp_blocks += warp_most(met_blocks);
      out->round_warp_blocks_full += warp_most(full_blocks);
      return redone;
    });
    out->unsynced_before_sweep =
        jc::slots_missing_through(s, slots.data(), k, frame_total_mcus(f) * f.blocks_in_mcu - 1);
    check_lanes(slots.data(), k);
    chosen_slot.assign(static_cast<size_t>(n), 0);
    auto part_ends_for = [&](int64_t j, int h, jc::PartEnds* storage) {
      *storage = slot_ends_of(j, h);
      return storage;
    };
    // Every chunk, as the one-record sweep below goes (the whole scan's chunk_starts checks them all).
    if (!jc::walk_slots(s, f, t, slots.data(), k, INT64_MAX, opt.sweep ? INT64_MAX : -1, part_ends_for, records.data(),
                        chosen_slot.data(), &out->redone_in_sweep))
      out->flags |= jc::kUnsynced;
    for (int64_t j = 1; j < n; ++j) {
      const int h = chosen_slot[j];
      if (jc::slot_starting_at(&slots[j * k], k, records[j - 1].end) == h)
        out->round_blocks_chosen += last_blocks[j * k + h];
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      jc::PartEnds ends = ends_of(j);
      out->flags |= jc::decode_chunk(s, f, t, j, jc::chunk_guess(s, j), &records[j], &ends);
    }
    run_rounds([&] {
      int64_t redone = 0;
      for (int64_t j = 0; j < n; ++j) {
        jc::PartEnds ends = ends_of(j);
        redone += jc::sync_chunk(s, f, t, j, records[j > 0 ? j - 1 : 0], records[j], &next[j], &ends) ? 1 : 0;
      }
      records.swap(next);
      return redone;
    });
    out->unsynced_before_sweep =
        jc::unsynced_chunks_through(s, records.data(), frame_total_mcus(f) * f.blocks_in_mcu - 1);
    check_lanes(records.data(), 1);
    if (opt.sweep)
      for (int64_t j = 1; j < n; ++j) {
        jc::PartEnds ends = ends_of(j);
        out->redone_in_sweep += jc::sync_chunk(s, f, t, j, records[j - 1], records[j], &records[j], &ends) ? 1 : 0;
      }
  }
  std::vector<jc::ChunkStart> starts(static_cast<size_t>(n + 1));
  const auto [first_row, num_rows] = kept_rows(f, opt.band);
  const auto [first_col, num_cols] = kept_cols(f, opt.band);
  int64_t needed = n;
  if (opt.band) {
    out->flags |= jc::chunk_starts_through(s, f, records.data(), last_block_read(f, true), starts.data(), &needed,
                                           first_block_kept(f, true), &out->strict_from, &out->whole_from);
    while (out->band_first_chunk < needed && starts[out->band_first_chunk + 1].block <= first_block_kept(f, true))
      ++out->band_first_chunk;
    out->cut_short = out->cut_bytes < scan_bytes && jc::window_cut_short(s, starts[needed].bit);
  } else {
    out->flags |= jc::chunk_starts(s, f, records.data(), starts.data());
  }
  // Stage 3 as a GPU's parallel scan would run it (Hillis-Steele: in step d, each record joined with the
  // one d before it) must give chunk_starts' starts.
  std::vector<jc::ChunkRecord> prefix = records, step(static_cast<size_t>(n));
  for (int64_t d = 1; d < n; d *= 2) {
    for (int64_t j = 0; j < n; ++j) step[j] = j >= d ? jc::join_records(prefix[j - d], prefix[j]) : prefix[j];
    prefix.swap(step);
  }
  for (int64_t j = 0; j < n; ++j) {
    const jc::ChunkStart expected = jc::chunk_start_after(starts[0], prefix[j]);
    if (std::memcmp(&expected, &starts[j + 1], sizeof(expected)) != 0) out->flags |= kScanDisagrees;
  }
  int16_t* planes[jc::kMaxComponents] = {nullptr, nullptr, nullptr, nullptr};
  for (int c = 0; c < f.num_components; ++c) {
    out->coef[c].assign(static_cast<size_t>(num_rows * f.mcu_blocks_v[c] * f.blocks_per_row[c] * 64), 0);
    planes[c] = out->coef[c].data();
  }
  // The parts of the chunks needed from strict_from on that the GPU's stage 4 decodes (the last chunk may have fewer
  // parts than the others): with --band, those stage4_part names; else every one.
  const int64_t needed_parts = std::min(needed * parts, fine.num_chunks);
  for (int64_t m = out->strict_from * parts; m < needed_parts; ++m) {
    const int32_t* slot_of = chosen_slot.empty() ? nullptr : chosen_slot.data();
    jc::ChunkStart from, to;
    const bool decoded = jc::stage4_part(f, starts.data(), part_ends.data(), parts, m, slot_of, n, out->whole_from,
                                         first_row, num_rows, first_col, num_cols, &from, &to);
    if (opt.band && !decoded) {
      ++out->parts_skipped;
      continue;
    }
    ++out->parts_decoded;
    const uint32_t flags =
        opt.band ? jc::decode_chunk_rect(fine, f, t, m, from, to, planes, first_row, num_rows, first_col, num_cols)
                 : jc::decode_chunk_blocks(fine, f, t, m, from, to, planes);
    out->flags |= flags;
    out->stage4_flags |= flags;
    out->flagged_chunks += flags != 0 ? 1 : 0;
  }
}

// Per record: one JSON line, with one entry in "runs" per chunk size; a run's coefficients are compared
// with libjpeg's (natural order) where its stage 4 flagged nothing (whatever the other stages said).
void run_chunked(const ChunkedOptions& opt) {
  std::vector<uint8_t> file;
  while (read_record(&file)) {
    Prepared p;
    prepare(file.data(), file.size(), &p);
    std::string line = "{\"core_error\": \"" + json_escape(p.error) + "\"";
    if (p.error.empty()) {
      const jc::Frame& f = p.frame;
      Reference ref;
      reference_coefficients(file.data(), file.size(), f, &ref);
      std::string sampling;
      for (int c = 0; c < f.num_components; ++c)
        sampling += (c ? "," : "") + std::to_string(f.h[c]) + "x" + std::to_string(f.v[c]);
      int64_t blocks = 0;
      for (int c = 0; c < f.num_components; ++c) blocks += jc::plane_coefficients(f, c) / 64;
      line += ", \"width\": " + std::to_string(f.width) + ", \"height\": " + std::to_string(f.height) +
              ", \"sampling\": \"" + sampling + "\", \"restart_interval\": " + std::to_string(p.info.restart_interval) +
              ", \"blocks\": " + std::to_string(blocks) + ", \"ref_coef_error\": \"" + json_escape(ref.coef_error) +
              "\", \"ref_warnings\": " + std::to_string(ref.coef_warnings) + ", \"ref_warning\": \"" +
              json_escape(ref.coef_warning) + "\", \"runs\": [";
      // With --band: libjpeg's warnings while it decodes the pixel rows of the MCU rows up to two before the
      // band's end (it reads ahead at most an iMCU row, which may be two of a grey file's MCU rows): all
      // inside the band's decode, which must flag wherever they are not zero. None where that is no row.
      int band_ref_warnings = 0;
      std::string band_ref_error;
      if (opt.band) {
        const auto [band_first, band_count] = kept_rows(f, true);
        const int64_t through = (band_first + band_count - 2) * 8 * f.max_v;
        if (through > 0)
          reference_warnings_through(file.data(), file.size(), static_cast<int>(std::min<int64_t>(through, f.height)),
                                     &band_ref_warnings, &band_ref_error);
      }
      for (size_t i = 0; i < opt.chunk_bytes.size(); ++i) {
        ChunkedRun run;
        chunked_decode(file.data(), file.size(), p, opt.chunk_bytes[i], opt, &run);
        int64_t compared = 0, mismatches = 0;
        std::string first_mismatch;
        const int64_t first_row = kept_rows(f, opt.band).first;
        const auto [first_col, num_cols] = kept_cols(f, opt.band);
        // Whether block b of component c's plane (whole rows) lies in the columns stored.
        auto stored_block = [&, first_col = first_col, num_cols = num_cols](int c, size_t b) {
          const int64_t mcu_col = static_cast<int64_t>(b % f.blocks_per_row[c]) / f.mcu_blocks_h[c];
          return mcu_col >= first_col && mcu_col < first_col + num_cols;
        };
        int64_t stored = 0;
        for (int c = 0; c < f.num_components; ++c)
          for (size_t b = 0; b * 64 < run.coef[c].size(); ++b) stored += stored_block(c, b) ? 1 : 0;
        for (int c = 0; c < f.num_components && run.stage4_flags == 0 && ref.coef_error.empty(); ++c) {
          const size_t skipped = static_cast<size_t>(first_row * f.mcu_blocks_v[c] * f.blocks_per_row[c]);
          for (size_t b = 0; b * 64 < run.coef[c].size(); ++b) {
            if (!stored_block(c, b)) continue;
            ++compared;
            const int16_t* mine = run.coef[c].data() + b * 64;
            const int16_t* theirs = ref.coef[c].data() + (skipped + b) * 64;
            if (std::memcmp(mine, theirs, 64 * sizeof(int16_t)) == 0 || mismatches++ > 0) continue;
            int k = 0;
            while (mine[k] == theirs[k]) ++k;
            first_mismatch = "component " + std::to_string(c) + " block " + std::to_string(b) + " coef " +
                             std::to_string(k) + ": core " + std::to_string(mine[k]) + " libjpeg " +
                             std::to_string(theirs[k]);
          }
        }
        line += std::string(i ? ", " : "") + "{\"chunk_bytes\": " + std::to_string(run.chunk_bytes) +
                ", \"chunks\": " + std::to_string(run.chunks) + ", \"parts\": " + std::to_string(run.parts) +
                ", \"slots\": " + std::to_string(run.slots) + ", \"guesses\": " + std::to_string(run.guesses) +
                ", \"rounds\": " + std::to_string(run.rounds) +
                ", \"redone_in_rounds\": " + std::to_string(run.redone_in_rounds) +
                ", \"redone_in_sweep\": " + std::to_string(run.redone_in_sweep) +
                ", \"unsynced_before_sweep\": " + std::to_string(run.unsynced_before_sweep) +
                ", \"flags\": " + std::to_string(run.flags) +
                ", \"stage4_flags\": " + std::to_string(run.stage4_flags) +
                ", \"flagged_chunks\": " + std::to_string(run.flagged_chunks) +
                ", \"strict_from\": " + std::to_string(run.strict_from) +
                ", \"whole_from\": " + std::to_string(run.whole_from) +
                ", \"parts_decoded\": " + std::to_string(run.parts_decoded) +
                ", \"parts_skipped\": " + std::to_string(run.parts_skipped) +
                ", \"band_first_chunk\": " + std::to_string(run.band_first_chunk) +
                ", \"cut_bytes\": " + std::to_string(run.cut_bytes) +
                ", \"cut_short\": " + (run.cut_short ? "true" : "false") +
                ", \"lanes_taken\": " + (run.lanes_taken ? "true" : "false") +
                ", \"round_blocks\": " + std::to_string(run.round_blocks) +
                ", \"round_blocks_full\": " + std::to_string(run.round_blocks_full) +
                ", \"round_warp_blocks\": " + std::to_string(run.round_warp_blocks) +
                ", \"round_warp_blocks_full\": " + std::to_string(run.round_warp_blocks_full) +
                ", \"round_blocks_chosen\": " + std::to_string(run.round_blocks_chosen) +
                ", \"repair_blocks\": " + std::to_string(run.repair_blocks) +
                ", \"repair_blocks_full\": " + std::to_string(run.repair_blocks_full) +
                ", \"stored_blocks\": " + std::to_string(stored) +
                ", \"band_ref_warnings\": " + std::to_string(band_ref_warnings) + ", \"band_ref_error\": \"" +
                json_escape(band_ref_error) + "\"" + ", \"coef_compared_blocks\": " + std::to_string(compared) +
                ", \"coef_mismatch_blocks\": " + std::to_string(mismatches) + ", \"first_coef_mismatch\": \"" +
                first_mismatch + "\"}";
      }
      line += "]";
    }
    line += "}\n";
    write_bytes(line.data(), line.size());
    std::fflush(stdout);
  }
}

// ---- Transcoding --------------------------------------------------------------------------------

struct TranscodeOptions {
  int interval = 0, rows = 0;
  bool optimize = false;
  bool hostile = false;
  uint32_t seed = 0;
  bool long_codes = false;
  uint32_t long_seed = 0;
  bool one_table = false;
};

// One Huffman table whose codes are as long as JPEG allows: of `symbols` (shuffled by rng), one gets a
// code of each length 1 to 8, the others 16-bit codes, which all start with eight ones: most codes miss
// the decoder's lookup table, and the data is full of FF bytes (stuffed).
void set_long_code_table(JHUFF_TBL* table, std::vector<UINT8> symbols, std::mt19937* rng) {
  std::shuffle(symbols.begin(), symbols.end(), *rng);
  std::memset(table->bits, 0, sizeof(table->bits));
  for (int length = 1; length <= 8; ++length) table->bits[length] = 1;
  table->bits[16] = static_cast<UINT8>(symbols.size() - 8);  // 2^8 - 1 codes of 16 bits are left
  for (size_t i = 0; i < symbols.size(); ++i) table->huffval[i] = symbols[i];
  table->sent_table = FALSE;
}

// Tables 0 and 1 (DC and AC) with long codes, holding every symbol libjpeg's 8-bit encoder emits; with
// one_table every component uses table 0, so that nothing but the data tells the blocks of an MCU apart.
void set_long_code_tables(j_compress_ptr dst, uint32_t seed, bool one_table) {
  std::mt19937 rng(seed);
  std::vector<UINT8> dc, ac = {0x00, 0xF0};
  for (int size = 0; size <= 11; ++size) dc.push_back(static_cast<UINT8>(size));
  for (int run = 0; run < 16; ++run)
    for (int size = 1; size <= 10; ++size) ac.push_back(static_cast<UINT8>(run << 4 | size));
  for (int i = 0; i < 2; ++i) {
    if (dst->dc_huff_tbl_ptrs[i] == nullptr)
      dst->dc_huff_tbl_ptrs[i] = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
    if (dst->ac_huff_tbl_ptrs[i] == nullptr)
      dst->ac_huff_tbl_ptrs[i] = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
    set_long_code_table(dst->dc_huff_tbl_ptrs[i], dc, &rng);
    set_long_code_table(dst->ac_huff_tbl_ptrs[i], ac, &rng);
  }
  if (one_table) {
    for (int c = 0; c < dst->num_components; ++c) dst->comp_info[c].dc_tbl_no = dst->comp_info[c].ac_tbl_no = 0;
  }
}

void make_hostile(j_decompress_ptr src, jvirt_barray_ptr* arrays, j_compress_ptr dst, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t qmax[] = {8, 255, 65535};
  const uint32_t q_limit = qmax[seed % 3];
  for (int t = 0; t < NUM_QUANT_TBLS; ++t) {
    JQUANT_TBL* q = dst->quant_tbl_ptrs[t];
    if (q == nullptr) continue;
    for (int k = 0; k < 64; ++k) {
      const uint32_t pick = rng() % 16;
      if (q_limit > 255 && pick == 0) q->quantval[k] = 32767;
      else if (q_limit > 255 && pick == 1) q->quantval[k] = 32768;
      else if (q_limit > 255 && pick == 2) q->quantval[k] = 65535;
      else q->quantval[k] = static_cast<UINT16>(1 + rng() % q_limit);
    }
  }
  for (int c = 0; c < src->num_components; ++c) {
    const jpeg_component_info* comp = &src->comp_info[c];
    for (JDIMENSION r = 0; r < comp->height_in_blocks; ++r) {
      JBLOCKARRAY row = (*src->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(src), arrays[c], r, 1, TRUE);
      for (JDIMENSION b = 0; b < comp->width_in_blocks; ++b) {
        const uint32_t kind = rng() % 8;
        if (kind >= 3) continue;  // most blocks stay as they are
        for (int k = 0; k < 64; ++k) {
          // libjpeg's encoder accepts |AC| <= 1023 and DC differences of 11 bits: DC in +-1023.
          const int extreme = (rng() % 2) ? 1023 : -1023;
          if (kind == 0) row[0][b][k] = static_cast<JCOEF>(extreme);  // every coefficient at the limit
          else if (rng() % 3 == 0) row[0][b][k] = static_cast<JCOEF>(static_cast<int>(rng() % 2047) - 1023);
        }
      }
    }
  }
}

void run_transcode(const TranscodeOptions& opt) {
  std::vector<uint8_t> file;
  while (read_record(&file)) {
    jpeg_decompress_struct src;
    jpeg_compress_struct dst;
    ErrorManager src_err, dst_err;
    std::string src_message, dst_message, warning;
    install_errors(&src_err, &src_message, &warning);
    install_errors(&dst_err, &dst_message, &warning);
    src.err = &src_err.pub;
    dst.err = &dst_err.pub;
    unsigned char* out = nullptr;
    unsigned long out_size = 0;
    jpeg_create_decompress(&src);
    jpeg_create_compress(&dst);
    volatile bool ok = false;
    if (setjmp(src_err.jump) == 0 && setjmp(dst_err.jump) == 0) {
      jpeg_mem_src(&src, file.data(), static_cast<unsigned long>(file.size()));
      jpeg_read_header(&src, TRUE);
      jvirt_barray_ptr* arrays = jpeg_read_coefficients(&src);
      jpeg_mem_dest(&dst, &out, &out_size);
      jpeg_copy_critical_parameters(&src, &dst);
      if (opt.rows > 0) dst.restart_in_rows = opt.rows;
      else dst.restart_interval = static_cast<unsigned int>(opt.interval);
      dst.optimize_coding = opt.optimize || opt.hostile ? TRUE : FALSE;
      if (opt.hostile) make_hostile(&src, arrays, &dst, opt.seed);
      if (opt.long_codes) {
        dst.optimize_coding = FALSE;
        set_long_code_tables(&dst, opt.long_seed, opt.one_table);
      }
      jpeg_write_coefficients(&dst, arrays);
      jpeg_finish_compress(&dst);
      jpeg_finish_decompress(&src);
      ok = true;
    }
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    if (ok) write_record(out, out_size);
    else write_record(nullptr, 0);
    std::free(out);
    std::fflush(stdout);
  }
}

// ---- Self-tests of single functions against libjpeg's definitions -------------------------------

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  if (g_failures++ < 20) std::printf("FAIL %s\n", what.c_str());
}

// jdmaster.c prepare_range_limit_table, built the way it builds it; the IDCT reads it at
// sample_range_limit + CENTERJSAMPLE, index x & 1023.
void selftest_range_limit() {
  std::vector<int> table(5 * 256 + 128);
  int* base = table.data() + 256;  // sample_range_limit
  for (int i = -256; i < 0; ++i) base[i] = 0;
  for (int i = 0; i <= 255; ++i) base[i] = i;
  int* post = base + 128;
  for (int i = 128; i < 512; ++i) post[i] = 255;
  for (int i = 512; i < 512 + 384; ++i) post[i] = 0;
  for (int i = 0; i < 128; ++i) post[896 + i] = base[i];
  for (int64_t x = -5000; x <= 5000; ++x)
    expect(jc::idct_range_limit(x) == post[x & 1023], "range limit at " + std::to_string(x));
  const int64_t big[] = {INT32_MAX, INT32_MIN, int64_t{1} << 40, -(int64_t{1} << 40) - 3};
  for (int64_t x : big) expect(jc::idct_range_limit(x) == post[x & 1023], "range limit far out");
}

// jdcolor.c build_ycc_rgb_table and ycc_rgb_convert, in JLONG (64-bit) as libjpeg computes them.
void selftest_color() {
  auto fix = [](double v) { return static_cast<int64_t>(v * 65536.0 + 0.5); };
  int64_t crr[256], cbb[256], crg[256], cbg[256];
  for (int i = 0; i < 256; ++i) {
    const int64_t x = i - 128;
    crr[i] = (fix(1.40200) * x + 32768) >> 16;
    cbb[i] = (fix(1.77200) * x + 32768) >> 16;
    crg[i] = -fix(0.71414) * x;
    cbg[i] = -fix(0.34414) * x + 32768;
  }
  auto limit = [](int64_t v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); };
  int bad = 0;
  for (int y = 0; y < 256; ++y)
    for (int cb = 0; cb < 256; ++cb)
      for (int cr = 0; cr < 256; ++cr) {
        uint8_t rgb[3];
        jc::ycc_to_rgb(y, cb, cr, rgb);
        bad += rgb[0] != limit(y + crr[cr]);
        bad += rgb[1] != limit(y + ((cbg[cb] + crg[cr]) >> 16));
        bad += rgb[2] != limit(y + cbb[cb]);
      }
  expect(bad == 0, "ycc_to_rgb differs from jdcolor.c's tables in " + std::to_string(bad) + " values");
}

// The 32-bit path of the IDCT must equal the 64-bit one wherever it is taken (UBSan, in the
// sanitized build, would also report any overflow in it). Inputs: extremes of the narrow region.
void selftest_idct_paths() {
  std::mt19937 rng(12345);
  const int64_t edges[] = {-32768, -32767, -16384, -1, 0, 1, 16383, 32767};
  int checked = 0;
  for (int iter = 0; iter < 400000; ++iter) {
    int64_t in[8];
    for (int i = 0; i < 8; ++i) {
      const uint32_t pick = rng() % 4;
      in[i] = pick == 0 ? edges[rng() % 8] : static_cast<int64_t>(static_cast<int32_t>(rng() % 65536) - 32768);
    }
    // Pull the pairs the narrow path needs inside int16 often enough.
    if (iter % 2 == 0) {
      in[4] = jc::clamp_int(static_cast<int>(in[4]), static_cast<int>(std::max<int64_t>(-32768 - in[0], in[0] - 32767)),
                            static_cast<int>(std::min<int64_t>(32767 - in[0], in[0] + 32768)));
      in[3] = jc::clamp_int(static_cast<int>(in[3]), static_cast<int>(-32768 - std::min<int64_t>(in[7], 0)),
                            static_cast<int>(32767 - std::max<int64_t>(in[7], 0)));
      in[1] = jc::clamp_int(static_cast<int>(in[1]), static_cast<int>(-32768 - std::min<int64_t>(in[5], 0)),
                            static_cast<int>(32767 - std::max<int64_t>(in[5], 0)));
    }
    if (!jc::islow::narrow_ok(in)) continue;
    ++checked;
    for (int shift : {11, 18}) {
      int64_t narrow[8], wide[8], tmp[8];
      jc::islow::transform_descaled(in, shift, narrow);
      jc::islow::transform<int64_t>(in, tmp);
      for (int i = 0; i < 8; ++i) wide[i] = (tmp[i] + (int64_t{1} << (shift - 1))) >> shift;
      for (int i = 0; i < 8; ++i) expect(narrow[i] == wide[i], "idct narrow/wide differ");
    }
  }
  expect(checked > 100000, "idct path test checked only " + std::to_string(checked));
}

// The same for the reduced IDCTs' steps: wherever step_descaled keeps its 32-bit result, that result
// is the 64-bit one. Inputs of every magnitude up to the int16 extremes, so that 32-bit sums wrap
// (they reach 2.5e9) and results land on both sides of each pass's range.
void selftest_reduced_idct_paths() {
  std::mt19937 rng(4321);
  const int64_t edges[] = {-32768, -32767, -16384, -1, 0, 1, 16383, 32767};
  for (int n : {4, 2}) {
    for (int pass = 1; pass <= 2; ++pass) {
      const int shift = n == 4 ? (pass == 1 ? jc::reduced::kPass1Shift4 : jc::reduced::kPass2Shift4)
                               : (pass == 1 ? jc::reduced::kPass1Shift2 : jc::reduced::kPass2Shift2);
      const int32_t lo = pass == 1 ? -32768 : -512, hi = pass == 1 ? 32767 : 511;
      int kept = 0, wide = 0;
      for (int iter = 0; iter < 100000; ++iter) {
        int64_t in[8];
        const int bits = 4 + static_cast<int>(rng() % 12);  // magnitudes up to 2^4 .. 2^15
        for (int i = 0; i < 8; ++i) {
          in[i] = rng() % 4 == 0 ? edges[rng() % 8] : static_cast<int64_t>(rng() % (2u << bits)) - (int64_t{1} << bits);
          in[i] = std::max<int64_t>(-32768, std::min<int64_t>(32767, in[i]));
          if (!jc::reduced::reads(n, i)) in[i] = 0;
        }
        if (iter % 7 == 0) in[rng() % 8] = static_cast<int64_t>(rng() % 200000) - 100000;  // outside int16
        int64_t got[4], tmp[4];
        const bool narrow = n == 4 ? jc::reduced::step_descaled<4>(in, shift, lo, hi, got)
                                   : jc::reduced::step_descaled<2>(in, shift, lo, hi, got);
        if (n == 4) jc::reduced::transform<4, int64_t>(in, tmp);
        else jc::reduced::transform<2, int64_t>(in, tmp);
        kept += narrow;
        wide += !narrow;
        for (int i = 0; i < n; ++i) {
          const int64_t expected = (tmp[i] + (int64_t{1} << (shift - 1))) >> shift;
          expect(got[i] == expected, "reduced idct " + std::to_string(n) + " pass " + std::to_string(pass) +
                                         (narrow ? " 32-bit" : " 64-bit") + " result differs");
          if (narrow) expect(expected >= lo && expected <= hi, "32-bit result kept out of range");
        }
      }
      expect(kept > 10000 && wide > 10000,
             "reduced idct path test: " + std::to_string(kept) + " kept, " + std::to_string(wide) + " recomputed");
    }
  }
}

void selftest_huffman_tables() {
  jc::HuffTable t;
  uint8_t counts[16] = {0};
  uint8_t symbols[300] = {0};
  counts[0] = 2;  // codes 0 and 1 of length 1: "1" is all ones
  expect(!jc::build_huffman_table(counts, symbols, 300, false, &t), "all-ones code accepted");
  counts[0] = 1;
  counts[1] = 1;  // 0, 10
  expect(jc::build_huffman_table(counts, symbols, 300, false, &t), "valid table refused");
  counts[1] = 2;  // 0, 10, 11: all ones again
  expect(!jc::build_huffman_table(counts, symbols, 300, false, &t), "all-ones code of length 2 accepted");
  for (int i = 0; i < 16; ++i) counts[i] = 0;
  counts[15] = 255;  // 255 codes of 16 bits fit (the last is not all ones)
  expect(jc::build_huffman_table(counts, symbols, 300, false, &t), "255 codes of 16 bits refused");
  counts[14] = 2;
  expect(!jc::build_huffman_table(counts, symbols, 300, false, &t), "more than 256 symbols accepted");
  for (int i = 0; i < 16; ++i) counts[i] = 0;
  counts[2] = 3;
  symbols[1] = 16;
  expect(!jc::build_huffman_table(counts, symbols, 300, true, &t), "DC category 16 accepted");
  expect(jc::build_huffman_table(counts, symbols, 300, false, &t), "AC symbol 16 refused");
  expect(!jc::build_huffman_table(counts, symbols, 2, false, &t), "table with missing symbols accepted");
  for (int i = 0; i < 16; ++i) counts[i] = 0;
  expect(jc::build_huffman_table(counts, symbols, 300, false, &t), "empty table refused");
  const uint8_t data[4] = {0x12, 0x34, 0x56, 0x78};
  jc::BitReader r;
  jc::reader_init(&r, data, data + 4);
  jc::reader_fill(&r);
  expect(jc::decode_symbol(&r, t) == -1, "empty table decoded a symbol");
}

// Each lookup entry (computed on its own, as the GPU decoder's threads compute them) against the
// classic fill: every code of at most kHuffLookBits bits owns the entries its bits start. Random
// tables of every shape the code space allows, full ones included.
void selftest_huffman_lookup() {
  std::mt19937 rng(2024);
  int tables = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    uint8_t counts[16] = {0}, symbols[256];
    for (uint8_t& v : symbols) v = static_cast<uint8_t>(rng());
    // Codes left at each length: one code space, less what shorter codes took (the all-ones code
    // kept out, as libjpeg demands).
    int64_t left = 2, total = 0;
    const int longest = 1 + static_cast<int>(rng() % 16);
    for (int length = 1; length <= longest && total < 256; ++length, left *= 2) {
      const int64_t room = std::min<int64_t>(left - 1, 256 - total);
      const int64_t n = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % (std::min<int64_t>(room, 48) + 1));
      counts[length - 1] = static_cast<uint8_t>(n);
      total += n;
      left -= n;
    }
    jc::HuffTable t;
    if (!jc::build_huffman_table(counts, symbols, 256, false, &t)) {
      expect(false, "a table within the code space refused");
      continue;
    }
    ++tables;
    uint16_t expected[1 << jc::kHuffLookBits] = {0};
    uint32_t code = 0;
    for (int length = 1, k = 0; length <= 16; ++length, code <<= 1) {
      for (int i = 0; i < counts[length - 1]; ++i, ++k, ++code) {
        if (length > jc::kHuffLookBits) continue;
        const uint32_t first = code << (jc::kHuffLookBits - length), n = 1u << (jc::kHuffLookBits - length);
        for (uint32_t j = 0; j < n; ++j) expected[first + j] = static_cast<uint16_t>((length << 8) | symbols[k]);
      }
    }
    for (int i = 0; i < (1 << jc::kHuffLookBits); ++i) {
      if (t.lookup[i] == expected[i]) continue;
      expect(false, "lookup entry " + std::to_string(i) + " differs from its code's");
      break;
    }
    // The step entries: a short code's bits and extra bits, and the coefficients it moves past (its zero run
    // and its value; ZRL 16; EOB and the other (run, 0) symbols to the block's end), scaled and packed as
    // tables.h says; in the first half the same for it and the next code where that one's code lies within the
    // kPairBits bits after the first's code and extra bits and the first is no end of block. Here the second
    // code is found by the classic fill's entries (the lookup expected above, at the bits after the first).
    auto skip_of = [](uint16_t entry, int* used, int* moved) {
      const int symbol = entry & 0xFF, run = symbol >> 4, size = symbol & 15;
      *moved = size != 0 ? run + 1 : run == 15 ? 16 : 64;
      *used = (entry >> 8) + size;
    };
    auto step_of = [](int used, int moved) { return static_cast<uint16_t>((moved * 8 << 5) | used); };
    static_assert(jc::kPairBits == 9 && jc::kStepScale == 8 && jc::kStepUsedBits == 5, "the layout checked here");
    for (int i = 0; i < (2 << jc::kPairBits); ++i) {
      uint16_t want = 0;
      const int bits = i & ((1 << jc::kPairBits) - 1);
      const uint16_t first = expected[bits >> (jc::kPairBits - jc::kHuffLookBits)];
      if (first != 0) {
        int used = 0, moved = 0;
        skip_of(first, &used, &moved);
        const int left = jc::kPairBits - used;
        if (i < (1 << jc::kPairBits) && moved != 64 && left > 0) {
          // The left bits after the first code, then zeros: a code found there no longer than `left` is the second.
          static_assert(jc::kPairBits - 1 <= jc::kHuffLookBits, "the bits after a first code fit a lookup index");
          const uint16_t second =
              expected[(static_cast<uint32_t>(bits) & ((1u << left) - 1)) << (jc::kHuffLookBits - left)];
          if (second != 0 && (second >> 8) <= left) {
            int used2 = 0, moved2 = 0;
            skip_of(second, &used2, &moved2);
            used += used2;
            moved += moved2;
          }
        }
        want = step_of(used, moved);
      }
      if (t.steps[i] == want) continue;
      expect(false, "step entry " + std::to_string(i) + " differs from its codes'");
      break;
    }
    // The same codes as a DC table (its symbols, the extra bits' counts, below 16): in the first half each short
    // code's bits with its extra bits, and the extra bits' count above them; the second half 0.
    uint8_t dc_symbols[256];
    for (int i = 0; i < 256; ++i) dc_symbols[i] = static_cast<uint8_t>(symbols[i] & 15);
    jc::HuffTable dc;
    if (!jc::build_huffman_table(counts, dc_symbols, 256, true, &dc)) {
      expect(false, "a DC table within the code space refused");
      continue;
    }
    for (int i = 0; i < (2 << jc::kPairBits); ++i) {
      uint16_t want = 0;
      const uint16_t code = i < (1 << jc::kPairBits) ? expected[i >> (jc::kPairBits - jc::kHuffLookBits)] : 0;
      if (code != 0) {
        const int size = code & 15;
        want = static_cast<uint16_t>((size << 5) | ((code >> 8) + size));
      }
      if (dc.steps[i] == want) continue;
      expect(false, "DC step entry " + std::to_string(i) + " differs from its code's");
      break;
    }
  }
  expect(tables == 20000, "lookup test built only " + std::to_string(tables) + " tables");
}

void selftest_bit_reader() {
  const uint8_t data[] = {0xAB, 0xFF, 0x00, 0xCD, 0xFF, 0xD3, 0x11};
  jc::BitReader r;
  jc::reader_init(&r, data, data + sizeof(data));
  jc::reader_fill(&r);
  expect(jc::reader_peek(&r, 24) == 0xABFFCD, "stuffing not removed");
  jc::reader_drop(&r, 24);
  expect(!jc::reader_overran(&r) && jc::reader_stopped_early(&r), "marker inside the range not seen");
  expect(jc::reader_unconsumed_bits(&r) == 24, "unconsumed bits past a marker");
  jc::reader_drop(&r, 1);
  expect(jc::reader_overran(&r), "overrun not seen");
  const uint8_t last_ff[] = {0x12, 0xFF};
  jc::reader_init(&r, last_ff, last_ff + 2);
  jc::reader_fill(&r);
  jc::reader_drop(&r, 8);
  expect(!jc::reader_overran(&r) && jc::reader_unconsumed_bits(&r) == 8, "FF ending the range");
  const uint8_t plain[] = {0xAB, 0xCD, 0xEF, 0x12, 0x34};
  jc::reader_init(&r, plain, plain + sizeof(plain));
  jc::reader_fill(&r);
  jc::reader_drop_low(&r, (0x3A0u << 5) | 12u);  // a step entry taking 12 bits
  expect(jc::reader_peek(&r, 16) == 0xDEF1 && jc::reader_unconsumed_bits(&r) == 28, "a step's bits not dropped");
}

// reader_bit_offset against offsets counted byte by byte: random data bytes (00 and FE among them) and
// stuffed FF 00, ending at the end of the range or at a marker, read from a random data byte by random
// drops through both reader_fill and reader_refill, up to the last data bit.
void selftest_bit_offset() {
  std::mt19937 rng(42);
  int wrong = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> at;  // where each data byte lies (a stuffed one: at its FF)
    const int64_t n = 1 + static_cast<int64_t>(rng() % 40);
    for (int64_t i = 0; i < n; ++i) {
      at.push_back(static_cast<int64_t>(bytes.size()));
      const uint32_t kind = rng() % 4;
      if (kind == 0) bytes.insert(bytes.end(), {0xFF, 0x00});
      else bytes.push_back(kind == 1 ? 0x00 : static_cast<uint8_t>(rng() % 255));
    }
    const int64_t data_end = static_cast<int64_t>(bytes.size());
    if (rng() % 2) bytes.insert(bytes.end(), {0xFF, static_cast<uint8_t>(0xD0 + rng() % 8)});
    const int64_t first = static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    const uint8_t* begin = bytes.data() + at[first];
    jc::BitReader r;
    jc::reader_init(&r, begin, bytes.data() + bytes.size());
    const int64_t available = 8 * (n - first);
    for (int64_t consumed = 0;;) {
      if (rng() % 3 == 0) jc::reader_fill(&r);
      else jc::reader_refill(&r);
      const int64_t expected = consumed == available ? 8 * data_end : 8 * at[first + consumed / 8] + consumed % 8;
      wrong += jc::reader_bit_offset(&r, begin, bytes.data()) != expected;
      if (consumed == available) break;
      const int64_t k = std::min<int64_t>({static_cast<int64_t>(1 + rng() % 32), available - consumed, r.bits});
      jc::reader_drop(&r, static_cast<int>(k));
      consumed += k;
    }
  }
  expect(wrong == 0, "reader_bit_offset: " + std::to_string(wrong) + " offsets wrong");
}

// sync_slot's assignment: slots that start at one of the previous chunk's distinct ends keep their records, the
// other ends go in order to the other slots, which decode from there, and the slots left over are cleared.
void selftest_sync_slot() {
  uint8_t data[96];
  for (size_t i = 0; i < sizeof(data); ++i) data[i] = static_cast<uint8_t>(0x10 + i % 0x60);
  jc::ChunkedScan s;
  jc::make_chunked_scan(data, sizeof(data), 0, 16, 0, &s);
  const int hv[3] = {1, 1, 1};
  jc::Frame f;
  jc::make_frame(64, 64, 3, hv, hv, nullptr, &f);
  jc::HuffTable table{};
  const uint8_t counts[16] = {0, 2};
  const uint8_t symbols[2] = {0, 1};
  jc::build_huffman_table(counts, symbols, 2, true, &table);
  jc::SegmentTables t = {{&table, &table, &table, nullptr}, {&table, &table, &table, nullptr}, nullptr};
  auto at = [](int64_t bit, int32_t block) { return jc::SyncPoint{bit, block, 0}; };
  auto slot = [](jc::SyncPoint start, jc::SyncPoint end) {
    jc::ChunkRecord r{};
    r.start = start;
    r.end = end;
    return r;
  };
  const jc::SyncPoint a = at(8 * 20, 0), b = at(8 * 21, 1), c = at(8 * 22 + 3, 2);
  jc::ChunkRecord unused;
  jc::clear_slot(&unused);
  {  // ends A, B (A twice); slot 0 already starts at B; slot 1 takes A; slot 2 is left over and keeps its record
    const jc::ChunkRecord previous[3] = {slot(at(0, 0), a), slot(at(1, 0), b), slot(at(2, 0), a)};
    const jc::ChunkRecord current[3] = {slot(b, at(8 * 40, 0)), slot(at(8 * 30, 0), a), slot(at(8 * 31, 2), c)};
    jc::ChunkRecord out[3];
    const bool decoded[3] = {jc::sync_slot(s, f, t, 1, previous, current, 3, 0, &out[0]),
                             jc::sync_slot(s, f, t, 1, previous, current, 3, 1, &out[1]),
                             jc::sync_slot(s, f, t, 1, previous, current, 3, 2, &out[2])};
    expect(!decoded[0] && jc::same_point(out[0].start, b) && jc::same_point(out[0].end, at(8 * 40, 0)),
           "sync_slot: a slot that starts at an end keeps its record");
    expect(decoded[1] && jc::same_point(out[1].start, a), "sync_slot: the first free slot decodes from the first end");
    expect(!decoded[2] && jc::same_point(out[2].start, current[2].start) && jc::same_point(out[2].end, c),
           "sync_slot: a slot with no end left keeps its record");
    jc::ChunkRecord kept, none;
    expect(!jc::sync_slot(s, f, t, 0, previous, current, 3, 1, &kept) && jc::same_point(kept.start, current[1].start),
           "sync_slot: chunk 0 keeps its slots");
    expect(!jc::sync_slot(s, f, t, 1, previous, current, 3, 3, &none) && !jc::slot_used(none) &&
               !jc::sync_slot(s, f, t, 1, previous, current, 0, 0, &none) && !jc::slot_used(none),
           "sync_slot: no slot h (h past k, or k out of range) gives a cleared slot");
  }
  {  // ends A, B, C (an unused slot between); slot 1 keeps C; the free slots 0 and 3 take A and B; slot 2, in use,
     // keeps its record
    const jc::ChunkRecord previous[4] = {slot(at(0, 0), a), unused, slot(at(1, 0), b), slot(at(2, 0), c)};
    const jc::ChunkRecord current[4] = {unused, slot(c, at(8 * 50, 1)), slot(at(8 * 33, 0), a), unused};
    jc::ChunkRecord out[4];
    bool decoded[4];
    for (int h = 0; h < 4; ++h) decoded[h] = jc::sync_slot(s, f, t, 1, previous, current, 4, h, &out[h]);
    expect(decoded[0] && jc::same_point(out[0].start, a) && !decoded[1] && jc::same_point(out[1].start, c) &&
               !decoded[2] && jc::same_point(out[2].start, current[2].start) && decoded[3] &&
               jc::same_point(out[3].start, b),
           "sync_slot: the ends no slot keeps go to the free slots first, in order");
  }
}

// sync_decode.h's refusals: arguments that name no chunking, no chunk, or a frame the tables and planes
// do not cover are kBadArguments, before anything is read or written.
// A window's first try: window_scan_bytes takes the whole scan where its estimate reaches it (the rows through the
// last, shares of 0.76 and more, degenerate arguments, margins past its end), else 1.25 f + 0.05 of it and the
// margins, more for later rows; window_cut_short holds at the scan's end and within kWindowCutSlack bytes of the
// cut, not before.
void selftest_window_cut() {
  const int64_t scan = 1000000, chunk = 2048, margins = chunk + jc::kMaxBlockBytes + jc::kWindowCutSlack;
  expect(jc::window_scan_bytes(scan, 100, 100, chunk) == scan && jc::window_scan_bytes(scan, 76, 100, chunk) == scan &&
             jc::window_scan_bytes(scan, 5, 0, chunk) == scan && jc::window_scan_bytes(0, 1, 100, chunk) == 0 &&
             jc::window_scan_bytes(2600, 1, 100, chunk) == 2600,
         "window_scan_bytes cut a scan its estimate reaches the end of");
  auto near = [](int64_t a, int64_t b) { return a >= b - 1 && a <= b + 1; };  // the share is a double
  expect(near(jc::window_scan_bytes(scan, 40, 100, chunk), 550000 + margins) &&
             near(jc::window_scan_bytes(scan, 1, 100, chunk), 62500 + margins),
         "window_scan_bytes is not 1.25 f + 0.05 of the scan and the margins");
  int64_t before = 0;
  bool rising = true;
  for (int64_t rows = 1; rows <= 100; ++rows) {
    const int64_t taken = jc::window_scan_bytes(scan, rows, 100, chunk);
    rising = rising && taken >= before && taken <= scan;
    before = taken;
  }
  expect(rising, "window_scan_bytes falls as the rows through the window grow, or passes the scan");
  const uint8_t data[256] = {};
  jc::ChunkedScan s;
  jc::make_chunked_scan(data, 256, 16, 32, 0, &s);
  expect(jc::window_cut_short(s, jc::kScanEnd) && jc::window_cut_short(s, 8 * (256 - jc::kWindowCutSlack) + 8) &&
             !jc::window_cut_short(s, 8 * (256 - jc::kWindowCutSlack)) && !jc::window_cut_short(s, 8 * 16),
         "window_cut_short does not hold exactly within kWindowCutSlack bytes of the cut");
}

// mcus_meet_rect and part_decode_needed against MCU-by-MCU answers, on every MCU range and rectangle of small
// frames (MCU rows of 1 to 6 MCUs, 1 to 5 rows; 4:2:0, six blocks an MCU).
void selftest_part_decode_needed() {
  const int h[3] = {2, 1, 1}, v[3] = {2, 1, 1};
  bool meet_ok = true, needed_ok = true;
  for (int w = 1; w <= 6 && meet_ok && needed_ok; ++w) {
    for (int rows = 1; rows <= 5; ++rows) {
      jc::Frame f;
      jc::make_frame(16 * w, 16 * rows, 3, h, v, nullptr, &f);
      const int64_t total = jc::frame_total_mcus(f), per_mcu = f.blocks_in_mcu;
      for (int64_t r0 = 0; r0 < rows; ++r0)
        for (int64_t nr = 1; r0 + nr <= rows; ++nr)
          for (int64_t c0 = 0; c0 < w; ++c0)
            for (int64_t nc = 1; c0 + nc <= w; ++nc)
              for (int64_t a = 0; a < total; ++a)
                for (int64_t b = a; b < total; ++b) {
                  bool meets = false;
                  for (int64_t m = a; m <= b; ++m) {
                    const int64_t row = m / w, col = m % w;
                    meets = meets || (row >= r0 && row < r0 + nr && col >= c0 && col < c0 + nc);
                  }
                  meet_ok = meet_ok && jc::mcus_meet_rect(f, a, b, r0, nr, c0, nc) == meets;
                  // A part from a block of MCU a to one of MCU b, ending before the scan's last block, in a chunk
                  // before whole_from: decoded where it meets the rectangle; from whole_from on, always.
                  jc::ChunkStart from{}, to{};
                  from.bit = 8;
                  to.bit = 800;
                  from.block = a * per_mcu + 1;
                  to.block = b * per_mcu + 2;
                  const bool last = to.block >= total * per_mcu;
                  needed_ok = needed_ok &&
                              jc::part_decode_needed(f, 3, 4, from, to, r0, nr, c0, nc) == (meets || last) &&
                              jc::part_decode_needed(f, 4, 4, from, to, r0, nr, c0, nc);
                }
    }
  }
  expect(meet_ok, "mcus_meet_rect differs from the MCU-by-MCU answer");
  expect(needed_ok, "part_decode_needed leaves out a part with a block of the rectangle, or keeps one without");
  jc::Frame f;
  jc::make_frame(64, 64, 3, h, v, nullptr, &f);
  jc::ChunkStart from{}, to{};
  from.block = 6;
  to.block = 6;
  to.bit = jc::kScanEnd;
  expect(jc::part_decode_needed(f, 0, 4, from, to, 3, 1, 3, 1), "part_decode_needed leaves out the scan's last part");
  to.bit = 800;
  expect(jc::part_decode_needed(f, 0, 4, from, to, 3, 1, 3, 1), "part_decode_needed leaves out an empty part");
  to.block = jc::frame_total_mcus(f) * f.blocks_in_mcu;  // MCUs 1 to 15, the scan's last block among them
  expect(!jc::mcus_meet_rect(f, 1, 15, 0, 1, 0, 1) && jc::part_decode_needed(f, 0, 4, from, to, 0, 1, 0, 1),
         "part_decode_needed leaves out the part that holds the scan's last block");
}

void selftest_chunk_arguments() {
  const uint8_t data[] = {0xFF, 0xD8, 0x12, 0x34, 0xFF, 0xD9};
  jc::ChunkedScan s;
  expect(!jc::make_chunked_scan(nullptr, 6, 2, 1, 0, &s) && !jc::make_chunked_scan(data, 6, 6, 1, 0, &s) &&
             !jc::make_chunked_scan(data, 6, 2, 0, 0, &s) && !jc::make_chunked_scan(data, 6, 2, 1, 65536, &s) &&
             !jc::make_chunked_scan(data, 6, -1, 1, 0, &s),
         "make_chunked_scan took arguments that name no chunking");
  expect(jc::make_chunked_scan(data, 6, 2, INT64_MAX, 0, &s) && s.num_chunks == 1, "a chunk larger than the file");
  expect(jc::make_chunked_scan(data, 6, 2, 1, 1, &s) && s.num_chunks == 4, "chunks of a byte");
  const int hv[1] = {1};
  jc::Frame f;
  jc::make_frame(8, 8, 1, hv, hv, nullptr, &f);
  jc::HuffTable table{};
  const uint8_t counts[16] = {1};
  const uint8_t symbols[1] = {0};
  jc::build_huffman_table(counts, symbols, 1, true, &table);
  jc::SegmentTables t = {{&table, nullptr, nullptr, nullptr}, {&table, nullptr, nullptr, nullptr}, nullptr};
  jc::ChunkRecord r;
  int16_t plane[64];
  int16_t* planes[jc::kMaxComponents] = {plane, nullptr, nullptr, nullptr};
  jc::ChunkStart starts[5];
  expect(jc::decode_chunk(s, f, t, 4, jc::chunk_guess(s, 0), &r) == jc::kBadArguments &&
             jc::decode_chunk(s, f, t, -1, jc::chunk_guess(s, 0), &r) == jc::kBadArguments &&
             jc::decode_chunk(s, f, t, 0, jc::chunk_guess(s, 0), nullptr) == jc::kBadArguments,
         "decode_chunk on no chunk");
  jc::SegmentTables no_ac = t;
  no_ac.ac[0] = nullptr;
  jc::Frame bad = f;
  bad.mcus_per_row = 0;
  expect(jc::decode_chunk(s, f, no_ac, 0, jc::chunk_guess(s, 0), &r) == jc::kBadArguments &&
             jc::decode_chunk(s, bad, t, 0, jc::chunk_guess(s, 0), &r) == jc::kBadArguments,
         "decode_chunk without a table, or on a frame without MCUs");
  // Stages 1 and 2 name an MCU's tables by 16-bit offsets from the lowest (McuTables): tables further apart
  // are refused, not misread.
  std::vector<jc::HuffTable> far(2 + 0x10000 / sizeof(jc::HuffTable));
  far.front() = far.back() = table;
  jc::SegmentTables apart = {
      {&far.front(), nullptr, nullptr, nullptr}, {&far.back(), nullptr, nullptr, nullptr}, nullptr};
  jc::SegmentTables near = {{&far[1], nullptr, nullptr, nullptr}, {&far.front(), nullptr, nullptr, nullptr}, nullptr};
  expect(jc::decode_chunk(s, f, apart, 0, jc::chunk_guess(s, 0), &r) == jc::kBadArguments &&
             jc::decode_chunk(s, f, near, 0, jc::chunk_guess(s, 0), &r) == 0,
         "decode_chunk with an MCU's tables 64 KB or more apart, and with the AC table below the DC table");
  expect(jc::decode_chunk(s, f, t, 0, jc::chunk_guess(s, 0), &r) == 0 && jc::chunk_starts(s, f, &r, nullptr) != 0,
         "chunk_starts without its output");
  starts[0] = starts[1] = jc::ChunkStart{16, 0, {0, 0, 0, 0}};
  expect(jc::decode_chunk_blocks(s, f, t, 0, starts[0], starts[1], nullptr) == jc::kBadArguments &&
             jc::decode_chunk_blocks(s, bad, t, 0, starts[0], starts[1], planes) == jc::kBadArguments,
         "decode_chunk_blocks without planes, or on a frame without MCUs");
  s.chunk_bytes = 2;  // no longer what make_chunked_scan made: num_chunks disagrees
  expect(jc::decode_chunk(s, f, t, 0, jc::chunk_guess(s, 0), &r) == jc::kBadArguments, "an inconsistent ChunkedScan");
}

// Per record: every segment decoded in zigzag order equals the natural-order decode, permuted.
void selftest_orders(const std::vector<uint8_t>& file) {
  HeaderInfo info;
  std::string why;
  if (!read_header_for_core(file.data(), file.size(), &info, &why)) return;
  jc::Frame f;
  if (!jc::make_frame(info.width, info.height, info.components, info.h, info.v, info.scan_order, &f)) return;
  const int64_t total = jc::frame_total_mcus(f);
  const int64_t per = info.restart_interval > 0 ? info.restart_interval : total;
  const int64_t n = (total + per - 1) / per;
  std::vector<size_t> b(static_cast<size_t>(n)), e(static_cast<size_t>(n));
  const jc::SegmentScan scan = jc::find_segments(file.data(), file.size(), info.scan_start, n, b.data(), e.data());
  jc::CoefOrder natural, zigzag;
  jc::make_natural_order(&natural);
  jc::make_zigzag_order(&zigzag);
  std::vector<int16_t> pn[4], pz[4];
  int16_t* planes_n[4] = {nullptr, nullptr, nullptr, nullptr};
  int16_t* planes_z[4] = {nullptr, nullptr, nullptr, nullptr};
  jc::SegmentTables tn, tz;
  for (int c = 0; c < 4; ++c) {
    tn.dc[c] = tz.dc[c] = &info.dc[c];
    tn.ac[c] = tz.ac[c] = &info.ac[c];
    if (c >= f.num_components) continue;
    pn[c].assign(static_cast<size_t>(jc::plane_coefficients(f, c)), 0);
    pz[c].assign(pn[c].size(), 0);
    planes_n[c] = pn[c].data();
    planes_z[c] = pz[c].data();
  }
  tn.order = &natural;
  tz.order = &zigzag;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) expect(natural.position[jc::zigzag_index(r, c)] == 8 * r + c, "zigzag_index");
  // A null order is zigzag order without the table (what the GPU decoder uses).
  jc::SegmentTables tnull = tz;
  tnull.order = nullptr;
  std::vector<int16_t> p0[4];
  int16_t* planes_0[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int c = 0; c < f.num_components; ++c) {
    p0[c].assign(pz[c].size(), 0);
    planes_0[c] = p0[c].data();
  }
  for (int64_t s = 0; s < scan.found; ++s) {
    const int64_t first = s * per, count = std::min<int64_t>(per, total - first);
    const uint8_t* begin = file.data() + b[static_cast<size_t>(s)];
    const uint8_t* end = file.data() + e[static_cast<size_t>(s)];
    const uint32_t fn = jc::decode_segment(begin, end, f, tn, first, count, planes_n);
    const uint32_t fz = jc::decode_segment(begin, end, f, tz, first, count, planes_z);
    const uint32_t f0 = jc::decode_segment(begin, end, f, tnull, first, count, planes_0);
    expect(fn == fz && fz == f0, "flags depend on the order");
  }
  for (int c = 0; c < f.num_components; ++c) expect(p0[c] == pz[c], "null order differs from zigzag order");
  for (int c = 0; c < f.num_components; ++c)
    for (size_t blk = 0; blk < pn[c].size() / 64; ++blk)
      for (int k = 0; k < 64; ++k)
        expect(pz[c][blk * 64 + k] == pn[c][blk * 64 + natural.position[k]], "zigzag order differs");

  // Keeping only a band of MCU rows (what the GPU decoder does for a window): every segment that
  // touches the band gives the same flags, and the band's blocks equal the full decode's.
  const int64_t first_row = f.mcu_rows / 3, num_rows = std::max<int64_t>(1, f.mcu_rows / 3);
  std::vector<int16_t> band[4];
  int16_t* planes_b[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int c = 0; c < f.num_components; ++c) {
    band[c].assign(static_cast<size_t>(num_rows * f.mcu_blocks_v[c] * f.blocks_per_row[c] * 64), 0);
    planes_b[c] = band[c].data();
  }
  int16_t scratch[64];
  for (int64_t s = 0; s < scan.found; ++s) {
    const int64_t first = s * per, count = std::min<int64_t>(per, total - first);
    const int64_t row_a = first / f.mcus_per_row, row_b = (first + count - 1) / f.mcus_per_row;
    if (row_b < first_row || row_a >= first_row + num_rows) continue;
    const uint8_t* begin = file.data() + b[static_cast<size_t>(s)];
    const uint8_t* end = file.data() + e[static_cast<size_t>(s)];
    const uint32_t fb =
        jc::decode_segment_rows(begin, end, f, tn, first, count, planes_b, first_row, num_rows, scratch);
    const uint32_t fn = jc::decode_segment(begin, end, f, tn, first, count, planes_n);
    expect(fb == fn, "flags depend on the rows kept");
  }
  for (int c = 0; c < f.num_components; ++c) {
    const size_t offset = static_cast<size_t>(first_row * f.mcu_blocks_v[c] * f.blocks_per_row[c] * 64);
    for (size_t i = 0; i < band[c].size(); ++i)
      expect(band[c][i] == pn[c][offset + i], "rows kept differ from the full decode");
  }
}

// One geometry question for libjpeg: a frame's factors and size at one scale, and its answers.
struct GeometryCase {
  int components, h[3], v[3], width, height, scale;
  int out_width, out_height, idct_size[3], sample_width[3], sample_height[3];
};

// libjpeg's answers: jpeg_calc_output_dimensions on the header of `data` with each case's size,
// factors and scale written into it. False after a libjpeg error (its message in *message).
bool libjpeg_geometry(const uint8_t* data, size_t size, GeometryCase* cases, size_t count, std::string* message,
                      std::string* warning) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install_errors(&err, message, warning);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  for (size_t i = 0; i < count; ++i) {
    GeometryCase& g = cases[i];
    if (g.components != cinfo.num_components) continue;
    cinfo.image_width = static_cast<JDIMENSION>(g.width);
    cinfo.image_height = static_cast<JDIMENSION>(g.height);
    cinfo.max_h_samp_factor = cinfo.max_v_samp_factor = 1;
    for (int c = 0; c < g.components; ++c) {
      cinfo.comp_info[c].h_samp_factor = g.h[c];
      cinfo.comp_info[c].v_samp_factor = g.v[c];
      cinfo.max_h_samp_factor = std::max(cinfo.max_h_samp_factor, g.h[c]);
      cinfo.max_v_samp_factor = std::max(cinfo.max_v_samp_factor, g.v[c]);
    }
    cinfo.scale_num = static_cast<unsigned int>(g.scale);
    cinfo.scale_denom = 8;
    jpeg_calc_output_dimensions(&cinfo);
    g.out_width = static_cast<int>(cinfo.output_width);
    g.out_height = static_cast<int>(cinfo.output_height);
    for (int c = 0; c < g.components; ++c) {
#if JPEG_LIB_VERSION >= 70
      g.idct_size[c] = cinfo.comp_info[c].DCT_h_scaled_size;
#else
      g.idct_size[c] = cinfo.comp_info[c].DCT_scaled_size;
#endif
      g.sample_width[c] = static_cast<int>(cinfo.comp_info[c].downsampled_width);
      g.sample_height[c] = static_cast<int>(cinfo.comp_info[c].downsampled_height);
    }
  }
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// For the first record of each number of components: make_scaling's output size, IDCT sizes and real
// sample sizes equal libjpeg's (jpeg_calc_output_dimensions) for every combination of sampling
// factors 1..4 that make_frame accepts, at every scale and several sizes; and at 8/8 they are the
// Frame's own, with the upsampling choose_upsample gives at full size.
void selftest_scaling(const std::vector<uint8_t>& file) {
  static bool done[4] = {false, false, false, false};
  HeaderInfo info;
  std::string why;
  if (!read_header_for_core(file.data(), file.size(), &info, &why) || info.components > 3) return;
  if (done[info.components]) return;
  done[info.components] = true;
  const int sizes[][2] = {{1, 1}, {1, 37}, {29, 1}, {3, 17}, {17, 33}, {375, 500}, {65535, 7}};
  std::vector<GeometryCase> cases;
  const int n = info.components;
  const int combos = 1 << (4 * n);  // 2 bits per factor
  for (int combo = 0; combo < combos; ++combo) {
    GeometryCase g{};
    g.components = n;
    for (int c = 0; c < n; ++c) {
      g.h[c] = 1 + ((combo >> (4 * c)) & 3);
      g.v[c] = 1 + ((combo >> (4 * c + 2)) & 3);
    }
    for (const auto& hw : sizes) {
      for (int scale : {1, 2, 4, 8}) {
        g.height = hw[0];
        g.width = hw[1];
        g.scale = scale;
        cases.push_back(g);
      }
    }
  }
  std::string message, warning;
  if (!libjpeg_geometry(file.data(), file.size(), cases.data(), cases.size(), &message, &warning)) {
    expect(false, "libjpeg_geometry: " + message);
    return;
  }
  int compared = 0;
  for (const GeometryCase& g : cases) {
    jc::Frame f;
    if (!jc::make_frame(g.width, g.height, g.components, g.h, g.v, nullptr, &f)) continue;
    jc::Scaling sc;
    expect(jc::make_scaling(f, g.scale, &sc), "make_scaling refused a valid scale");
    const std::string mine =
        geometry_string(sc.width, sc.height, g.components, sc.idct_size, sc.sample_width, sc.sample_height);
    const std::string theirs =
        geometry_string(g.out_width, g.out_height, g.components, g.idct_size, g.sample_width, g.sample_height);
    std::string factors;
    for (int c = 0; c < g.components; ++c) factors += std::to_string(g.h[c]) + "x" + std::to_string(g.v[c]) + " ";
    expect(mine == theirs, "geometry of " + factors + std::to_string(g.width) + "x" + std::to_string(g.height) +
                               " at " + std::to_string(g.scale) + "/8: core " + mine + ", libjpeg " + theirs);
    ++compared;
    if (g.scale != 8) continue;
    for (int c = 0; c < g.components; ++c) {
      const int method =
          g.components == 1 ? jc::kUpsampleFull : jc::choose_upsample(f.h_ratio[c], f.v_ratio[c], f.sample_width[c]);
      expect(sc.sample_width[c] == f.sample_width[c] && sc.sample_height[c] == f.sample_height[c] &&
                 sc.upsample[c] == method && sc.idct_size[c] == 8,
             "8/8 scaling differs from the frame's geometry");
    }
  }
  expect(compared > 0, "no scaling case compared");
  jc::Scaling unused;
  jc::Frame f;
  const int one[1] = {1};
  jc::make_frame(8, 8, 1, one, one, nullptr, &f);
  for (int scale : {0, 3, 5, 6, 7, 9, 16})
    expect(!jc::make_scaling(f, scale, &unused), "make_scaling took a bad scale");
}

void run_selftest() {
  selftest_range_limit();
  selftest_color();
  selftest_idct_paths();
  selftest_reduced_idct_paths();
  selftest_huffman_tables();
  selftest_huffman_lookup();
  selftest_bit_reader();
  selftest_bit_offset();
  selftest_chunk_arguments();
  selftest_window_cut();
  selftest_part_decode_needed();
  selftest_sync_slot();
  std::vector<uint8_t> file;
  int files = 0;
  while (read_record(&file)) {
    selftest_orders(file);
    selftest_scaling(file);
    ++files;
  }
  std::printf("{\"failures\": %d, \"files\": %d}\n", g_failures, files);
}

int usage() {
  std::fprintf(stderr,
               "usage: jpeg_core_harness check | dump [--gray-output] [--scale 1|2|4|8] | selftest | "
               "chunked [--chunk N[,N...]] [--rounds N] [--no-sweep] [--band [--cut N]] [--parts P] [--slots K] "
               "[--guesses G] [--walk-budget B] | "
               "transcode [--interval N | --rows N] [--optimize] [--hostile SEED] [--long-codes SEED [--one-table]]"
               "  (records on stdin)\n");
  return 2;
}

}  // namespace

#ifndef JPEG_CORE_HARNESS_NO_MAIN
int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string command = argv[1];
  if (command == "check" || command == "dump") {
    bool gray_output = false;
    int scale = 8;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--gray-output") {
        gray_output = true;
      } else if (a == "--scale" && i + 1 < argc) {
        scale = std::atoi(argv[++i]);
        if (!jc::valid_scale(scale)) return usage();
      } else {
        return usage();
      }
    }
    run_check(command == "dump", gray_output, scale);
    return 0;
  }
  if (command == "chunked") {
    ChunkedOptions opt;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--chunk" && i + 1 < argc) {
        opt.chunk_bytes.clear();
        for (const char* c = argv[++i]; *c != '\0';) {
          char* end = nullptr;
          const long long bytes = std::strtoll(c, &end, 10);
          if (end == c || bytes < 1) return usage();
          opt.chunk_bytes.push_back(bytes);
          c = *end == ',' ? end + 1 : end;
        }
      } else if (a == "--rounds" && i + 1 < argc) {
        opt.rounds = std::atoll(argv[++i]);
      } else if (a == "--no-sweep") {
        opt.sweep = false;
      } else if (a == "--band") {
        opt.band = true;
      } else if (a == "--cut" && i + 1 < argc) {
        opt.cut = std::atoll(argv[++i]);
        if (opt.cut < 0) return usage();
      } else if (a == "--slots" && i + 1 < argc) {
        opt.slots = std::atoi(argv[++i]);
        if (opt.slots < -1 || opt.slots > jc::kMaxSlots) return usage();
      } else if (a == "--parts" && i + 1 < argc) {
        opt.parts = std::atoll(argv[++i]);
        if (opt.parts < 1) return usage();
      } else if (a == "--guesses" && i + 1 < argc) {
        opt.guesses = std::atoi(argv[++i]);
        if (opt.guesses < 0) return usage();
      } else if (a == "--walk-budget" && i + 1 < argc) {
        opt.walk_budget = std::atoll(argv[++i]);
        if (opt.walk_budget < 0) return usage();
      } else {
        return usage();
      }
    }
    run_chunked(opt);
    return 0;
  }
  if (command == "selftest") {
    run_selftest();
    return 0;
  }
  if (command == "transcode") {
    TranscodeOptions opt;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--optimize") opt.optimize = true;
      else if (a == "--interval" && i + 1 < argc) opt.interval = std::atoi(argv[++i]);
      else if (a == "--rows" && i + 1 < argc) opt.rows = std::atoi(argv[++i]);
      else if (a == "--hostile" && i + 1 < argc) {
        opt.hostile = true;
        opt.seed = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
      } else if (a == "--long-codes" && i + 1 < argc) {
        opt.long_codes = true;
        opt.long_seed = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
      } else if (a == "--one-table") {
        opt.one_table = true;
      } else {
        return usage();
      }
    }
    run_transcode(opt);
    return 0;
  }
  return usage();
}
#endif  // JPEG_CORE_HARNESS_NO_MAIN
