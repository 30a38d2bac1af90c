// What our CUDA decoder needs from a file's header beyond jpeg_header.h's scan: the first scan's
// component order and table selectors, and the Huffman and quantisation tables in force when it
// starts, read on the host without libjpeg.
//
// It accepts only what libjpeg-turbo 2.1.5 reads silently and decodes like the decoding core: a
// baseline or extended sequential Huffman frame (SOF0/SOF1), DQT/DHT/DRI/APPn/COM (and DAC, which
// such a frame ignores) before one SOS that interleaves every component with Ss=0, Se=63, Ah=Al=0,
// every table it selects defined (libjpeg would substitute the standard Huffman tables for missing
// ones: those files are left to the other decoders), and a JFIF marker of major version 1 where there
// is one (libjpeg warns about any other). Anything else returns false and the file goes to another
// decoder; a table the core's builder refuses is one libjpeg refuses too, and the CPU path then gives
// libjpeg's error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "jpeg_core/tables.h"

namespace custom_op {
namespace gpu {

// A raw DHT definition (16 counts, then the symbols): bytes of the file, from which the GPU decoder
// builds the table (segment_decoder.h).
struct TableBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

struct ScanTables {
  int scan_order[jpeg_core::kMaxComponents];  // frame component indices, in the SOS's order
  // Per frame component: its Huffman tables' definitions (pointing into the file's bytes) and its
  // quantisation table in natural order.
  TableBytes dc[jpeg_core::kMaxComponents];
  TableBytes ac[jpeg_core::kMaxComponents];
  jpeg_core::QuantTable quant[jpeg_core::kMaxComponents];
};

// `header_end`: the offset just past the first SOS segment (jpeg_header.h's header_end).
bool read_scan_tables(const uint8_t* data, size_t header_end, int components, ScanTables* out);

}  // namespace gpu
}  // namespace custom_op
