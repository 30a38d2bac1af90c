// The GPU window decode of a batch the caller has planned: what decode_jpegs_cuda runs once its
// planner (planner.h) has read the headers and placed the windows, and what the resized crop
// (resized_crop_cuda.cpp) runs on its own plan, so that each file's header is read once per call and
// no operator is dispatched in between.
#pragma once

#include <vector>

#include <c10/core/Device.h>

#include "cuda/batch_item.h"
#include "cuda/batch_outputs.h"
#include "cuda/testing_options.h"

namespace custom_op {
namespace gpu {

// Decodes `items` (scan_items, then plan_windows) on `device`: the outputs are allocated (see
// batch_outputs.h: with stack=False, the windows are views of one allocation), the GPU decoders take
// what they may, the CPU path the rest, and the results are those of decode_jpegs_cuda, ordered on the
// current stream.
BatchResults decode_planned(std::vector<Item>& items, bool stack, const CallOptions& options,
                            const TestingOptions& testing, const c10::Device& device);

}  // namespace gpu
}  // namespace custom_op
