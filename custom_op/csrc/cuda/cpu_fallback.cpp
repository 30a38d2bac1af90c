#include "cuda/cpu_fallback.h"

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include "common/item_status.h"

namespace custom_op {
namespace gpu {
namespace {

// image, and libjpeg's warnings as UTF-8 bytes (empty when none, or without on_warning "warn")
using Decoded = std::tuple<at::Tensor, at::Tensor>;

// Through the dispatcher: the CPU library is loaded before this one. The options are the call's, as
// the CPU operators take them, and a window at the item's scale.
Decoded decode_item(const Item& it, const CallOptions& o) {
  if (o.whole) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("custom_op::decode_jpeg", "")
                         .typed<Decoded(const at::Tensor&, int64_t, bool, int64_t, int64_t)>();
    return op.call(it.data, o.mode_code(), o.apply_exif_orientation, o.on_warning_code(), o.max_pixels);
  }
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("custom_op::decode_and_crop_jpeg", "")
                       .typed<Decoded(const at::Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t,
                                      int64_t, int64_t)>();
  return op.call(it.data, it.top, it.left, it.height, it.width, o.mode_code(), o.apply_exif_orientation,
                 o.on_warning_code(), o.max_pixels, int64_t{it.scale});
}

// decode_item, its errors as capture_outcome reads them. The CPU operators' errors name their type at
// the start of their message (common/item_status.h), whichever exception class carries them across the
// dispatcher; c10's own (the dispatcher's, ATen's) name it by their class, and their what() adds a
// backtrace.
Decoded decode_item_or_throw_ours(const Item& it, const CallOptions& o) {
  try {
    return decode_item(it, o);
  } catch (const c10::ValueError& e) {
    throw Error(ItemStatus::kValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    throw Error(ItemStatus::kTypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

std::string text_of(const at::Tensor& bytes) {
  if (bytes.numel() == 0) return {};
  const at::Tensor b = bytes.contiguous();
  return std::string(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(b.numel()));
}

}  // namespace

void decode_on_cpu(std::vector<Item>& items, std::vector<at::Tensor>& outputs, const CallOptions& options, bool stack,
                   const at::TensorOptions& device) {
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    if (it.path != kCpu) continue;
    at::Tensor host, warnings;
    const ItemOutcome outcome =
        capture_outcome([&] { std::tie(host, warnings) = decode_item_or_throw_ours(it, options); });
    if (failed(outcome.status)) {
      fail_item(it, outcome.status, outcome.message);
      continue;
    }
    if (outputs[i].defined() && outputs[i].sizes() != host.sizes()) {
      if (stack) {
        std::ostringstream message;
        message << "custom_op: stack=True needs one output shape; this file decodes to " << host.sizes()
                << ", the stack holds " << outputs[i].sizes();
        fail_item(it, ItemStatus::kValueError, message.str());
        continue;
      }
      outputs[i] = at::Tensor();  // the planner's shape is not the CPU path's: an output of its own
    }
    const std::string text = text_of(warnings);
    if (!text.empty()) {
      it.status = ItemStatus::kWarned;
      it.message = prefixed(text);
    }
    if (outputs[i].defined()) {
      outputs[i].copy_(host, /*non_blocking=*/true);
    } else {
      outputs[i] = host.to(device, /*non_blocking=*/true);
    }
  }
}

}  // namespace gpu
}  // namespace custom_op
