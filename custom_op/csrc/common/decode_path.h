// Which decoder took each item of a GPU batch: the op returns it per item (`paths`) for tests and
// benchmarks, and _set_gpu_testing takes one to force it (cuda/testing_options.h). Part of the op's
// contract: custom_op/gpu.py names the codes, and tests/test_ops.py checks them against these
// (_constants, which the CPU library exports).
#pragma once

#include <cstdint>

namespace custom_op {
namespace gpu {

enum DecodePath : int64_t {
  kHardwareRoi = 0,   // the JPEG engines, region of interest
  kHardwareFull = 1,  // the JPEG engines, whole image (they declined the region); the copy-out crops
  kGpuHybrid = 2,     // nvJPEG's GPU-hybrid decoder (Huffman decoding on the GPU), region of interest
  kCpuHybrid = 3,     // nvJPEG's hybrid decoder (Huffman decoding on the CPU), region of interest
  kCpu = 4,           // the CPU operators (libjpeg-turbo), copied to the device
  kFailed = 5,        // not decoded: the item's status and message say why
  kPending = 6,       // internal, never returned: a GPU decoder may take it, none has claimed it yet
  kCudaDecoder = 7,   // our own CUDA decoder (segment_decoder.h), one thread per restart segment
};

// Added to an item's path when nvJPEG decoded the sub-image of its restart segments (planner.h).
constexpr int64_t kSegmentsFlag = 16;

// A GPU decoder took the item (or shares its leader's decode).
inline bool on_gpu(DecodePath path) { return path != kCpu && path != kFailed && path != kPending; }

// An nvJPEG decoder wrote (or shares) the item's decode in the staging buffer.
inline bool staged(DecodePath path) { return on_gpu(path) && path != kCudaDecoder; }

}  // namespace gpu
}  // namespace custom_op
