// The output tensors of a GPU batch, and the op's results.
//
// Made before decoding, where the planner knows the shapes, and every decoder writes into them. With
// stack=True: the [N, C, H, W] tensor, each item's output one of its slices; outputs of different
// shapes or channel counts are a call-level ValueError. Without it, windows in RGB or GRAY (shapes the
// call's arguments give, so that the fake kernel in custom_op/_ops.py makes the same views): one
// allocation, of which each item's [C, H, W] output is a view of its own part, in item order, each
// from a multiple of kOutputAlignment bytes (common/output_layout.h). Otherwise an allocation per output. The CPU path
// makes its own output for an item whose shape only it can tell.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/output_layout.h"
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

// Before decoding: checks stack=True's shapes and allocates the outputs (per_item: the stack's slices,
// the views of one allocation, or tensors of their own; undefined where the shape is not known yet).
BatchOutputs allocate_outputs(const std::vector<Item>& items, bool stack, bool views, const at::TensorOptions& device);

// After every decoder: a failed item's image is an empty tensor, or zeros in the stack.
BatchResults batch_results(const std::vector<Item>& items, BatchOutputs& outputs, bool stack,
                           const at::TensorOptions& device);

}  // namespace gpu
}  // namespace custom_op
