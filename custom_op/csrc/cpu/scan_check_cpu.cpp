// CPU kernel of custom_op::_check_entropy_data, the check that the GPU path's check_entropy option runs
// before nvJPEG gets a file (cuda/planner.cpp): libjpeg reads the headers and sets the decode up, and
// our entropy decoder walks the whole scan (libjpeg_session.h: walk_scan). nvJPEG reports no damage,
// so a file gets to it only when nothing here found any.
#include <cstdint>
#include <vector>

#include "common/item_status.h"
#include "libjpeg_session.h"
#include "parallel_items.h"
#include "tensors.h"

namespace custom_op {
namespace {

int64_t check_one(const Tensor& data) {
  // kRaise: the first warning libjpeg gives while reading the headers or setting the decode up ends
  // the check (kRefused).
  JpegSession session(WarningPolicy::kRaise);
  if (!session.read_header(data.const_data_ptr<uint8_t>(), static_cast<size_t>(data.numel()), /*save_app1=*/false))
    return static_cast<int64_t>(ScanWalk::kRefused);
  return static_cast<int64_t>(session.walk_scan());
}

std::vector<int64_t> check_entropy_data_cpu(const std::vector<Tensor>& data) {
  const int64_t n = static_cast<int64_t>(data.size());
  for (const Tensor& d : data)
    CUSTOM_OP_CHECK_TYPE(d.is_cpu() && d.scalar_type() == ScalarType::Byte && d.dim() == 1 && d.is_contiguous(),
                         kMessagePrefix, "_check_entropy_data: each file must be a 1-D contiguous uint8 CPU tensor");
  std::vector<int64_t> found(data.size());
  for_each_item(n, [&](int64_t i) { found[static_cast<size_t>(i)] = check_one(data[static_cast<size_t>(i)]); });
  return found;
}

}  // namespace

// CompositeExplicitAutograd rather than CPU: an empty list has no tensor to dispatch on.
STABLE_TORCH_LIBRARY_IMPL(custom_op, CompositeExplicitAutograd, m) {
  m.impl("_check_entropy_data", TORCH_BOX(&check_entropy_data_cpu));
}

}  // namespace custom_op
