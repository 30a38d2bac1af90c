// The GPU resized crop's per-sample code (custom_op/csrc/jpeg_core/resample.h) run on the CPU, with the
// host's taps (common/resample_taps.h), for tests/test_resample_core.py to compare with resize_box and
// with torch's normalisation.
//
//   resample_check IN OUT C H W box0 box1 box2 box3 out_h out_w top left height width origin_row
//                  origin_col filter antialias flip dtype [mean_c std_c]*C
//
// IN holds the planar uint8 image [C, H, W]; OUT gets the [C, height, width] result in dtype's bytes.
// The passes run as the kernels run them: every intermediate sample, then every output sample.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "common/resample_taps.h"
#include "jpeg_core/resample.h"

namespace jc = custom_op::jpeg_core;

namespace {

jc::ResampleTaps flat(const custom_op::AxisTaps& t) {
  const auto [lo, hi] = custom_op::taps_span(t);
  return {t.first.data(), t.count.data(), t.weights.data(), t.ksize, static_cast<int32_t>(t.first.size()), lo, hi};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 23) {
    std::fprintf(stderr, "usage: see the file's header\n");
    return 2;
  }
  const auto I = [&](int i) { return std::atoll(argv[i]); };
  const auto D = [&](int i) { return std::atof(argv[i]); };
  const int C = static_cast<int>(I(3));
  const int64_t H = I(4), W = I(5);
  const double box[4] = {D(6), D(7), D(8), D(9)};
  const int64_t out_h = I(10), out_w = I(11), top = I(12), left = I(13), height = I(14), width = I(15);
  const int64_t origin_row = I(16), origin_col = I(17);
  const auto filter = static_cast<custom_op::Filter>(I(18));
  const bool antialias = I(19) != 0, flip = I(20) != 0;
  const int dtype = static_cast<int>(I(21));
  if (argc != 22 + 2 * C || C < 1 || C > 4) {
    std::fprintf(stderr, "need a mean and a std per channel\n");
    return 2;
  }
  std::vector<uint8_t> image(static_cast<size_t>(C * H * W));
  FILE* in = std::fopen(argv[1], "rb");
  if (in == nullptr || std::fread(image.data(), 1, image.size(), in) != image.size()) return 3;
  std::fclose(in);
  try {
    const custom_op::AxisTaps rows =
        custom_op::axis_taps("row", box[0], box[2], out_h, top, height, origin_row, H, filter, antialias);
    custom_op::AxisTaps cols =
        custom_op::axis_taps("column", box[1], box[3], out_w, left, width, origin_col, W, filter, antialias);
    if (flip) custom_op::reverse_taps(&cols);
    jc::ResampleItem it{};
    it.source = image.data();
    it.source_plane = H * W;
    it.source_pitch = static_cast<int32_t>(W);
    it.channels = C;
    it.vertical_first = custom_op::vertical_pass_first(box[2] - box[0], box[3] - box[1], out_h, out_w);
    it.rows = flat(rows);
    it.cols = flat(cols);
    it.dtype = dtype;
    for (int c = 0; c < C; ++c) {
      it.mean[c] = static_cast<float>(D(22 + 2 * c));
      it.std[c] = static_cast<float>(D(23 + 2 * c));
    }
    const int mid_rows = jc::resample_mid_rows(it), mid_cols = jc::resample_mid_cols(it);
    std::vector<uint8_t> mid(static_cast<size_t>(C) * mid_rows * mid_cols);
    it.mid = mid.data();
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < mid_rows; ++y)
        for (int x = 0; x < mid_cols; ++x)
          mid[(static_cast<size_t>(c) * mid_rows + y) * mid_cols + x] = jc::resample_first_pass(it, c, y, x);
    const int64_t plane = height * width;
    std::vector<uint8_t> out(static_cast<size_t>(C * plane * jc::output_dtype_bytes(dtype)));
    it.out = out.data();
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
          jc::resample_store(it, c, c * plane + y * width + x, jc::resample_second_pass(it, c, y, x));
    FILE* f = std::fopen(argv[2], "wb");
    if (f == nullptr || std::fwrite(out.data(), 1, out.size(), f) != out.size()) return 3;
    std::fclose(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
