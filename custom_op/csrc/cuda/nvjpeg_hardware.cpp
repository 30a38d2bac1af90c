// The JPEG engines (nvJPEG's hardware backend): one batched call per output format, each image with its
// region of interest where the engines take it, else whole.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/executor.h"
#include "cuda/warm_up.h"

namespace custom_op {
namespace gpu {
namespace {

// How the engines return colour. Their RGB is exact where there is no upsampling (4:4:4, gray), but
// for subsampled chroma they replicate samples, and their interpolating upsampling is slower and was
// wrong at region edges of vertically subsampled images (nvJPEG 13.0.1). So subsampled files come back
// as the planes stored (YCbCr), which the copy-out kernel upsamples and converts with libjpeg-turbo's
// arithmetic: bit-exact. A batched call writes the one format it was initialized with, whatever each
// image asks, so a batch mixing 4:4:4 and subsampled files makes two calls; no one-call way was both
// exact and as fast (bench/results/gpu_h100.md).
nvjpegOutputFormat_t hardware_format(const DecodeCall& call, const JpegHeader& h) {
  if (call.options.mode == ReadMode::kGray) return NVJPEG_OUTPUT_Y;
  // Without margins the copy-out lacks the chroma neighbours it upsamples from: nvJPEG's own RGB then.
  if (call.testing.no_margin) return NVJPEG_OUTPUT_RGB;
  const Subsampling ss = subsampling_of(h);
  if (ss == Subsampling::kGray || ss == Subsampling::k444) return NVJPEG_OUTPUT_RGB;
  return NVJPEG_OUTPUT_YUV;
}

// RGB and Y share a state (a call has one of them), planar YCbCr has its own.
int format_group(nvjpegOutputFormat_t format) { return format == NVJPEG_OUTPUT_YUV ? 1 : 0; }

// nvjpegDecodeBatchedSupportedEx needs a stream parsed by nvjpegJpegStreamParseHeader, which reads
// through the whole file although the answer depends on the headers only: it is given the bytes up to
// the end of the first scan header. Only when the first scan does not hold every component do the
// later scans say whether the engines take the file; that file, and one whose short parse fails, is
// parsed whole.
bool parse_header(nvjpegHandle_t handle, const Item& it, nvjpegJpegStream_t stream) {
  const JpegHeader& h = it.header;
  if (h.header_end > 0 && h.scan_components == h.components &&
      nvjpegJpegStreamParseHeader(handle, it.bytes, h.header_end, stream) == NVJPEG_STATUS_SUCCESS)
    return true;
  return nvjpegJpegStreamParseHeader(handle, it.bytes, it.size, stream) == NVJPEG_STATUS_SUCCESS;
}

// Whether the engines take the parsed file with this region of interest ((0, 0, -1, -1): whole).
bool engines_take(nvjpegHandle_t handle, nvjpegJpegStream_t stream, nvjpegDecodeParams_t params, const Region& r) {
  int unsupported = 1;
  return nvjpegDecodeParamsSetROI(params, r.left, r.top, r.width, r.height) == NVJPEG_STATUS_SUCCESS &&
         nvjpegDecodeBatchedSupportedEx(handle, stream, params, &unsupported) == NVJPEG_STATUS_SUCCESS &&
         unsupported == 0;
}

class HardwareExecutor : public Executor {
 public:
  void claim(DecodeCall& call, std::vector<Item>& items) override {
    params_of_.assign(items.size(), -1);
    const nvjpegHandle_t handle = call.context.hardware;
    if (handle == nullptr || !call.testing.engines_allowed()) return;
    std::vector<size_t> candidates;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].path == kPending && items[i].leader < 0) candidates.push_back(i);
    reserve_hardware_items(call.context, call.slot, candidates.size());
    for (size_t j = 0; j < candidates.size(); ++j) {
      Item& it = items[candidates[j]];
      const nvjpegJpegStream_t stream = call.slot.hw_streams[j];
      const nvjpegDecodeParams_t params = call.slot.hw_params[j];
      const nvjpegOutputFormat_t format = hardware_format(call, it.header);
      if (!parse_header(handle, it, stream) ||
          nvjpegDecodeParamsSetOutputFormat(params, format) != NVJPEG_STATUS_SUCCESS)
        continue;
      if (call.testing.engine_roi_allowed() && engines_take(handle, stream, params, it.decoded)) {
        it.path = kHardwareRoi;
      } else if (engines_take(handle, stream, params, Region{0, 0, -1, -1})) {
        it.path = kHardwareFull;
        it.decoded = {0, 0, it.header.height, it.header.width};
      } else {
        continue;
      }
      it.staged_format = format;
      params_of_[candidates[j]] = static_cast<int>(j);
      warm_up(call.context, call.state, call.slot, format_group(format));
    }
  }

  void decode(DecodeCall& call, std::vector<Item>& items) override {
    for (int group = 0; group < Slot::kFormatGroups; ++group) {
      std::vector<size_t> batch;
      for (size_t i = 0; i < items.size(); ++i)
        if (params_of_[i] >= 0 && format_group(items[i].staged_format) == group) batch.push_back(i);
      if (batch.empty()) continue;
      // Largest files first: the order bench/results/gpu_h100.md was measured with.
      std::stable_sort(batch.begin(), batch.end(), [&](size_t x, size_t y) { return items[x].size > items[y].size; });
      if (decode_batch(call, items, batch, group)) continue;
      // The batched call does not say which file it failed on: the CPU path redoes them all and names
      // the bad one.
      for (size_t i : batch) items[i].path = kCpu;
    }
  }

 private:
  bool decode_batch(DecodeCall& call, const std::vector<Item>& items, const std::vector<size_t>& batch, int group) {
    const size_t n = batch.size();
    std::vector<const unsigned char*> data(n);
    std::vector<size_t> lengths(n);
    std::vector<nvjpegImage_t> images(n);
    std::vector<nvjpegDecodeParams_t> params(n);
    for (size_t k = 0; k < n; ++k) {
      const Item& it = items[batch[k]];
      data[k] = it.bytes;
      lengths[k] = it.size;
      images[k] = staging_image(call.slot, it);
      params[k] = call.slot.hw_params[static_cast<size_t>(params_of_[batch[k]])];
    }
    const nvjpegHandle_t handle = call.context.hardware;
    const nvjpegJpegState_t state = hardware_state(call.context, call.slot, group);
    const nvjpegOutputFormat_t format = items[batch[0]].staged_format;
    int& initialized = call.slot.hw_initialized[group];
    const int setup = static_cast<int>(n) * 64 + static_cast<int>(format);
    nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
    if (initialized != setup) {
      initialized = 0;
      // One CPU thread (max_cpu_threads): more change nothing on the hardware backend (nvJPEG 13.0.1).
      s = nvjpegDecodeBatchedInitialize(handle, state, static_cast<int>(n), 1, format);
    }
    if (s == NVJPEG_STATUS_SUCCESS) {
      s = nvjpegDecodeBatchedEx(handle, state, data.data(), lengths.data(), images.data(), params.data(),
                                call.state.decode_stream);
    }
    initialized = s == NVJPEG_STATUS_SUCCESS ? setup : 0;  // a failed call needs a new initialization
    return s == NVJPEG_STATUS_SUCCESS;
  }

  std::vector<int> params_of_;  // per item: its parsed stream and parameters in the slot, -1 when not ours
};

}  // namespace

std::unique_ptr<Executor> hardware_executor() { return std::make_unique<HardwareExecutor>(); }

}  // namespace gpu
}  // namespace custom_op
