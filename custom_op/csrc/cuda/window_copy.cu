#include "window_copy.h"

#include "orientation.h"

namespace custom_op {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerImage = 1024;
constexpr int kMaxImagesPerLaunch = 65535;  // gridDim.y

// libjpeg-turbo's h2v1 / h1v2 / h2v2 "fancy" upsampling (jdsample.c), one output sample: 3/4 of the
// nearer chroma sample and 1/4 of the next nearer in each subsampled direction, with its rounding
// biases; samples beyond the region's edge repeat the edge one, as libjpeg's do at the image's edge.
__device__ __forceinline__ int upsampled(const uint8_t* plane, int pitch, int y, int x, const WindowCopy& d) {
  if (d.h_factor == 1 && d.v_factor == 1) return plane[static_cast<int64_t>(y) * pitch + x];
  if (!d.fancy) return plane[static_cast<int64_t>(y / d.v_factor) * pitch + x / d.h_factor];
  const int last_col = d.chroma_width - 1, last_row = d.chroma_height - 1;
  if (d.v_factor == 1) {  // h2v1
    const uint8_t* row = plane + static_cast<int64_t>(y) * pitch;
    const int k = x >> 1;
    const int near = row[k];
    return (x & 1) ? (3 * near + row[min(k + 1, last_col)] + 2) >> 2 : (3 * near + row[max(k - 1, 0)] + 1) >> 2;
  }
  const int j = y >> 1;
  const int jn = (y & 1) ? min(j + 1, last_row) : max(j - 1, 0);
  const uint8_t* row = plane + static_cast<int64_t>(j) * pitch;
  const uint8_t* other = plane + static_cast<int64_t>(jn) * pitch;
  if (d.h_factor == 1) {  // h1v2
    return (3 * row[x] + other[x] + ((y & 1) ? 2 : 1)) >> 2;
  }
  const int k = x >> 1;  // h2v2: column sums of the two rows, then horizontally
  const int here = 3 * row[k] + other[k];
  if (x & 1) {
    const int kn = min(k + 1, last_col);
    return (3 * here + 3 * row[kn] + other[kn] + 7) >> 4;
  }
  const int kp = max(k - 1, 0);
  return (3 * here + 3 * row[kp] + other[kp] + 8) >> 4;
}

__device__ __forceinline__ uint8_t clamp255(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

__global__ void copy_windows(const WindowCopy* descs) {
  const WindowCopy d = descs[blockIdx.y];
  const bool swap = d.orientation >= 5;
  const int out_h = swap ? d.region_width : d.region_height;
  const int out_w = swap ? d.region_height : d.region_width;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  const int last_row = d.region_height - 1, last_col = d.region_width - 1;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < plane;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int y = static_cast<int>(p / out_w);
    const int x = static_cast<int>(p - static_cast<int64_t>(y) * out_w);
    int r, s;
    stored_position(d.orientation, y, x, last_row, last_col, &r, &s);
    const int ry = d.src_top + r, rx = d.src_left + s;  // in the decoded region
    if (d.ycc) {
      // libjpeg-turbo's YCbCr -> RGB (jdcolor.c): 16-bit fixed point, its tables' rounding.
      const int luma = d.src[static_cast<int64_t>(ry) * d.src_pitch + rx];
      const int cb = upsampled(d.src + d.src_plane, d.src_pitch, ry, rx, d) - 128;
      const int cr = upsampled(d.src + 2 * d.src_plane, d.src_pitch, ry, rx, d) - 128;
      d.dst[p] = clamp255(luma + ((91881 * cr + 32768) >> 16));
      d.dst[plane + p] = clamp255(luma + ((-22554 * cb + 32768 - 46802 * cr) >> 16));
      d.dst[2 * plane + p] = clamp255(luma + ((116130 * cb + 32768) >> 16));
      continue;
    }
    const int64_t at = static_cast<int64_t>(ry) * d.src_pitch + rx;
    for (int c = 0; c < d.channels; ++c) {
      // A gray file decoded to one plane feeds every output channel.
      d.dst[c * plane + p] = d.src[(d.src_planes == 1 ? 0 : c) * d.src_plane + at];
    }
  }
}

}  // namespace

cudaError_t launch_window_copies(const WindowCopy* descs, int count, int64_t max_pixels, cudaStream_t stream) {
  if (count <= 0 || max_pixels <= 0) return cudaSuccess;
  int64_t blocks = (max_pixels + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocksPerImage) blocks = kMaxBlocksPerImage;
  for (int first = 0; first < count; first += kMaxImagesPerLaunch) {
    const int n = count - first < kMaxImagesPerLaunch ? count - first : kMaxImagesPerLaunch;
    copy_windows<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)), kThreads, 0, stream>>>(descs + first);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace custom_op
