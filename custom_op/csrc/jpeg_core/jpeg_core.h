// The JPEG decoding core shared by the CUDA kernels and the CPU test harness.
//
// Why it exists: the GPU decoder for files with short restart intervals decodes one restart segment
// per thread and must give libjpeg-turbo 2.1.5's pixels exactly (JDCT_ISLOW, fancy upsampling, its
// YCbCr -> RGB; at full size or scaled to 1/8, 2/8 or 4/8 by its reduced IDCTs), or report the
// segment so that the CPU path decodes it. Writing the arithmetic once
// as __host__ __device__ code lets CI, which has no GPU, test the very code the kernels run:
// tests/jpeg_core_harness.cpp compiles these headers with a plain C++ compiler and
// tests/test_jpeg_core.py compares the results with libjpeg-turbo, on every subsampling, and fuzzes;
// tests/jpeg_core_gpu_check.cu runs the same stages in CUDA kernels and requires results identical to
// the CPU build's, bit for bit (where a GPU is present).
//
// The stages, in the order a decode runs them (each header says why it is built the way it is):
//   segments.h    find every restart segment's byte range, checking the markers (host or device);
//   huffman.h     Huffman-decode one segment's MCUs into coefficient blocks (bit_reader.h reads it);
//   sync_decode.h  instead of both: Huffman-decode a whole scan, restart markers or not, in chunks of
//                 bytes that self-synchronising decoders take in parallel, into the same blocks;
//   idct_islow.h  dequantise + islow IDCT one block into samples, flagging blocks where libjpeg's
//                 SIMD and C code could differ;
//   idct_reduced.h  the same for a decode scaled to 4/8, 2/8 or 1/8: jidctred.c's 4x4, 2x2 and 1x1
//                 IDCTs, with the same flag (idct_scaled picks one of the four by size);
//   scaling.h     which IDCT size each component gets at each scale, and the upsampling left after it
//                 (a subsampled component is enlarged by its IDCT where libjpeg does so);
//   upsample.h    fancy upsampling (or replication), one output sample at a time;
//   color.h       YCbCr -> RGB.
// tables.h holds the plain-data tables and the frame geometry they all use; hd.h the
// __host__ __device__ switch and the rules every header follows.
#pragma once

#include "bit_reader.h"
#include "color.h"
#include "hd.h"
#include "huffman.h"
#include "idct_islow.h"
#include "idct_reduced.h"
#include "scaling.h"
#include "segments.h"
#include "sync_decode.h"
#include "tables.h"
#include "upsample.h"
