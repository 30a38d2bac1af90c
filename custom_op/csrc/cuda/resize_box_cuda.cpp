// resize_box on CUDA tensors: the CPU kernel's resampling (its checks, its taps, its pass order and
// arithmetic, through resample_batch.h), so that an image resized on the GPU equals the same image
// resized on the CPU. An [N, C, H, W] batch is one call: its images share their taps.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/item_status.h"
#include "common/resize_box_args.h"
#include "cuda/resample_batch.h"
#include "jpeg_core/normalize.h"

namespace custom_op {
namespace gpu {
namespace {

at::Tensor resize_box_cuda(const at::Tensor& image, c10::ArrayRef<double> box, c10::IntArrayRef size,
                           c10::IntArrayRef out_window, c10::IntArrayRef origin, int64_t filter, bool antialias,
                           bool flip) {
  std::ostringstream shape;
  shape << image.sizes();
  CUSTOM_OP_CHECK_TYPE(image.is_cuda() && image.scalar_type() == at::kByte && (image.dim() == 3 || image.dim() == 4),
                       "resize_box: image must be a uint8 CUDA tensor [C, H, W] or [N, C, H, W], got ",
                       image.scalar_type(), " of shape ", shape.str());
  const ResizeBoxArgs a = checked_resize_box_args(
      image.sizes().data(), image.sizes().size(), shape.str(), box.data(), box.size(), size.data(), size.size(),
      out_window.data(), out_window.size(), origin.data(), origin.size(), filter, antialias, flip);
  c10::cuda::CUDAGuard device_guard(image.device());
  const at::Tensor src = image.contiguous();
  std::vector<int64_t> shape_out = image.sizes().vec();
  shape_out[shape_out.size() - 2] = a.height;
  shape_out[shape_out.size() - 1] = a.width;
  at::Tensor out = at::empty(shape_out, image.options());
  ResampleBatch batch(a.filter, a.antialias, jpeg_core::kOutUint8, {}, {});
  AxisPlan rows{a.box[0], a.box[2], a.out_h, a.top, a.height, a.origin_row, a.H, false};
  AxisPlan cols{a.box[1], a.box[3], a.out_w, a.left, a.width, a.origin_col, a.W, a.flip};
  const int r = batch.add_axis("row", rows), c = batch.add_axis("column", cols);
  const int64_t in_plane = a.C * a.H * a.W, out_plane = a.C * a.height * a.width;
  for (int64_t i = 0; i < a.images; ++i)
    batch.add_item(src.const_data_ptr<uint8_t>() + i * in_plane, a.C, a.H, a.W, r, c,
                   out.data_ptr<uint8_t>() + i * out_plane);
  batch.run(image.device(), c10::cuda::getCurrentCUDAStream(image.device().index()).stream());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(custom_op, CUDA, m) { m.impl("resize_box", &resize_box_cuda); }

}  // namespace gpu
}  // namespace custom_op
