// Splits interleaved RGB pixels (what libjpeg writes) into three planes (what a CHW tensor holds).
#pragma once

#include <cstdint>

namespace custom_op {

// r[i], g[i], b[i] = rgb[3i], rgb[3i+1], rgb[3i+2] for i < n. The four buffers must not overlap.
void deinterleave_rgb(const uint8_t* rgb, uint8_t* r, uint8_t* g, uint8_t* b, int n);

}  // namespace custom_op
