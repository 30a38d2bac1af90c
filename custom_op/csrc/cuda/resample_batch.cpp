#include "cuda/resample_batch.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/item_status.h"
#include "jpeg_core/resample_weights.h"

namespace custom_op {
namespace gpu {

namespace jc = jpeg_core;

ResampleBatch::ResampleBatch(Filter filter, bool antialias, int32_t dtype, std::vector<float> mean,
                             std::vector<float> std)
    : filter_(filter),
      antialias_(antialias),
      gpu_taps_(jc::arithmetic_filter(static_cast<int32_t>(filter))),
      dtype_(dtype),
      mean_(std::move(mean)),
      std_(std::move(std)) {}

void ResampleBatch::reserve(size_t items, size_t axes) {
  items_.reserve(items);
  axes_.reserve(axes);
}

int ResampleBatch::add_axis(const char* name, const AxisPlan& p) {
  Axis axis;
  axis.plan = p;
  if (gpu_taps_) {
    axis.spec = {p.in0, p.in1, p.out_size, p.origin, p.in_count, static_cast<int32_t>(filter_), antialias_ ? 1 : 0};
    axis.geometry = jc::resample_geometry(axis.spec);
    axis.ksize = axis.geometry.ksize;
    scratch_.resize(static_cast<size_t>(axis.ksize));
    int32_t first[2] = {0, 0}, count[2] = {0, 0};
    const int64_t ends[2] = {p.out_start, p.out_start + p.out_count - 1};
    for (int e = 0; e < 2; ++e)
      count[e] = output_taps(name, axis.spec, axis.geometry, ends[e], &first[e], scratch_.data());
    // The taps' first pixels are monotonic, so the first and last outputs bound the span.
    axis.lo = std::min(first[0], first[1]);
    axis.hi = std::max(first[0] + count[0], first[1] + count[1]);
  } else {
    axis.host =
        axis_taps(name, p.in0, p.in1, p.out_size, p.out_start, p.out_count, p.origin, p.in_count, filter_, antialias_);
    if (p.reverse) reverse_taps(&axis.host);
    axis.ksize = axis.host.ksize;
    std::tie(axis.lo, axis.hi) = taps_span(axis.host);
  }
  axes_.push_back(std::move(axis));
  return static_cast<int>(axes_.size()) - 1;
}

void ResampleBatch::add_item(const uint8_t* source, int64_t channels, int64_t height, int64_t width, int rows, int cols,
                             void* out) {
  const AxisPlan& r = axes_[static_cast<size_t>(rows)].plan;
  const AxisPlan& c = axes_[static_cast<size_t>(cols)].plan;
  const bool vertical_first = vertical_pass_first(r.in1 - r.in0, c.in1 - c.in0, r.out_size, c.out_size);
  items_.push_back({source, channels, height, width, rows, cols, vertical_first ? 1 : 0, out});
}

void ResampleBatch::run(const c10::Device& device, cudaStream_t stream) {
  if (items_.empty()) return;
  const auto on_device = at::TensorOptions().dtype(at::kByte).device(device);
  // The taps buffer, where the GPU computes them or the host's go.
  int64_t tap_words = 0, max_outputs = 0;
  for (Axis& axis : axes_) {
    axis.words_at = tap_words;
    tap_words += axis.words();
    max_outputs = std::max(max_outputs, axis.plan.out_count);
  }
  at::Tensor taps = at::empty({std::max<int64_t>(tap_words, 1) * 4}, on_device);
  auto* const words = reinterpret_cast<int32_t*>(taps.data_ptr<uint8_t>());
  const auto device_taps = [&](const Axis& a) {
    int32_t* base = words + a.words_at;
    const auto n = static_cast<int32_t>(a.plan.out_count);
    return jc::ResampleTaps{base, base + n, base + 2 * n, a.ksize, n, a.lo, a.hi};
  };
  // The intermediates, one allocation.
  int64_t mid_total = 0, max_mid = 0, max_out = 0;
  std::vector<int64_t> mid_at(items_.size());
  for (size_t j = 0; j < items_.size(); ++j) {
    const Item& it = items_[j];
    const Axis& r = axes_[static_cast<size_t>(it.rows)];
    const Axis& c = axes_[static_cast<size_t>(it.cols)];
    const int64_t mid =
        it.channels * (it.vertical_first ? r.plan.out_count * (c.hi - c.lo) : (r.hi - r.lo) * c.plan.out_count);
    mid_at[j] = mid_total;
    mid_total += mid;
    max_mid = std::max(max_mid, mid);
    max_out = std::max(max_out, it.channels * r.plan.out_count * c.plan.out_count);
  }
  at::Tensor mids = at::empty({std::max<int64_t>(mid_total, 1)}, on_device);

  // Pinned: the item descriptors, the taps jobs (GPU taps) or the taps themselves (host taps).
  const size_t jobs = gpu_taps_ ? axes_.size() : 0;
  const size_t host_words = gpu_taps_ ? 0 : static_cast<size_t>(tap_words);
  const size_t items_bytes = items_.size() * sizeof(jc::ResampleItem);
  const size_t jobs_at = (items_bytes + 15) / 16 * 16;
  const size_t words_at = (jobs_at + jobs * sizeof(TapsJob) + 15) / 16 * 16;
  const size_t bytes = words_at + host_words * sizeof(int32_t);
  at::Tensor host = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  at::Tensor up = at::empty({static_cast<int64_t>(bytes)}, on_device);
  uint8_t* const h = host.data_ptr<uint8_t>();
  for (size_t j = 0; j < items_.size(); ++j) {
    const Item& it = items_[j];
    jc::ResampleItem d{};
    d.source = it.source;
    d.source_plane = it.height * it.width;
    d.source_pitch = static_cast<int32_t>(it.width);
    d.mid = mids.data_ptr<uint8_t>() + mid_at[j];
    d.channels = static_cast<int32_t>(it.channels);
    d.vertical_first = it.vertical_first;
    d.rows = device_taps(axes_[static_cast<size_t>(it.rows)]);
    d.cols = device_taps(axes_[static_cast<size_t>(it.cols)]);
    d.out = it.out;
    d.dtype = dtype_;
    for (int64_t c = 0; c < it.channels && c < 4; ++c) {
      d.mean[c] = mean_.empty() ? 0.0f : mean_[static_cast<size_t>(c)];
      d.std[c] = std_.empty() ? 1.0f : std_[static_cast<size_t>(c)];
    }
    std::memcpy(h + j * sizeof(jc::ResampleItem), &d, sizeof(d));
  }
  for (size_t a = 0; a < axes_.size(); ++a) {
    const Axis& axis = axes_[a];
    const jc::ResampleTaps t = device_taps(axis);
    if (gpu_taps_) {
      const TapsJob job{axis.spec,
                        axis.geometry,
                        axis.plan.out_start,
                        static_cast<int32_t>(axis.plan.out_count),
                        axis.plan.reverse ? 1 : 0,
                        const_cast<int32_t*>(t.first),
                        const_cast<int32_t*>(t.count),
                        const_cast<int32_t*>(t.weights)};
      std::memcpy(h + jobs_at + a * sizeof(TapsJob), &job, sizeof(job));
    } else {
      auto* base = reinterpret_cast<int32_t*>(h + words_at) + axis.words_at;
      const int64_t n = axis.plan.out_count;
      std::memcpy(base, axis.host.first.data(), sizeof(int32_t) * n);
      std::memcpy(base + n, axis.host.count.data(), sizeof(int32_t) * n);
      std::memcpy(base + 2 * n, axis.host.weights.data(), sizeof(int32_t) * n * axis.ksize);
    }
  }
  up.copy_(host, /*non_blocking=*/true);
  const uint8_t* u = up.const_data_ptr<uint8_t>();
  if (!gpu_taps_)
    C10_CUDA_CHECK(
        cudaMemcpyAsync(words, u + words_at, host_words * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  C10_CUDA_CHECK(launch_resample(reinterpret_cast<const TapsJob*>(u + jobs_at), static_cast<int>(jobs), max_outputs,
                                 reinterpret_cast<const jc::ResampleItem*>(u), static_cast<int>(items_.size()), max_mid,
                                 max_out, stream));
}

}  // namespace gpu
}  // namespace custom_op
