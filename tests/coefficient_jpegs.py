"""Baseline JPEGs written from chosen quantized coefficients and Huffman code lengths, for the entropy
decoder's tests: what a pixel encoder seldom writes on purpose (blocks whose last coefficient is at
zigzag position 63 followed closely by the next block's DC code, codes of 1 to 16 bits, extra bits
of all ones, long zero runs, many FF bytes in the entropy-coded data) written on demand.

`write` takes the blocks in the scan's order and codes them with tables made from weights the caller
chooses (the codes need not suit the data: any symbol the data uses gets a code). The quantization
table is all ones, so pixels are whatever libjpeg's IDCT makes of the coefficients (clamped).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Component(NamedTuple):
    h: int  # sampling factors
    v: int
    table: int  # Huffman table id for both DC and AC (0 or 1)


def code_lengths(weights: dict[int, float]) -> tuple[list[int], list[int]]:
    """(bits[1..16] counts, symbols in code order) for a table giving each symbol a code, lengths from
    the weights as JPEG's Annex K.2 and K.3 make them (at most 16 bits, no code of all ones)."""
    symbols = sorted(weights)
    freq = [float(weights[s]) for s in symbols] + [0.0]  # the last one is the reserved all-ones code
    freq[-1] = min(freq) / 4 if symbols else 1.0
    n = len(freq)
    size = [0] * n
    others = [-1] * n
    live = [True] * n
    while True:
        order = sorted((i for i in range(n) if live[i]), key=lambda i: (freq[i], -i))
        if len(order) < 2:
            break
        c1, c2 = order[0], order[1]
        freq[c1] += freq[c2]
        live[c2] = False
        for c in (c1, c2):
            size[c] += 1
            while others[c] >= 0:
                c = others[c]
                size[c] += 1
        c = c1
        while others[c] >= 0:
            c = others[c]
        others[c] = c2
    bits = [0] * 33
    for s in size:
        bits[s] += 1
    for i in range(32, 16, -1):
        while bits[i] > 0:
            j = i - 2
            while bits[j] == 0:
                j -= 1
            bits[i] -= 2
            bits[i - 1] += 1
            bits[j + 1] += 2
            bits[j] -= 1
    i = 16
    while bits[i] == 0:
        i -= 1
    bits[i] -= 1  # the reserved code
    # Symbols in code order: by length, then as listed (the reserved one is the last of the longest).
    by_size = sorted(range(n - 1), key=lambda k: (size[k], k))
    # K.3 moved lengths around: hand them out again in order of the original lengths.
    lengths = [length for length in range(1, 17) for _ in range(bits[length])]
    assert len(lengths) == len(symbols)
    return bits[1:17], [symbols[k] for k in by_size][: len(lengths)]


def _codes(bits: list[int], order: list[int]) -> dict[int, tuple[int, int]]:
    codes, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            codes[order[k]] = (code, length)
            code += 1
            k += 1
        code <<= 1
    return codes


class _Bits:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, n: int):
        for i in range(n - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc = self.n = 0

    def align(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def _category(value: int) -> int:
    return abs(value).bit_length()


def _extra(value: int, size: int) -> int:
    return value if value >= 0 else value + (1 << size) - 1


def _symbols(block: np.ndarray) -> list[tuple[int, int]]:
    """The AC symbols of a block given in zigzag order: (run << 4 | size, value)."""
    out, run = [], 0
    last = max((k for k in range(1, 64) if block[k] != 0), default=0)
    for k in range(1, last + 1):
        if block[k] == 0:
            run += 1
            continue
        while run > 15:
            out.append((0xF0, 0))
            run -= 16
        out.append(((run << 4) | _category(int(block[k])), int(block[k])))
        run = 0
    if last < 63:
        out.append((0x00, 0))
    return out


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def write(
    blocks: list[np.ndarray],
    height: int,
    width: int,
    components: list[Component],
    restart_interval: int = 0,
    ac_weights=None,
    dc_weights=None,
) -> bytes:
    """A baseline JPEG of `blocks` (int arrays of 64 quantized coefficients in zigzag order, DC first,
    in the interleaved scan's order: MCU after MCU, each component's blocks row by row within it).
    ac_weights(table, symbols) / dc_weights(table, symbols) give each table's weights (default: how
    often the data uses each symbol)."""
    hmax = max(c.h for c in components)
    vmax = max(c.v for c in components)
    if len(components) == 1:
        hmax = vmax = 1
    mcus = -(-width // (8 * hmax)) * -(-height // (8 * vmax))
    per_mcu = [c.h * c.v if len(components) > 1 else 1 for c in components]
    assert len(blocks) == mcus * sum(per_mcu), (len(blocks), mcus, per_mcu)

    # What each table codes.
    coded = []  # (table, dc diff, ac symbols) per block
    pred = [0] * len(components)
    i = 0
    for m in range(mcus):
        if restart_interval and m % restart_interval == 0:
            pred = [0] * len(components)
        for ci, comp in enumerate(components):
            for _ in range(per_mcu[ci]):
                block = blocks[i]
                i += 1
                diff = int(block[0]) - pred[ci]
                pred[ci] = int(block[0])
                coded.append((comp.table, diff, _symbols(block)))
    tables = sorted({c.table for c in components})
    dc_use = {t: {} for t in tables}
    ac_use = {t: {} for t in tables}
    for table, diff, symbols in coded:
        dc_use[table][_category(diff)] = dc_use[table].get(_category(diff), 0) + 1
        for symbol, _ in symbols:
            ac_use[table][symbol] = ac_use[table].get(symbol, 0) + 1
    dc_codes, ac_codes, dht = {}, {}, b""
    for t in tables:
        for cls, use, weigh, codes in ((0, dc_use, dc_weights, dc_codes), (1, ac_use, ac_weights, ac_codes)):
            weights = weigh(t, sorted(use[t])) if weigh else use[t]
            bits, order = code_lengths(weights)
            codes[t] = _codes(bits, order)
            dht += _segment(0xC4, bytes([cls << 4 | t]) + bytes(bits) + bytes(order))

    out = bytearray(b"\xff\xd8")
    out += _segment(0xDB, bytes([0]) + bytes([1] * 64))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([len(components)])
    for ci, c in enumerate(components):
        sof += bytes([ci + 1, c.h << 4 | c.v, 0])
    out += _segment(0xC0, sof)
    out += dht
    if restart_interval:
        out += _segment(0xDD, restart_interval.to_bytes(2, "big"))
    sos = bytes([len(components)])
    for ci, c in enumerate(components):
        sos += bytes([ci + 1, c.table << 4 | c.table])
    out += _segment(0xDA, sos + bytes([0, 63, 0]))

    bits = _Bits()
    k = 0
    for m in range(mcus):
        if restart_interval and m and m % restart_interval == 0:
            bits.align()
            out += bits.out
            bits.out = bytearray()
            out += bytes([0xFF, 0xD0 + (m // restart_interval - 1) % 8])
        for n in per_mcu:
            for _ in range(n):
                table, diff, symbols = coded[k]
                k += 1
                size = _category(diff)
                bits.put(*dc_codes[table][size])
                if size:
                    bits.put(_extra(diff, size), size)
                for symbol, value in symbols:
                    bits.put(*ac_codes[table][symbol])
                    if symbol & 15:
                        bits.put(_extra(value, symbol & 15), symbol & 15)
    bits.align()
    out += bits.out + b"\xff\xd9"
    return bytes(out)
