#include "cuda/copy_out.h"

#include <algorithm>
#include <cstring>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>

#include "cuda/window_copy.h"

namespace custom_op {
namespace gpu {
namespace {

WindowCopy describe(const Slot& slot, const Item& it, const at::Tensor& out) {
  const JpegHeader& h = it.header;  // of the bytes decoded: the sub-image's, with segments
  const bool stored_planes = it.staged_format == NVJPEG_OUTPUT_YUV;
  WindowCopy w;
  std::memset(&w, 0, sizeof(w));
  w.src = slot.staging.data() + it.staging_offset;
  w.src_plane = it.staging_pitch * it.decoded.height;
  w.src_pitch = static_cast<int32_t>(it.staging_pitch);
  w.src_top = it.region.top - it.decoded.top;
  w.src_left = it.region.left - it.decoded.left;
  w.src_planes = staged_planes(it.staged_format);
  w.region_height = it.region.height;
  w.region_width = it.region.width;
  w.dst = out.data_ptr<uint8_t>();
  w.channels = it.channels;
  w.orientation = it.orientation;
  if (stored_planes && h.components == 3 && it.channels == 3) {
    // Eligible files have 1x1 chroma, so the luma factors are the subsampling factors. The region
    // starts on an MCU boundary, so its chroma starts on a whole sample.
    w.ycc = 1;
    w.h_factor = h.h[0];
    w.v_factor = h.v[0];
    // libjpeg upsamples by replication where the whole image has 2 chroma columns or fewer.
    w.fancy = !(h.h[0] == 2 && (h.width + 1) / 2 <= 2);
    w.chroma_width = (it.decoded.width + h.h[0] - 1) / h.h[0];
    w.chroma_height = (it.decoded.height + h.v[0] - 1) / h.v[0];
  }
  return w;
}

}  // namespace

void copy_out(DeviceContext& context, Slot& slot, const std::vector<Item>& items,
              const std::vector<at::Tensor>& outputs, cudaStream_t stream) {
  std::vector<WindowCopy> copies;
  int64_t max_pixels = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (!staged(it.path)) continue;
    copies.push_back(describe(slot, it, outputs[i]));
    max_pixels = std::max<int64_t>(max_pixels, int64_t(it.region.height) * it.region.width);
  }
  if (copies.empty()) return;
  const size_t bytes = copies.size() * sizeof(WindowCopy);
  at::Tensor& pinned = slot.pinned_descriptors;
  if (!pinned.defined() || static_cast<size_t>(pinned.numel()) < bytes) {
    pinned = at::empty({static_cast<int64_t>(bytes * 2)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  }
  std::memcpy(pinned.data_ptr(), copies.data(), bytes);
  slot.descriptors.reserve(bytes, context.tag_stream);
  C10_CUDA_CHECK(cudaMemcpyAsync(slot.descriptors.data(), pinned.data_ptr(), bytes, cudaMemcpyHostToDevice, stream));
  C10_CUDA_CHECK(launch_window_copies(reinterpret_cast<const WindowCopy*>(slot.descriptors.data()),
                                      static_cast<int>(copies.size()), max_pixels, stream));
}

}  // namespace gpu
}  // namespace custom_op
