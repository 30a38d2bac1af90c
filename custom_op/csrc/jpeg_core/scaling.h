// libjpeg-turbo's DCT scaling (scale_num / scale_denom = 8): for a decode at 1/8, 2/8, 4/8 or 8/8 of
// the image's size, which IDCT size each component gets and how its samples are upsampled after it.
//
// Why a component is not simply scaled like the output. libjpeg-turbo 2.1.5 (jdmaster.c,
// jpeg_core_output_dimensions and jpeg_calc_output_dimensions, IDCT_SCALING_SUPPORTED):
//   - the output is ceil(size * scale / 8) pixels each way, and every block of a full-size component
//     becomes scale x scale samples (min_DCT_scaled_size = scale);
//   - a subsampled component's blocks are enlarged further by its IDCT, instead of by its upsampler:
//     starting from scale, the size doubles while it is below 8 and the component is still subsampled
//     by at least 2 relative to the output in BOTH directions (max_h * scale and max_v * scale both
//     multiples of 2 * factor * size). There is one size for both directions, so 4:2:2 and 4:4:0
//     chroma keep the output's size and are upsampled, while 4:2:0 chroma gets twice the output's
//     size and needs no upsampling below 8/8. (IJG libjpeg 9 also looks at do_fancy_upsampling and
//     scales each direction separately; libjpeg-turbo does neither.) jddctmgr.c then runs the IDCT of
//     that size: idct_scaled;
//   - the component's real samples (downsampled_width/height, what upsampling reads) are
//     ceil(size * factor * idct_size / (max_factor * 8)), and jdsample.c's jinit_upsampler sees one
//     "input group" of factor * idct_size / scale samples per max_factor pixels: its ratio is
//     max_factor / that, and the method is choose_upsample's, with libjpeg's do_fancy =
//     do_fancy_upsampling && scale > 1: at 1/8 libjpeg replicates (jdmainct.c cannot give the triangle
//     filters their context rows when a block is one sample).
// Resulting table (fancy upsampling on; "s" is the scale; Y is full size, 8/8 is the unscaled decode):
//   4:4:4, gray   every component s x s, no upsampling
//   4:2:2         chroma s, fancy h2v1 (replicated at 1/8 or when at most 2 samples wide)
//   4:4:0         chroma s, fancy h1v2 (replicated 1x2 at 1/8)
//   4:2:0         chroma 2s and no upsampling at 1/8, 2/8, 4/8; 8 with fancy h2v2 at 8/8
//   4:1:1         chroma s, replicated 4x1
//   4:1:0 (4x2)   chroma 2s with h2v1 (fancy at 2/8 and 4/8, replicated at 1/8); 8, replicated 4x2, at 8/8
#pragma once

#include "hd.h"
#include "tables.h"
#include "upsample.h"

namespace custom_op {
namespace jpeg_core {

// Whether libjpeg's scaled decode gives this output scale (samples per block side): the four sizes
// with a reduced IDCT here (jidctint.c's other sizes, 3/8 .. 7/8, are not implemented).
CUSTOM_OP_HD inline bool valid_scale(int scale) { return scale == 1 || scale == 2 || scale == 4 || scale == 8; }

// jpeg_calc_output_dimensions's IDCT size for a component with sampling factors h x v in a frame
// whose largest are max_h x max_v, at output scale `scale`.
CUSTOM_OP_HD inline int component_idct_size(int scale, int max_h, int max_v, int h, int v) {
  int size = scale;
  while (size < 8 && (max_h * scale) % (h * size * 2) == 0 && (max_v * scale) % (v * size * 2) == 0) size *= 2;
  return size;
}

// A frame's geometry at one output scale, per component.
struct Scaling {
  int scale;          // samples per block side of a full-size component: 1, 2, 4 or 8 (eighths of the image)
  int width, height;  // output pixels (libjpeg's output_width/height)
  int idct_size[kMaxComponents];  // samples per block side after the IDCT (DCT_scaled_size)
  int sample_width[kMaxComponents], sample_height[kMaxComponents];  // downsampled_width/height
  int h_ratio[kMaxComponents], v_ratio[kMaxComponents];             // upsampling ratios, 0 where not integral
  int upsample[kMaxComponents];  // choose_upsample's method (kUpsampleNone where libjpeg cannot)
};

// Fills `s` for frame `f` decoded at `scale` eighths. False, with `s` unusable, for a scale that
// valid_scale refuses. A component's plane after the IDCT is blocks_per_row * idct_size samples wide
// and block_rows * idct_size high; upsampling reads only its sample_width x sample_height corner.
CUSTOM_OP_HD inline bool make_scaling(const Frame& f, int scale, Scaling* s) {
  if (!valid_scale(scale)) return false;
  s->scale = scale;
  s->width = ceil_div_int(static_cast<int64_t>(f.width) * scale, 8);
  s->height = ceil_div_int(static_cast<int64_t>(f.height) * scale, 8);
  for (int c = 0; c < kMaxComponents; ++c) {
    s->idct_size[c] = s->sample_width[c] = s->sample_height[c] = 0;
    s->h_ratio[c] = s->v_ratio[c] = 0;
    s->upsample[c] = kUpsampleNone;
  }
  for (int c = 0; c < f.num_components; ++c) {
    const int size = component_idct_size(scale, f.max_h, f.max_v, f.h[c], f.v[c]);
    s->idct_size[c] = size;
    s->sample_width[c] = ceil_div_int(static_cast<int64_t>(f.width) * f.h[c] * size, int64_t{f.max_h} * 8);
    s->sample_height[c] = ceil_div_int(static_cast<int64_t>(f.height) * f.v[c] * size, int64_t{f.max_v} * 8);
    // jinit_upsampler: an input group of factor * size / scale samples becomes max_factor pixels.
    const int h_in = f.h[c] * size / scale, v_in = f.v[c] * size / scale;
    s->h_ratio[c] = f.max_h % h_in == 0 ? f.max_h / h_in : 0;
    s->v_ratio[c] = f.max_v % v_in == 0 ? f.max_v / v_in : 0;
    s->upsample[c] = choose_upsample(s->h_ratio[c], s->v_ratio[c], s->sample_width[c], scale > 1);
  }
  return true;
}

// Component c's samples after the IDCT, as the upsampler reads them: `data` is the plane's first
// sample, `pitch` its row pitch (at least blocks_per_row * idct_size).
CUSTOM_OP_HD inline SamplePlane scaled_plane(const Scaling& s, int c, const uint8_t* data, ptrdiff_t pitch) {
  SamplePlane p;
  p.data = data;
  p.pitch = pitch;
  p.width = s.sample_width[c];
  p.height = s.sample_height[c];
  p.h_ratio = s.h_ratio[c];
  p.v_ratio = s.v_ratio[c];
  p.method = s.upsample[c];
  return p;
}

}  // namespace jpeg_core
}  // namespace custom_op
