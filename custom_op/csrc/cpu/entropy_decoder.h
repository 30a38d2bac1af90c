// Our baseline Huffman decoder, put in place of libjpeg's for the scan a session decodes.
//
// libjpeg-turbo 2.1's decoder reads a code per table lookup and its extra bits in a second step,
// drops to its slow path for a whole scan whenever the file declares a restart interval (which every
// file prepared for random access does), and fully decodes the MCUs beside a cropped window only to
// throw their coefficients away. This decoder reads a code together with its coefficient, and often
// the next code and coefficient too, in one lookup, takes restart markers on its fast path, and only
// walks the MCUs outside the crop (and those jpeg_skip_scanlines discards). Its tables:
// huffman_tables.h. libjpeg keeps all the rest (IDCT, upsampling, colour conversion), through its
// entropy-decoder interface.
//
// It takes no decision about damaged data. On anything a valid scan would not contain (a code the
// table lacks, a marker inside an MCU, restart markers out of place, the end of the data) it gives
// up, and the session decodes the window again with libjpeg's own decoder: warnings, errors and the
// pixels of damaged files stay exactly libjpeg's. The same walk over a whole scan is the GPU path's
// check of a file before nvJPEG gets it (walk_whole_scan): there, giving up sends the file to the CPU
// path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>

namespace custom_op {

class HuffmanTable;

// libjpeg's entropy-decoder interface: struct jpeg_entropy_decoder of jpegint.h, unchanged since
// libjpeg 6b. jpegint.h is internal and not installed everywhere, so its layout is restated here.
struct EntropyDecoderMethods {
  void (*start_pass)(j_decompress_ptr cinfo);
  boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW* MCU_data);
  boolean insufficient_data;
};

struct OwnEntropyDecoder {
  EntropyDecoderMethods pub;  // first member: cinfo->entropy points at it

  // The scan, per block of an MCU.
  int blocks;
  const HuffmanTable* dc[D_MAX_BLOCKS_IN_MCU];
  const HuffmanTable* ac[D_MAX_BLOCKS_IN_MCU];
  int component[D_MAX_BLOCKS_IN_MCU];  // index into the scan's components
  bool store_ac[D_MAX_BLOCKS_IN_MCU];  // false where libjpeg never reads the AC coefficients
  int32_t pred[MAX_COMPS_IN_SCAN];

  unsigned int restart_interval, restarts_to_go;
  int next_restart;  // n of the RSTn marker expected next
  JDIMENSION mcus_per_row, column;
  JDIMENSION first_column, last_column;  // MCU columns libjpeg transforms (the crop)

  // The entropy-coded bits: next..end is the rest of the memory source's buffer.
  const uint8_t* next;
  const uint8_t* end;
  uint64_t buf;    // unread bits, most significant first
  int bits;        // bits in buf, never above 63
  int fake_bits;   // zero bits put in past a marker; consuming one means the scan was damaged
  bool at_marker;  // next stands on a marker (FF, then neither 00 nor FF)
};

// Puts `decoder` in place of libjpeg's entropy decoder for the scan jpeg_start_decompress just
// started. MCU columns first_column..last_column are the ones libjpeg transforms (after
// jpeg_crop_scanline); the others are walked. False, leaving libjpeg's decoder, for scans this one
// does not decode: progressive, arithmetic-coded, 12-bit, or not holding every component, or when
// it is switched off.
bool install_entropy_decoder(j_decompress_ptr cinfo, OwnEntropyDecoder* decoder, JDIMENSION first_column,
                             JDIMENSION last_column);

// Walks every MCU of the scan jpeg_start_decompress just started, storing no coefficient, then takes
// the end-of-image marker, which must follow the last MCU's byte directly. Gives up, as a decode does,
// on anything a valid scan would not contain: a code the table lacks, a marker inside an MCU, a
// restart marker missing, misnumbered or preceded by stray bytes, fill bytes (FF FF), the end of the
// data, or anything but end-of-image after the last MCU. That is everything libjpeg's decoder warns
// about in entropy-coded data, wherever a decode would stop reading. False, having read nothing,
// for scans install_entropy_decoder does not take (whether or not the decoder is switched off).
bool walk_whole_scan(j_decompress_ptr cinfo, OwnEntropyDecoder* decoder);

// After the last row a decode needs: whether libjpeg's own decoder, which reads a few bytes ahead of
// the bits it decodes, would have met the end of the data by then (it warns there: "Premature end of
// JPEG file"). If so, gives up (the decode is redone with libjpeg's decoder, which says what it says).
// cinfo->entropy must be the decoder install_entropy_decoder put in.
void check_entropy_read_ahead(j_decompress_ptr cinfo);

// Switches the decoder on or off for the whole process and returns the previous setting (tests and
// benchmarks compare it with libjpeg's own).
bool set_own_entropy_decoder(bool on);

// How many times, in this process, it gave a scan back to libjpeg's decoder: the session counts
// each time it does (walk_whole_scan gives nothing back, and counts nothing).
int64_t entropy_decoder_give_ups();
void count_entropy_give_up();

}  // namespace custom_op
