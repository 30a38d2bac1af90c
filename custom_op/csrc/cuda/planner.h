// The host-side plan of a GPU batch, made before anything is decoded.
//
// Per item: our own header scan (jpeg_header.h) and the CPU path's checks of the window and of
// max_pixels; whether nvJPEG may decode the file (else the CPU path does, and gives libjpeg's verdict
// on files we do not fully understand, and the CPU operator's error on items that fail a check); the
// region nvJPEG decodes, with margins.
// Then, across items: a file repeated in the batch is decoded once, and files prepared for random
// access that our own CUDA decoder does not take give nvJPEG the sub-image of their windows' restart
// segments. Which decoder takes an item is left to the executors (executor.h). With
// options.check_entropy, the files left to nvJPEG once our own CUDA decoder has claimed its own are
// checked first (send_unchecked_files_to_cpu).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "cuda/batch_item.h"
#include "cuda/testing_options.h"

namespace custom_op {
namespace gpu {

// Items a GPU decoder may take come back kPending (Item::nvjpeg_takes: nvJPEG too), the others kCpu (kFailed: a data
// tensor not on the CPU). The window lists are read only without options.whole.
std::vector<Item> plan_items(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                             c10::IntArrayRef heights, c10::IntArrayRef widths, const CallOptions& options,
                             const TestingOptions& testing);

// Items still pending that nvJPEG may not take (Item::nvjpeg_takes: samplings such as 4:1:1, which
// only our own CUDA decoder takes; every item where a test forbids nvJPEG) go to the CPU path; run
// once our own decoder has claimed its items.
void leave_to_cpu_what_nvjpeg_cannot_take(std::vector<Item>& items, const TestingOptions& testing);

// The bytes nvJPEG would decode of each pending item (its sub-image, where it has one) are checked on
// the CPU (the CPU library's _check_entropy_data), and a file found wrong in any way goes to the CPU
// path with all its windows: nvJPEG reports no damage, the CPU path reports all of it. Our own CUDA
// decoder needs no such check (it reports damage itself), so this runs after it has claimed its items.
void send_unchecked_files_to_cpu(std::vector<Item>& items);

}  // namespace gpu
}  // namespace custom_op
