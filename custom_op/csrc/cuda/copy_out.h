// The copy-out: one kernel (window_copy.h) on the caller's stream moves every decoded window from the
// staging buffer into its output, applying the EXIF orientation, and for items staged as YCbCr planes
// libjpeg-turbo's upsampling and colour conversion. nvJPEG never writes an output itself: the hardware
// decoder writes when it is called, not in stream order, so outputs are written only in stream order.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include "cuda/batch_item.h"
#include "cuda/nvjpeg_context.h"

namespace custom_op {
namespace gpu {

// Queues the copies of every staged item (after share_leader_decodes) on `stream`, which must already
// wait for the decodes. The descriptors go through the slot's buffers.
void copy_out(DeviceContext& context, Slot& slot, const std::vector<Item>& items,
              const std::vector<at::Tensor>& outputs, cudaStream_t stream);

}  // namespace gpu
}  // namespace custom_op
