// One-time work of a new decode state, done when it is created rather than by the first calls.
#pragma once

#include "cuda/nvjpeg_context.h"

namespace custom_op {
namespace gpu {

// Puts each of the state's JPEG-engine states through one tiny decode (warm_up.cpp says why).
// Best effort: what nvJPEG declines here is done by the first real calls instead.
void warm_up(DeviceContext& context, DecodeState& state);

}  // namespace gpu
}  // namespace custom_op
