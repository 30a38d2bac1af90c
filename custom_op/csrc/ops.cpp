// The operator schemas, declared once for every backend. Kernels live in cpu/ (and cuda/ later).
#include <torch/library.h>

TORCH_LIBRARY(custom_op, m) {
  // mode: 0 UNCHANGED, 1 GRAY, 2 RGB. on_warning: 0 raise, 1 warn, 2 ignore. max_pixels: 0 = no limit.
  // scale_num: decode at scale_num/8 of full size (libjpeg's DCT scaling, 1..16); the window is then
  // given in that scaled image.
  m.def(
      "decode_and_crop_jpeg(Tensor data, int top, int left, int height, int width, int mode, "
      "bool apply_exif_orientation, int on_warning, int max_pixels, int scale_num=8) -> Tensor");
  m.def(
      "decode_jpeg(Tensor data, int mode, bool apply_exif_orientation, int on_warning, "
      "int max_pixels) -> Tensor");
  // The same with on_warning "warn": libjpeg's warnings come back as text ("" when none), for the
  // Python wrapper to raise as a UserWarning (TORCH_WARN does not reach Python's warnings from here).
  m.def(
      "decode_and_crop_jpeg_with_warnings(Tensor data, int top, int left, int height, int width, "
      "int mode, bool apply_exif_orientation, int max_pixels, int scale_num=8) -> (Tensor, str)");
  m.def(
      "decode_jpeg_with_warnings(Tensor data, int mode, bool apply_exif_orientation, int max_pixels) "
      "-> (Tensor, str)");
  // [height, width, num_components, jpeg_color_space, progressive, arithmetic, orientation,
  //  h_samp[0], v_samp[0], ..., h_samp[n-1], v_samp[n-1]]; height/width are displayed ones when asked.
  m.def("read_jpeg_header(Tensor data, bool apply_exif_orientation) -> int[]");
}
