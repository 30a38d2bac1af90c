// Differential fuzzing of our entropy decoder against libjpeg's own, under ASan and UBSan.
//
// Built by run_sanitized.sh from custom_op/csrc/cpu's sources (no torch: decode_cpu.cpp needs torch,
// so its decode_window sequence is restated here). For each input and its seeded mutations, random
// windows are decoded at scales 1..8 and 16 of 8, in each colour space the file allows, twice: with
// our entropy decoder on, then off. Both must end alike: same success or failure, same message,
// same warnings, same pixels (pixels only after a success: a failed decode's rows are thrown away).
// A third decode, by libjpeg alone (no sub-image), checks the random-access path too: where it
// decodes the window without a warning, the first must give the same pixels and no warning either.
// And the whole-scan walk of the GPU path's check must fail every input that libjpeg, decoding the
// whole image, warns about or refuses.
// The sanitizers catch what the comparisons cannot (a read one byte past the caller's buffer gives
// the same pixels); every input is copied into a heap block of exactly its size so that such a read
// lands in ASan's red zone.
//
// A mismatch prints a line starting with MISMATCH, writes the input under --artifacts and exits 1.
// A sanitizer report or a hang (--timeout per input) writes the input there too before the process
// dies. Replay a saved input with the same --seed and --mutants 0: its windows come from the seed
// and its bytes, so they are the ones that failed.
//
// libjpeg-turbo itself is the system's, not instrumented: reads it makes past a buffer go unseen.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define HAVE_SANITIZER_INTERFACE 1
#endif
#endif

#include "entropy_decoder.h"
#include "libjpeg_session.h"
#include "restart_index.h"
#include "window.h"

namespace {

using custom_op::FastPath;
using custom_op::JpegSession;
using custom_op::Region;
using custom_op::WarningPolicy;

using Bytes = std::vector<uint8_t>;

// The decompression-bomb guard decode_cpu.cpp applies (max_pixels); mutated headers declare anything.
constexpr int64_t kMaxPixels = int64_t{1} << 22;
// A window's output is held twice per case; keep mutated giants from costing seconds each.
constexpr int64_t kMaxWindowPixels = int64_t{1} << 20;

const unsigned int kScales[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};

// ---- What a crash or hang leaves behind -------------------------------------------------------------

// The input being decoded, for the death callback and the alarm handler: both may only write it out.
const uint8_t* g_current = nullptr;
size_t g_current_size = 0;
char g_crash_path[4096] = "";
char g_hang_path[4096] = "";

void write_current(const char* path) {
  if (path[0] == '\0' || g_current == nullptr) return;
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < g_current_size) {
    const ssize_t n = write(fd, g_current + done, g_current_size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

void on_sanitizer_death() {
  write_current(g_crash_path);
  static const char note[] = "sanitized_decode: the input being decoded was written to the crash artifact\n";
  (void)!write(2, note, sizeof(note) - 1);
}

void on_alarm(int) {
  write_current(g_hang_path);
  static const char note[] =
      "sanitized_decode: HANG: one input took longer than --timeout; written to the hang artifact\n";
  (void)!write(2, note, sizeof(note) - 1);
  _exit(3);
}

// ---- One decode, as decode_cpu.cpp's decode_and_crop does it -------------------------------------

struct Case {
  unsigned int scale_num;
  J_COLOR_SPACE space;
  WarningPolicy policy;
  bool save_app1;  // read EXIF and apply its orientation, as apply_exif_orientation=True does
  uint32_t r[5];   // chooses the window once the scaled size is known
};

struct Outcome {
  // Which step ended it; only a finished decode (kDecoded) or a failed one (kFailed) reached the
  // entropy-coded data.
  enum Stage { kHeaderFailed, kScaleFailed, kTooLarge, kDecoded, kFailed } stage;
  std::string message;
  int warnings = 0;
  std::string first_warning;
  Region region{0, 0, 0, 0};
  Bytes pixels;
};

const char* stage_name(Outcome::Stage s) {
  switch (s) {
    case Outcome::kHeaderFailed: return "header failed";
    case Outcome::kScaleFailed: return "scale failed";
    case Outcome::kTooLarge: return "too large";
    case Outcome::kDecoded: return "decoded";
    case Outcome::kFailed: return "decode failed";
  }
  return "?";
}

const char* space_name(J_COLOR_SPACE s) {
  switch (s) {
    case JCS_RGB: return "RGB";
    case JCS_GRAYSCALE: return "GRAY";
    case JCS_CMYK: return "CMYK";
    default: return "other";
  }
}

int components_of(J_COLOR_SPACE s) { return s == JCS_CMYK ? 4 : s == JCS_GRAYSCALE ? 1 : 3; }

// The displayed-frame window a case asks for, in an image of h x w: mostly random, sometimes the
// shapes that reach the edges (the whole image, the last rows, the last columns, one pixel).
void choose_window(const Case& c, int64_t h, int64_t w, int64_t* top, int64_t* left, int64_t* height, int64_t* width) {
  switch (c.r[4] % 8) {
    case 0:  // the whole image (decode_jpeg)
      *top = 0, *left = 0, *height = h, *width = w;
      break;
    case 1:  // the bottom rows, where the data ends
      *height = 1 + c.r[0] % std::min<int64_t>(h, 48);
      *top = h - *height;
      *left = c.r[1] % w;
      *width = 1 + c.r[2] % (w - *left);
      break;
    case 2:  // the right columns
      *width = 1 + c.r[0] % std::min<int64_t>(w, 48);
      *left = w - *width;
      *top = c.r[1] % h;
      *height = 1 + c.r[2] % (h - *top);
      break;
    case 3:  // one pixel
      *top = c.r[0] % h, *left = c.r[1] % w, *height = 1, *width = 1;
      break;
    default:
      *top = c.r[0] % h;
      *left = c.r[1] % w;
      *height = 1 + c.r[2] % (h - *top);
      *width = 1 + c.r[3] % (w - *left);
  }
  // Keep the window affordable, trimming its far edges (a whole giant image stays its top-left part).
  while (*height * *width > kMaxWindowPixels) {
    if (*height > *width) *height = (*height + 1) / 2;
    else *width = (*width + 1) / 2;
  }
}

struct RowSink {
  uint8_t* out;
  size_t row_bytes;
  void operator()(const uint8_t* src, int r) const {
    std::memcpy(out + static_cast<size_t>(r) * row_bytes, src, row_bytes);
  }
};

// With fast_paths false: libjpeg alone (our decoder off, no sub-image), the reference.
Outcome decode_once(const Bytes& input, const Case& c, bool own_entropy, bool fast_paths = true) {
  custom_op::set_own_entropy_decoder(own_entropy);
  // Exactly the input's size on the heap: one byte read past the end is an ASan report.
  std::unique_ptr<uint8_t[]> data(new uint8_t[input.size()]);
  if (!input.empty()) std::memcpy(data.get(), input.data(), input.size());

  Outcome o;
  JpegSession session(c.policy);
  auto finish = [&](Outcome::Stage stage) {
    o.stage = stage;
    if (stage != Outcome::kDecoded && stage != Outcome::kTooLarge) o.message = session.error_message();
    o.warnings = session.num_warnings();
    if (o.warnings > 0) o.first_warning = session.first_warning();
    return o;
  };
  if (!session.read_header(data.get(), input.size(), c.save_app1)) return finish(Outcome::kHeaderFailed);
  if (!session.set_scale(c.scale_num)) return finish(Outcome::kScaleFailed);
  const int orientation = c.save_app1 ? session.exif_orientation() : 1;
  const jpeg_decompress_struct& cinfo = session.cinfo;
  if (int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > kMaxPixels) return finish(Outcome::kTooLarge);
  const int64_t stored_h = cinfo.output_height, stored_w = cinfo.output_width;
  if (stored_h < 1 || stored_w < 1) return finish(Outcome::kTooLarge);
  const bool swap = custom_op::swaps_axes(orientation);
  int64_t top, left, height, width;
  choose_window(c, swap ? stored_w : stored_h, swap ? stored_h : stored_w, &top, &left, &height, &width);
  const Region region = custom_op::stored_region(orientation, static_cast<int>(stored_h), static_cast<int>(stored_w),
                                                 static_cast<int>(top), static_cast<int>(left),
                                                 static_cast<int>(height), static_cast<int>(width));
  o.region = region;
  const size_t row_bytes = static_cast<size_t>(region.width) * components_of(c.space);
  // Rows the decode does not write keep this pattern (compared only after a successful decode).
  o.pixels.assign(row_bytes * static_cast<size_t>(region.height), 0xA5);
  RowSink sink{o.pixels.data(), row_bytes};

  // decode_window's sequence: random access, else the session's own decode.
  const FastPath fast =
      fast_paths ? custom_op::decode_region_random_access(session, c.space, region, sink) : FastPath::kNotApplicable;
  const bool ok =
      fast == FastPath::kNotApplicable ? session.decode_region(c.space, region, sink) : fast == FastPath::kDecoded;
  return finish(ok ? Outcome::kDecoded : Outcome::kFailed);
}

// What the GPU path's check (check_entropy=True) finds in the input: libjpeg's header read and our
// walk over the whole scan, on a copy of exactly the input's size.
custom_op::ScanWalk walk_once(const Bytes& input) {
  std::unique_ptr<uint8_t[]> data(new uint8_t[input.size()]);
  if (!input.empty()) std::memcpy(data.get(), input.data(), input.size());
  JpegSession session(WarningPolicy::kRaise);
  if (!session.read_header(data.get(), input.size(), /*save_app1=*/false)) return custom_op::ScanWalk::kRefused;
  return session.walk_scan();
}

// ---- Mutations --------------------------------------------------------------------------------------

// Offset of the first byte after the first SOS segment (the entropy-coded data), or 0 when the
// markers before it do not parse.
size_t scan_start(const Bytes& d) {
  size_t p = 2;
  while (p + 4 <= d.size()) {
    if (d[p] != 0xFF) return 0;
    const uint8_t code = d[p + 1];
    if (code == 0xFF) {
      ++p;
      continue;
    }
    const size_t length = (size_t{d[p + 2]} << 8) | d[p + 3];
    if (code == 0xDA) return std::min(d.size(), p + 2 + length);
    p += 2 + length;
  }
  return 0;
}

std::vector<size_t> restart_markers(const Bytes& d, size_t from) {
  std::vector<size_t> at;
  for (size_t p = from; p + 1 < d.size(); ++p)
    if (d[p] == 0xFF && d[p + 1] >= 0xD0 && d[p + 1] <= 0xD7) at.push_back(p);
  return at;
}

using Rng = std::mt19937_64;

size_t pick(Rng& rng, size_t lo, size_t hi) {  // in [lo, hi]
  return lo + static_cast<size_t>(rng() % (hi - lo + 1));
}

// A position in the entropy-coded data mostly, sometimes anywhere (headers matter too).
size_t position(Rng& rng, const Bytes& d, size_t scan) {
  if (d.empty()) return 0;
  if (scan > 0 && scan < d.size() && rng() % 8 != 0) return pick(rng, scan, d.size() - 1);
  return pick(rng, 0, d.size() - 1);
}

const char* mutate_once(Rng& rng, Bytes& d) {
  const size_t scan = scan_start(d);
  switch (rng() % 15) {
    case 0: {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips && !d.empty(); ++i)
        d[position(rng, d, scan)] ^= static_cast<uint8_t>(1u << (rng() % 8));
      return "bit flips";
    }
    case 1:
      if (!d.empty()) d.resize(position(rng, d, scan));
      return "truncation";
    case 2:
      // The last bytes: EOI, the final partial byte, the last restart segment.
      if (d.size() > 1) d.resize(d.size() - std::min<size_t>(d.size() - 1, 1 + rng() % 24));
      return "truncation near the end";
    case 3: {
      const size_t at = position(rng, d, scan);
      const uint8_t marker[2] = {0xFF, static_cast<uint8_t>(0xD0 + rng() % 8)};
      d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), marker, marker + 2);
      return "inserted RST";
    }
    case 4: {
      const std::vector<size_t> rst = restart_markers(d, scan);
      if (rst.empty()) return "remove RST (none)";
      const size_t at = rst[rng() % rst.size()];
      d.erase(d.begin() + static_cast<std::ptrdiff_t>(at), d.begin() + static_cast<std::ptrdiff_t>(at) + 2);
      return "removed RST";
    }
    case 5: {
      const std::vector<size_t> rst = restart_markers(d, scan);
      if (rst.empty()) return "renumber RST (none)";
      d[rst[rng() % rst.size()] + 1] = static_cast<uint8_t>(0xD0 + rng() % 8);
      return "renumbered RST";
    }
    case 6: {
      // A restart marker moved by a few bytes: the segment before it ends early or late.
      const std::vector<size_t> rst = restart_markers(d, scan);
      if (rst.empty()) return "move RST (none)";
      const size_t at = rst[rng() % rst.size()];
      const uint8_t code = d[at + 1];
      d.erase(d.begin() + static_cast<std::ptrdiff_t>(at), d.begin() + static_cast<std::ptrdiff_t>(at) + 2);
      const int64_t shift = static_cast<int64_t>(rng() % 9) - 4;
      const int64_t to = std::clamp<int64_t>(static_cast<int64_t>(at) + shift, 0, static_cast<int64_t>(d.size()));
      const uint8_t marker[2] = {0xFF, code};
      d.insert(d.begin() + to, marker, marker + 2);
      return "moved RST";
    }
    case 7: {
      const size_t at = position(rng, d, scan);
      const uint8_t pair[2] = {0xFF, static_cast<uint8_t>(rng() % 2 ? 0x00 : 0xFF)};
      d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), pair, pair + 2);
      return "inserted FF 00 / FF FF";
    }
    case 8: {
      if (d.size() < 2) return "swap (too short)";
      const size_t a = position(rng, d, scan);
      const size_t b = rng() % 2 ? std::min(d.size() - 1, a + 1) : position(rng, d, scan);
      std::swap(d[a], d[b]);
      return "swapped bytes";
    }
    case 9: {
      const size_t at = position(rng, d, scan);
      const size_t n = std::min(d.size() - at, 1 + static_cast<size_t>(rng() % 64));
      for (size_t i = 0; i < n; ++i) d[at + i] = static_cast<uint8_t>(rng());
      return "garbage after SOS";
    }
    case 10: {
      // Any marker, not only restarts, inside the data (EOI, DNL, an APPn).
      const size_t at = position(rng, d, scan);
      const uint8_t codes[] = {0xD9, 0xDC, 0xE0, 0xC4, 0xDA, 0x01, 0xD8};
      const uint8_t marker[2] = {0xFF, codes[rng() % sizeof(codes)]};
      d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), marker, marker + 2);
      return "inserted other marker";
    }
    case 11: {
      if (d.empty()) return "delete (empty)";
      const size_t at = position(rng, d, scan);
      const size_t n = std::min(d.size() - at, 1 + static_cast<size_t>(rng() % 16));
      d.erase(d.begin() + static_cast<std::ptrdiff_t>(at), d.begin() + static_cast<std::ptrdiff_t>(at + n));
      return "deleted bytes";
    }
    case 13: {
      // A run of FF fill bytes, then 00 (one FF data byte to libjpeg) or a marker code.
      const size_t at = position(rng, d, scan);
      Bytes run(1 + rng() % 48, 0xFF);
      run.push_back(rng() % 2 ? 0x00 : static_cast<uint8_t>(0xD0 + rng() % 10));
      d.insert(d.begin() + static_cast<std::ptrdiff_t>(at), run.begin(), run.end());
      return "inserted FF run";
    }
    case 14: {
      // A new ending in place of the last bytes (EOI among them): data, stuffing, fill bytes, markers
      // within the few bytes libjpeg reads ahead of what it decodes.
      d.resize(d.size() - std::min(d.size(), static_cast<size_t>(rng() % 40)));
      const int pieces = static_cast<int>(rng() % 4);
      for (int i = 0; i < pieces; ++i) {
        // clang-format off
        switch (rng() % 5) {
          case 0: d.insert(d.end(), 1 + rng() % 12, static_cast<uint8_t>(rng() % 255)); break;
          case 1: d.insert(d.end(), {0xFF, 0x00}); break;
          case 2: d.insert(d.end(), 1 + rng() % 40, 0xFF); d.push_back(0x00); break;
          case 3: d.insert(d.end(), {0xFF, static_cast<uint8_t>(0xD0 + rng() % 10)}); break;
          default: d.push_back(0xFF); break;
        }
        // clang-format on
      }
      return "new ending";
    }
    default: {
      // A byte set to an extreme: FF (a marker or a stuffing start), 00, or a random value.
      if (d.empty()) return "set byte (empty)";
      const uint8_t values[] = {0xFF, 0x00, static_cast<uint8_t>(rng())};
      d[position(rng, d, scan)] = values[rng() % 3];
      return "set byte";
    }
  }
}

// Whether the entropy-coded data holds FF FF .. FF 00 (see check_input).
bool has_filled_data_byte(const Bytes& d) {
  const size_t scan = scan_start(d);
  for (size_t p = scan == 0 ? 2 : scan; p + 2 < d.size(); ++p) {
    if (d[p] != 0xFF || d[p + 1] != 0xFF) continue;
    size_t q = p + 1;
    while (q < d.size() && d[q] == 0xFF) ++q;
    if (q < d.size() && d[q] == 0x00) return true;
    p = q;
  }
  return false;
}

// ---- Comparison -------------------------------------------------------------------------------------

struct Stats {
  int64_t inputs = 0, mutants = 0, cases = 0, decoded = 0, failed = 0, with_warnings = 0, header_failed = 0;
  int64_t compared_bytes = 0;
};

std::string describe(const Outcome& o) {
  char line[1024];
  std::snprintf(line, sizeof(line), "%s, %d warning(s)%s%s%s%s", stage_name(o.stage), o.warnings,
                o.first_warning.empty() ? "" : " (first: ", o.first_warning.c_str(), o.first_warning.empty() ? "" : ")",
                o.message.empty() ? "" : (", message: " + o.message).c_str());
  return line;
}

// The first difference between the two outcomes, or "" when they agree.
std::string difference(const Outcome& on, const Outcome& off) {
  if (on.stage != off.stage) return "outcome";
  if (on.message != off.message) return "error message";
  if (on.warnings != off.warnings) return "warning count";
  if (on.first_warning != off.first_warning) return "first warning";
  if (on.pixels.size() != off.pixels.size()) return "window size";
  // A failed decode's rows are thrown away (the op raises), and they may differ: our decoder may have
  // handed over rows before giving up that libjpeg's redo fails before reaching.
  if (on.stage != Outcome::kDecoded) return "";
  if (on.pixels != off.pixels) {
    size_t i = 0;
    while (on.pixels[i] == off.pixels[i]) ++i;
    return "pixels (first at byte " + std::to_string(i) + " of " + std::to_string(on.pixels.size()) + ")";
  }
  return "";
}

uint64_t fnv1a(const Bytes& d) {
  uint64_t h = 1469598103934665603ULL;
  for (uint8_t b : d) h = (h ^ b) * 1099511628211ULL;
  return h;
}

struct Options {
  uint64_t seed = 1;
  int mutants = 50;    // per input per round
  int cases = 6;       // windows per input (each decoded three times, see the top of this file)
  double seconds = 0;  // keep going round after round until this much time has passed
  int timeout = 120;   // seconds for one input's cases before it counts as a hang
  std::string artifacts = ".";
  bool keep_going = false;  // report every mismatch instead of stopping at the first
  bool verbose = false;
  std::vector<std::string> paths;
};

void save_artifact(const Options& opt, const char* kind, const Bytes& d, std::string* path) {
  char name[4096];
  std::snprintf(name, sizeof(name), "%s/%s-%016llx.jpg", opt.artifacts.c_str(), kind,
                static_cast<unsigned long long>(fnv1a(d)));
  std::ofstream(name, std::ios::binary)
      .write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size()));
  *path = name;
}

// All cases of one input; false on a mismatch.
bool check_input(const Options& opt, const Bytes& input, const std::string& origin, Stats& stats) {
  ++stats.inputs;
  g_current = input.data();
  g_current_size = input.size();
  alarm(static_cast<unsigned>(opt.timeout));
  // The windows depend on the seed and the bytes only: a saved input replays with the same ones.
  Rng rng(opt.seed ^ fnv1a(input));
  int components = 3;
  {
    JpegSession probe(WarningPolicy::kIgnore);
    std::unique_ptr<uint8_t[]> data(new uint8_t[input.size()]);
    if (!input.empty()) std::memcpy(data.get(), input.data(), input.size());
    if (probe.read_header(data.get(), input.size(), false)) components = probe.cinfo.num_components;
  }
  const bool four_components = components == 4;
  // libjpeg-turbo reads FF FF .. FF 00 in the scan as one FF data byte on its slow Huffman path, but
  // its fast path takes FF FF for a marker and hands the MCU to the slow path without clearing the
  // coefficients it wrote. Which path an MCU takes depends on how its source hands over the bytes (a
  // whole file, a sub-image), so libjpeg alone gives different pixels, without a warning, for the
  // same bytes. The comparison with libjpeg alone is left out for such inputs; ours on and off (the
  // same source) must still agree.
  const bool path_dependent = has_filled_data_byte(input);
  bool all_same = true;
  for (int k = 0; k < opt.cases; ++k) {
    Case c;
    c.scale_num = kScales[rng() % (sizeof(kScales) / sizeof(kScales[0]))];
    if (rng() % 3 == 0) c.scale_num = 8;  // the usual scale gets more of the cases
    // What decode_cpu.cpp's output_format asks of libjpeg; other spaces too, now and then, since
    // libjpeg's refusals must also come out alike.
    const J_COLOR_SPACE spaces[] = {JCS_RGB, JCS_GRAYSCALE, JCS_CMYK};
    c.space =
        four_components ? (rng() % 6 ? JCS_CMYK : spaces[rng() % 2]) : (rng() % 12 ? spaces[rng() % 2] : JCS_CMYK);
    const WarningPolicy policies[] = {WarningPolicy::kRaise, WarningPolicy::kWarn, WarningPolicy::kIgnore};
    c.policy = policies[rng() % 3];
    c.save_app1 = rng() % 4 == 0;
    for (uint32_t& r : c.r) r = static_cast<uint32_t>(rng());
    if (k == 0) {
      // First, what decode_jpeg does (the whole image, full size, the file's own colours, warnings
      // counted), so that every input gets that case whatever the seed.
      c.scale_num = 8;
      c.space = four_components ? JCS_CMYK : components == 1 ? JCS_GRAYSCALE : JCS_RGB;
      c.policy = WarningPolicy::kWarn;
      c.r[4] = 0;
    }

    const Outcome on = decode_once(input, c, true);
    const Outcome off = decode_once(input, c, false);
    // The fast paths decode less of a damaged file than libjpeg does (a sub-image skips the segments
    // beside the window), so their warnings may rightly differ from a plain decode's. Where libjpeg
    // alone decodes the window cleanly, though, they must give exactly its pixels.
    const Outcome plain = decode_once(input, c, false, /*fast_paths=*/false);
    std::string diff = difference(on, off);
    const char* against = "ours off";
    if (diff.empty() && plain.stage == Outcome::kDecoded && plain.warnings == 0 && !path_dependent) {
      diff = difference(on, plain);
      against = "libjpeg alone";
    }
    // The first case decodes the whole image with libjpeg alone: a file the check passes must decode
    // there without a warning (the check must find everything libjpeg warns about, or nvJPEG would
    // decode it silently).
    if (k == 0 && diff.empty() && off.stage != Outcome::kTooLarge &&
        (off.stage != Outcome::kDecoded || off.warnings > 0) && walk_once(input) == custom_op::ScanWalk::kClean) {
      diff = "the whole-scan check passes it";
      against = "the GPU path's check";
    }
    ++stats.cases;
    stats.header_failed += off.stage == Outcome::kHeaderFailed;
    stats.decoded += off.stage == Outcome::kDecoded;
    stats.failed += off.stage == Outcome::kFailed;
    stats.with_warnings += off.warnings > 0;
    stats.compared_bytes += static_cast<int64_t>(off.pixels.size());
    if (opt.verbose || !diff.empty()) {
      std::printf("%s %s: %zu bytes, scale %u/8, %s, policy %d, exif %d, window (%d, %d, %d, %d)\n",
                  diff.empty() ? "case" : "MISMATCH", origin.c_str(), input.size(), c.scale_num, space_name(c.space),
                  static_cast<int>(c.policy), c.save_app1 ? 1 : 0, on.region.top, on.region.left, on.region.height,
                  on.region.width);
    }
    if (!diff.empty()) {
      std::string path;
      save_artifact(opt, "mismatch", input, &path);
      std::printf(
          "  differs from %s in: %s\n  ours on:  %s\n  ours off: %s\n  libjpeg alone: %s\n"
          "  input saved to %s; replay: sanitized_decode --seed %llu --mutants 0 %s\n",
          against, diff.c_str(), describe(on).c_str(), describe(off).c_str(), describe(plain).c_str(), path.c_str(),
          static_cast<unsigned long long>(opt.seed), path.c_str());
      std::fflush(stdout);
      all_same = false;
      if (!opt.keep_going) break;
    }
  }
  alarm(0);
  return all_same;
}

bool read_file(const std::string& path, Bytes* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

// Files named, and the regular files directly inside folders named, sorted for a stable order.
std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) {
      std::fprintf(stderr, "sanitized_decode: %s: no such file or folder\n", p.c_str());
      std::exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> inside;
    if (DIR* dir = opendir(p.c_str())) {
      while (dirent* e = readdir(dir)) {
        const std::string child = p + "/" + e->d_name;
        if (e->d_name[0] != '.' && stat(child.c_str(), &st) == 0 && S_ISREG(st.st_mode)) inside.push_back(child);
      }
      closedir(dir);
    }
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  return files;
}

const char kUsage[] =
    "usage: sanitized_decode [--seed N] [--mutants N] [--cases N] [--seconds S] [--timeout S]\n"
    "                        [--artifacts DIR] [--keep-going] [--verbose] FILE_OR_DIR...\n"
    "Each input is checked as it is, then --mutants seeded mutations of it, each with --cases windows\n"
    "decoded with our entropy decoder on and off (and by libjpeg alone). With --seconds, rounds repeat\n"
    "(new mutations each round) until that much time has passed. Exit 0: all alike; 1: a mismatch; 2: bad usage;\n"
    "3: a hang. A sanitizer report ends the process with the sanitizer's own exit code.\n";

Options parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sanitized_decode: %s needs a value\n%s", a.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") opt.seed = std::strtoull(value(), nullptr, 10);
    else if (a == "--mutants") opt.mutants = std::atoi(value());
    else if (a == "--cases") opt.cases = std::atoi(value());
    else if (a == "--seconds") opt.seconds = std::atof(value());
    else if (a == "--timeout") opt.timeout = std::atoi(value());
    else if (a == "--artifacts") opt.artifacts = value();
    else if (a == "--keep-going") opt.keep_going = true;
    else if (a == "--verbose") opt.verbose = true;
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "sanitized_decode: unknown option %s\n%s", a.c_str(), kUsage);
      std::exit(2);
    } else {
      opt.paths.push_back(a);
    }
  }
  if (opt.paths.empty() || opt.mutants < 0 || opt.cases < 1 || opt.timeout < 1) {
    std::fputs(kUsage, stderr);
    std::exit(2);
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  mkdir(opt.artifacts.c_str(), 0755);
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%d.jpg", opt.artifacts.c_str(), getpid());
  std::snprintf(g_hang_path, sizeof(g_hang_path), "%s/hang-%d.jpg", opt.artifacts.c_str(), getpid());
#ifdef HAVE_SANITIZER_INTERFACE
  __sanitizer_set_death_callback(on_sanitizer_death);
#endif
  std::signal(SIGALRM, on_alarm);

  const std::vector<std::string> files = expand(opt.paths);
  std::vector<Bytes> inputs(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    if (!read_file(files[i], &inputs[i])) {
      std::fprintf(stderr, "sanitized_decode: cannot read %s\n", files[i].c_str());
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const int64_t give_ups_before = custom_op::entropy_decoder_give_ups();
  const int64_t random_access_before = custom_op::random_access_decodes();
  Stats stats;
  bool clean = true;
  int rounds = 0;
  for (int round = 0; clean || opt.keep_going; ++round) {
    for (size_t f = 0; f < inputs.size() && (clean || opt.keep_going); ++f) {
      if (round == 0) clean &= check_input(opt, inputs[f], files[f], stats);
      // Each mutant is a function of (seed, file index, round, mutant index): print those to rebuild it.
      for (int m = 0; m < opt.mutants && (clean || opt.keep_going); ++m) {
        Rng rng(opt.seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t(f) << 40) ^ (uint64_t(round) << 20) ^ uint64_t(m));
        Bytes mutant = inputs[f];
        const int steps = 1 + static_cast<int>(rng() % 3);
        std::string what;
        for (int s = 0; s < steps; ++s) what += std::string(s ? ", " : "") + mutate_once(rng, mutant);
        ++stats.mutants;
        char origin[4352];
        std::snprintf(origin, sizeof(origin), "%s [round %d, mutant %d: %s]", files[f].c_str(), round, m, what.c_str());
        clean &= check_input(opt, mutant, origin, stats);
      }
      if (opt.seconds > 0 && elapsed() >= opt.seconds) break;
    }
    rounds = round + 1;
    if (opt.seconds <= 0 || elapsed() >= opt.seconds) break;
  }
  g_current = nullptr;
  std::printf(
      "sanitized_decode: %s. seed %llu, %zu files, %d round(s), %lld inputs (%lld mutants), %lld cases "
      "(x3 decodes): %lld decoded, %lld failed in the data, %lld failed in the header, %lld with warnings; "
      "%lld random-access decodes, %lld give-ups of our decoder; %.1f MB of pixels "
      "compared; %.0f s\n",
      clean ? "all alike" : "MISMATCHES FOUND", static_cast<unsigned long long>(opt.seed), files.size(), rounds,
      static_cast<long long>(stats.inputs), static_cast<long long>(stats.mutants), static_cast<long long>(stats.cases),
      static_cast<long long>(stats.decoded), static_cast<long long>(stats.failed),
      static_cast<long long>(stats.header_failed), static_cast<long long>(stats.with_warnings),
      static_cast<long long>(custom_op::random_access_decodes() - random_access_before),
      static_cast<long long>(custom_op::entropy_decoder_give_ups() - give_ups_before), stats.compared_bytes / 1e6,
      elapsed());
  return clean ? 0 : 1;
}
