// The libjpeg error manager of JpegSession (libjpeg_session.h) and prepare_jpeg's transcoder
// (prepare_cpu.cpp): libjpeg's errors, warnings and a limit on hostile input, turned into a longjmp to
// the caller's jump point with a message, instead of a process exit or a line on stderr.
//
// libjpeg reports errors by calling error_exit, which must not return. We longjmp out of it, to the
// jump point of the function that called into libjpeg; that function holds no object with a destructor,
// so no C++ frame is skipped. Header-only: the functions below are libjpeg's callbacks, and every
// library that links the session or the transcoder gets them with this header alone.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstring>

#include <jpeglib.h>

#include "common/options.h"

namespace custom_op {

// A hostile progressive file can hold thousands of tiny scans that each cost a pass over the image.
// No real encoder writes more than a few dozen; TurboJPEG suggests a limit of 500 for untrusted input.
constexpr int kMaxScans = 500;

// One error manager, for one libjpeg object or for several (the transcoder's decompressor and
// compressor share one): put the pointer init returns in each one's `err`.
struct ErrorState {
  jpeg_error_mgr pub;  // first member: libjpeg hands us a jpeg_error_mgr* that we cast back
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  WarningPolicy on_warning;
  int num_warnings;
  char message[JMSG_LENGTH_MAX];
  char first_warning[JMSG_LENGTH_MAX];
  bool entropy_gave_up;  // the jump came from our entropy decoder giving a scan back to libjpeg

  // Clears everything and sets libjpeg's callbacks up: an error formats its text into message and
  // longjmps to jump; a warning does the same under WarningPolicy::kRaise, and is otherwise counted in
  // num_warnings (the first one's text in first_warning); trace messages are dropped and nothing is
  // printed. A decompressor whose `progress` is &progress (set it after jpeg_create_decompress, which
  // clears it) stops with an error past kMaxScans scans. Returns the manager for cinfo.err.
  jpeg_error_mgr* init(WarningPolicy policy);
};

namespace libjpeg_errors {

inline ErrorState* state_of(j_common_ptr cinfo) { return reinterpret_cast<ErrorState*>(cinfo->err); }

[[noreturn]] inline void on_error(j_common_ptr cinfo) {
  ErrorState* err = state_of(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg calls this for warnings (level -1) and trace messages (level >= 0). A warning means the data
// is corrupt but decoding can go on (missing bytes become gray, for example).
inline void on_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level != -1) return;
  ErrorState* err = state_of(cinfo);
  if (err->on_warning == WarningPolicy::kRaise) on_error(cinfo);
  if (err->num_warnings++ == 0) (*cinfo->err->format_message)(cinfo, err->first_warning);
}

inline void print_nothing(j_common_ptr) {}

inline void limit_scans(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number <= kMaxScans) return;
  ErrorState* err = state_of(cinfo);
  std::snprintf(err->message, sizeof(err->message), "the file has more than %d scans; refusing it as hostile",
                kMaxScans);
  std::longjmp(err->jump, 1);
}

}  // namespace libjpeg_errors

inline jpeg_error_mgr* ErrorState::init(WarningPolicy policy) {
  std::memset(this, 0, sizeof(*this));
  jpeg_error_mgr* mgr = jpeg_std_error(&pub);
  pub.error_exit = libjpeg_errors::on_error;
  pub.emit_message = libjpeg_errors::on_message;
  pub.output_message = libjpeg_errors::print_nothing;
  on_warning = policy;
  progress.progress_monitor = libjpeg_errors::limit_scans;
  return mgr;
}

}  // namespace custom_op
