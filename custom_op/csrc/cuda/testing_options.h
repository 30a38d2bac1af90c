// The GPU backend's one testing hook (torch.ops.custom_op._set_gpu_testing): process-wide settings
// with which tests and benchmarks reach the paths that the normal choices do not take. Never needed
// in normal use.
#pragma once

#include <cstdint>
#include <vector>

#include "common/decode_path.h"

namespace custom_op {
namespace gpu {

// When a file prepared for random access gives nvJPEG the sub-image of its restart segments.
enum class SegmentsRule : int64_t { kBySize = 0, kAlways = 1, kNever = 2 };

struct TestingOptions {
  // -1: the normal choices. Else the decoder every item the GPU decoders may take is sent to: kCpu
  // the CPU path; kCudaDecoder our own decoder, and the CPU path what it does not take; kCpuHybrid
  // neither our decoder, the JPEG engines nor the GPU-hybrid decoder; kGpuHybrid neither ours nor the
  // engines (the hybrid decoders still choose by size); kHardwareFull the engines decode whole images;
  // kHardwareRoi nvJPEG's normal choices, without our decoder. Where that decoder is absent (no
  // engines on this GPU), the items go on to the next one as usual.
  int64_t force_path = -1;
  bool no_margin = false;  // decode exactly the window: shows nvJPEG's chroma edges at region borders
  bool no_dedupe = false;  // a file repeated in the batch is decoded once per window
  SegmentsRule segments = SegmentsRule::kBySize;
  // > 0: the chunk size of files decoded in chunks, in place of segment_executor.cpp's (small chunks
  // put chunk boundaries, and the decoders' synchronisation across them, all over a small test image).
  int64_t chunk_bytes = 0;
  // The backend acts as on a GPU without JPEG engines: they take nothing (nvJPEG's hybrid decoders do).
  bool hide_engines = false;
  // > 0: a window's first try in a file decoded in chunks takes this many of its scan's bytes, whatever the scan's
  // size, in place of jpeg_core's window_scan_bytes in large scans (a few bytes: every such window is decoded
  // again with the whole file).
  int64_t window_bytes = 0;

  bool cpu_only() const { return force_path == kCpu; }
  // Whether our decoder may take the files (those without short restart segments too, in chunks), from the
  // forced path: executor.h's own_decoder_allowed (the call's gpu_decoder option decides where no path is
  // forced).
  bool own_decoder_forced() const { return force_path == kCudaDecoder; }
  bool nvjpeg_allowed() const { return force_path != kCudaDecoder; }
  bool engines_allowed() const { return !hide_engines && force_path != kGpuHybrid && force_path != kCpuHybrid; }
  bool engine_roi_allowed() const { return force_path != kHardwareFull; }
  bool gpu_hybrid_allowed() const { return force_path != kCpuHybrid; }
};

// The settings now (a call reads them once).
TestingOptions testing_options();

// The op: sets them and returns the previous ones, [force_path, no_margin, no_dedupe, segments, chunk_bytes,
// hide_engines, window_bytes].
std::vector<int64_t> set_gpu_testing(int64_t force_path, bool no_margin, bool no_dedupe, int64_t segments,
                                     int64_t chunk_bytes, bool hide_engines, int64_t window_bytes);

}  // namespace gpu
}  // namespace custom_op
