// How the batched operators report each item: a status code and a message, never an exception for
// one bad file. Python (custom_op/_outcomes.py) turns them into exceptions or UserWarnings.
//
// Every message an operator raises or returns starts with kMessagePrefix; the batched API's wording
// ("custom_op: batch item 3: ...") is added in Python, after that prefix.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace custom_op {

constexpr const char* kMessagePrefix = "custom_op: ";

enum class ItemStatus : int64_t {
  kOk = 0,          // decoded; message empty
  kWarned = 1,      // decoded with on_warning "warn"; message holds libjpeg's warnings
  kValueError = 2,  // message: why (window outside the image, over max_pixels, ...)
  kTypeError = 3,
  kRuntimeError = 4,  // not a JPEG this library decodes, or libjpeg's error
};

inline bool failed(ItemStatus status) { return status >= ItemStatus::kValueError; }

// `message` with kMessagePrefix in front, unless it has it already.
inline std::string prefixed(const std::string& message) {
  const std::string prefix(kMessagePrefix);
  return message.compare(0, prefix.size(), prefix) == 0 ? message : prefix + message;
}

struct ItemOutcome {
  ItemStatus status = ItemStatus::kOk;
  std::string message;  // prefixed; empty when kOk
};

// Runs one item's decode; the exception it throws (the same one the single-image operator raises)
// becomes the item's status, so that one bad file never stops a batch.
template <class F>
ItemOutcome capture_outcome(F&& decode) {
  try {
    decode();
    return {};
  } catch (const c10::ValueError& e) {
    return {ItemStatus::kValueError, prefixed(e.what_without_backtrace())};
  } catch (const c10::TypeError& e) {
    return {ItemStatus::kTypeError, prefixed(e.what_without_backtrace())};
  } catch (const c10::Error& e) {
    return {ItemStatus::kRuntimeError, prefixed(e.what_without_backtrace())};
  } catch (const std::exception& e) {
    return {ItemStatus::kRuntimeError, prefixed(e.what())};
  }
}

}  // namespace custom_op
