// The output tensors of a GPU batch, and the op's results.
//
// With stack=True the [N, C, H, W] tensor is made before decoding when the planner knows the windows'
// shape, and every decoder writes into its slices; outputs of different shapes or channel counts are
// a call-level ValueError. Without it, each item a GPU decoder took gets its own [C, H, W] tensor once
// the decodes are queued, and the CPU path makes its own.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

#include "cuda/batch_item.h"

namespace custom_op {
namespace gpu {

struct BatchOutputs {
  at::Tensor stacked;                // with stack=True, when the shape was known before decoding
  std::vector<at::Tensor> per_item;  // slices of `stacked`, or separate tensors; undefined where the CPU path makes one
};

// images, status, messages, paths
using BatchResults =
    std::tuple<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<std::string>, std::vector<int64_t>>;

// Before decoding: checks stack=True's shapes and allocates the stack (per_item: its slices, or
// undefined).
BatchOutputs allocate_outputs(const std::vector<Item>& items, bool stack, const at::TensorOptions& device);

// Once the GPU decoders have claimed their items: a tensor for each item one took that has none yet.
void allocate_item_outputs(const std::vector<Item>& items, std::vector<at::Tensor>& per_item,
                           const at::TensorOptions& device);

// After every decoder: a failed item's image is an empty tensor, or zeros in the stack.
BatchResults batch_results(const std::vector<Item>& items, BatchOutputs& outputs, bool stack,
                           const at::TensorOptions& device);

}  // namespace gpu
}  // namespace custom_op
