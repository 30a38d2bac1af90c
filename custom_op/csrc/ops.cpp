// Every operator of the custom_op namespace, declared once, by the CPU library (on torch's stable ABI,
// cpu/tensors.h). Kernels live with their backend: cpu/*_cpu.cpp (STABLE_TORCH_LIBRARY_IMPL CPU),
// cuda/decode_cuda.cpp (the GPU library, loaded on first use). Fake kernels, for torch.compile and
// FakeTensor tracing, are in custom_op/_ops.py.
//
// Options are keyword-only: Python passes them by name (custom_op/_args.py), and a kernel reads the
// decoding options into one checked value (common/checked_options.h: mode 0 UNCHANGED, 1 GRAY, 2 RGB;
// on_warning 0 raise, 1 warn, 2 ignore; max_pixels 0 = no limit). The kernels' errors reach Python as
// RuntimeError; one that the Python API raises as ValueError or TypeError starts with that type's name
// (common/item_status.h).
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(custom_op, m) {
  // One image. `warnings`: libjpeg's warnings with on_warning "warn", as UTF-8 text in a 1-D uint8
  // tensor (empty when none; Python raises them as a UserWarning). A tensor rather than a str, so that
  // torch.compile can keep the call in one graph. scale_num: decode at scale_num/8 of full size
  // (libjpeg's DCT scaling, 1..16); the window is then given in that scaled image.
  m.def(
      "decode_and_crop_jpeg(Tensor data, int top, int left, int height, int width, *, int mode, "
      "bool apply_exif_orientation, int on_warning, int max_pixels, int scale_num=8) "
      "-> (Tensor image, Tensor warnings)");
  m.def(
      "decode_jpeg(Tensor data, *, int mode, bool apply_exif_orientation, int on_warning, int max_pixels) "
      "-> (Tensor image, Tensor warnings)");
  // height and width are the displayed ones when apply_exif_orientation. color_space: libjpeg's
  // J_COLOR_SPACE. sampling: h, v of each component.
  m.def(
      "read_jpeg_header(Tensor data, *, bool apply_exif_orientation) -> (int height, int width, int channels, "
      "int color_space, bool progressive, bool arithmetic, int orientation, int[] sampling, bool random_access)");

  // Batches. With whole=True each image is decoded whole and the window lists are ignored. Bad items
  // do not raise: each item has a status (common/item_status.h: 0 ok, 1 decoded with warnings, 2-4
  // ValueError, TypeError, RuntimeError) and a message. (The str[] output makes torch.compile run
  // these calls outside its graphs, where the statuses are real.) A failed item's image is an empty tensor, or
  // zeros in the stack. stack=True: `images` holds one [N, C, H, W] tensor (empty when no item
  // decoded and its shape cannot be known); outputs of different shapes raise ValueError.
  // On the CPU, the items are decoded in parallel on torch's intra-op thread pool.
  m.def(
      "decode_jpegs(Tensor[] data, int[] tops, int[] lefts, int[] heights, int[] widths, *, bool whole, int mode, "
      "bool apply_exif_orientation, int on_warning, int max_pixels, bool stack) "
      "-> (Tensor[] images, int[] status, str[] messages)");
  // The same on CUDA device `device` (the encoded bytes stay on the CPU), ordered on its current
  // stream. paths: which decoder took each item (common/decode_path.h). check_entropy: before nvJPEG
  // gets a file, _check_entropy_data checks it on the CPU, and a file it finds anything wrong with
  // goes to the CPU path. scales: per item, its DCT scale in eighths (1, 2, 4 or 8; empty: all 8), the
  // pixels of decode_and_crop_jpeg's scale_num, with the window in the scaled image; windows only.
  // decoder: which GPU decoder takes the files both can (cuda/batch_item.h, GpuDecoder: 0 auto, 1 our
  // CUDA decoder every file it takes, 2 nvJPEG every file it takes).
  m.def(
      "decode_jpegs_cuda(Tensor[] data, int[] tops, int[] lefts, int[] heights, int[] widths, *, bool whole, "
      "int mode, bool apply_exif_orientation, int on_warning, int max_pixels, bool stack, int device, "
      "bool check_entropy=False, int[] scales=[], int decoder=0) "
      "-> (Tensor[] images, int[] status, str[] messages, int[] paths)");
  // The batched fused resized crop on CUDA device `device` (cuda/resized_crop_cuda.cpp): the arguments
  // of decode_and_resized_crop_jpegs, the same pixels, one stacked output on the device.
  m.def(
      "decode_and_resized_crop_jpegs_cuda(Tensor[] data, int[] tops, int[] lefts, int[] heights, int[] widths, *, "
      "int[] size, int resize_shorter, int scale, int filter, bool antialias, int[] flips, float[] mean, "
      "float[] std, int dtype, int mode, bool apply_exif_orientation, int on_warning, int max_pixels, int device, "
      "bool check_entropy=False, int decoder=0) -> (Tensor images, int[] status, str[] messages, int[] paths)");
  m.def(
      "gpu_backend_info(*, int device) -> (str nvjpeg_version, bool hardware, int hardware_engines, "
      "int hardware_cores, str hardware_note, bool torch_allocators)");

  // prepare_jpeg (cpu/prepare_cpu.cpp): a lossless rewrite into the random-access layout.
  // restart_mcus: the restart interval, in MCUs (at most the MCUs per row: larger values give one
  // segment per row); 0 chooses one for decoding speed, with every segment's data within
  // max_segment_bytes (0: no bound) and the file within a size budget of max_growth (a fraction of
  // the input's size).
  m.def(
      "prepare_jpeg(Tensor data, *, int restart_mcus, bool keep_exif, bool keep_icc, bool optimize, int max_pixels, "
      "float max_growth, int max_segment_bytes) -> Tensor");
  // resize_box (cpu/resize_cpu.cpp, cuda/resize_box_cuda.cpp): the fused resized crop's resampling.
  // image [C, H, W] uint8, or a batch [N, C, H, W] resampled alike, whose pixel (0, 0) is frame pixel
  // (origin[0], origin[1]); box (top, left, bottom, right) in frame
  // coordinates is mapped onto an output of `size` (h, w), of which the window out_window (top, left,
  // height, width) is returned. filter: 0 nearest, 1 bilinear, 2 bicubic, 3 box, 4 hamming, 5 lanczos.
  // flip: the window mirrored left-right (the output's columns in reverse order, at no extra cost).
  m.def(
      "resize_box(Tensor image, *, float[] box, int[] size, int[] out_window, int[] origin, int filter, "
      "bool antialias, bool flip=False) -> Tensor");

  // The fused resized crop of a batch (cpu/resized_crop_batch_cpu.cpp; each item planned by
  // common/resized_crop_plan.h): every item decoded at a reduced DCT scale and resampled to `size`
  // [h, w]. resize_shorter 0: crop then resize, of the windows (tops, lefts, heights, widths: one per
  // item, full-resolution pixels of the displayed frame); > 0: the image resized so that its shorter
  // side is resize_shorter, then its centred `size` crop (the window lists empty). scale: eighths
  // (1..16), 0 automatic. filter, antialias: as resize_box. flips: one 0/1 per item (1: mirrored
  // left-right), or empty for none. mean, std: empty, or one per output channel (torchvision's
  // Normalize, on values in [0, 1]). dtype: 0 uint8, 1 float32, 2 float16, 3 bfloat16
  // (jpeg_core/normalize.h; float outputs are x / 255, normalised when mean and std are given).
  // Returns one [N, C, h, w] tensor, and each item's status and message as decode_jpegs; a failed
  // item's slot is zeros. On the CPU, the items run in parallel on torch's intra-op thread pool.
  m.def(
      "decode_and_resized_crop_jpegs(Tensor[] data, int[] tops, int[] lefts, int[] heights, int[] widths, *, "
      "int[] size, int resize_shorter, int scale, int filter, bool antialias, int[] flips, float[] mean, "
      "float[] std, int dtype, int mode, bool apply_exif_orientation, int on_warning, int max_pixels) "
      "-> (Tensor images, int[] status, str[] messages)");

  // For tests and benchmarks (custom_op/testing.py).
  // The random-access path's sub-image of a window's restart segments (cpu/restart_index.h) and where
  // it lies, [top, left, height, width]; an empty tensor when the file has no such layout.
  m.def("_jpeg_sub_image(Tensor data, int top, int left, int height, int width) -> (Tensor, int[])");
  // Which restart segments the CPU path's decode of a stored-frame window at full scale reads
  // (common/restart_plan.h): (last MCU row, empty) when it decodes every segment from the first through
  // that row, (-1, the original segments its sub-image holds) otherwise. Segment lists are sorted int64
  // tensors (their length is known only from the file, which a fake kernel cannot say of an int[]).
  m.def("_jpeg_segments_read(Tensor data, int top, int left, int height, int width) -> (int, Tensor)");
  // The restart segments our CUDA decoder decodes when one decode of the file serves these windows
  // (stored frame, full scale).
  m.def("_cuda_decoder_segments(Tensor data, int[] tops, int[] lefts, int[] heights, int[] widths) -> Tensor");
  // Per file, what the GPU path's check_entropy found (cpu/libjpeg_session.h, ScanWalk): 0 nothing
  // wrong (libjpeg read the headers without a warning, and our entropy decoder walked the whole scan
  // to the end-of-image marker), 1 libjpeg warned or refused while setting the decode up, 2 a file
  // the walk does not take (progressive, arithmetic-coded, several scans), 3 the walk met something a
  // valid scan does not hold. The files are checked in parallel on torch's intra-op thread pool.
  m.def("_check_entropy_data(Tensor[] data) -> int[]");
  // Windows decoded through restart segments in this process.
  m.def("_random_access_decodes() -> int");
  // Our baseline Huffman decoder on or off (returns the old setting), and the scans it gave back to
  // libjpeg's own decoder (damaged data) in this process.
  m.def("_set_own_entropy_decoder(bool on) -> bool");
  m.def("_entropy_decoder_give_ups() -> int");
  // The GPU backend's testing options (cuda/testing_options.h); returns the ones before.
  // force_path: -1 none, else a path code of common/decode_path.h every GPU-capable item must take.
  m.def(
      "_set_gpu_testing(*, int force_path, bool no_margin, bool no_dedupe, int segments, int chunk_bytes, "
      "bool hide_engines, int window_bytes) -> int[]");
  // Items our own CUDA decoder gave to the CPU path, and windows it decoded again after their first try, in this
  // process (cuda/executor.h).
  m.def("_cuda_decoder_fallbacks() -> int");
  m.def("_cuda_decoder_retries() -> int");
  // The codes and sizes Python must agree on with the libraries (read modes, warning policies, item
  // statuses, GPU path codes, the GPU outputs' alignment, output dtypes), by name: tests/test_ops.py checks custom_op's
  // Python constants against them on any machine (cpu/constants_cpu.cpp).
  m.def("_constants() -> (str[] names, int[] values)");
}
