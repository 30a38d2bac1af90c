// The host's copy of files into our CUDA decoder's upload buffer (custom_op/csrc/cuda/upload_copy.cpp),
// timed on its own: CPU time per file for each way this host can copy, beside memcpy and beside the
// 32-byte streaming stores without the source prefetch, with the files in the cache and out of it, on
// one thread and on as many as the decoder's copy helpers. bench/bench_upload_copy.py builds and runs it.
//
//     upload_copy_bench FILE_BYTES COLD_FILES WARM_FILES ROUNDS THREADS...
//
// Prints one line a case: "<cache> <threads> <way> <CPU us per file> <wall GB/s>".
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/upload_copy.h"

namespace {

using Copy = void (*)(uint8_t*, const uint8_t*, size_t);

// The reference: the product's 32-byte loop without its prefetch.
__attribute__((target("avx2"))) void streaming32_no_prefetch(uint8_t* dst, const uint8_t* src, size_t size) {
  size_t i = 0;
  for (; i + 128 <= size; i += 128)
    for (int r = 0; r < 4; ++r)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32 * r),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32 * r)));
  std::memcpy(dst + i, src + i, size - i);
  _mm_sfence();
}

void plain_memcpy(uint8_t* dst, const uint8_t* src, size_t size) { std::memcpy(dst, src, size); }

template <custom_op::gpu::UploadCopy Kind>
void product(uint8_t* dst, const uint8_t* src, size_t size) {
  custom_op::gpu::copy_with(Kind, dst, src, size);
}

double now(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s FILE_BYTES COLD_FILES WARM_FILES ROUNDS THREADS...\n", argv[0]);
    return 2;
  }
  const size_t file = std::strtoull(argv[1], nullptr, 10);
  const size_t cold_files = std::strtoull(argv[2], nullptr, 10), warm_files = std::strtoull(argv[3], nullptr, 10);
  const int rounds = std::atoi(argv[4]);
  std::vector<int> thread_counts;
  for (int a = 5; a < argc; ++a) thread_counts.push_back(std::atoi(argv[a]));

  // Cold: more files than any cache holds, each copied once a round. Warm: a few copied over and over.
  std::vector<uint8_t*> files(cold_files);
  for (size_t j = 0; j < cold_files; ++j) {
    files[j] = static_cast<uint8_t*>(std::malloc(file));
    for (size_t b = 0; b < file; ++b) files[j][b] = static_cast<uint8_t>(j * 131 + b * 7);
  }
  const size_t slots = 64, stride = (file + 63) / 64 * 64;
  int most_threads = 1;
  for (int t : thread_counts) most_threads = std::max(most_threads, t);
  std::vector<uint8_t*> dsts(most_threads);
  for (auto& d : dsts) {
    d = static_cast<uint8_t*>(std::aligned_alloc(64, slots * stride));
    std::memset(d, 0, slots * stride);
  }

  std::vector<std::pair<std::string, Copy>> ways = {{"memcpy", plain_memcpy}};
  using custom_op::gpu::UploadCopy;
  if (custom_op::gpu::upload_copy_available(UploadCopy::kStreaming16))
    ways.push_back({"streaming16", product<UploadCopy::kStreaming16>});
  if (custom_op::gpu::upload_copy_available(UploadCopy::kStreaming32)) {
    ways.push_back({"streaming32 without prefetch", streaming32_no_prefetch});
    ways.push_back({"streaming32", product<UploadCopy::kStreaming32>});
  }
  std::printf("used: %s\n", custom_op::gpu::upload_copy_name(custom_op::gpu::upload_copy_kind()));

  for (const bool cold : {true, false}) {
    const size_t span = cold ? cold_files : warm_files;
    for (const int threads : thread_counts) {
      std::vector<double> cpu(ways.size()), wall(ways.size());
      for (int r = 0; r < rounds; ++r)
        for (size_t w = 0; w < ways.size(); ++w) {  // the ways in turn, so that each sees the same machine
          std::vector<double> spent(threads);
          const double w0 = now(CLOCK_MONOTONIC);
          std::vector<std::thread> pool;
          for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
              const double c0 = now(CLOCK_THREAD_CPUTIME_ID);
              for (size_t j = t; j < cold_files; j += threads)
                ways[w].second(dsts[t] + (j / threads % slots) * stride, files[j % span], file);
              spent[t] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
            });
          for (auto& p : pool) p.join();
          wall[w] += now(CLOCK_MONOTONIC) - w0;
          for (double s : spent) cpu[w] += s;
        }
      for (size_t w = 0; w < ways.size(); ++w)
        std::printf("%s\t%d\t%s\t%.2f\t%.2f\n", cold ? "cold" : "warm", threads, ways[w].first.c_str(),
                    cpu[w] / rounds / cold_files * 1e6,
                    static_cast<double>(file) * cold_files * rounds / wall[w] / 1e9);
    }
  }
  return 0;
}
