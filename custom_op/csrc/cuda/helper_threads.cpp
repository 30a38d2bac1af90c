#include "cuda/helper_threads.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include <c10/core/thread_pool.h>
#include <c10/util/thread_name.h>

namespace custom_op {
namespace gpu {
namespace {

// The pool's threads besides the caller: as many as a work may ask for (kCopyHelpers), fewer on a
// machine with fewer cores. (Asked once: std::thread::hardware_concurrency reads /sys each time.)
unsigned helper_count() {
  static const unsigned count = std::min(kCopyHelpers, std::max(1u, std::thread::hardware_concurrency()) - 1);
  return count;
}

// The process's pool, made on first use. A child forked from a process that had one gets a copy
// whose threads did not survive the fork, so each process makes its own; the old one is left as is
// (never destroyed: its destructor would join threads that do not exist).
c10::ThreadPool* helper_pool() {
  static std::mutex mutex;
  static c10::ThreadPool* pool = nullptr;
  static pid_t owner = 0;
  const unsigned helpers = helper_count();
  if (helpers == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (pool == nullptr || owner != getpid()) {
    pool = new c10::ThreadPool(static_cast<int>(helpers), -1, [] { c10::setThreadName("custom_op_host"); });
    owner = getpid();
  }
  return pool;
}

}  // namespace

struct ChunkedWork::Shared {
  std::function<void(size_t, size_t)> work;
  size_t count = 0, chunk = 1, chunks = 0;
  std::atomic<size_t> next{0};                // the first chunk no thread has taken
  std::unique_ptr<std::atomic<bool>[]> done;  // per chunk
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  // Runs the first chunk no thread has taken; false when none is left.
  bool run_one() {
    const size_t c = next.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks) return false;
    try {
      work(c * chunk, std::min(count, (c + 1) * chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      failed.store(true, std::memory_order_release);
    }
    done[c].store(true, std::memory_order_release);
    return true;
  }

  void wait_for_chunk(size_t c) {
    while (!done[c].load(std::memory_order_acquire))
      if (!run_one()) std::this_thread::yield();  // a helper runs it: a few microseconds
  }

  void rethrow() {
    if (!failed.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(error_mutex);
    std::rethrow_exception(error);
  }
};

ChunkedWork::ChunkedWork(size_t count, size_t chunk, std::function<void(size_t, size_t)> work, unsigned max_helpers)
    : shared_(std::make_shared<Shared>()) {
  Shared& s = *shared_;
  s.work = std::move(work);
  s.count = count;
  s.chunk = std::max<size_t>(chunk, 1);
  s.chunks = (count + s.chunk - 1) / s.chunk;
  s.done.reset(new std::atomic<bool>[s.chunks]);
  for (size_t c = 0; c < s.chunks; ++c) s.done[c].store(false, std::memory_order_relaxed);
  if (s.chunks < 2) return;
  c10::ThreadPool* pool = helper_pool();
  if (pool == nullptr) return;
  const size_t helpers = std::min<size_t>({pool->size(), s.chunks - 1, max_helpers});
  for (size_t h = 0; h < helpers; ++h)
    pool->run([shared = shared_] {
      while (shared->run_one()) {
      }
    });
}

ChunkedWork::~ChunkedWork() {
  // No chunk may start once the caller's data is gone: take every one not yet taken, then wait for
  // those running.
  Shared& s = *shared_;
  const size_t started = std::min(s.next.exchange(s.chunks + (size_t{1} << 40)), s.chunks);
  for (size_t c = 0; c < started; ++c)
    while (!s.done[c].load(std::memory_order_acquire)) std::this_thread::yield();
}

void ChunkedWork::ready(size_t k) {
  shared_->wait_for_chunk(k / shared_->chunk);
  shared_->rethrow();
}

void ChunkedWork::wait_all() {
  for (size_t c = 0; c < shared_->chunks; ++c) shared_->wait_for_chunk(c);
  shared_->rethrow();
}

}  // namespace gpu
}  // namespace custom_op
