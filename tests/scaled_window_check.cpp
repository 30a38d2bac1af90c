// For tests/test_scaled_window.py: checks common/scaled_window.h against jpeg_core's scaled geometry
// and upsampler (jpeg_core/scaling.h, upsample.h), the code our CUDA decoder runs. For frames of many
// samplings and sizes, at scales 1, 2, 4 and 8, and windows at the edges, 1x1 ones, whole images and
// random ones: the grid's sizes are make_frame's and make_scaling's; an MCU covers a whole number of
// each component's samples; and every sample the upsampler reads for any pixel of a window lies in the
// MCU rectangle decode_rectangle gives for region_with_margin's region (samples outside it hold 255,
// inside 0, and every method's output is 0 only where all it read was 0). Prints "checks N failures M"
// and the first failures.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/scaled_window.h"
#include "jpeg_core/jpeg_core.h"

namespace jc = custom_op::jpeg_core;
using custom_op::McuRect;
using custom_op::Region;
using custom_op::ScaledGrid;

namespace {

long checks = 0, failures = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (ok) return;
  if (++failures <= 20) std::printf("FAIL %s\n", what.c_str());
}

struct Sampling {
  int n;
  int h[3], v[3];
};

std::string describe(const Sampling& s, int width, int height, int scale, const Region& r) {
  std::string out;
  for (int c = 0; c < s.n; ++c) out += std::to_string(s.h[c]) + "x" + std::to_string(s.v[c]) + " ";
  return out + std::to_string(width) + "x" + std::to_string(height) + " at " + std::to_string(scale) + "/8, window " +
         std::to_string(r.top) + "," + std::to_string(r.left) + " " + std::to_string(r.height) + "x" +
         std::to_string(r.width);
}

// One frame at one scale: its planes, 0 inside a window's rectangle and 255 elsewhere, and every pixel
// of the window upsampled from them.
void check_window(const Sampling& s, const jc::Frame& f, const jc::Scaling& sc, const ScaledGrid& g, const Region& r,
                  int width, int height) {
  const std::string what = describe(s, width, height, sc.scale, r);
  const Region decoded = custom_op::region_with_margin(r, g);
  expect(decoded.top <= r.top && decoded.left <= r.left && decoded.top + decoded.height >= r.top + r.height &&
             decoded.left + decoded.width >= r.left + r.width && decoded.top + decoded.height <= g.height &&
             decoded.left + decoded.width <= g.width,
         what + ": the margin region holds the window, inside the image");
  const McuRect m = custom_op::decode_rectangle(decoded, g);
  expect(m.rows > 0 && m.cols > 0 && m.row0 + m.rows <= g.mcu_rows && m.col0 + m.cols <= g.mcus_per_row,
         what + ": a rectangle inside the grid");
  if (m.rows <= 0 || m.cols <= 0) return;
  std::vector<uint8_t> planes[3];
  jc::SamplePlane sp[3];
  for (int c = 0; c < s.n; ++c) {
    const int size = sc.idct_size[c];
    const int pitch = f.blocks_per_row[c] * size, rows = f.block_rows[c] * size;
    planes[c].assign(static_cast<size_t>(pitch) * rows, 255);
    const int y0 = m.row0 * f.mcu_blocks_v[c] * size, y1 = (m.row0 + m.rows) * f.mcu_blocks_v[c] * size;
    const int x0 = m.col0 * f.mcu_blocks_h[c] * size, x1 = (m.col0 + m.cols) * f.mcu_blocks_h[c] * size;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) planes[c][static_cast<size_t>(y) * pitch + x] = 0;
    sp[c] = jc::scaled_plane(sc, c, planes[c].data(), pitch);
  }
  int outside = 0;
  for (int y = r.top; y < r.top + r.height; ++y)
    for (int x = r.left; x < r.left + r.width; ++x)
      for (int c = 0; c < s.n; ++c) outside += jc::upsampled_sample(sp[c], y, x) != 0;
  expect(outside == 0, what + ": " + std::to_string(outside) + " samples upsampled from outside the rectangle");
}

void check_frame(const Sampling& s, int width, int height, int scale, std::mt19937& rng) {
  jc::Frame f;
  if (!jc::make_frame(width, height, s.n, s.h, s.v, nullptr, &f)) return;
  jc::Scaling sc;
  if (!jc::make_scaling(f, scale, &sc)) return;
  for (int c = 0; c < s.n; ++c)
    if (sc.upsample[c] == jc::kUpsampleNone) return;  // libjpeg refuses it; so does our decoder
  const int mcu_w = s.n > 1 ? 8 * f.max_h : 8, mcu_h = s.n > 1 ? 8 * f.max_v : 8;
  const ScaledGrid g = custom_op::scaled_grid(width, height, mcu_w, mcu_h, scale);
  const std::string what = describe(s, width, height, scale, {0, 0, 0, 0});
  expect(g.width == sc.width && g.height == sc.height, what + ": output size is make_scaling's");
  expect(g.mcus_per_row == f.mcus_per_row && g.mcu_rows == f.mcu_rows, what + ": MCU grid is make_frame's");
  for (int c = 0; c < s.n; ++c)
    expect(f.mcu_blocks_h[c] * sc.idct_size[c] * sc.h_ratio[c] == g.mcu_width &&
               f.mcu_blocks_v[c] * sc.idct_size[c] * sc.v_ratio[c] == g.mcu_height,
           what + ": an MCU's samples of component " + std::to_string(c) + " cover the MCU's pixels");
  std::vector<Region> windows = {{0, 0, g.height, g.width},
                                 {0, 0, 1, 1},
                                 {g.height - 1, g.width - 1, 1, 1},
                                 {0, g.width - 1, g.height, 1},
                                 {g.height - 1, 0, 1, g.width}};
  std::uniform_int_distribution<int> ys(0, g.height - 1), xs(0, g.width - 1);
  for (int i = 0; i < 12; ++i) {
    const int top = ys(rng), left = xs(rng);
    const int h = std::uniform_int_distribution<int>(1, g.height - top)(rng);
    const int w = std::uniform_int_distribution<int>(1, g.width - left)(rng);
    windows.push_back({top, left, i % 3 == 0 ? 1 : h, i % 3 == 0 ? 1 : w});
  }
  for (const Region& r : windows) check_window(s, f, sc, g, r, width, height);
}

}  // namespace

int main() {
  const Sampling samplings[] = {
      {1, {1, 0, 0}, {1, 0, 0}},  // grey
      {1, {2, 0, 0}, {2, 0, 0}},  // grey declaring 2x2: still one block an MCU
      {3, {1, 1, 1}, {1, 1, 1}},  // 4:4:4
      {3, {2, 1, 1}, {1, 1, 1}},  // 4:2:2
      {3, {2, 1, 1}, {2, 1, 1}},  // 4:2:0
      {3, {1, 1, 1}, {2, 1, 1}},  // 4:4:0
      {3, {4, 1, 1}, {1, 1, 1}},  // 4:1:1
      {3, {4, 1, 1}, {2, 1, 1}},  // 4:1:0
      {3, {2, 1, 2}, {2, 2, 1}},  // unusual per-component factors
      {3, {1, 2, 2}, {1, 2, 2}},  // luma subsampled
      {3, {2, 2, 1}, {2, 1, 1}},
  };
  const int sizes[][2] = {{1, 1}, {2, 3}, {17, 9}, {61, 47}, {130, 211}, {33, 250}, {64, 64}};
  std::mt19937 rng(12345);
  for (const Sampling& s : samplings)
    for (const auto& wh : sizes)
      for (int scale : {1, 2, 4, 8}) check_frame(s, wh[0], wh[1], scale, rng);
  std::printf("checks %ld failures %ld\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
