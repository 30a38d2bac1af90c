// For tests/test_decode_runs.py: lays out runs of the given lengths (argv[1..], each at least 1) as
// the host does for a launch, and prints, for every task of the launch in order, the run that
// run_of_task (custom_op/csrc/cuda/decode_runs.h, the kernel's code) says holds it.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/decode_runs.h"

int main(int argc, char** argv) {
  std::vector<custom_op::gpu::DecodeRun> runs;
  int32_t tasks = 0;
  for (int i = 1; i < argc; ++i) {
    const int32_t count = static_cast<int32_t>(std::atoi(argv[i]));
    if (count < 1) return 2;
    runs.push_back({i - 1, 10 * i, count, tasks});
    tasks += count;
  }
  if (runs.empty()) return 2;
  for (int32_t t = 0; t < tasks; ++t)
    std::printf(t ? " %d" : "%d", custom_op::gpu::run_of_task(runs.data(), static_cast<int>(runs.size()), t));
  std::printf("\n");
  return 0;
}
