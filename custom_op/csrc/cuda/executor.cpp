#include "cuda/executor.h"

#include <cstring>

namespace custom_op {
namespace gpu {
namespace {

int64_t round_up(int64_t value, int64_t granule) { return (value + granule - 1) / granule * granule; }

}  // namespace

size_t lay_out_staging(std::vector<Item>& items) {
  size_t offset = 0;
  for (Item& it : items) {
    if (!staged(it.path) || it.leader >= 0) continue;
    it.staging_pitch = round_up(it.decoded.width, 64);
    it.staging_offset = offset;
    const int64_t bytes = staged_planes(it.staged_format) * it.staging_pitch * it.decoded.height;
    offset += static_cast<size_t>(round_up(bytes, 256));
  }
  return offset;
}

nvjpegImage_t staging_image(const Slot& slot, const Item& item) {
  nvjpegImage_t image;
  std::memset(&image, 0, sizeof(image));
  uint8_t* base = slot.staging.data() + item.staging_offset;
  const int64_t plane = item.staging_pitch * item.decoded.height;
  for (int c = 0; c < staged_planes(item.staged_format); ++c) {
    image.channel[c] = base + c * plane;
    image.pitch[c] = static_cast<size_t>(item.staging_pitch);
  }
  return image;
}

void share_leader_decodes(std::vector<Item>& items) {
  for (Item& it : items) {
    if (it.leader < 0) continue;
    const Item& leader = items[static_cast<size_t>(it.leader)];
    it.path = leader.path;
    it.staged_format = leader.staged_format;
    it.decoded = leader.decoded;
    it.staging_offset = leader.staging_offset;
    it.staging_pitch = leader.staging_pitch;
  }
}

}  // namespace gpu
}  // namespace custom_op
