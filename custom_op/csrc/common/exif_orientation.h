// Reads the EXIF orientation tag from an APP1 payload. Untrusted bytes: every read is bounds-checked.
#pragma once
#include <cstddef>
#include <cstdint>

namespace custom_op {

// Returns the orientation (1..8) stored in an APP1 "Exif\0\0" payload, or 1 when absent or invalid.
int exif_orientation(const uint8_t* app1, size_t length);

}  // namespace custom_op
