// A batch of GPU resamples described on the host and run in three launches (resample_kernels.h): the
// resized crop's (resized_crop_cuda.cpp) and resize_box's on CUDA tensors (resize_box_cuda.cpp).
//
// Axes and items are separate: several items may share an axis's taps (resize_box's images of one
// batch). The taps of the arithmetic filters are computed on the GPU, one thread per output pixel
// (jpeg_core/resample_weights.h); the host computes only each axis's first and last outputs, which bound
// the source span the passes read and say whether the box lies in the source. Hamming's and Lanczos's
// taps (sin and cos) are computed on the host and uploaded. Everything the launches read goes up in one
// copy from pinned memory; the buffers come from torch's caching allocator and are ordered on the
// stream given to run().
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/resample_taps.h"
#include "cuda/resample_kernels.h"

namespace custom_op {
namespace gpu {

// One axis: the box [in0, in1) onto out_size outputs, of which [out_start, out_start + out_count) are
// made, from a source holding frame pixels [origin, origin + in_count); reversed for a left-right flip.
struct AxisPlan {
  double in0 = 0, in1 = 0;
  int64_t out_size = 0, out_start = 0, out_count = 0, origin = 0, in_count = 0;
  bool reverse = false;
};

class ResampleBatch {
 public:
  // dtype: jpeg_core::OutputDtype; mean and std: one per channel, or empty.
  ResampleBatch(Filter filter, bool antialias, int32_t dtype, std::vector<float> mean, std::vector<float> std);

  // Room for `items` items and `axes` axes, so that adding them does not reallocate.
  void reserve(size_t items, size_t axes);

  // Returns the axis's index. Throws ValueError, with resize_box's message, when the box lies outside
  // the source (an output without a source pixel).
  int add_axis(const char* name, const AxisPlan& axis);

  // source: `channels` planes of height x width (device memory, contiguous); out: the item's
  // [channels, rows' out_count, cols' out_count] slot of the dtype (device memory).
  void add_item(const uint8_t* source, int64_t channels, int64_t height, int64_t width, int rows, int cols, void* out);

  bool empty() const { return items_.empty(); }

  // Queues the taps, both passes and the output on `stream` (on `device`).
  void run(const c10::Device& device, cudaStream_t stream);

 private:
  struct Axis {
    AxisPlan plan;
    jpeg_core::ResampleAxisSpec spec{};
    jpeg_core::ResampleGeometry geometry{};
    int32_t ksize = 0, lo = 0, hi = 0;
    AxisTaps host;         // the taps, where the host computes them
    int64_t words_at = 0;  // first, count, weights from here in the taps buffer (int32 words)
    int64_t words() const { return plan.out_count * (2 + ksize); }
  };
  struct Item {
    const uint8_t* source;
    int64_t channels, height, width;
    int rows, cols;
    int32_t vertical_first;
    void* out;
  };

  Filter filter_;
  bool antialias_;
  bool gpu_taps_;
  int32_t dtype_;
  std::vector<float> mean_, std_;
  std::vector<Axis> axes_;
  std::vector<Item> items_;
  std::vector<int32_t> scratch_;
};

}  // namespace gpu
}  // namespace custom_op
