#include "cuda/testing_options.h"

#include <atomic>

#include "common/item_status.h"

namespace custom_op {
namespace gpu {
namespace {

std::atomic<int64_t> force_path_setting{-1};
std::atomic<bool> no_margin_setting{false};
std::atomic<bool> no_dedupe_setting{false};
std::atomic<int64_t> segments_setting{static_cast<int64_t>(SegmentsRule::kBySize)};
std::atomic<int64_t> chunk_bytes_setting{0};
std::atomic<bool> hide_engines_setting{false};
std::atomic<int64_t> window_bytes_setting{0};

}  // namespace

TestingOptions testing_options() {
  TestingOptions t;
  t.force_path = force_path_setting.load();
  t.no_margin = no_margin_setting.load();
  t.no_dedupe = no_dedupe_setting.load();
  t.segments = static_cast<SegmentsRule>(segments_setting.load());
  t.chunk_bytes = chunk_bytes_setting.load();
  t.hide_engines = hide_engines_setting.load();
  t.window_bytes = window_bytes_setting.load();
  return t;
}

std::vector<int64_t> set_gpu_testing(int64_t force_path, bool no_margin, bool no_dedupe, int64_t segments,
                                     int64_t chunk_bytes, bool hide_engines, int64_t window_bytes) {
  CUSTOM_OP_CHECK_VALUE((force_path >= -1 && force_path <= kCpu) || force_path == kCudaDecoder,
                        "custom_op: force_path must be -1 (none) or a decoder's path code, 0 to 4 or 7, got ",
                        force_path);
  CUSTOM_OP_CHECK_VALUE(segments >= 0 && segments <= 2,
                        "custom_op: segments must be 0 (by size), 1 (always) or 2 (never), got ", segments);
  CUSTOM_OP_CHECK_VALUE(chunk_bytes >= 0 && chunk_bytes <= (int64_t{1} << 20),
                        "custom_op: chunk_bytes must be 0 (the default) or a size up to 1 MiB, got ", chunk_bytes);
  CUSTOM_OP_CHECK_VALUE(window_bytes >= 0, "custom_op: window_bytes must be 0 (the default) or a size, got ",
                        window_bytes);
  return {force_path_setting.exchange(force_path),       no_margin_setting.exchange(no_margin) ? 1 : 0,
          no_dedupe_setting.exchange(no_dedupe) ? 1 : 0, segments_setting.exchange(segments),
          chunk_bytes_setting.exchange(chunk_bytes),     hide_engines_setting.exchange(hide_engines) ? 1 : 0,
          window_bytes_setting.exchange(window_bytes)};
}

}  // namespace gpu
}  // namespace custom_op
