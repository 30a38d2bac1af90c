#include "window_copy.h"

#include "jpeg_core/color.h"
#include "jpeg_core/upsample.h"
#include "orientation.h"

namespace custom_op {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksPerImage = 1024;
constexpr int kMaxImagesPerLaunch = 65535;  // gridDim.y

namespace jc = jpeg_core;

// A chroma plane of the decoded region as jpeg_core's upsampler reads it (libjpeg-turbo's fancy
// upsampling, or replication where the whole image has 2 chroma columns or fewer): the region's edges
// are the image's, or lie beyond the window's reach, so its chroma samples stand for the component's.
__device__ __forceinline__ jc::SamplePlane chroma_plane(const WindowCopy& d, const uint8_t* data) {
  jc::SamplePlane p;
  p.data = data;
  p.pitch = d.src_pitch;
  p.width = d.chroma_width;
  p.height = d.chroma_height;
  p.h_ratio = d.h_factor;
  p.v_ratio = d.v_factor;
  if (d.h_factor == 1 && d.v_factor == 1) p.method = jc::kUpsampleFull;
  else if (!d.fancy) p.method = jc::kUpsampleReplicate;
  else if (d.v_factor == 1) p.method = jc::kUpsampleFancyH2V1;
  else p.method = d.h_factor == 1 ? jc::kUpsampleFancyH1V2 : jc::kUpsampleFancyH2V2;
  return p;
}

__global__ void copy_windows(const WindowCopy* descs) {
  const WindowCopy d = descs[blockIdx.y];
  const bool swap = d.orientation >= 5;
  const int out_h = swap ? d.region_width : d.region_height;
  const int out_w = swap ? d.region_height : d.region_width;
  const int64_t plane = static_cast<int64_t>(out_h) * out_w;
  const int last_row = d.region_height - 1, last_col = d.region_width - 1;
  // Read only for stored YCbCr planes (d.ycc), which are three.
  const jc::SamplePlane cb_plane = chroma_plane(d, d.ycc ? d.src + d.src_plane : d.src);
  const jc::SamplePlane cr_plane = chroma_plane(d, d.ycc ? d.src + 2 * d.src_plane : d.src);
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < plane;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int y = static_cast<int>(p / out_w);
    const int x = static_cast<int>(p - static_cast<int64_t>(y) * out_w);
    int r, s;
    stored_position(d.orientation, y, x, last_row, last_col, &r, &s);
    const int ry = d.src_top + r, rx = d.src_left + s;  // in the decoded region
    if (d.ycc) {
      // The CPU path's arithmetic, from jpeg_core (tested against libjpeg-turbo on the CPU).
      const int luma = d.src[static_cast<int64_t>(ry) * d.src_pitch + rx];
      uint8_t rgb[3];
      jc::ycc_to_rgb(luma, jc::upsampled_sample(cb_plane, ry, rx), jc::upsampled_sample(cr_plane, ry, rx), rgb);
      d.dst[p] = rgb[0];
      d.dst[plane + p] = rgb[1];
      d.dst[2 * plane + p] = rgb[2];
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
