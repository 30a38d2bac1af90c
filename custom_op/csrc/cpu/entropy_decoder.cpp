#include "entropy_decoder.h"

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstring>

#include "huffman_tables.h"
#include "libjpeg_session.h"

namespace custom_op {
namespace {

std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_give_ups{0};

constexpr uint8_t kRST0 = 0xD0;
constexpr uint8_t kEOI = 0xD9;

// libjpeg keeps up to 64 bits loaded ahead of the bits it has decoded (an FF FF .. FF 00 run counts
// as one byte), and asks its source for more (a warning, on a memory source) when that read-ahead
// meets the end of the data.
constexpr int kReadAheadBytes = 9;

// Zigzag position -> natural (row-major) position, with every position past 63 sent to 63: a damaged
// block whose zero runs carry it past the end stores its last value there, as libjpeg does. A step of
// decode_ac may reach 63 + 128 (huffman_tables.h's ac_steps).
struct NaturalOrder {
  uint8_t at[256];
  constexpr NaturalOrder() : at() {
    // The zigzag walk of the JPEG standard (figure A.6), computed rather than tabulated.
    int i = 0;
    for (int s = 0; s < 15; ++s) {
      for (int j = 0; j <= s; ++j) {
        const int r = (s % 2 == 0) ? s - j : j;
        const int c = s - r;
        if (r < 8 && c < 8) at[i++] = static_cast<uint8_t>(8 * r + c);
      }
    }
    for (; i < 256; ++i) at[i] = 63;
  }
};
constexpr NaturalOrder kNatural;
static_assert(kNatural.at[1] == 1 && kNatural.at[2] == 8 && kNatural.at[3] == 16 && kNatural.at[63] == 63,
              "zigzag order");

[[noreturn]] void give_up(j_decompress_ptr cinfo) {
  ErrorState* err = reinterpret_cast<ErrorState*>(cinfo->err);
  err->entropy_gave_up = true;
  std::longjmp(err->jump, 1);
}

// Loads bytes one at a time until more than 55 bits are in the buffer, unstuffing FF 00 and putting
// zeros in past a marker. Gives up at the end of the data: libjpeg asks its source for more there (a
// warning, on a memory source), and only libjpeg can say exactly when (see check_entropy_read_ahead).
__attribute__((noinline)) void load_bytes(j_decompress_ptr cinfo, OwnEntropyDecoder& d) {
  while (d.bits < 56) {
    if (!d.at_marker) {
      if (d.next == d.end) give_up(cinfo);
      const uint8_t byte = *d.next;
      if (byte != 0xFF) {
        d.buf |= static_cast<uint64_t>(byte) << (56 - d.bits);
        d.bits += 8;
        ++d.next;
        continue;
      }
      // FF as the last byte, or FF FF (fill bytes, which libjpeg also reads as part of FF FF .. FF 00,
      // and no valid scan needs): libjpeg decides.
      if (d.end - d.next < 2 || d.next[1] == 0xFF) give_up(cinfo);
      if (d.next[1] == 0x00) {
        d.buf |= uint64_t{0xFF} << (56 - d.bits);
        d.bits += 8;
        d.next += 2;
        continue;
      }
      d.at_marker = true;
    }
    d.bits += 8;
    d.fake_bits += 8;
  }
}

// The decoder's bit position in locals, so that it stays in registers through an MCU (members
// reached through the decoder would be stored back after every coefficient, as the block stores
// might alias them). A Reader is only ever a local whose address no call takes: one that a call
// needs gets a copy.
class Reader {
 public:
  Reader(j_decompress_ptr cinfo, OwnEntropyDecoder& d)
      : cinfo_(cinfo), d_(&d), next_(d.next), end_(d.end), buf_(d.buf), bits_(d.bits) {}

  void store() const {
    // A refill may have loaded part of the next byte beyond bits_: keep zeros there, which
    // load_bytes needs (it only ORs bytes in, and the marker's zeros are not written at all).
    d_->buf = bits_ > 0 ? buf_ & (~0ULL << (64 - bits_)) : 0;
    d_->bits = bits_;
    d_->next = next_;
  }

  // Afterwards at least 56 bits are loaded.
  __attribute__((always_inline)) void refill() {
    if (end_ - next_ >= 8) {
      uint64_t w;
      std::memcpy(&w, next_, 8);
      const uint64_t inv = ~w;
      const uint64_t ff = (inv - 0x0101010101010101ULL) & ~inv & 0x8080808080808080ULL;
      // No FF among the 8 bytes: no stuffing and no marker. Bytes that only partly fit are loaded
      // in part; the next refill loads them again, to the same place.
      if (__builtin_expect(ff == 0, 1)) {
        buf_ |= __builtin_bswap64(w) >> bits_;
        next_ += (63 - bits_) >> 3;
        bits_ |= 56;  // bits_ + 8 * the whole bytes taken
        return;
      }
      // The bytes before the first FF (the first byte the test flags is an FF), when they are
      // enough: nothing of the FF or after it is loaded, as a marker's padding must stay zeros.
      const int before_ff = __builtin_ctzll(ff) >> 3;
      const int whole = std::min(before_ff, (63 - bits_) >> 3);
      if (bits_ + 8 * whole >= 56) {
        buf_ |= (__builtin_bswap64(w) & ~(~0ULL >> (8 * whole))) >> bits_;
        next_ += whole;
        bits_ += 8 * whole;
        return;
      }
    }
    if (bits_ < 56) slow();
  }
  __attribute__((always_inline)) void fill(int need) {
    if (bits_ < need) refill();
  }
  uint32_t peek(int n) const { return static_cast<uint32_t>(buf_ >> (64 - n)); }
  void drop(int n) {
    buf_ <<= n;
    bits_ -= n;
  }
  // Gives back the last `n` bits dropped, which were `bits`.
  void rewind(uint64_t bits, int n) {
    buf_ = (buf_ >> n) | bits << (64 - n);
    bits_ += n;
  }

 private:
  __attribute__((always_inline)) void slow() {
    store();
    load_bytes(cinfo_, *d_);
    next_ = d_->next;
    end_ = d_->end;
    buf_ = d_->buf;
    bits_ = d_->bits;
  }

  j_decompress_ptr cinfo_;
  OwnEntropyDecoder* d_;
  const uint8_t* next_;
  const uint8_t* end_;
  uint64_t buf_;
  int bits_;
};

// A DC difference; needs 56 bits loaded (any difference fits in 31).
__attribute__((always_inline)) inline bool decode_dc(Reader& in, const HuffmanTable& t, int32_t* diff) {
  const uint16_t e = t.dc_whole[in.peek(HuffmanTable::kDcBits)];
  if (__builtin_expect(e != 0, 1)) {
    in.drop(e & 15);
    *diff = static_cast<int16_t>(e) >> 4;
    return true;
  }
  int s;
  if (!decode_symbol(in, t, &s)) return false;
  *diff = 0;
  if (s != 0) {
    *diff = extend(in.peek(s), s);
    in.drop(s);
  }
  return true;
}

// One step of decode_ac: one or two coefficients (huffman_tables.h's ac_steps). False when the
// table has no entry for the bits (a long symbol: nothing consumed, k < 64 still) or when the block
// ended in the step (k >= 64). Needs kValueBits bits loaded.
__attribute__((always_inline)) inline bool ac_step(Reader& in, const uint64_t* table, JCOEF* block, size_t& k) {
  const uint32_t index = in.peek(HuffmanTable::kValueBits);
  const uint64_t e = table[index];
  const size_t k1 = k + (static_cast<uint32_t>(e) >> 24);
  const size_t k2 = k + ((e >> 8) & 0xFF);
  // The second first: without one, k2 == k1 and the first's store wins.
  block[kNatural.at[k2 - 1]] = static_cast<JCOEF>(e >> 48);
  block[kNatural.at[k1 - 1]] = static_cast<JCOEF>(e >> 32);
  const int used = static_cast<uint8_t>(e);
  in.drop(used);
  if (__builtin_expect(k2 < 64, 1)) {
    k = k2;
    return true;
  }
  if (used == 0) return false;  // kAcMissAdvance: k stays, nothing was consumed
  k = k2;
  // The first symbol ended the block: a second one in the step is the next block's (its store, at
  // position 63 or its clamp, came before the first's). Its bits go back, from the index.
  const int second = used - static_cast<int>((e >> 16) & 15);
  if (k1 >= 64 && second != 0) in.rewind((index >> (HuffmanTable::kValueBits - used)) & ((1u << second) - 1), second);
  return false;
}

// A symbol whose code is longer than the code table's lookup (at most 16 + 15 bits with its extra
// bits): the position after it, or -1 for a code the table lacks.
__attribute__((noinline)) int ac_long_symbol(Reader& in, const HuffmanTable& t, JCOEF* block, size_t k) {
  in.fill(31);
  int symbol;
  if (!decode_symbol(in, t, &symbol)) return -1;
  const int run = symbol >> 4, size = symbol & 15;
  if (size != 0) {
    k += run;
    block[kNatural.at[k]] = static_cast<JCOEF>(extend(in.peek(size), size));
    in.drop(size);
    ++k;
  } else {
    k += run == 15 ? 16 : 64;  // a zero run, or the end of the block
  }
  return static_cast<int>(k);
}

// A block's AC coefficients into `block` (zeroed by libjpeg), in natural order.
static_assert(4 * HuffmanTable::kValueBits <= 56, "decode_ac's refills");

__attribute__((always_inline)) inline bool decode_ac(Reader& in, const HuffmanTable& t, JCOEF* block) {
  const uint64_t* const table = t.ac_steps;
  size_t k = 1;
  for (;;) {
    // Four steps per refill, without testing how many bits are left: a refill leaves at least 56.
    in.refill();
    if (ac_step(in, table, block, k) && ac_step(in, table, block, k) && ac_step(in, table, block, k) &&
        ac_step(in, table, block, k))
      continue;
    if (k >= 64) return true;
    // A symbol ac_step could not take: mostly a code the code table has, with more extra bits than
    // fit beside it; then the rarer longer codes, out of line.
    in.fill(HuffmanTable::kLookBits + 15);
    const uint16_t code = t.code[in.peek(HuffmanTable::kLookBits)];
    if (__builtin_expect(code != 0, 1)) {
      in.drop(code >> 8);
      const int run = (code >> 4) & 15, size = code & 15;
      if (size != 0) {
        k += static_cast<size_t>(run);
        block[kNatural.at[k]] = static_cast<JCOEF>(extend(in.peek(size), size));
        in.drop(size);
        ++k;
      } else {
        k += run == 15 ? 16 : 64;  // a zero run, or the end of the block
      }
      if (k >= 64) return true;
      continue;
    }
    Reader copy = in;
    const int after = ac_long_symbol(copy, t, block, k);
    in = copy;
    if (after < 0) return false;
    if (after >= 64) return true;
    k = static_cast<size_t>(after);
  }
}

// Adds a DC difference the way libjpeg does (a damaged file can push the sum out of int range; it
// wraps, and only its low 16 bits are stored).
inline int32_t add_wrapping(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

__attribute__((always_inline)) inline bool decode_blocks(Reader& in, OwnEntropyDecoder& d, JBLOCKROW* MCU_data) {
  for (int b = 0; b < d.blocks; ++b) {
    in.refill();
    int32_t diff;
    if (!decode_dc(in, *d.dc[b], &diff)) return false;
    int32_t& p = d.pred[d.component[b]];
    p = add_wrapping(p, diff);
    JCOEF* block = MCU_data[b][0];
    block[0] = static_cast<JCOEF>(p);
    if (__builtin_expect(d.store_ac[b], 1)) {
      if (!decode_ac(in, *d.ac[b], block)) return false;
    } else {
      in.fill(3 * HuffmanTable::kAcBits);
      if (!walk_ac(in, *d.ac[b])) return false;
    }
  }
  return true;
}

__attribute__((always_inline)) inline bool walk_blocks(Reader& in, OwnEntropyDecoder& d) {
  for (int b = 0; b < d.blocks; ++b) {
    in.refill();
    int32_t diff;
    if (!decode_dc(in, *d.dc[b], &diff)) return false;
    int32_t& p = d.pred[d.component[b]];
    p = add_wrapping(p, diff);
    in.fill(3 * HuffmanTable::kAcBits);
    if (!walk_ac(in, *d.ac[b])) return false;
  }
  return true;
}

// An MCU's blocks, stored (MCU_data) or walked (null), with the decoder's bit position in a local
// Reader that goes back into the decoder afterwards.
__attribute__((noinline)) bool mcu_blocks(j_decompress_ptr cinfo, OwnEntropyDecoder& d, JBLOCKROW* MCU_data) {
  Reader in(cinfo, d);
  const bool ok = MCU_data != nullptr ? decode_blocks(in, d, MCU_data) : walk_blocks(in, d);
  in.store();
  return ok;
}

// The marker that must follow the data decoded so far, right after its last byte.
void take_marker(j_decompress_ptr cinfo, OwnEntropyDecoder& d, uint8_t marker) {
  if (!d.at_marker) load_bytes(cinfo, d);
  // Whole bytes left unread before the marker are data libjpeg would discard with a warning.
  if (!d.at_marker || d.bits - d.fake_bits >= 8 || d.fake_bits > d.bits) give_up(cinfo);
  if (d.next[1] != marker) give_up(cinfo);
  d.next += 2;
  d.at_marker = false;
  d.buf = 0;
  d.bits = 0;
  d.fake_bits = 0;
}

// The restart marker that must follow the segment just decoded.
void take_restart(j_decompress_ptr cinfo, OwnEntropyDecoder& d) {
  take_marker(cinfo, d, static_cast<uint8_t>(kRST0 + d.next_restart));
  for (int32_t& p : d.pred) p = 0;
  d.restarts_to_go = d.restart_interval;
  d.next_restart = (d.next_restart + 1) & 7;
}

boolean decode_mcu(j_decompress_ptr cinfo, JBLOCKROW* MCU_data) {
  OwnEntropyDecoder& d = *reinterpret_cast<OwnEntropyDecoder*>(cinfo->entropy);
  if (d.restart_interval != 0) {
    if (d.restarts_to_go == 0) take_restart(cinfo, d);
    --d.restarts_to_go;
  }
  const bool store = MCU_data != nullptr && d.column >= d.first_column && d.column <= d.last_column;
  if (++d.column == d.mcus_per_row) d.column = 0;
  const bool ok = mcu_blocks(cinfo, d, store ? MCU_data : nullptr);
  if (!ok || d.fake_bits > d.bits) give_up(cinfo);
  // Where libjpeg's own reader would stand, give or take the bytes read ahead.
  cinfo->src->next_input_byte = d.next;
  cinfo->src->bytes_in_buffer = static_cast<size_t>(d.end - d.next);
  return TRUE;
}

// Called by libjpeg at the start of another scan, which a single-scan decode never has.
void start_another_scan(j_decompress_ptr cinfo) { give_up(cinfo); }

// install_entropy_decoder without the process-wide switch.
bool set_up(j_decompress_ptr cinfo, OwnEntropyDecoder* d, JDIMENSION first_column, JDIMENSION last_column) {
  if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8) return false;
  if (cinfo->comps_in_scan != cinfo->num_components || cinfo->comps_in_scan > MAX_COMPS_IN_SCAN) return false;
  if (cinfo->blocks_in_MCU < 1 || cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU) return false;
  if (cinfo->entropy == nullptr || cinfo->src == nullptr || cinfo->unread_marker != 0) return false;
  if (cinfo->MCUs_per_row < 1) return false;
  d->blocks = cinfo->blocks_in_MCU;
  for (int b = 0; b < d->blocks; ++b) {
    const int ci = cinfo->MCU_membership[b];
    if (ci < 0 || ci >= cinfo->comps_in_scan) return false;
    const jpeg_component_info* comp = cinfo->cur_comp_info[ci];
    if (comp == nullptr) return false;
    const int dc_no = comp->dc_tbl_no, ac_no = comp->ac_tbl_no;
    if (dc_no < 0 || dc_no >= NUM_HUFF_TBLS || ac_no < 0 || ac_no >= NUM_HUFF_TBLS) return false;
    d->dc[b] = derived_table(cinfo->dc_huff_tbl_ptrs[dc_no], true);
    d->ac[b] = derived_table(cinfo->ac_huff_tbl_ptrs[ac_no], false);
    if (d->dc[b] == nullptr || d->ac[b] == nullptr) return false;
    d->component[b] = ci;
#if JPEG_LIB_VERSION >= 70
    const int scaled_size = comp->DCT_h_scaled_size;
#else
    const int scaled_size = comp->DCT_scaled_size;
#endif
    // libjpeg's own decoder skips these too: a 1x1 IDCT reads only the DC coefficient, and an
    // unneeded component (the chroma of a grayscale decode) is not transformed at all.
    d->store_ac[b] = comp->component_needed && scaled_size > 1;
  }
  for (int32_t& p : d->pred) p = 0;
  d->restart_interval = cinfo->restart_interval;
  d->restarts_to_go = cinfo->restart_interval;
  d->next_restart = 0;
  d->mcus_per_row = cinfo->MCUs_per_row;
  d->column = 0;
  d->first_column = first_column;
  d->last_column = last_column;
  d->next = cinfo->src->next_input_byte;
  d->end = d->next + cinfo->src->bytes_in_buffer;
  d->buf = 0;
  d->bits = 0;
  d->fake_bits = 0;
  d->at_marker = false;
  d->pub.start_pass = start_another_scan;
  d->pub.decode_mcu = decode_mcu;
  d->pub.insufficient_data = FALSE;
  cinfo->entropy = reinterpret_cast<jpeg_entropy_decoder*>(&d->pub);
  return true;
}

}  // namespace

bool install_entropy_decoder(j_decompress_ptr cinfo, OwnEntropyDecoder* d, JDIMENSION first_column,
                             JDIMENSION last_column) {
  return g_enabled.load(std::memory_order_relaxed) && set_up(cinfo, d, first_column, last_column);
}

bool walk_whole_scan(j_decompress_ptr cinfo, OwnEntropyDecoder* d) {
  // No MCU column is stored: decode_mcu gets no blocks to store into, and walks every one.
  if (!set_up(cinfo, d, 1, 0)) return false;
  const uint64_t mcus = uint64_t{cinfo->MCUs_per_row} * uint64_t{cinfo->MCU_rows_in_scan};
  for (uint64_t i = 0; i < mcus; ++i) decode_mcu(cinfo, nullptr);
  take_marker(cinfo, *d, kEOI);
  return true;
}

void check_entropy_read_ahead(j_decompress_ptr cinfo) {
  const OwnEntropyDecoder& d = *reinterpret_cast<const OwnEntropyDecoder*>(cinfo->entropy);
  if (d.at_marker) return;  // libjpeg stops at a marker too
  // libjpeg's read-ahead starts from the bits decoded, which are all before `next`.
  const uint8_t* p = d.next;
  for (int data_bytes = 0; data_bytes < kReadAheadBytes;) {
    if (p == d.end) give_up(cinfo);
    if (*p != 0xFF) {
      ++p;
      ++data_bytes;
      continue;
    }
    // As load_bytes: an FF that ends a buffer, or FF FF, is left to libjpeg.
    if (d.end - p < 2 || p[1] == 0xFF) give_up(cinfo);
    if (p[1] != 0x00) return;  // a marker
    p += 2;
    ++data_bytes;
  }
}

bool set_own_entropy_decoder(bool on) { return g_enabled.exchange(on, std::memory_order_relaxed); }

void count_entropy_give_up() { g_give_ups.fetch_add(1, std::memory_order_relaxed); }

int64_t entropy_decoder_give_ups() { return g_give_ups.load(std::memory_order_relaxed); }

}  // namespace custom_op
