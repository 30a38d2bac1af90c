// CPU kernel of custom_op::_constants: every code and size that Python must agree on with the
// libraries, by name, so that a test on any machine (no GPU needed) catches a value changed on one
// side only. The GPU library compiles the same common/ headers.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/decode_path.h"
#include "common/item_status.h"
#include "common/options.h"
#include "common/output_layout.h"
#include "jpeg_core/normalize.h"
#include "tensors.h"

namespace custom_op {
namespace {

std::tuple<std::vector<std::string>, std::vector<int64_t>> constants() {
  const std::pair<const char*, int64_t> table[] = {
      {"read_mode.UNCHANGED", static_cast<int64_t>(ReadMode::kUnchanged)},
      {"read_mode.GRAY", static_cast<int64_t>(ReadMode::kGray)},
      {"read_mode.RGB", static_cast<int64_t>(ReadMode::kRgb)},
      {"on_warning.raise", static_cast<int64_t>(WarningPolicy::kRaise)},
      {"on_warning.warn", static_cast<int64_t>(WarningPolicy::kWarn)},
      {"on_warning.ignore", static_cast<int64_t>(WarningPolicy::kIgnore)},
      {"item_status.ok", static_cast<int64_t>(ItemStatus::kOk)},
      {"item_status.warned", static_cast<int64_t>(ItemStatus::kWarned)},
      {"item_status.value_error", static_cast<int64_t>(ItemStatus::kValueError)},
      {"item_status.type_error", static_cast<int64_t>(ItemStatus::kTypeError)},
      {"item_status.runtime_error", static_cast<int64_t>(ItemStatus::kRuntimeError)},
      {"path.hardware-roi", gpu::kHardwareRoi},
      {"path.hardware-full", gpu::kHardwareFull},
      {"path.gpu-hybrid", gpu::kGpuHybrid},
      {"path.hybrid", gpu::kCpuHybrid},
      {"path.cpu", gpu::kCpu},
      {"path.failed", gpu::kFailed},
      {"path.cuda", gpu::kCudaDecoder},
      {"path.segments_flag", gpu::kSegmentsFlag},
      {"output_alignment", kOutputAlignment},
      {"output_dtype.uint8", jpeg_core::kOutUint8},
      {"output_dtype.float32", jpeg_core::kOutFloat32},
      {"output_dtype.float16", jpeg_core::kOutFloat16},
      {"output_dtype.bfloat16", jpeg_core::kOutBfloat16},
  };
  std::vector<std::string> names;
  std::vector<int64_t> values;
  for (const auto& [name, value] : table) {
    names.emplace_back(name);
    values.push_back(value);
  }
  return {std::move(names), std::move(values)};
}

}  // namespace

// No tensor argument to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) { m.impl("_constants", TORCH_BOX(&constants)); }

}  // namespace custom_op
