// The one kernel of the GPU path: moves each decoded region from the private staging buffer into its
// output tensor, on the caller's stream, applying the EXIF orientation and the channel mapping.
//
// nvJPEG writes into staging memory that only this library touches (the hardware decoder writes when
// it is called, not in stream order); outputs are only ever written by this kernel, in stream order.
// Plain CUDA, no torch headers, so that nvcc compiles it quickly.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace custom_op {
namespace gpu {

struct WindowCopy {
  const uint8_t* src;  // plane 0 (R, or Y) of the decoded region in staging
  int64_t src_plane;   // bytes from one decoded plane to the next
  int32_t src_pitch;   // bytes from one decoded row to the next (every plane)
  int32_t src_top;     // where the stored-frame window starts inside the decoded region
  int32_t src_left;
  int32_t src_planes;     // planar copy: 1 (Y, fed to every output channel) or 3 decoded planes
  int32_t region_height;  // the stored-frame window
  int32_t region_width;
  uint8_t* dst;  // output [channels, H, W]; H and W are the region's, swapped for 5..8
  int32_t channels;
  int32_t orientation;  // EXIF 1..8
  // ycc = 1: the planes are Y, Cb, Cr as stored (chroma subsampled by h_factor x v_factor); the
  // kernel upsamples and converts to RGB with libjpeg-turbo's integer arithmetic.
  int32_t ycc;
  int32_t h_factor;       // 1 or 2
  int32_t v_factor;       // 1 or 2
  int32_t fancy;          // libjpeg's interpolating upsampling (0: replication, for images <= 4 wide)
  int32_t chroma_width;   // chroma samples of the decoded region: beyond them libjpeg replicates the
  int32_t chroma_height;  // edge (the region's edges are the image's, or lie beyond the window's reach)
};

// descs: `count` descriptors in device memory. max_pixels: the largest H*W among them, which sizes
// the grid. Returns the launch's error code.
cudaError_t launch_window_copies(const WindowCopy* descs, int count, int64_t max_pixels, cudaStream_t stream);

}  // namespace gpu
}  // namespace custom_op
