"""The error contract: bad windows, bad arguments, corrupt or hostile data give the documented Python
exception (ValueError / TypeError / RuntimeError), warnings follow on_warning, and the process stays
healthy afterwards."""

import io
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
import damaged_jpegs
import jpeg_factory
import jpeg_markers as jm

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

HEIGHT, WIDTH = 64, 96


@pytest.fixture(scope="module")
def valid():
    """A small 4:2:0 baseline file and the pixels custom_op decodes from it before anything failed."""
    data = jpeg_factory.encode(jpeg_factory.photo_like(HEIGHT, WIDTH, seed=11), quality=90)
    reference = custom_op.decode_jpeg(data)
    assert reference.shape == (3, HEIGHT, WIDTH)
    # Sanity check of the reference against an independent decoder (same libjpeg settings give the
    # same pixels up to the odd rounding difference between builds).
    pillow = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    assert (reference.int() - pillow.int()).abs().max() <= 2
    return data, reference


@pytest.fixture(scope="module")
def progressive_file():
    return jpeg_factory.encode(jpeg_factory.photo_like(HEIGHT, WIDTH, seed=12), progressive=True)


@pytest.fixture(autouse=True)
def stays_healthy(valid):
    """After every test here, whatever failed in it, a valid decode still gives the right pixels."""
    yield
    data, reference = valid
    assert torch.equal(custom_op.decode_jpeg(data), reference)
    assert torch.equal(custom_op.decode_and_crop_jpeg(data, 5, 7, 20, 30), reference[:, 5:25, 7:37])


def _header_end(data: bytes) -> int:
    """Offset of the first byte of entropy-coded data (just past the first SOS segment)."""
    sos = jm.find(data, jm.SOS)
    return sos.offset + sos.length


# ---------------------------------------------------------------------------------------------- windows

EMPTY_WINDOWS = [(0, 0, 0, 10), (0, 0, 10, 0), (0, 0, -5, 10), (0, 0, 10, -5)]
BAD_WINDOWS = [
    (-1, 0, 10, 10),
    (0, -1, 10, 10),
    (HEIGHT - 9, 0, 10, 10),  # bottom one row past the image
    (0, WIDTH - 9, 10, 10),  # right one column past the image
    (HEIGHT, 0, 1, 1),
    (0, WIDTH, 1, 1),
    (0, 0, HEIGHT + 1, WIDTH),
    (0, 0, HEIGHT, WIDTH + 1),
    (2**31 - 1, 0, 1, 1),
    (0, 0, 2**31, 2**31),
    (0, 0, 2**32 + 10, 10),  # 10 if truncated to 32 bits
    (2**32, 2**32, 10, 10),  # (0, 0) if truncated to 32 bits
    (2**62, 2**62, 2**62, 2**62),  # top + height overflows int64
    (-(2**63) + 1, 0, 10, 10),
]


@pytest.mark.parametrize("window", BAD_WINDOWS, ids=str)
def test_window_outside_image_is_value_error_naming_window_and_size(valid, window):
    data, _ = valid
    with pytest.raises(ValueError) as info:
        custom_op.decode_and_crop_jpeg(data, *window)
    message = str(info.value)
    for number in (*window, HEIGHT, WIDTH):
        assert str(number) in message, (number, message)


@pytest.mark.parametrize("window", EMPTY_WINDOWS, ids=str)
def test_empty_window_is_value_error_saying_at_least_1(valid, window):
    data, _ = valid
    for call in (
        lambda: custom_op.decode_and_crop_jpeg(data, *window),
        lambda: custom_op.decode_and_crop_jpegs([data, data], 0, 0, [10, window[2]], [10, window[3]]),
        lambda: custom_op.decode_and_resized_crop_jpeg(data, *window, 8),
    ):
        with pytest.raises(ValueError, match="must be at least 1") as info:
            call()
        assert f"height={window[2]}" in str(info.value) and f"width={window[3]}" in str(info.value)
    with pytest.raises(ValueError, match="batch item 1: the crop window's height and width must be at least 1"):
        custom_op.decode_and_crop_jpegs([data, data], 0, 0, [10, window[2]], [10, window[3]])


@pytest.mark.parametrize("window", [(0, 0, HEIGHT, WIDTH), (HEIGHT - 1, WIDTH - 1, 1, 1), (0, WIDTH - 1, HEIGHT, 1)])
def test_windows_touching_the_edges_are_fine(valid, window):
    data, reference = valid
    top, left, height, width = window
    out = custom_op.decode_and_crop_jpeg(data, *window)
    assert torch.equal(out, reference[:, top : top + height, left : left + width])


def test_window_checked_against_the_displayed_frame(valid):
    # No EXIF here, so orientation changes nothing; a window fitting only the transposed frame fails.
    data, _ = valid
    with pytest.raises(ValueError):
        custom_op.decode_and_crop_jpeg(data, 0, 0, WIDTH, HEIGHT, apply_exif_orientation=True)


def test_bad_window_raised_before_decoding(valid):
    # The header declares a huge image whose data is missing: decoding first would hit the missing
    # data (RuntimeError) or take long; checking the window first gives ValueError at once.
    data, _ = valid
    huge = jm.patch_sof(data, height=60000, width=60000)
    with pytest.raises(ValueError, match="60000"):
        custom_op.decode_and_crop_jpeg(huge, 59990, 59990, 20, 20, max_pixels=None)
    with pytest.raises(ValueError, match="60000"):
        custom_op.decode_and_crop_jpeg(huge, 0, 0, 60001, 10, max_pixels=None, on_warning="ignore")


# ------------------------------------------------------------------------------------- argument types


def _bad_data_objects(data: bytes):
    array = np.frombuffer(data, dtype=np.uint8)
    tensor = torch.from_numpy(array.copy())
    doubled = torch.from_numpy(np.repeat(array, 2))
    return {
        "float32 tensor": tensor.float(),
        "int16 tensor": tensor.to(torch.int16),
        "int8 tensor": tensor.to(torch.int8),
        "bool tensor": tensor.bool(),
        "float32 array": array.astype(np.float32),
        "int16 array": array.astype(np.int16),
        "2-D tensor": tensor[: len(data) // 2 * 2].reshape(2, -1),
        "2-D array": array[: len(data) // 2 * 2].reshape(2, -1),
        "0-D tensor": torch.tensor(255, dtype=torch.uint8),
        "non-contiguous tensor": doubled[::2],
        "non-contiguous array": np.repeat(array, 2)[::2],
        "int32 memoryview": memoryview(np.frombuffer(data[: len(data) // 4 * 4], dtype=np.int32)),
        "strided memoryview": memoryview(bytes(data) * 2)[::2],
        "list": list(data),
        "None": None,
        "str": "not bytes",
        "int": 7,
    }


@pytest.mark.parametrize("kind", list(_bad_data_objects(b"\xff\xd8\xff\xd9")))
@pytest.mark.parametrize("op", ["decode_and_crop_jpeg", "decode_jpeg", "read_jpeg_header"])
def test_wrong_data_type_is_type_error(valid, kind, op):
    bad = _bad_data_objects(valid[0])[kind]
    call = {
        "decode_and_crop_jpeg": lambda d: custom_op.decode_and_crop_jpeg(d, 0, 0, 8, 8),
        "decode_jpeg": custom_op.decode_jpeg,
        "read_jpeg_header": custom_op.read_jpeg_header,
    }[op]
    with pytest.raises(TypeError):
        call(bad)


@pytest.mark.parametrize("kind", list(_bad_data_objects(b"\xff\xd8\xff\xd9")))
def test_wrong_data_type_in_a_cpu_batch_names_the_item(valid, kind):
    bad = _bad_data_objects(valid[0])[kind]
    with pytest.raises(TypeError, match="batch item 1: .*data must"):
        custom_op.decode_and_crop_jpegs([valid[0], bad], 0, 0, 8, 8)


def test_batch_window_lists(valid):
    data, reference = valid
    # numpy ints, a tensor, a tuple and a bool (an int) are all taken
    out = custom_op.decode_and_crop_jpegs([data, data], [0, np.int64(1)], torch.tensor([0, 2]), (8, 8), [True, 8])
    assert torch.equal(out[0], reference[:, 0:8, 0:1]) and torch.equal(out[1], reference[:, 1:9, 2:10])
    with pytest.raises(TypeError, match=r"tops\[1\] must be an integer, got float"):
        custom_op.decode_and_crop_jpegs([data, data], [0, 1.5], 0, 8, 8)
    with pytest.raises(TypeError, match=r"widths\[0\] must be an integer, got str"):
        custom_op.decode_and_crop_jpegs([data, data], 0, 0, 8, ["8", 8])
    with pytest.raises(ValueError, match=r"lefts\[1\]=9223372036854775808 is out of range"):
        custom_op.decode_and_crop_jpegs([data, data], 0, [0, 2**63], 8, 8)
    with pytest.raises(ValueError, match="heights has 3 entries for 2 images"):
        custom_op.decode_and_crop_jpegs([data, data], 0, 0, [8, 8, 8], 8)


def test_an_empty_batch(valid):
    """An empty batch gives an empty list; stacked, [0, C, h, w] where one int gives the windows' size and
    the mode the channels (as a batch of one window would be shaped), else a ValueError saying why, never
    a [0] tensor that fails far from the call. Decided before any operator: device="cuda" answers alike."""
    data, _ = valid
    assert custom_op.decode_and_crop_jpegs([], [], [], [], []) == [] == custom_op.decode_jpegs([])
    for mode, channels in (("RGB", 3), ("GRAY", 1)):
        stacked = custom_op.decode_and_crop_jpegs([], 5, 7, 64, 48, mode=mode, stack=True)
        one = custom_op.decode_and_crop_jpegs([data], 0, 0, 64, 48, mode=mode, stack=True)
        assert stacked.shape == (0, channels, 64, 48) == (0, *one.shape[1:]) and stacked.dtype == torch.uint8
    stacked, errors = custom_op.decode_and_crop_jpegs([], 0, 0, torch.tensor(32), 32, stack=True, on_error="return")
    assert stacked.shape == (0, 3, 32, 32) and errors == []
    packed = custom_op.pack_files([])
    assert custom_op.decode_and_crop_jpegs(packed, 0, 0, 16, 16, stack=True).shape == (0, 3, 16, 16)
    for device in ("cpu", "cuda"):
        for call, args, options in (
            (custom_op.decode_and_crop_jpegs, ([], [], [], [], []), {}),  # sizes given per file
            (custom_op.decode_and_crop_jpegs, ([], 0, 0, 64, 48), {"mode": "UNCHANGED"}),
            (custom_op.decode_jpegs, ([],), {"on_error": "return"}),  # whole images
        ):
            with pytest.raises(ValueError, match=r"^custom_op: stack=True on an empty batch: .* is unknown; "):
                call(*args, stack=True, device=device, **options)
    with pytest.raises(ValueError, match="given per file"):
        custom_op.decode_and_crop_jpegs([], 0, 0, np.array([], dtype=np.int64), 48, stack=True)
    with pytest.raises(ValueError, match="UNCHANGED"):
        custom_op.decode_and_crop_jpegs([], 0, 0, 64, 48, mode="UNCHANGED", stack=True)
    with pytest.raises(ValueError, match="whole images"):
        custom_op.decode_jpegs([], stack=True)
    with pytest.raises(ValueError, match="at least 1"):
        custom_op.decode_and_crop_jpegs([], 0, 0, 0, 48, stack=True)
    with pytest.raises(TypeError, match="heights must be an integer"):
        custom_op.decode_and_crop_jpegs([], 0, 0, 1.5, 48, stack=True)


def test_a_batch_of_tensors_for_the_gpu_is_passed_on_unchecked():
    # For device="cuda" the operator checks each tensor itself (tests/test_gpu.py); Python checks the
    # other objects as always, and every file for the CPU operator.
    from custom_op import _args

    good, bad = torch.zeros(4, dtype=torch.uint8), torch.zeros(4)
    assert _args.tensors([good, bad], check_tensors=False)[1] is bad
    with pytest.raises(TypeError, match="batch item 1: data must be a uint8 tensor"):
        _args.tensors([good, bad])
    mixed = _args.tensors([good, b"ab"], check_tensors=False)
    assert mixed[0] is good and mixed[1].dtype == torch.uint8 and mixed[1].tolist() == [97, 98]
    for other in (np.zeros(2, np.int32), "str", None):
        with pytest.raises(TypeError, match="batch item 1"):
            _args.tensors([good, other], check_tensors=False)


_GARBAGE = b"this is not a jpeg file at all"


@pytest.mark.parametrize(
    "garbage",
    [
        _GARBAGE,
        bytearray(_GARBAGE),
        memoryview(_GARBAGE),
        np.frombuffer(_GARBAGE, dtype=np.uint8),
        torch.frombuffer(bytearray(_GARBAGE), dtype=torch.uint8),
    ],
    ids=["bytes", "bytearray", "memoryview", "numpy", "tensor"],
)
def test_every_accepted_input_form_gives_runtime_error_for_garbage(garbage):
    with pytest.raises(RuntimeError, match="Not a JPEG file"):
        custom_op.decode_jpeg(garbage)
    with pytest.raises(RuntimeError, match="Not a JPEG file"):
        custom_op.decode_and_crop_jpeg(garbage, 0, 0, 1, 1)
    with pytest.raises(RuntimeError, match="Not a JPEG file"):
        custom_op.read_jpeg_header(garbage)


# --------------------------------------------------------------------------------------- corrupt data


def _png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(jpeg_factory.photo_like(16, 16)).save(buffer, format="PNG")
    return buffer.getvalue()


def _replace_segment(data: bytes, segment: jm.Segment, payload: bytes) -> bytes:
    return data[: segment.offset] + payload + data[segment.offset + segment.length :]


def _dht(table_class: int, table_id: int, counts, values) -> bytes:
    body = bytes([table_class << 4 | table_id]) + bytes(counts) + bytes(values)
    return b"\xff\xc4" + struct.pack(">H", 2 + len(body)) + body


# How a corruption must be reported:
#   HEADER: libjpeg errors while reading the header: RuntimeError from all three ops, any on_warning.
#   DECODE: the header reads, libjpeg errors when decoding starts: RuntimeError from the decoding ops,
#           any on_warning; read_jpeg_header may succeed (with the right size) or raise RuntimeError.
#   WARNING: libjpeg only warns: RuntimeError from decode_jpeg with on_warning="raise" (a window may
#           not reach the damage); otherwise an image of the right shape or RuntimeError.
HEADER, DECODE, WARNING = "header", "decode", "warning"


def _corruptions(data: bytes):
    """name -> (bytes, kind)."""
    sof = jm.find(data, jm.SOF)
    sos = jm.find(data, jm.SOS)
    dht = jm.find(data, jm.DHT)
    dqt = jm.find(data, jm.DQT)
    components = data[sof.offset + 9]

    def at(offset, new):  # data with the bytes at offset replaced
        return data[:offset] + new + data[offset + len(new) :]

    def insert(offset, new):
        return data[:offset] + new + data[offset:]

    return {
        "empty": (b"", HEADER),
        "not a jpeg": (b"not a jpeg", HEADER),
        "png": (_png_bytes(), HEADER),
        "SOI only": (b"\xff\xd8", HEADER),
        "SOI EOI": (b"\xff\xd8\xff\xd9", HEADER),
        "twelve-bit": (jm.patch_sof(data, precision=12), HEADER),
        "sixteen-bit": (jm.patch_sof(data, precision=16), HEADER),
        "zero height": (jm.patch_sof(data, height=0), HEADER),
        "zero width": (jm.patch_sof(data, width=0), HEADER),
        "zero components": (at(sof.offset + 9, b"\x00"), HEADER),
        "SOF length lies": (at(sof.offset + 2, struct.pack(">H", 8 + 3 * components + 5)), HEADER),
        "zero sampling factor": (at(sof.offset + 11, b"\x00"), HEADER),
        "sampling factor 5": (at(sof.offset + 11, b"\x55"), HEADER),
        "SOS unknown component": (at(sos.offset + 5, b"\x09"), HEADER),
        "SOS zero components": (at(sos.offset + 4, b"\x00"), HEADER),
        "SOS five components": (at(sos.offset + 4, b"\x05"), HEADER),
        "undefined Huffman table": (at(sos.offset + 6, b"\x33"), DECODE),
        "undefined quant table": (at(sof.offset + 12, b"\x03"), DECODE),
        "Huffman counts over 256": (_replace_segment(data, dht, _dht(0, 0, [0] * 14 + [200, 100], [0] * 10)), HEADER),
        "three 1-bit Huffman codes": (_replace_segment(data, dht, _dht(0, 0, [3] + [0] * 15, [0, 1, 2])), DECODE),
        "DC Huffman symbol 200": (_replace_segment(data, dht, _dht(0, 0, [0, 1] + [0] * 14, [200])), DECODE),
        "Huffman class 2": (_replace_segment(data, dht, _dht(2, 0, [0, 1] + [0] * 14, [0])), HEADER),
        "Huffman table id 4": (_replace_segment(data, dht, _dht(0, 4, [0, 1] + [0] * 14, [0])), HEADER),
        "empty Huffman table": (_replace_segment(data, dht, _dht(0, 0, [0] * 16, [])), WARNING),
        "quant table id 7": (at(dqt.offset + 4, bytes([data[dqt.offset + 4] | 7])), HEADER),
        "DQT length zero": (at(dqt.offset + 2, b"\x00\x00"), HEADER),
        "DRI length lies": (insert(sos.offset, b"\xff\xdd\x00\x07\x00\x01"), HEADER),
        "second SOF": (insert(sos.offset, data[sof.offset : sof.offset + sof.length]), HEADER),
        "no SOF": (data[: sof.offset] + data[sof.offset + sof.length :], HEADER),
        "no SOS": (data[: sos.offset] + b"\xff\xd9", HEADER),
        "marker length past the end": (data[:2] + b"\xff\xe1\xff\xff" + data[2:40], HEADER),
        "SOF3 lossless": (at(sof.offset + 1, b"\xc3"), HEADER),
        "garbage between markers": (insert(sof.offset, b"\x00\x11\x22"), WARNING),
        "scan data all 0xFF 0x00": (data[: sos.offset + sos.length] + b"\xff\x00" * 300 + b"\xff\xd9", WARNING),
        "scan data all zero": (data[: sos.offset + sos.length] + b"\x00" * 600 + b"\xff\xd9", WARNING),
    }


CORRUPTION_NAMES = (
    list(_corruptions(jpeg_factory.encode(jpeg_factory.photo_like(16, 16))))
    if jpeg_factory.unavailable_reason() is None
    else []
)


@pytest.mark.parametrize("name", CORRUPTION_NAMES)
@pytest.mark.filterwarnings("ignore:custom_op. corrupt JPEG data")  # on_warning="warn" is exercised, not asserted, here
def test_corrupt_data_is_runtime_error(valid, name):
    bad, kind = _corruptions(valid[0])[name]
    decoders = (
        lambda **kw: custom_op.decode_jpeg(bad, **kw),
        lambda **kw: custom_op.decode_and_crop_jpeg(bad, 0, 0, 8, 8, **kw),
        lambda **kw: custom_op.decode_and_crop_jpeg(bad, HEIGHT - 8, WIDTH - 8, 8, 8, **kw),
    )
    for i, decode in enumerate(decoders):
        # A window's decode stops after its last row, so it may never reach data that only warns.
        if kind == WARNING and i > 0:
            try:
                decode()
            except RuntimeError:
                pass
        else:
            with pytest.raises(RuntimeError) as info:
                decode()
            assert str(info.value).strip(), "the message must say what libjpeg found"
        for on_warning in ("warn", "ignore"):
            if kind == WARNING:
                try:
                    out = decode(on_warning=on_warning)
                except RuntimeError:
                    continue
                assert out.dtype == torch.uint8 and out.shape[0] == 3
            else:
                with pytest.raises(RuntimeError):
                    decode(on_warning=on_warning)
    if kind == HEADER:
        with pytest.raises(RuntimeError):
            custom_op.read_jpeg_header(bad)
    else:
        try:
            header = custom_op.read_jpeg_header(bad)
        except RuntimeError:
            pass
        else:
            assert (header.height, header.width) == (HEIGHT, WIDTH)


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"", "(?i)empty"),
        (b"not a jpeg", "Not a JPEG file"),
        ("png", "Not a JPEG file"),
        ("twelve-bit", "precision 12"),
        ("zero height", "(?i)empty JPEG image"),
    ],
)
def test_runtime_errors_carry_libjpegs_message(valid, bad, message):
    if isinstance(bad, str):
        bad = _corruptions(valid[0])[bad][0]
    with pytest.raises(RuntimeError, match=message):
        custom_op.decode_jpeg(bad)
    with pytest.raises(RuntimeError, match=message):
        custom_op.read_jpeg_header(bad)


def test_truncated_inside_the_header_fails_everywhere(valid, progressive_file):
    for data in (valid[0], progressive_file):
        # libjpeg only warns about odd spectral-selection bytes (the last 3 of SOS) in a sequential
        # file, so a cut there is a warning: it must raise by default, but need not with "ignore".
        fatal_until = _header_end(data) - 3
        for cut in range(0, _header_end(data)):
            truncated = data[:cut]
            with pytest.raises(RuntimeError):
                custom_op.decode_jpeg(truncated)
            with pytest.raises(RuntimeError):
                custom_op.decode_and_crop_jpeg(truncated, 0, 0, 1, 1)
            with pytest.raises(RuntimeError):
                custom_op.read_jpeg_header(truncated)
            if cut >= fatal_until:
                continue
            for on_warning in ("warn", "ignore"):
                with pytest.raises(RuntimeError):
                    custom_op.decode_jpeg(truncated, on_warning=on_warning)
                with pytest.raises(RuntimeError):
                    custom_op.decode_and_crop_jpeg(truncated, 0, 0, 1, 1, on_warning=on_warning)


def _scan_cuts(data: bytes, count: int = 40):
    """Offsets inside entropy-coded data, spread over every scan. A cut inside a marker segment
    between the scans of a progressive file (a Huffman table, say) is a broken header, an error
    under any on_warning, so those offsets are left out."""
    inside = []
    for sos in jm.segments(data):
        if sos.marker == jm.SOS:
            inside.extend(range(sos.offset + sos.length, sos.entropy_end))
    picks = np.linspace(0, len(inside) - 1, count).astype(int)
    return sorted({inside[i] for i in picks})


def test_truncated_mid_scan_follows_on_warning(valid, progressive_file):
    for data in (valid[0], progressive_file):
        for cut in _scan_cuts(data):
            truncated = data[:cut]
            with pytest.raises(RuntimeError, match="(?i)premature end|corrupt"):
                custom_op.decode_jpeg(truncated)
            assert custom_op.decode_jpeg(truncated, on_warning="ignore").shape == (3, HEIGHT, WIDTH)
            with pytest.warns(UserWarning, match="(?i)premature end|corrupt"):
                out = custom_op.decode_jpeg(truncated, on_warning="warn")
            assert out.shape == (3, HEIGHT, WIDTH)
            # The header is complete, so the header alone still reads.
            info = custom_op.read_jpeg_header(truncated)
            assert (info.height, info.width) == (HEIGHT, WIDTH)


def test_window_in_missing_rows_of_a_truncated_file(valid):
    # The cut is near the start of the scan, so the bottom rows are missing whatever the early stop.
    data = valid[0]
    truncated = data[: _header_end(data) + 20]
    with pytest.raises(RuntimeError, match="(?i)premature end|corrupt"):
        custom_op.decode_and_crop_jpeg(truncated, HEIGHT - 8, WIDTH - 8, 8, 8)
    out = custom_op.decode_and_crop_jpeg(truncated, HEIGHT - 8, WIDTH - 8, 8, 8, on_warning="ignore")
    assert out.shape == (3, 8, 8)
    with pytest.warns(UserWarning):
        custom_op.decode_and_crop_jpeg(truncated, HEIGHT - 8, WIDTH - 8, 8, 8, on_warning="warn")


def test_missing_only_eoi_gives_the_full_image_or_runtime_error(valid):
    # All pixel data is there; whether the missing EOI is noticed depends on reading past the last
    # MCU. Either outcome is acceptable, but an image returned must be the right one.
    data, reference = valid
    for cut in (len(data) - 2, len(data) - 1):
        try:
            out = custom_op.decode_jpeg(data[:cut])
        except RuntimeError:
            continue
        assert torch.equal(out, reference)


@pytest.mark.parametrize("scans", [1, 3, 5, 8])
def test_progressive_file_ending_cleanly_after_some_scans(progressive_file, scans):
    # Cut at a scan boundary and closed with EOI, the file is one libjpeg accepts without a warning
    # (coefficients it never got are left at zero and smoothed over). So the default policy decodes
    # it, and a window must still be exactly the slice of the full decode, columns cropped or not.
    sos = [s for s in jm.segments(progressive_file) if s.marker == jm.SOS]
    assert len(sos) > scans
    data = progressive_file[: sos[scans].offset] + b"\xff\xd9"
    full = custom_op.decode_jpeg(data)
    assert full.shape == (3, HEIGHT, WIDTH)
    for top, left, height, width in [(0, 0, HEIGHT, WIDTH), (16, 40, 32, 40), (0, 33, HEIGHT, 20), (5, 0, 20, 50)]:
        out = custom_op.decode_and_crop_jpeg(data, top, left, height, width)
        expected = full[:, top : top + height, left : left + width]
        assert torch.equal(out, expected), (
            f"window {(top, left, height, width)} of a progressive file cut after {scans} scans differs from "
            f"the full decode by up to {(out.int() - expected.int()).abs().max().item()}"
        )


def test_too_many_scans_is_refused(progressive_file):
    # Hundreds of repeated refinement scans: each costs a pass over the image, so a small file could
    # keep a worker busy for long. libjpeg only warns about them, hence "ignore" must still refuse.
    sos = [s for s in jm.segments(progressive_file) if s.marker == jm.SOS]
    last = progressive_file[sos[-1].offset : sos[-1].entropy_end]
    data = progressive_file[: sos[-1].entropy_end] + last * 600 + b"\xff\xd9"
    for on_warning in ("raise", "warn", "ignore"):
        with pytest.raises(RuntimeError):
            custom_op.decode_jpeg(data, on_warning=on_warning)
    with pytest.raises(RuntimeError, match="scans"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, on_warning="ignore")


@pytest.mark.parametrize("op", ["decode_and_crop_jpeg", "decode_jpeg"])
@pytest.mark.parametrize("value", ["bogus", "", "errors", "raise!"])
def test_invalid_on_warning_is_value_error(valid, op, value):
    data = valid[0]
    with pytest.raises(ValueError, match="on_warning"):
        if op == "decode_jpeg":
            custom_op.decode_jpeg(data, on_warning=value)
        else:
            custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, on_warning=value)


DECODES = {
    "decode_and_crop_jpeg": lambda data, **options: custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, **options),
    "decode_jpeg": lambda data, **options: custom_op.decode_jpeg(data, **options),
    "decode_and_crop_jpegs": lambda data, **options: custom_op.decode_and_crop_jpegs([data], 0, 0, 8, 8, **options),
    "decode_jpegs": lambda data, **options: custom_op.decode_jpegs([data], **options),
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("value", ["yes", "false", 1, 0, None])
@pytest.mark.parametrize("decode", DECODES)
def test_check_entropy_must_be_true_or_false(valid, decode, value, device):
    # A string such as "false" would be true as a bool; checked before the device is, so the same
    # TypeError comes on a machine without a GPU.
    with pytest.raises(TypeError, match="check_entropy must be True or False"):
        DECODES[decode](valid[0], check_entropy=value, device=device)


@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
def test_check_entropy_changes_nothing_on_the_cpu(valid, on_warning):
    """The CPU path gives libjpeg's outcome already: with check_entropy=True every item's pixels,
    exception and warnings are the same."""
    data, reference = valid
    files = [data] + [case for _, case in damaged_jpegs.damaged(data, np.random.default_rng(3), flips=10)]

    def outcomes(check_entropy):
        """Each file's tensor or exception, batched then one by one, and the warnings, as text."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            options = {"on_warning": on_warning, "check_entropy": check_entropy}
            results = custom_op.decode_and_crop_jpegs(files, 8, 8, 40, 60, on_error="return", **options)
            for f in files:
                try:
                    results.append(custom_op.decode_jpeg(f, **options))
                except RuntimeError as error:
                    results.append(error)
        shown = [r if isinstance(r, torch.Tensor) else f"{type(r).__name__}: {r}" for r in results]
        return shown, [str(w.message) for w in caught]

    checked, checked_warnings = outcomes(True)
    plain, plain_warnings = outcomes(False)
    assert checked_warnings == plain_warnings
    assert len(checked) == len(plain) == 2 * len(files)
    for a, b in zip(checked, plain):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    # The damage shows: errors or warnings, or with "ignore" other pixels.
    if on_warning == "ignore":
        assert any(isinstance(r, str) or not torch.equal(r, reference) for r in plain[len(files) + 1 :])
    else:
        assert any(isinstance(r, str) for r in plain) or len(plain_warnings) > 0


# Every call that takes gpu_decoder, with the other arguments a small valid file needs.
GPU_DECODER_CALLS = {
    **DECODES,
    "decode_and_resized_crop_jpeg": lambda data, **options: custom_op.decode_and_resized_crop_jpeg(
        data, 0, 0, 16, 16, 8, **options
    ),
    "decode_and_resized_crop_jpegs": lambda data, **options: custom_op.decode_and_resized_crop_jpegs(
        [data], 0, 0, 16, 16, 8, **options
    ),
    "RandomResizedCropJpeg.batch": lambda data, **options: custom_op.transforms.RandomResizedCropJpeg(8).batch(
        [data], 0, **options
    ),
    "ResizeCenterCropJpeg.batch": lambda data, **options: custom_op.transforms.ResizeCenterCropJpeg(16, 8).batch(
        [data], **options
    ),
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("value", ["gpu", "CUDA", "nvJPEG", "", None, 1])
@pytest.mark.parametrize("call", GPU_DECODER_CALLS)
def test_gpu_decoder_must_be_a_known_name(valid, call, value, device):
    # Checked with the other options, before the device is used: the same ValueError comes on a machine
    # without a GPU, and on the CPU, where the option changes nothing.
    with pytest.raises(ValueError, match="gpu_decoder must be 'auto', 'cuda' or 'nvjpeg'"):
        GPU_DECODER_CALLS[call](valid[0], gpu_decoder=value, device=device)


@pytest.mark.parametrize("call", GPU_DECODER_CALLS)
def test_gpu_decoder_changes_nothing_on_the_cpu(valid, call):
    results = [GPU_DECODER_CALLS[call](valid[0], gpu_decoder=value) for value in ("auto", "cuda", "nvjpeg")]
    first = results[0][0] if isinstance(results[0], list) else results[0]
    for result in results[1:]:
        assert torch.equal(result[0] if isinstance(result, list) else result, first)


# ----------------------------------------------------------------------------- decompression bombs


def _rss_probe(script: str) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh interpreter that has custom_op imported; a hang guard, not a timing."""
    prelude = textwrap.dedent(
        """
        import resource, sys
        sys.path.insert(0, {tests!r})
        import custom_op, jpeg_factory, jpeg_markers as jm
        def peak_mb():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        """
    ).format(tests=str(Path(__file__).parent))
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )


def test_bomb_header_is_value_error_before_allocating():
    result = _rss_probe(
        """
        data = jpeg_factory.encode(jpeg_factory.photo_like(64, 96))
        bomb = jm.patch_sof(data, height=60000, width=60000)
        before = peak_mb()
        for call in (
            lambda: custom_op.decode_jpeg(bomb, on_warning="ignore"),
            lambda: custom_op.decode_and_crop_jpeg(bomb, 0, 0, 16, 16, on_warning="ignore"),
            lambda: custom_op.decode_jpeg(bomb, on_warning="ignore", mode=custom_op.ImageReadMode.GRAY),
        ):
            try:
                call()
            except ValueError as error:
                assert "max_pixels" in str(error), str(error)
            else:
                raise AssertionError("a 60000x60000 header was decoded")
        print("GROWTH_MB", peak_mb() - before)
        """
    )
    assert result.returncode == 0, result.stderr
    growth = float(result.stdout.split("GROWTH_MB")[1])
    assert growth < 100, f"peak RSS grew by {growth:.0f} MB while refusing a bomb"


def test_max_pixels_can_be_raised_or_disabled(valid):
    data = valid[0]
    declared = jm.patch_sof(data, height=2000, width=3000)  # 6 Mpx declared, a few KB of data
    with pytest.raises(ValueError, match="max_pixels"):
        custom_op.decode_jpeg(declared, max_pixels=1000)
    with pytest.raises(ValueError, match="max_pixels"):
        custom_op.decode_jpeg(data, max_pixels=HEIGHT * WIDTH - 1)
    assert custom_op.decode_jpeg(data, max_pixels=HEIGHT * WIDTH).shape == (3, HEIGHT, WIDTH)
    for limit in (6_000_000, None):
        # Let through: now it fails (or decodes) on its data like any file.
        with pytest.raises(RuntimeError):
            custom_op.decode_jpeg(declared, max_pixels=limit)
        assert custom_op.decode_jpeg(declared, max_pixels=limit, on_warning="ignore").shape == (3, 2000, 3000)
        out = custom_op.decode_and_crop_jpeg(declared, 1990, 2990, 10, 10, max_pixels=limit, on_warning="ignore")
        assert out.shape == (3, 10, 10)


# ------------------------------------------------ odd files (odd-jpegs/, or generated stand-ins)


def test_truncated_odd_file(odd_jpegs):
    data = (odd_jpegs / "truncated_jpeg.jpg").read_bytes()
    with pytest.raises(RuntimeError):
        custom_op.decode_jpeg(data)
    info = custom_op.read_jpeg_header(data)
    out = custom_op.decode_jpeg(data, on_warning="ignore")
    assert out.shape == (3, info.height, info.width)
    with pytest.warns(UserWarning):
        custom_op.decode_jpeg(data, on_warning="warn")


def test_odd_files_cut_anywhere(odd_jpegs):
    for path in sorted(odd_jpegs.glob("*.jpg")):
        data = path.read_bytes()
        for cut in np.linspace(0, len(data) - 3, 25).astype(int):
            for call in (
                lambda d: custom_op.decode_jpeg(d, on_warning="ignore"),
                lambda d: custom_op.decode_and_crop_jpeg(d, 0, 0, 1, 1, on_warning="ignore"),
                custom_op.read_jpeg_header,
            ):
                try:
                    call(data[:cut])
                except (RuntimeError, ValueError):
                    pass


def test_ignore_prints_nothing_about_corrupt_data(tmp_path):
    """on_warning="ignore" is silent: no Python warning and nothing on stderr (from the C++ side)."""
    code = textwrap.dedent("""
        import sys, warnings
        sys.path.insert(0, sys.argv[1])
        import custom_op, jpeg_factory
        data = jpeg_factory.encode(jpeg_factory.photo_like(64, 96, seed=3))
        sos = data.index(b"\\xff\\xda")
        cut = data[: sos + 200]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            custom_op.decode_jpeg(cut, on_warning="ignore")
            custom_op.decode_and_crop_jpeg(cut, 40, 40, 8, 8, on_warning="ignore")
        print("ok")
    """)
    tests_dir = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", code, tests_dir],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    noise = [line for line in done.stderr.splitlines() if "corrupt" in line.lower() or "warning" in line.lower()]
    assert noise == []
