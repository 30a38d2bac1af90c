#include "cuda/resample_kernels.h"

namespace custom_op {
namespace gpu {
namespace {

namespace jc = jpeg_core;

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerItem = 512;
constexpr int kMaxItemsPerLaunch = 65535;  // gridDim.y
constexpr int kOutputsPerThread = 8;       // the second pass's, against its table's set-up

// One thread per output pixel of an axis.
__global__ void taps_kernel(const TapsJob* jobs) {
  const TapsJob job = jobs[blockIdx.y];
  const int ksize = job.geometry.ksize;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < job.out_count; j += gridDim.x * blockDim.x) {
    const int64_t i = job.out_start + (job.reverse ? job.out_count - 1 - j : j);
    int32_t* weights = job.weights + static_cast<int64_t>(j) * ksize;
    int32_t first = 0;
    const int32_t n = jc::arithmetic_output_taps(job.spec, job.geometry, i, &first, weights);
    // An output without a source pixel (the host checked the first and last) reads nothing.
    job.first[j] = first;
    job.count[j] = n;
  }
}

// The item's descriptor, read once per thread block into shared memory (each thread reading its own
// copy from global memory cost more than the sums).
__device__ __forceinline__ void load_item(const jc::ResampleItem* items, jc::ResampleItem* shared) {
  constexpr int kWords = sizeof(jc::ResampleItem) / sizeof(uint32_t);
  static_assert(sizeof(jc::ResampleItem) % sizeof(uint32_t) == 0, "descriptors are copied a word at a time");
  const auto* from = reinterpret_cast<const uint32_t*>(items + blockIdx.y);
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) reinterpret_cast<uint32_t*>(shared)[i] = from[i];
  __syncthreads();
}

// Calls f(c, y, x, p) for every sample p of a [channels, rows, cols] plane set that this thread takes:
// neighbouring threads take neighbouring samples of a row, so that their reads and writes coalesce.
// The index arithmetic is 32-bit where the samples allow (64-bit division is many instructions).
template <typename F>
__device__ __forceinline__ void for_each_sample(int channels, int rows, int cols, F f) {
  const int64_t plane = static_cast<int64_t>(rows) * cols, total = plane * channels;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (total <= INT32_MAX) {
    const auto plane32 = static_cast<uint32_t>(plane), cols32 = static_cast<uint32_t>(cols);
    for (auto p = static_cast<uint32_t>(start); p < static_cast<uint32_t>(total); p += static_cast<uint32_t>(step)) {
      const uint32_t c = p / plane32, q = p - c * plane32, y = q / cols32;
      f(static_cast<int>(c), static_cast<int>(y), static_cast<int>(q - y * cols32), static_cast<int64_t>(p));
    }
    return;
  }
  for (int64_t p = start; p < total; p += step) {
    const int c = static_cast<int>(p / plane);
    const int64_t q = p - c * plane;
    const int y = static_cast<int>(q / cols);
    f(c, y, static_cast<int>(q - static_cast<int64_t>(y) * cols), p);
  }
}

__global__ void first_pass_kernel(const jc::ResampleItem* items) {
  __shared__ jc::ResampleItem it;
  load_item(items, &it);
  for_each_sample(it.channels, jc::resample_mid_rows(it), jc::resample_mid_cols(it),
                  [&](int c, int y, int x, int64_t p) { it.mid[p] = jc::resample_first_pass(it, c, y, x); });
}

// The output values of the item's 256 sample values per channel are tabulated first: the float
// divisions of the normalisation then run 256 times per channel and thread block instead of once per
// output, and each thread block takes enough outputs (kOutputsPerThread a thread) for that to pay.
__global__ void second_pass_kernel(const jc::ResampleItem* items) {
  __shared__ jc::ResampleItem it;
  __shared__ uint32_t table[4][256];
  load_item(items, &it);
  for (int i = threadIdx.x; i < it.channels * 256; i += blockDim.x)
    table[i / 256][i % 256] = jc::resample_output_bits(it, i / 256, static_cast<uint8_t>(i % 256));
  __syncthreads();
  for_each_sample(it.channels, it.rows.outputs, it.cols.outputs, [&](int c, int y, int x, int64_t p) {
    jc::resample_store_bits(it, p, table[c][jc::resample_second_pass(it, c, y, x)]);
  });
}

int grid_for(int64_t work) {
  int64_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocksPerItem) blocks = kMaxBlocksPerItem;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

}  // namespace

cudaError_t launch_resample(const TapsJob* jobs, int job_count, int64_t max_outputs, const jc::ResampleItem* items,
                            int count, int64_t max_mid, int64_t max_out, cudaStream_t stream) {
  for (int first = 0; first < job_count; first += kMaxItemsPerLaunch) {
    const int n = job_count - first < kMaxItemsPerLaunch ? job_count - first : kMaxItemsPerLaunch;
    taps_kernel<<<dim3(grid_for(max_outputs), n), kThreads, 0, stream>>>(jobs + first);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  for (int first = 0; first < count; first += kMaxItemsPerLaunch) {
    const int n = count - first < kMaxItemsPerLaunch ? count - first : kMaxItemsPerLaunch;
    first_pass_kernel<<<dim3(grid_for(max_mid), n), kThreads, 0, stream>>>(items + first);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    second_pass_kernel<<<dim3(grid_for(max_out / kOutputsPerThread), n), kThreads, 0, stream>>>(items + first);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace custom_op
