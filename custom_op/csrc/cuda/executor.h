// The nvJPEG decoders of the GPU path, behind one interface, and the staging buffer they write into.
//
// The executors run in a fixed order (decode_cuda.cpp). Each first claims, from the items the planner
// left pending, those it decodes; the last one (the hybrid decoders) takes all that is left. Once every
// item has its decoder, the slot's staging buffer is laid out and each executor queues its decodes:
// nvJPEG's into staging on the decode state's stream, from which the copy-out kernel moves every window
// into its output; our own CUDA decoder's (segment_decoder.h) straight into the outputs, which exist
// before any executor runs. An item an executor fails on goes to the CPU path, which decodes it or
// gives libjpeg's error: nvJPEG's failures are known when decode() returns, our decoder's once its
// kernels have run (finish()). A new decoder is one more Executor and one more path code
// (decode_path.h): staging and copy-out read only an item's `decoded` region and `staged_format`.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include <nvjpeg.h>

#include "cuda/batch_item.h"
#include "cuda/nvjpeg_context.h"
#include "cuda/testing_options.h"

namespace custom_op {
namespace gpu {

// What the executors of one call share.
struct DecodeCall {
  DeviceContext& context;
  DecodeState& state;  // leased for the call: its decode stream, hybrid objects and slots
  Slot& slot;          // the call's staging buffer and hardware decoder objects
  const CallOptions& options;
  const TestingOptions& testing;
  // Per item: defined for every item a GPU decoder may take (allocated before the executors run).
  const std::vector<at::Tensor>& outputs;
  cudaStream_t caller;  // the caller's current stream
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Takes the pending items it will decode (never an item with a leader: that one shares its leader's
  // decode) and sets their path, their `decoded` region and their `staged_format`.
  virtual void claim(DecodeCall& call, std::vector<Item>& items) = 0;
  // Queues the decodes of the items it claimed: nvJPEG's into staging, on call.state.decode_stream; our
  // own decoder's into the outputs, ordered before the caller's stream's later work. Sets the path of
  // those it fails on to kCpu.
  virtual void decode(DecodeCall& call, std::vector<Item>& items) = 0;
  // After every executor's decode() and the copy-out: sets the path of the items whose decode turned
  // out to be unusable to kCpu (waiting for the GPU where it must).
  virtual void finish(DecodeCall& call, std::vector<Item>& items) {}
};

// The executors, in the order they claim.
std::unique_ptr<Executor> segment_executor();   // segment_executor.cpp: our own CUDA decoder
std::unique_ptr<Executor> hardware_executor();  // nvjpeg_hardware.cpp
std::unique_ptr<Executor> hybrid_executor();    // nvjpeg_hybrid.cpp

// Whether our own CUDA decoder takes a file, as far as its header and size tell (claim() also reads
// its tables): baseline, one scan of every component, restart segments short enough for a thread.
bool segment_decoder_takes(const JpegHeader& header, size_t size);

// Whether it takes such a file whatever its restart segments, decoding it in chunks (segment_decoder.h).
bool chunk_decoder_takes(const JpegHeader& header, size_t size);

// Whether a call's files go to our own CUDA decoder, those without short restart segments too (in
// chunks): as the call's gpu_decoder option asks, unless a test forces a path (testing_options.h).
bool own_decoder_allowed(const CallOptions& options, const TestingOptions& testing);

// Whether the files left to nvJPEG are checked first (planner.h's send_unchecked_files_to_cpu): where the
// caller asks (check_entropy), and wherever our decoder takes files, so that every item of such a call
// gets the CPU path's outcome.
bool nvjpeg_files_checked(const CallOptions& options, const TestingOptions& testing);

// Gives every claimed item its place in staging; returns the bytes needed.
size_t lay_out_staging(std::vector<Item>& items);

// Where a decoder writes an item: its planes in the slot's staging buffer.
nvjpegImage_t staging_image(const Slot& slot, const Item& item);

// Items our own CUDA decoder decoded and then sent to the CPU path (its kernels found something
// libjpeg would warn about or decode differently), in this process: for tests and benchmarks.
int64_t segment_decoder_fallbacks();

// Windows our own CUDA decoder decoded again with the whole file after their first try fell short (segment_decoder.h's
// kWindowCut), in this process.
int64_t segment_decoder_retries();

// After decoding: an item with a leader takes its window from the leader's decode, or goes to the CPU
// path with it.
void share_leader_decodes(std::vector<Item>& items);

}  // namespace gpu
}  // namespace custom_op
