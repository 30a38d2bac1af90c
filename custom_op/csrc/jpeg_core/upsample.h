// libjpeg-turbo's chroma upsampling (jdsample.c) with do_fancy_upsampling = TRUE, one output sample
// at a time.
//
// Why per output sample: a GPU thread per output pixel reads the few component samples it needs,
// so the function takes the output coordinates and reads the plane directly; the CPU harness calls
// the same function for every pixel. libjpeg works a row group at a time, but its results are a
// pure function of the component's real samples, which is what this reproduces:
//   - which method a component gets is jinit_upsampler's choice, restated in choose_upsample: full
//     size; "fancy" triangle filters for 2:1 horizontal (h2v1), 2:1 vertical (h1v2, which
//     libjpeg-turbo has had since 2.0; on x86 it is C only) and 2:1 both ways (h2v2); plain
//     replication (int_upsample, a box filter) for any other integral ratio, 4:1:1 included. In a
//     scaled decode the ratios are those left after the IDCT (scaling.h), and at 1/8 every ratio
//     but 1:1 is replicated;
//   - h2v1 and h2v2 are fancy only when the component is more than 2 samples wide: a plane of 1 or 2
//     samples is replicated (h2v1_upsample / h2v2_upsample), in BOTH directions for h2v2. h1v2 is
//     fancy whatever the width;
//   - at the image's edges the missing neighbour is the edge sample itself: horizontally because
//     jdsample.c's first and last columns are special-cased that way (the SIMD versions insert a
//     copy of the last sample), vertically because jdmainct.c gives the first row group a copy of
//     the first row as its row above and pads below the last real row with copies of it. "The
//     edge" is the component's real size (libjpeg's downsampled_width/height), not the block-padded
//     plane: samples past it are never read.
// The SIMD versions of h2v1/h2v2 fancy upsampling compute exactly the C code's values (the tests
// check against libjpeg with and without SIMD).
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

enum UpsampleMethod : int {
  kUpsampleNone = -1,  // sampling ratios libjpeg cannot upsample (JERR_FRACT_SAMPLE_NOTIMPL)
  kUpsampleFull = 0,
  kUpsampleFancyH2V1 = 1,
  kUpsampleFancyH1V2 = 2,
  kUpsampleFancyH2V2 = 3,
  kUpsampleReplicate = 4,
};

// jinit_upsampler's choice for a component with these ratios (max factor / component factor, 0 when
// not integral; at a reduced scale, scaling.h's) and real width in samples. `fancy` is libjpeg's
// do_fancy: fancy upsampling requested and the output scale above 1/8 (scaling.h says why); without
// it every ratio but 1:1 is replicated (h2v1_upsample, h2v2_upsample, int_upsample).
CUSTOM_OP_HD inline int choose_upsample(int h_ratio, int v_ratio, int sample_width, bool fancy = true) {
  if (h_ratio < 1 || v_ratio < 1) return kUpsampleNone;
  if (h_ratio == 1 && v_ratio == 1) return kUpsampleFull;
  if (!fancy) return kUpsampleReplicate;
  if (h_ratio == 2 && v_ratio == 1) return sample_width > 2 ? kUpsampleFancyH2V1 : kUpsampleReplicate;
  if (h_ratio == 1 && v_ratio == 2) return kUpsampleFancyH1V2;
  if (h_ratio == 2 && v_ratio == 2) return sample_width > 2 ? kUpsampleFancyH2V2 : kUpsampleReplicate;
  return kUpsampleReplicate;
}

// One component's decoded samples: width x height real samples (the plane behind them may be
// larger), row r starting at data + r * pitch.
struct SamplePlane {
  const uint8_t* data;
  ptrdiff_t pitch;
  int width, height;
  int h_ratio, v_ratio;
  int method;  // choose_upsample's
};

// The upsampled value at output pixel (y, x), 0 <= y < height * v_ratio, 0 <= x < width * h_ratio
// (the image itself is never larger). Reads only samples inside width x height.
CUSTOM_OP_HD inline int upsampled_sample(const SamplePlane& p, int y, int x) {
  switch (p.method) {
    case kUpsampleFull: return p.data[y * p.pitch + x];
    case kUpsampleFancyH2V1: {
      const uint8_t* row = p.data + y * p.pitch;
      const int k = x >> 1;
      const int near = 3 * row[k];
      // Odd outputs lean right (bias 2), even ones left (bias 1): libjpeg's ordered dither.
      return (x & 1) ? (near + row[min_int(k + 1, p.width - 1)] + 2) >> 2 : (near + row[max_int(k - 1, 0)] + 1) >> 2;
    }
    case kUpsampleFancyH1V2: {
      const int j = y >> 1;
      const int other = (y & 1) ? min_int(j + 1, p.height - 1) : max_int(j - 1, 0);
      return (3 * p.data[j * p.pitch + x] + p.data[other * p.pitch + x] + ((y & 1) ? 2 : 1)) >> 2;
    }
    case kUpsampleFancyH2V2: {
      const int j = y >> 1;
      const int other = (y & 1) ? min_int(j + 1, p.height - 1) : max_int(j - 1, 0);
      const uint8_t* near_row = p.data + j * p.pitch;
      const uint8_t* far_row = p.data + other * p.pitch;
      const int k = x >> 1;
      // Column sums of the nearer row (3/4) and the further one (1/4), then the same horizontally.
      const int here = 3 * near_row[k] + far_row[k];
      const int kn = (x & 1) ? min_int(k + 1, p.width - 1) : max_int(k - 1, 0);
      const int beside = 3 * near_row[kn] + far_row[kn];
      return (3 * here + beside + ((x & 1) ? 7 : 8)) >> 4;
    }
    case kUpsampleReplicate: return p.data[(y / p.v_ratio) * p.pitch + x / p.h_ratio];
    default: return 0;
  }
}

}  // namespace jpeg_core
}  // namespace custom_op
