// The CPU path of a GPU batch: files nvJPEG should not get, and those it failed on, are decoded by the
// CPU library's operators (libjpeg-turbo), which also give every error and warning its message, and
// are copied to the device.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "cuda/batch_item.h"

namespace custom_op {
namespace gpu {

// Decodes every item on path kCpu and copies it into its output (allocating one where it has none, or,
// without `stack`, where the planner's shape is not the CPU path's) on the current stream. An item the CPU operator
// rejects gets its status and message and path kFailed; one decoded with libjpeg's warnings (on_warning "warn") gets
// kWarned and their text.
void decode_on_cpu(std::vector<Item>& items, std::vector<at::Tensor>& outputs, const CallOptions& options, bool stack,
                   const at::TensorOptions& device);

}  // namespace gpu
}  // namespace custom_op
