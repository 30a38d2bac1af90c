// Reads the entropy-coded bits of ONE restart segment, given as a byte range.
//
// Why a range and not a stream: on the GPU each thread decodes one segment and must never look at
// another's bytes, so the reader is confined to [begin, end) and can say precisely how the segment
// ended. libjpeg reads FF 00 as a data byte FF and treats any other FF xx as a marker, past which it
// supplies zero bits (with a warning, "Corrupt JPEG data: premature end of data segment", as soon as
// one of them is consumed). The reader does the same: it unstuffs FF 00, stops at any other FF (a
// marker inside the range, FF FF fill, an FF as the last byte) or at the end, and pads zeros after
// that while counting them. A decoder that consumed a padded bit decoded something libjpeg would
// have warned about, and reports the segment as damaged (see overran()).
//
// It never reads outside [begin, end): every load is checked against `end`. The buffer holds up to
// 64 bits. reader_fill() loads one byte at a time and leaves at least 57; reader_refill(), what the
// segment decoder calls before each symbol, does nothing while 32 bits are buffered (enough for a
// 16-bit code and its 15 extra bits) and else appends four bytes at once where none of them is FF.
#pragma once

#include "hd.h"

namespace custom_op {
namespace jpeg_core {

struct BitReader {
  const uint8_t* next;  // next byte to load
  const uint8_t* end;   // end of the segment's bytes
  uint64_t buf;         // unconsumed bits, most significant first; zeros below them
  int bits;             // bits in buf (data and padding)
  int padded;           // zero bits appended after the data stopped (always the last ones in buf)
  bool stopped;         // the data stopped: at `end`, or at an FF (next points at it) not followed by 00
  // The four bytes at `next` (where `ahead_loaded`: four bytes of the range are left there), loaded
  // as soon as `next` moves, a refill ahead of their use, and kept as loaded: they are put together
  // only where the next refill uses them, so that a GPU thread does not wait for the loads until
  // then (it decodes a few symbols meanwhile); put together where they are loaded, they would make
  // the thread wait at once.
  uint32_t ahead0, ahead1, ahead2, ahead3;
  bool ahead_loaded;
};

// The byte at p (begin <= p < end).
CUSTOM_OP_HD inline uint32_t reader_byte(const uint8_t* p) { return load_readonly(p); }

// Loads the four bytes at `next` (ahead0..3) where four bytes of the range are left there.
CUSTOM_OP_HD inline void reader_load_ahead(BitReader* r) {
  r->ahead_loaded = !r->stopped && r->end - r->next >= 4;
  if (r->ahead_loaded) {
    r->ahead0 = reader_byte(r->next);
    r->ahead1 = reader_byte(r->next + 1);
    r->ahead2 = reader_byte(r->next + 2);
    r->ahead3 = reader_byte(r->next + 3);
  } else {
    r->ahead0 = r->ahead1 = r->ahead2 = r->ahead3 = 0;
  }
}

// The four bytes reader_load_ahead loaded, most significant first.
CUSTOM_OP_HD inline uint32_t reader_ahead_word(const BitReader* r) {
  return (r->ahead0 << 24) | (r->ahead1 << 16) | (r->ahead2 << 8) | r->ahead3;
}

CUSTOM_OP_HD inline void reader_init(BitReader* r, const uint8_t* begin, const uint8_t* end) {
  r->next = begin;
  r->end = end;
  r->buf = 0;
  r->bits = 0;
  r->padded = 0;
  r->stopped = begin >= end;
  reader_load_ahead(r);
}

// Loads bytes until more than 56 bits are buffered.
CUSTOM_OP_HD inline void reader_fill(BitReader* r) {
  while (r->bits <= 56) {
    uint32_t byte = 0;
    if (!r->stopped) {
      if (r->next >= r->end) {
        r->stopped = true;
      } else if ((byte = reader_byte(r->next)) != 0xFF) {
        r->next += 1;
      } else if (r->end - r->next >= 2 && reader_byte(r->next + 1) == 0x00) {
        r->next += 2;
      } else {
        byte = 0;
        r->stopped = true;  // a marker, fill bytes, or an FF ending the range
      }
    }
    if (r->stopped) r->padded += 8;
    r->buf |= static_cast<uint64_t>(byte) << (56 - r->bits);
    r->bits += 8;
  }
  reader_load_ahead(r);
}

// Makes at least 32 bits buffered. Why not reader_fill before every symbol: that loads about a byte
// per symbol, each load waiting for the one before (whether a byte is FF decides what comes next);
// here four bytes come at once every few symbols, loaded the refill before. Four bytes holding an FF
// (stuffing or a marker, rare in entropy-coded data) go through reader_fill, so the reader's state
// (padding, where it stopped) is exactly what reader_fill alone would leave.
CUSTOM_OP_HD inline void reader_refill(BitReader* r) {
  if (r->bits >= 32) return;
  const uint32_t word = reader_ahead_word(r);
  // A byte of `word` is FF exactly where the same byte of ~word is zero (the exact zero-byte test).
  if (r->ahead_loaded && ((~word - 0x01010101u) & word & 0x80808080u) == 0) {
    r->buf |= static_cast<uint64_t>(word) << (32 - r->bits);
    r->bits += 32;
    r->next += 4;
    reader_load_ahead(r);
  } else {
    reader_fill(r);
  }
}

// The next n bits (1 <= n <= 32), without consuming them. Needs n bits buffered. (From the buffer's high word: a
// GPU thread shifts a 64-bit value by a count it does not know in several steps.)
CUSTOM_OP_HD inline uint32_t reader_peek(const BitReader* r, int n) {
  return static_cast<uint32_t>(r->buf >> 32) >> (32 - n);
}

// Consumes n bits (0 <= n <= bits, n <= 32: a code and its extra bits at most). The mask only tells
// the compiler that the shift is below 64, so that it needs no test for a shift that empties the buffer.
CUSTOM_OP_HD inline void reader_drop(BitReader* r, int n) {
  r->buf <<= (n & 63);
  r->bits -= n;
}

// Consumes (n & 31) bits (at most bits): n's higher bits are ignored, so that a table entry whose low bits
// count the bits it takes (tables.h's step entries) is passed as it was loaded. On the GPU, two funnel shifts,
// which take the count modulo 32 themselves: the shift of a 64-bit buffer by a count not known to be below 64
// took a mask and a test besides.
CUSTOM_OP_HD inline void reader_drop_low(BitReader* r, uint32_t n) {
#if defined(__CUDA_ARCH__)
  const uint32_t lo = static_cast<uint32_t>(r->buf), hi = static_cast<uint32_t>(r->buf >> 32);
  r->buf = (static_cast<uint64_t>(__funnelshift_l(lo, hi, n)) << 32) | __funnelshift_l(0u, lo, n);
#else
  r->buf <<= (n & 31);
#endif
  r->bits -= static_cast<int>(n & 31);
}

// Whether any padded bit (past the segment's data) has been consumed.
CUSTOM_OP_HD inline bool reader_overran(const BitReader* r) { return r->padded > r->bits; }

// Whether the data stopped before `end`: at an FF that is not stuffing.
CUSTOM_OP_HD inline bool reader_stopped_early(const BitReader* r) { return r->stopped && r->next < r->end; }

// Data bits not consumed: those still buffered plus the bytes never loaded (stuffing counts as 8).
// Valid encoders leave fewer than 8 (the padding to a byte boundary).
CUSTOM_OP_HD inline int64_t reader_unconsumed_bits(const BitReader* r) {
  const int64_t buffered = r->bits > r->padded ? r->bits - r->padded : 0;
  return buffered + 8 * static_cast<int64_t>(r->end - r->next);
}

// Where the next bit to consume lies in the bytes: its offset in bits from `base`, with a stuffed FF 00
// counted as the FF's 8 bits (the 00 holds none), so that readers started at different bytes of the
// same data give one bit the same offset. `begin` is where reader_init started the reader (at a data
// byte or an FF 00, never at the 00). Walks back over the buffered bytes (8 at most): a 00 after an FF
// is stuffing, as reader_fill reads it. Needs !reader_overran(r).
CUSTOM_OP_HD inline int64_t reader_bit_offset(const BitReader* r, const uint8_t* begin, const uint8_t* base) {
  int buffered = r->bits - r->padded;
  const uint8_t* p = r->next;
  while (buffered > 0) {
    p -= (p - begin >= 2 && reader_byte(p - 1) == 0x00 && reader_byte(p - 2) == 0xFF) ? 2 : 1;
    buffered -= 8;
  }
  return 8 * static_cast<int64_t>(p - base) - buffered;  // buffered in (-8, 0]: bits of p's byte consumed
}

}  // namespace jpeg_core
}  // namespace custom_op
