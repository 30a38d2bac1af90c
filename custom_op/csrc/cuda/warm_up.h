// One-time work of a JPEG-engine state, done before its first real batch rather than by it.
#pragma once

#include "cuda/nvjpeg_context.h"

namespace custom_op {
namespace gpu {

// Puts the slot's JPEG-engine state of an output format group through one tiny decode, the first time
// the engines get files of that group (warm_up.cpp says why); a process that never gives the engines a
// file does not pay for it. Call before the call's staging is laid out: the decode writes there.
// Best effort: what nvJPEG declines here is done by the first real calls instead.
void warm_up(DeviceContext& context, DecodeState& state, Slot& slot, int group);

}  // namespace gpu
}  // namespace custom_op
