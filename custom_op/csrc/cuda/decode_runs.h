// How decode_segments (segment_decoder.h) finds its work: the host lists each image's segments as
// runs of consecutive segments, and each GPU thread finds the run holding its task.
//
// Why runs: a window's segments are a few runs (one per MCU row of its rectangle, at most), where
// hundreds of segments each made a task of its own, which the host wrote and uploaded one by one:
// host time for every segment of every image on the thread that queues the GPU work. A search over a
// part's runs costs each GPU thread a few reads that the whole part shares in cache.
//
// Plain C++ with CUSTOM_OP_HD (jpeg_core/hd.h): the kernel runs run_of_task, and a CPU test
// (tests/test_decode_runs.py) runs the very same code.
#pragma once

#include <stdint.h>

#include "jpeg_core/hd.h"

namespace custom_op {
namespace gpu {

// Segments first .. first + count - 1 of one image of a launch, decoded by one thread each: tasks
// before .. before + count - 1 of the launch, `before` being the tasks of the runs ahead of it.
struct DecodeRun {
  int32_t image;
  int32_t first;
  int32_t count;
  int32_t before;
};

// The run holding task `task` of a launch whose `count` runs (at least one) are in task order, the
// first with before == 0 and none empty: the last run whose `before` is at most `task`.
CUSTOM_OP_HD inline int run_of_task(const DecodeRun* runs, int count, int32_t task) {
  int lo = 0, hi = count;  // the answer lies in [lo, hi)
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (jpeg_core::load_readonly(&runs[mid].before) <= task) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace gpu
}  // namespace custom_op
