// The GPU's resized crop after the decode: every item's two resampling passes, flip and normalisation
// (jpeg_core/resample.h: the same per-sample code CI runs on the CPU, tests/resample_check.cpp), in two
// launches for the whole batch. Plain CUDA, no torch headers.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jpeg_core/resample.h"

namespace custom_op {
namespace gpu {

// items: `count` descriptors in device memory, whose pointers are device pointers. max_mid and
// max_out: the largest intermediate and output of an item, in samples (they size the grids).
cudaError_t launch_resample(const jpeg_core::ResampleItem* items, int count, int64_t max_mid, int64_t max_out,
                            cudaStream_t stream);

}  // namespace gpu
}  // namespace custom_op
