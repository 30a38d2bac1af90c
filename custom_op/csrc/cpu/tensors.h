// The CPU library's tensors: torch's stable ABI (torch/csrc/stable/), which lets one build of the library
// serve every torch from the version it targets on (TORCH_TARGET_VERSION, set by
// custom_op/_build_config.py). Only what the kernels need, and a device and a shape written as c10
// writes them, so that the messages name them as torch's own do.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace custom_op {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
// An int[] argument (a std::vector the boxed kernel owns, viewed).
using IntArrayRef = torch::headeronly::IntHeaderOnlyArrayRef;

// A new uninitialized CPU tensor of this shape and type.
inline Tensor new_cpu_tensor(IntArrayRef sizes, ScalarType type = ScalarType::Byte) {
  return torch::stable::empty(sizes, type, std::nullopt, torch::stable::Device(torch::headeronly::DeviceType::CPU));
}

// "cpu", "cuda:0", ...: as c10::Device prints.
inline std::string device_text(const torch::stable::Device& device) {
  using torch::headeronly::DeviceType;
  std::string name;
  switch (device.type()) {
    case DeviceType::CPU: name = "cpu"; break;
    case DeviceType::CUDA: name = "cuda"; break;
    case DeviceType::HIP: name = "hip"; break;
    case DeviceType::XPU: name = "xpu"; break;
    case DeviceType::MPS: name = "mps"; break;
    case DeviceType::Meta: name = "meta"; break;
    default: name = "device type " + std::to_string(static_cast<int>(device.type()));
  }
  return device.index() >= 0 ? name + ":" + std::to_string(static_cast<int>(device.index())) : name;
}

// Whether two shapes are equal (element by element: HeaderOnlyArrayRef has no operator== before
// torch 2.13, and the library builds against any torch from its target on).
inline bool same_shape(IntArrayRef a, IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// "[3, 20, 30]": as c10 prints a tensor's sizes.
inline std::string shape_text(IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

}  // namespace custom_op
