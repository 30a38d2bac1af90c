// nvJPEG's single-image decoders on the default backend, one image at a time with its region of
// interest: the GPU-hybrid decoder (Huffman decoding on the GPU) for large images, the hybrid one
// (Huffman decoding on the CPU, less launch overhead) for the others and for what the GPU-hybrid one
// declines. They take every item the engines left.
#include <cstdint>
#include <vector>

#include <c10/cuda/CUDAException.h>

#include "cuda/executor.h"

namespace custom_op {
namespace gpu {
namespace {

constexpr int64_t kGpuHybridMinPixels = 1 << 20;

class HybridExecutor : public Executor {
 public:
  void claim(DecodeCall& call, std::vector<Item>& items) override {
    const nvjpegOutputFormat_t format = call.options.mode == ReadMode::kGray ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGB;
    for (size_t i = 0; i < items.size(); ++i) {
      Item& it = items[i];
      if (it.path != kPending || it.leader >= 0) continue;
      it.path = kCpuHybrid;  // until decode() knows which of the two decoders took it
      it.staged_format = format;
      mine_.push_back(i);
    }
  }

  void decode(DecodeCall& call, std::vector<Item>& items) override {
    for (size_t i : mine_) items[i].path = decode_one(call, items[i]);
  }

 private:
  // The path the item took: kGpuHybrid, kCpuHybrid, or kCpu when nvJPEG failed on it.
  DecodePath decode_one(DecodeCall& call, const Item& it) {
    const DeviceContext& c = call.context;
    DecodeState& st = call.state;
    // Two stages alternate, so that one image's host phase overlaps the previous one's transfer.
    HybridStage& stage = st.stages[st.next_stage];
    st.next_stage ^= 1;
    if (stage.in_flight) {
      C10_CUDA_CHECK(cudaEventSynchronize(stage.transferred));
      stage.in_flight = false;
    }
    if (nvjpegJpegStreamParse(c.hybrid, it.bytes, it.size, 0, 0, st.hybrid_stream) != NVJPEG_STATUS_SUCCESS)
      return kCpu;
    const Region& d = it.decoded;
    if (nvjpegDecodeParamsSetOutputFormat(st.hybrid_params, it.staged_format) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeParamsSetROI(st.hybrid_params, d.left, d.top, d.width, d.height) != NVJPEG_STATUS_SUCCESS)
      return kCpu;
    bool on_gpu =
        call.testing.gpu_hybrid_allowed() && int64_t(it.header.width) * it.header.height >= kGpuHybridMinPixels;
    if (on_gpu) {
      int unsupported = 1;
      on_gpu = nvjpegDecoderJpegSupported(c.gpu_hybrid_decoder, st.hybrid_stream, st.hybrid_params, &unsupported) ==
                   NVJPEG_STATUS_SUCCESS &&
               unsupported == 0;
    }
    const nvjpegJpegDecoder_t decoder = on_gpu ? c.gpu_hybrid_decoder : c.cpu_hybrid_decoder;
    const nvjpegJpegState_t state = on_gpu ? stage.gpu_state : stage.cpu_state;
    if (nvjpegDecodeJpegHost(c.hybrid, decoder, state, st.hybrid_params, st.hybrid_stream) != NVJPEG_STATUS_SUCCESS)
      return kCpu;
    if (nvjpegDecodeJpegTransferToDevice(c.hybrid, decoder, state, st.hybrid_stream, st.decode_stream) !=
        NVJPEG_STATUS_SUCCESS)
      return kCpu;
    C10_CUDA_CHECK(cudaEventRecord(stage.transferred, st.decode_stream));
    stage.in_flight = true;
    nvjpegImage_t image = staging_image(call.slot, it);
    if (nvjpegDecodeJpegDevice(c.hybrid, decoder, state, &image, st.decode_stream) != NVJPEG_STATUS_SUCCESS)
      return kCpu;
    return on_gpu ? kGpuHybrid : kCpuHybrid;
  }

  std::vector<size_t> mine_;
};

}  // namespace

std::unique_ptr<Executor> hybrid_executor() { return std::make_unique<HybridExecutor>(); }

}  // namespace gpu
}  // namespace custom_op
