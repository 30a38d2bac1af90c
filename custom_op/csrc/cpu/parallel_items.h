// The CPU batched kernels' loop: items in parallel on torch's intra-op thread pool.
#pragma once

#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace custom_op {

// Calls body(i) for every i in [0, n), on min(n, torch.get_num_threads()) threads. Items are handed out
// one at a time from a shared counter: decode and check times differ by file, so a static split of the
// batch would leave threads idle while one finishes a long share. The pool runs in libtorch, across the
// stable ABI, which would turn an exception thrown by body into a RuntimeError about the pool: the
// bodies catch their own (capture_outcome). One item runs on the calling thread, with no parallel
// region: the single-image calls go through the batched kernels, and must not start the pool.
template <class F>
void for_each_item(int64_t n, F&& body) {
  if (n == 1) {
    body(int64_t{0});
    return;
  }
  std::atomic<int64_t> next{0};
  const int64_t threads = std::min<int64_t>(n, torch::stable::get_num_threads());
  torch::stable::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) body(i);
  });
}

}  // namespace custom_op
