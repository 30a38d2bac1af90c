// Per-image host work of a batch, shared between the calling thread and a few helper threads, in
// image order, so that the caller can use an image's results (queue its part's copies and kernels)
// while the helpers work on the images after it.
//
// Why: at large batches our CUDA decoder's calls are bound by the host's work per image (the segments
// each decode reads, the copy of files in ordinary memory into the upload buffer), not by the GPU. The
// helpers are a pool of our own (c10::ThreadPool: they sleep on a condition variable between calls),
// not torch's intra-op pool, whose OpenMP threads by default spin-wait a while after each parallel
// region before they sleep (libgomp's GOMP_SPINCOUNT): CPU time spent on nothing, several times a call.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace custom_op {
namespace gpu {

// How many helpers a work asks for. Work of a few microseconds per image needs only a few: more would
// mostly wait for the caller, which queues the GPU work in order, and each costs the host a wake-up
// (batches of files in pinned memory were slower with seven than with three). Copies of files into
// the upload buffer are bound by each core's memory bandwidth: there every helper shortens the call
// (batches of files in ordinary memory were much faster with seven than with three).
constexpr unsigned kFewHelpers = 3;
constexpr unsigned kCopyHelpers = 7;

// work(begin, end) runs once for each chunk of `chunk` consecutive images of [0, count), on the
// calling thread or up to `max_helpers` helpers; chunks start in order. ready(k) returns once image
// k's chunk has run, running chunks itself while none is free; wait_all() once every chunk has,
// rethrowing the first exception a chunk threw. The destructor waits for every chunk that has
// started. Chunks that run side by side must not write the same memory.
class ChunkedWork {
 public:
  ChunkedWork(size_t count, size_t chunk, std::function<void(size_t, size_t)> work, unsigned max_helpers);
  ~ChunkedWork();
  ChunkedWork(const ChunkedWork&) = delete;
  ChunkedWork& operator=(const ChunkedWork&) = delete;

  void ready(size_t k);
  void wait_all();

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;  // helpers hold it too: one may wake after the call has ended
};

}  // namespace gpu
}  // namespace custom_op
