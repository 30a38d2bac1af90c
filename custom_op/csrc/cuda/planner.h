// The host-side plan of a GPU batch, made before anything is decoded.
//
// Per item: our own header scan (jpeg_header.h) and the CPU path's checks of the window and of
// max_pixels; whether nvJPEG may decode the file (else the CPU path does, and gives libjpeg's verdict
// on files we do not fully understand, and the CPU operator's error on items that fail a check); the
// region a decoder decodes, with margins. An item may be decoded at a DCT scale (Item::scale), which
// only our own CUDA decoder and the CPU path do.
// Then, across items: a file repeated in the batch at one scale is decoded once, and files prepared for random
// access that our own CUDA decoder does not take give nvJPEG the sub-image of their windows' restart
// segments. Which decoder takes an item is left to the executors (executor.h). Where
// executor.h's nvjpeg_files_checked says so, the files left to nvJPEG once our own CUDA decoder has
// claimed its own are checked first (send_unchecked_files_to_cpu).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "cuda/batch_item.h"
#include "cuda/testing_options.h"

namespace custom_op {
namespace gpu {

// The plan of a batch's items, in two steps, which plan_items runs one after the other.
//
// scan_items: per item, our header scan (Item::header_known, header, orientation, channels) and which
// decoders may take its file: path kPending where a GPU decoder may (Item::nvjpeg_takes: nvJPEG too;
// Item::own_decoder: our own CUDA decoder), else kCpu (kFailed: a data tensor not on the CPU). No
// window is read. A caller that chooses each item's scale and window from its file (the resized
// crop) runs it first, and reads Item::own_decoder to know, before anything is decoded, whether our
// own CUDA decoder will decode the item at any scale: only it decodes at a reduced scale, and an item
// it does not take goes to nvJPEG at scale 8 but to the CPU path at any other, which is slower. (Our
// decoder can still refuse a file own_decoder promised, when its claim finds Huffman table
// definitions it cannot use, and send an item to the CPU path once its kernels have run, as at
// scale 8: the pixels are the same either way.) scaled_image_size gives the displayed image's size
// at a scale, which windows must fit.
std::vector<Item> scan_items(at::TensorList data, const CallOptions& options, const TestingOptions& testing);

// The displayed image's size (EXIF orientation applied when the call asks) decoded at `scale` eighths
// (1, 2, 4 or 8), for an item scan_items understood (Item::header_known).
void scaled_image_size(const Item& it, int scale, int64_t* height, int64_t* width);

// plan_windows: per item, its scale (`scales`: 1, 2, 4 or 8, checked by the caller; empty: all 8) and
// window, in the displayed frame of the image at that scale as the CPU operator's scale_num takes it
// (read only without options.whole; with it, each item's window is its whole image at scale 8); the
// CPU operator's checks of the window; its region in the stored frame and the region decoded with
// margins. A window that does not fit, and an item at a scale other than 8 that our own CUDA decoder
// does not take, go to the CPU path (kCpu). Then, across items: a file repeated in the batch at one
// scale is decoded once (Item::leader), and sub-images for nvJPEG (see the top of this file).
void plan_windows(std::vector<Item>& items, c10::IntArrayRef tops, c10::IntArrayRef lefts, c10::IntArrayRef heights,
                  c10::IntArrayRef widths, c10::IntArrayRef scales, const CallOptions& options,
                  const TestingOptions& testing);

std::vector<Item> plan_items(at::TensorList data, c10::IntArrayRef tops, c10::IntArrayRef lefts,
                             c10::IntArrayRef heights, c10::IntArrayRef widths, c10::IntArrayRef scales,
                             const CallOptions& options, const TestingOptions& testing);

// Items still pending that nvJPEG may not take (Item::nvjpeg_takes: samplings such as 4:1:1, which
// only our own CUDA decoder takes; items at a scale other than 8; every item where a test forbids
// nvJPEG) go to the CPU path; run once our own decoder has claimed its items.
void leave_to_cpu_what_nvjpeg_cannot_take(std::vector<Item>& items, const TestingOptions& testing);

// The bytes nvJPEG would decode of each pending item (its sub-image, where it has one) are checked on
// the CPU (the CPU library's _check_entropy_data), and a file found wrong in any way goes to the CPU
// path with all its windows: nvJPEG reports no damage, the CPU path reports all of it. Our own CUDA
// decoder needs no such check (it reports damage itself), so this runs after it has claimed its items.
void send_unchecked_files_to_cpu(std::vector<Item>& items);

}  // namespace gpu
}  // namespace custom_op
