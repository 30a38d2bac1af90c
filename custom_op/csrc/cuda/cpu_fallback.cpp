#include "cuda/cpu_fallback.h"

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

namespace custom_op {
namespace gpu {
namespace {

// image, and libjpeg's warnings as UTF-8 bytes (empty when none, or without on_warning "warn")
using Decoded = std::tuple<at::Tensor, at::Tensor>;

// Through the dispatcher: the CPU library is loaded before this one.
Decoded decode_item(const Item& it, const CallOptions& o) {
  const auto mode = static_cast<int64_t>(o.mode);
  if (o.whole) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("custom_op::decode_jpeg", "")
                         .typed<Decoded(const at::Tensor&, int64_t, bool, int64_t, int64_t)>();
    return op.call(it.data, mode, o.apply_exif_orientation, o.on_warning, o.max_pixels);
  }
  constexpr int64_t kFullScale = 8;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("custom_op::decode_and_crop_jpeg", "")
                       .typed<Decoded(const at::Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t,
                                      int64_t, int64_t)>();
  return op.call(it.data, it.top, it.left, it.height, it.width, mode, o.apply_exif_orientation, o.on_warning,
                 o.max_pixels, kFullScale);
}

std::string text_of(const at::Tensor& bytes) {
  if (bytes.numel() == 0) return {};
  const at::Tensor b = bytes.contiguous();
  return std::string(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(b.numel()));
}

// The CPU operator's exception becomes the item's status, with its message.
template <class F>
void capture_errors(Item& it, F&& f) {
  try {
    f();
  } catch (const c10::ValueError& e) {
    fail_item(it, ItemStatus::kValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    fail_item(it, ItemStatus::kTypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    fail_item(it, ItemStatus::kRuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail_item(it, ItemStatus::kRuntimeError, e.what());
  }
}

}  // namespace

void decode_on_cpu(std::vector<Item>& items, std::vector<at::Tensor>& outputs, const CallOptions& options, bool stack,
                   const at::TensorOptions& device) {
  for (size_t i = 0; i < items.size(); ++i) {
    Item& it = items[i];
    if (it.path != kCpu) continue;
    at::Tensor host, warnings;
    capture_errors(it, [&] { std::tie(host, warnings) = decode_item(it, options); });
    if (failed(it.status)) continue;
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
