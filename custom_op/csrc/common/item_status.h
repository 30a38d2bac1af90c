// How the operators report errors: the type an error is raised as in Python (ValueError, TypeError or
// RuntimeError), and for the batched operators each item's status code and message, never an exception
// for one bad file. Free of torch's headers: both libraries include it, the CPU one on torch's stable
// ABI and the GPU one on a torch's C++ ABI.
//
// The stable ABI carries an exception from a kernel to Python as its message alone, always as a
// RuntimeError. So an error of ours that Python must raise as another type says so at the start of its
// message: "ValueError: custom_op: ..." (see Error). The Python functions around the operators
// (custom_op/_outcomes.py, `call`) raise it as that type with the rest of the message; the batched
// kernels read it back into the item's status (capture_outcome).
//
// Every message an operator returns for an item starts with kMessagePrefix; the batched API's wording
// ("custom_op: batch item 3: ...") is added in Python, after that prefix.
#pragma once

#include <cstdint>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// The start of the message of an error that Python raises as ValueError or TypeError (custom_op/_outcomes.py
// reads the same tags); a RuntimeError has none.
constexpr const char* kValueErrorTag = "ValueError: ";
constexpr const char* kTypeErrorTag = "TypeError: ";

inline std::string type_tag(ItemStatus type) {
  return type == ItemStatus::kValueError ? kValueErrorTag : type == ItemStatus::kTypeError ? kTypeErrorTag : "";
}

// The errors our kernels throw: what() is the message after its type's tag. `type` is kValueError,
// kTypeError or kRuntimeError.
class Error : public std::runtime_error {
 public:
  Error(ItemStatus type, const std::string& message) : std::runtime_error(type_tag(type) + message) {}
};

// The arguments written one after another, as a message.
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

struct ItemOutcome {
  ItemStatus status = ItemStatus::kOk;
  std::string message;  // prefixed; empty when kOk
};

// The outcome of an item whose decode failed with this error message: its type from the tag, if any
// (an Error's, from either library: the GPU library calls the CPU operators through the dispatcher,
// which passes their messages on unchanged), else RuntimeError.
inline ItemOutcome failed_outcome(const std::string& what) {
  for (const ItemStatus type : {ItemStatus::kValueError, ItemStatus::kTypeError}) {
    const std::string tag = type_tag(type);
    if (what.compare(0, tag.size(), tag) == 0) return {type, prefixed(what.substr(tag.size()))};
  }
  return {ItemStatus::kRuntimeError, prefixed(what)};
}

// Runs one item's decode; the exception it throws (the same one the single-image operator raises)
// becomes the item's status, so that one bad file never stops a batch.
template <class F>
ItemOutcome capture_outcome(F&& decode) {
  try {
    decode();
    return {};
  } catch (const std::exception& e) {
    return failed_outcome(e.what());
  }
}

// A batch's outcomes as the batched operators return them: one status code and one message per item
// (the messages are moved out).
inline std::pair<std::vector<int64_t>, std::vector<std::string>> outcome_lists(std::vector<ItemOutcome>& outcomes) {
  std::pair<std::vector<int64_t>, std::vector<std::string>> lists;
  lists.first.reserve(outcomes.size());
  lists.second.reserve(outcomes.size());
  for (ItemOutcome& o : outcomes) {
    lists.first.push_back(static_cast<int64_t>(o.status));
    lists.second.push_back(std::move(o.message));
  }
  return lists;
}

}  // namespace custom_op

// Throws an Error of that type, its message the remaining arguments written one after another, unless
// `cond` holds. The message is built only when it fails.
#define CUSTOM_OP_CHECK_OF_TYPE(type, cond, ...)                                \
  do {                                                                          \
    if (!(cond)) throw ::custom_op::Error(type, ::custom_op::str(__VA_ARGS__)); \
  } while (false)
#define CUSTOM_OP_CHECK_VALUE(cond, ...) \
  CUSTOM_OP_CHECK_OF_TYPE(::custom_op::ItemStatus::kValueError, cond, __VA_ARGS__)
#define CUSTOM_OP_CHECK_TYPE(cond, ...) CUSTOM_OP_CHECK_OF_TYPE(::custom_op::ItemStatus::kTypeError, cond, __VA_ARGS__)
#define CUSTOM_OP_CHECK(cond, ...) CUSTOM_OP_CHECK_OF_TYPE(::custom_op::ItemStatus::kRuntimeError, cond, __VA_ARGS__)
