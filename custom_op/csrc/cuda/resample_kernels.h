// The GPU's resized crop after the decode: every item's taps (jpeg_core/resample_weights.h, one thread
// per output pixel of an axis), then its two resampling passes, flip and normalisation
// (jpeg_core/resample.h), in three launches for the whole batch: the per-sample code CI runs on the
// CPU (tests/resample_check.cpp, and the CPU resize's taps). Plain CUDA, no torch headers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jpeg_core/resample.h"
#include "jpeg_core/resample_weights.h"

namespace custom_op {
namespace gpu {

// One axis of one item whose taps the GPU computes: outputs [out_start, out_start + out_count) of
// `spec`, written to first/count/weights (out_count, out_count and out_count * geometry.ksize int32s,
// device memory), in reverse order when `reverse` (a left-right flip).
struct TapsJob {
  jpeg_core::ResampleAxisSpec spec;
  jpeg_core::ResampleGeometry geometry;
  int64_t out_start;
  int32_t out_count;
  int32_t reverse;
  int32_t* first;
  int32_t* count;
  int32_t* weights;
};

// jobs: `job_count` TapsJobs in device memory (none where the host wrote the taps), max_outputs their
// largest out_count; items: `count` descriptors in device memory, whose pointers are device pointers.
// max_mid and max_out: the largest intermediate and output of an item, in samples (they size the grids).
cudaError_t launch_resample(const TapsJob* jobs, int job_count, int64_t max_outputs,
                            const jpeg_core::ResampleItem* items, int count, int64_t max_mid, int64_t max_out,
                            cudaStream_t stream);

}  // namespace gpu
}  // namespace custom_op
