// A few threads for host work that nvJPEG does one file at a time.
//
// nvJPEG's header parse for the hardware decoder, given whole files, reads through them: 20-50 us per
// ImageNet photo on the H100 machine. The files are independent, so a batch parses them on several
// threads (parse mode 0; the default now gives it the headers only, see assign_hardware). The pool
// also runs concurrent batched decode jobs when those are asked for (Tuning in nvjpeg_context.h). One pool per decode state:
// states are leased one per call, so concurrent calls never wait on each other's pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace custom_op {
namespace gpu {

class HostPool {
 public:
  explicit HostPool(int workers);
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Runs fn(i) for every i in [0, n), on the pool's threads and the caller's, and returns when all
  // have run; on the caller's thread alone when n < min_parallel. fn must not throw. Not reentrant:
  // one caller at a time (the state's lease ensures it).
  void parallel_for(size_t n, const std::function<void(size_t)>& fn, size_t min_parallel = 8);

 private:
  void work();
  void drain(const std::function<void(size_t)>& fn, size_t n);

  std::mutex mutex_;
  std::condition_variable start_, finished_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  size_t running_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const int owner_;  // the process whose threads these are
  std::vector<std::thread> threads_;
};

// Worker threads for header parsing: CUSTOM_OP_NVJPEG_PARSE_THREADS, else up to 7, half the cores
// less one (0: parse on the caller's thread only).
int parse_workers();

}  // namespace gpu
}  // namespace custom_op
