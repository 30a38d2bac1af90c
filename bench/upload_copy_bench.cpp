// Times custom_op/csrc/cuda/upload_copy.cpp for bench/bench_upload_copy.py: each call copies a batch
// of files (ordinary heap memory, sizes given on the command line, taken in turn from the whole set,
// so that the set's size decides how much of it the cache holds) into one 64-byte-aligned buffer, as
// our CUDA decoder's host work does, split over `threads` threads taking files in turn. The ways of
// copying take turns call by call. Prints one line per call: way, threads, wall microseconds (with
// the threads' start) and CPU microseconds (the threads' copying loops only, summed).
//
//   upload_copy_bench BATCH CALLS THREADS[,THREADS...] SIZE...
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/upload_copy.h"

using namespace custom_op::gpu;

namespace {

double thread_cpu_us() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const size_t batch = std::strtoul(argv[1], nullptr, 10), calls = std::strtoul(argv[2], nullptr, 10);
  std::vector<int> thread_counts;
  for (char* p = argv[3]; *p;) {
    thread_counts.push_back(static_cast<int>(std::strtol(p, &p, 10)));
    if (*p == ',') ++p;
  }
  std::vector<std::vector<uint8_t>> files;
  for (int i = 4; i < argc; ++i) files.emplace_back(std::strtoul(argv[i], nullptr, 10), static_cast<uint8_t>(i));
  size_t largest = 0;
  for (const auto& f : files) largest = std::max(largest, f.size());
  const size_t slot = (largest + kUploadAlignment - 1) / kUploadAlignment * kUploadAlignment;
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(kUploadAlignment, slot * batch));
  std::memset(buffer, 0, slot * batch);

  std::vector<UploadCopy> kinds;
  for (const UploadCopy k : kUploadCopies)
    if (upload_copy_available(k)) kinds.push_back(k);
  size_t first = 0;  // the set's file the next call starts at
  for (int threads : thread_counts) {
    for (size_t call = 0; call < calls; ++call) {
      for (UploadCopy kind : kinds) {
        std::atomic<size_t> next{0};
        std::atomic<int64_t> cpu_ns{0};
        auto work = [&] {
          const double cpu0 = thread_cpu_us();
          for (size_t i; (i = next.fetch_add(1)) < batch;) {
            const auto& f = files[(first + i) % files.size()];
            copy_with(kind, buffer + i * slot, f.data(), f.size());
          }
          cpu_ns += static_cast<int64_t>((thread_cpu_us() - cpu0) * 1e3);
        };
        std::vector<std::thread> helpers;
        const auto wall0 = std::chrono::steady_clock::now();
        for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
        work();
        for (auto& h : helpers) h.join();
        const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall0).count();
        std::printf("%s %d %.1f %.1f\n", upload_copy_name(kind), threads, wall, cpu_ns.load() / 1e3);
        first = (first + batch) % files.size();
      }
    }
  }
  std::printf("used %s\n", upload_copy_name(upload_copy_kind()));
  std::free(buffer);
  return 0;
}
