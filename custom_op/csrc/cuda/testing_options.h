// The GPU backend's one testing hook (torch.ops.custom_op._set_gpu_testing): process-wide settings
// with which tests and benchmarks reach the paths that the normal choices do not take. Never needed
// in normal use.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/decode_path.h"

namespace custom_op {
namespace gpu {

// When a file prepared for random access gives nvJPEG the sub-image of its restart segments.
enum class SegmentsRule : int64_t { kBySize = 0, kAlways = 1, kNever = 2 };

struct TestingOptions {
  // -1: the normal choices. Else the decoder every item nvJPEG may decode is sent to: kCpu the CPU
  // path; kCpuHybrid neither the JPEG engines nor the GPU-hybrid decoder; kGpuHybrid not the engines
  // (the hybrid decoders still choose by size); kHardwareFull the engines decode whole images;
  // kHardwareRoi the normal choices. Where that decoder is absent (no engines on this GPU), the items
  // go on to the next one as usual.
  int64_t force_path = -1;
  bool no_margin = false;  // decode exactly the window: shows nvJPEG's chroma edges at region borders
  bool no_dedupe = false;  // a file repeated in the batch is decoded once per window
  SegmentsRule segments = SegmentsRule::kBySize;

  bool cpu_only() const { return force_path == kCpu; }
  bool engines_allowed() const { return force_path != kGpuHybrid && force_path != kCpuHybrid; }
  bool engine_roi_allowed() const { return force_path != kHardwareFull; }
  bool gpu_hybrid_allowed() const { return force_path != kCpuHybrid; }
};

// The settings now (a call reads them once).
TestingOptions testing_options();

// The op: sets them and returns the previous ones, [force_path, no_margin, no_dedupe, segments].
std::vector<int64_t> set_gpu_testing(int64_t force_path, bool no_margin, bool no_dedupe, int64_t segments);

}  // namespace gpu
}  // namespace custom_op
