"""Our baseline Huffman decoder (csrc/cpu/entropy_decoder.h), which takes libjpeg's place in a decode.

Every other test runs with it on (the default) and compares with Pillow. These compare it with
libjpeg's own decoder, switched back on through torch.ops.custom_op._set_own_entropy_decoder, on the
cases where the two differ in what they do: restart markers, MCUs beside a crop (walked, not decoded),
rows skipped by jpeg_skip_scanlines, reduced DCT scales, components a mode does not need, and damaged
data, where ours must give up and leave everything (pixels, warnings, errors) to libjpeg.
"""

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import coefficient_jpegs
import custom_op
import damaged_jpegs
import jpeg_factory
import jpeg_markers as jm
import restart_segments
from custom_op import ImageReadMode, testing
from test_decode import assert_crops_exact, pillow_reference

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

ops = torch.ops.custom_op
MODES = (ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED)
POLICIES = {"raise": 0, "warn": 1, "ignore": 2}


def give_ups() -> int:
    return int(ops._entropy_decoder_give_ups())


def decode(data: bytes, window, *, own: bool, mode=ImageReadMode.RGB, scale=8, policy=0):
    """The window through the op, with our decoder on or off; a libjpeg error comes back as its message."""
    previous_own = bool(ops._set_own_entropy_decoder(own))
    try:
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        image, warnings = ops.decode_and_crop_jpeg(
            tensor,
            *window,
            mode=int(mode),
            apply_exif_orientation=False,
            on_warning=policy,
            max_pixels=0,
            scale_num=scale,
        )
        return image, bytes(warnings.tolist()).decode()
    except RuntimeError as error:
        return None, str(error)
    finally:
        ops._set_own_entropy_decoder(previous_own)


def assert_same_outcome(data: bytes, window, **options):
    ours, ours_message = decode(data, window, own=True, **options)
    libjpegs, libjpegs_message = decode(data, window, own=False, **options)
    assert ours_message == libjpegs_message, (window, options)
    if libjpegs is None:
        assert ours is None, (window, options)
    else:
        assert ours is not None and torch.equal(ours, libjpegs), (window, options)


def windows(height: int, width: int, rng: np.random.Generator, n: int = 10):
    out = {
        (0, 0, height, width),
        (0, 0, 1, 1),
        (height - 1, width - 1, 1, 1),
        (height // 2, 0, height - height // 2, 1),
        (0, width - 1, height, 1),
        (height - 1, 0, 1, width),
    }
    for _ in range(n):
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        out.add((int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w))
    return sorted(out)


SAMPLINGS = ["4:2:0", "4:4:4", "4:2:2", "4:4:0", "4:1:1", "1x2,2x1,1x1"]


@pytest.mark.parametrize("restart", [0, 1, 3, 7], ids=lambda r: f"restart{r}")
@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_equals_libjpegs_decoder_without_giving_up(sampling, restart):
    data = jpeg_factory.encode(
        jpeg_factory.photo_like(75, 133, seed=restart), sampling=sampling, restart_interval=restart
    )
    before = give_ups()
    rng = np.random.default_rng(restart)
    for window in windows(75, 133, rng):
        for mode in MODES:
            assert_same_outcome(data, window, mode=mode)
    assert give_ups() == before, "valid data must never be given back to libjpeg"
    assert_crops_exact(data, pillow_reference(data), rng)


@pytest.mark.parametrize(
    "options",
    [
        {"restart_rows": 1},
        {"optimize": True},
        {"quality": 100},
        {"quality": 5},
        {"optimize": True, "restart_interval": 2, "quality": 97},
    ],
    ids=["restart per row", "optimized", "q100", "q5", "optimized restart q97"],
)
def test_tables_and_restart_layouts(options):
    data = jpeg_factory.encode(jpeg_factory.photo_like(130, 211, seed=4), **options)
    before = give_ups()
    for window in windows(130, 211, np.random.default_rng(1)):
        assert_same_outcome(data, window)
    assert give_ups() == before
    assert_crops_exact(data, pillow_reference(data), np.random.default_rng(2))


# ---------------------------------------------------------------------------------------------------
# Coefficients written on purpose (coefficient_jpegs.py): a lookup of ours takes up to two AC symbols
# with their coefficients, and must never take the next block's DC code for a second AC symbol.


def _chosen_blocks(kind: str, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` blocks of quantized coefficients (zigzag order) of one kind:
    "end63": small coefficients, the last at position 63 (no end-of-block), so that a block's last
    symbol and the next block's DC code fit in one lookup;
    "mixed": sparse and dense blocks, long zero runs (zero-run symbols), coefficients of every size
    up to 10 (codes with their extra bits longer than a lookup), extra bits of all ones (FF bytes)."""
    out = []
    dc = 0
    for _ in range(count):
        block = np.zeros(64, dtype=np.int64)
        dc = int(np.clip(dc + rng.integers(-300, 301) * (rng.random() < 0.5), -1023, 1023))
        block[0] = dc
        if kind == "end63":
            for k in rng.choice(np.arange(1, 63), size=int(rng.integers(0, 6)), replace=False):
                block[k] = rng.choice([-2, -1, 1, 2])
            block[63] = rng.choice([-1, 1])
        else:
            style = rng.integers(0, 5)
            if style == 0:  # dense, small
                block[1:] = rng.integers(-3, 4, size=63)
            elif style == 1:  # a few far apart: zero runs of 16 and more
                k = 1 + int(rng.integers(0, 20))
                while k < 64:
                    block[k] = rng.choice([-1, 1]) * int(rng.integers(1, 64))
                    k += 17 + int(rng.integers(0, 30))
            elif style == 2:  # every size, all-ones extra bits
                for k in rng.choice(np.arange(1, 64), size=int(rng.integers(1, 20)), replace=False):
                    size = int(rng.integers(1, 11))
                    block[k] = (1 << size) - 1 if rng.random() < 0.7 else -((1 << size) - 1)
            elif style == 3:  # sparse, then the end of the block
                for k in range(1, int(rng.integers(2, 12))):
                    block[k] = rng.choice([-1, 0, 1])
            else:  # ends at 63 after a long run
                block[int(rng.integers(1, 40))] = 1
                block[63] = rng.choice([-3, -1, 1, 2])
        out.append(block)
    return out


def _skewed(rng: np.random.Generator):
    """Table weights from 1-bit codes to 16-bit ones, whatever the data uses most."""

    def weigh(table, symbols):
        # A symbol above all the others together (a 1-bit code), then halving weights down to a tail of
        # equal ones (Huffman code lengths stay within 32 before they are limited to 16).
        order = rng.permutation(len(symbols))
        return {s: 4.0 if order[i] == 0 else 2.0 ** -min(float(order[i]), 20.0) for i, s in enumerate(symbols)}

    return weigh


COEFFICIENT_LAYOUTS = {
    "gray": [coefficient_jpegs.Component(1, 1, 0)],
    "4:2:0": [coefficient_jpegs.Component(2, 2, 0)] + [coefficient_jpegs.Component(1, 1, 1)] * 2,
    "4:4:4": [coefficient_jpegs.Component(1, 1, 0)] + [coefficient_jpegs.Component(1, 1, 1)] * 2,
}


@pytest.mark.parametrize("weights", ["data", "skewed"])
@pytest.mark.parametrize("kind", ["end63", "mixed"])
@pytest.mark.parametrize("restart", [0, 1, 3])
@pytest.mark.parametrize("layout", sorted(COEFFICIENT_LAYOUTS))
def test_chosen_coefficients(layout, restart, kind, weights):
    components = COEFFICIENT_LAYOUTS[layout]
    height, width = 72, 104
    hmax = max(c.h for c in components) if len(components) > 1 else 1
    vmax = max(c.v for c in components) if len(components) > 1 else 1
    mcus = -(-width // (8 * hmax)) * -(-height // (8 * vmax))
    per_mcu = sum(c.h * c.v for c in components) if len(components) > 1 else 1
    rng = np.random.default_rng([restart, len(kind), len(layout), len(weights)])
    blocks = _chosen_blocks(kind, mcus * per_mcu, rng)
    weigh = _skewed(rng) if weights == "skewed" else None
    data = coefficient_jpegs.write(blocks, height, width, components, restart, ac_weights=weigh, dc_weights=weigh)
    before, fast = give_ups(), testing.random_access_decodes()
    for window in windows(height, width, rng, n=8):
        for mode in (ImageReadMode.RGB, ImageReadMode.UNCHANGED):
            assert_same_outcome(data, window, mode=mode, policy=POLICIES["raise"])
    assert give_ups() == before, "valid data must never be given back to libjpeg"
    if restart:  # a marker at least once per MCU row: the restart-segment path
        assert testing.random_access_decodes() > fast
    whole = custom_op.decode_jpeg(data, mode=ImageReadMode.UNCHANGED).numpy()
    for top, left, h, w in windows(height, width, rng, n=8):
        window = custom_op.decode_and_crop_jpeg(data, top, left, h, w, mode=ImageReadMode.UNCHANGED)
        assert np.array_equal(window.numpy(), whole[:, top : top + h, left : left + w]), (top, left, h, w)


def test_chosen_coefficients_make_what_they_are_meant_to():
    # The files above hold what they are for: codes of 1 and of 16 bits, and many FF bytes.
    rng = np.random.default_rng(0)
    components = COEFFICIENT_LAYOUTS["gray"]
    data = coefficient_jpegs.write(
        _chosen_blocks("mixed", 13 * 9, rng), 72, 104, components, 1, ac_weights=_skewed(rng)
    )
    tables = [data[s.offset + 5 : s.offset + 21] for s in jm.segments(data) if s.marker == 0xC4]
    lengths = [i + 1 for bits in tables for i, n in enumerate(bits) if n]
    assert min(lengths) <= 2 and max(lengths) == 16
    sos = jm.find(data, [0xDA])
    scan = data[sos.offset + sos.length : sos.entropy_end]
    assert scan.count(b"\xff\x00") > len(scan) // 100


@pytest.mark.parametrize("channels,color_space", [(1, None), (4, "cmyk"), (4, "ycck"), (3, "rgb")])
def test_gray_cmyk_ycck_rgb(channels, color_space):
    options = {"restart_interval": 2}
    if color_space is not None:
        options["color_space"] = color_space
        options["sampling"] = "4:4:4" if color_space != "ycck" else "4:2:0"
    data = jpeg_factory.encode(jpeg_factory.photo_like(66, 90, channels=channels, seed=5), **options)
    for window in windows(66, 90, np.random.default_rng(channels), n=5):
        for mode in MODES:
            assert_same_outcome(data, window, mode=mode)


@pytest.mark.parametrize("scale", [1, 2, 3, 5, 8, 16])
def test_reduced_scales(scale):
    # At 1/8 libjpeg needs only the DC coefficients, and ours walks the AC ones without storing them.
    data = jpeg_factory.encode(jpeg_factory.photo_like(150, 170, seed=scale), restart_interval=1)
    out_h, out_w = -(-150 * scale // 8), -(-170 * scale // 8)
    for window in windows(out_h, out_w, np.random.default_rng(scale), n=6):
        assert_same_outcome(data, window, scale=scale)


def test_random_access_path():
    # Files prepared for random access hand libjpeg a sub-image with restart markers: ours decodes it.
    data = jpeg_factory.encode(jpeg_factory.photo_like(300, 260, seed=6))
    prepared = custom_op.prepare_jpeg(data)
    before = give_ups()
    random_access_before = testing.random_access_decodes()
    for window in windows(300, 260, np.random.default_rng(3)):
        assert_same_outcome(data, window)
        assert_same_outcome(prepared, window)
    assert testing.random_access_decodes() > random_access_before
    assert give_ups() == before


def _entropy_start(data: bytes) -> int:
    sos = data.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")


def _damaged_cases(data: bytes, rng: np.random.Generator, flips: int = 30):
    start = _entropy_start(data)
    cases = [data[: start + n] for n in (0, 1, 37, 500, len(data) - start - 2)]
    for _ in range(flips):
        damaged = bytearray(data)
        for position in rng.integers(start, len(data) - 2, size=int(rng.integers(1, 4))):
            damaged[position] ^= 1 << int(rng.integers(0, 8))
        cases.append(bytes(damaged))
    return cases


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("restart", [0, 2])
def test_damaged_data_gives_libjpegs_outcome(policy, restart):
    data = jpeg_factory.encode(jpeg_factory.photo_like(120, 160, seed=9), restart_interval=restart)
    before = give_ups()
    for case in _damaged_cases(data, np.random.default_rng(restart)):
        for window in ((0, 0, 120, 160), (100, 10, 20, 50), (30, 70, 40, 33)):
            assert_same_outcome(case, window, policy=POLICIES[policy])
    assert give_ups() > before, "damaged data never made the decoder give up"


def test_restart_markers_out_of_place_are_left_to_libjpeg():
    data = jpeg_factory.encode(jpeg_factory.photo_like(96, 128, seed=2), restart_interval=2)
    markers = restart_segments.scan(data).markers
    assert len(markers) > 4
    i = markers[2][0]
    cases = []
    cases.append(data[: i + 1] + bytes([0xD0 + ((data[i + 1] - 0xD0 + 3) & 7)]) + data[i + 2 :])
    cases.append(data[:i] + data[i + 2 :])
    cases.append(data[:i] + b"\xff" + bytes([data[i + 1]]) + data[i:])
    cases.append(data[:i] + b"\x12\x34" + data[i:])
    cases.append(data[:i] + b"\xff\xff" + data[i + 1 :])  # fill bytes before the marker
    before = give_ups()
    for case in cases:
        for policy in POLICIES.values():
            for window in ((0, 0, 96, 128), (50, 64, 30, 30)):
                assert_same_outcome(case, window, policy=policy)
    assert give_ups() > before


def test_the_process_stays_healthy_after_giving_up():
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 64, seed=1))
    truncated = data[: len(data) // 2]
    for _ in range(200):
        with pytest.raises(RuntimeError, match="Premature end|JPEG"):
            custom_op.decode_and_crop_jpeg(truncated, 0, 0, 64, 64)
    out = custom_op.decode_and_crop_jpeg(truncated, 0, 0, 64, 64, on_warning="ignore")
    assert out.shape == (3, 64, 64)
    assert np.array_equal(custom_op.decode_jpeg(data).numpy(), pillow_reference(data))


def test_threads():
    files = [
        jpeg_factory.encode(
            jpeg_factory.photo_like(100 + 7 * i, 90 + 5 * i, seed=i),
            quality=50 + 10 * i,
            restart_interval=i % 3,
            optimize=bool(i % 2),
        )
        for i in range(4)
    ]
    references = [pillow_reference(f) for f in files]
    failures = []

    def work(offset):
        try:
            for n in range(60):
                i = (n + offset) % len(files)
                out = custom_op.decode_jpeg(files[i])
                if not np.array_equal(out.numpy(), references[i]):
                    failures.append(i)
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(repr(error))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_switch_returns_the_previous_setting():
    assert bool(ops._set_own_entropy_decoder(False)) is True
    assert bool(ops._set_own_entropy_decoder(True)) is False


def test_photos(photos):
    before = give_ups()
    rng = np.random.default_rng(0)
    for path in photos[:60]:
        data = path.read_bytes()
        info = custom_op.read_jpeg_header(data)
        h, w = min(info.height, 224), min(info.width, 224)
        window = (int(rng.integers(0, info.height - h + 1)), int(rng.integers(0, info.width - w + 1)), h, w)
        assert_same_outcome(data, window)
        assert_same_outcome(data, (0, 0, info.height, info.width), mode=ImageReadMode.GRAY)
    assert give_ups() == before


def test_odd_jpegs(odd_jpegs):
    for path in sorted(odd_jpegs.iterdir()):
        if path.suffix.lower() not in (".jpg", ".jpeg"):
            continue
        data = path.read_bytes()
        try:
            info = custom_op.read_jpeg_header(data)
        except RuntimeError:
            continue
        for mode in MODES:
            for policy in POLICIES.values():
                assert_same_outcome(data, (0, 0, info.height, info.width), mode=mode, policy=policy)
                assert_same_outcome(
                    data,
                    (info.height // 3, info.width // 4, info.height // 2, info.width // 2),
                    mode=mode,
                    policy=policy,
                )


REGRESSIONS = sorted((Path(__file__).parent / "fuzz" / "regressions").glob("*.jpg"))


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_inputs_the_sanitized_fuzz_found(path):
    # Each once decoded differently with our decoder (tests/fuzz/regressions/README.md says how).
    data = path.read_bytes()
    info = custom_op.read_jpeg_header(data)
    for policy in POLICIES.values():
        for mode in MODES:
            assert_same_outcome(data, (0, 0, info.height, info.width), mode=mode, policy=policy)


def _oversubscribed(data: bytes, table_class: int, counts) -> bytes:
    """data with the first Huffman table of class table_class (0 DC, 1 AC) given these code counts per
    length (as many symbols as before; counts that assign more codes than a length has)."""
    out = bytearray(data)
    i = 2
    while i + 4 <= len(out):
        marker, length = out[i + 1], int.from_bytes(out[i + 2 : i + 4], "big")
        if marker == 0xC4:
            j = i + 4
            while j < i + 2 + length:
                n = sum(out[j + 1 : j + 17])
                if out[j] >> 4 == table_class:
                    new = list(counts(n))
                    assert sum(new) == n and len(new) == 16
                    out[j + 1 : j + 17] = bytes(new)
                    return bytes(out)
                j += 17 + n
        i += 2 + length
    raise AssertionError("no such table")


@pytest.mark.parametrize("table_class", [0, 1], ids=["DC", "AC"])
@pytest.mark.parametrize("shape", ["all length 1", "three of length 1", "full at 2 bits then more"])
def test_oversubscribed_huffman_tables_are_refused(table_class, shape):
    # libjpeg accepts such a table while reading the header and refuses it only when decoding starts,
    # with its own error; our table derivation (huffman_tables.cpp) must refuse it too, writing nothing
    # out of bounds, and not leave a broken table in the per-thread cache.
    counts = {
        "all length 1": lambda n: [n] + [0] * 15,
        "three of length 1": lambda n: [3] + [0] * 14 + [n - 3],
        "full at 2 bits then more": lambda n: [0, 4] + [0] * 13 + [n - 4],
    }[shape]
    data = jpeg_factory.encode(jpeg_factory.photo_like(256, 256, seed=8), quality=90)
    hostile = _oversubscribed(data, table_class, counts)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="Huffman table"):
            custom_op.decode_and_crop_jpeg(hostile, 200, 0, 16, 16)
    assert_same_outcome(data, (200, 0, 16, 16))


# ---------------------------------------------------------------------------------------------------
# The whole-scan walk: the check that check_entropy=True runs on the CPU before nvJPEG gets a file
# (ops._check_entropy_data, testing.check_entropy_data). It must find every file whose decode libjpeg
# warns about or refuses; it may find more (damage a decode stops before reading), never less.


def libjpeg_outcome(data: bytes) -> str:
    """What libjpeg's own decoder says of the whole image: "clean", or its warning or error."""
    with testing.own_entropy_decoder(False):
        try:
            custom_op.decode_jpeg(data, on_warning="raise")
        except RuntimeError as error:
            return str(error)
    return "clean"


@pytest.mark.parametrize("restart", [0, 1, 3], ids=lambda r: f"restart{r}")
@pytest.mark.parametrize("sampling", ["4:2:0", "4:4:4", "4:2:2", "4:4:0", "4:1:1", "gray"])
def test_the_check_finds_every_file_libjpeg_warns_about(sampling, restart):
    channels = 1 if sampling == "gray" else 3
    data = jpeg_factory.encode(
        jpeg_factory.photo_like(72, 104, channels, seed=restart),
        sampling="4:4:4" if sampling == "gray" else sampling,
        restart_interval=restart,
    )
    cases = damaged_jpegs.damaged(data, np.random.default_rng(restart), flips=40)
    found = testing.check_entropy_data([data] + [case for _, case in cases])
    assert found[0] == "ok"
    warned = missed = 0
    for (name, case), check in zip(cases, found[1:]):
        outcome = libjpeg_outcome(case)
        if outcome != "clean":
            warned += 1
            missed += check == "ok"
            assert check == "damaged", (name, outcome, check)
    assert missed == 0
    # The cases exercise the check both ways: libjpeg warns about some of them (the cuts, a flipped
    # bit in a Huffman code that ends in a bad code or runs into a marker), and a flipped bit in a
    # coefficient's extra bits leaves a valid scan, which passes.
    assert warned >= 5 and found.count("ok") >= 5, (warned, found)


def test_the_check_finds_damage_a_decode_never_reads():
    # libjpeg's decode stops after the last row, so stray bytes before the end-of-image marker and
    # fill bytes before a restart marker decode cleanly on the CPU; the check, which walks to the
    # end-of-image marker and takes only what a valid encoder writes, finds them. They then go to the
    # CPU path, which gives its clean decode.
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 80, seed=3), restart_interval=2)
    cases = dict(damaged_jpegs.damaged(data, np.random.default_rng(0), flips=0))
    for name in ("two stray bytes before the end-of-image marker", "fill bytes before a restart marker"):
        assert libjpeg_outcome(cases[name]) == "clean", name
        assert testing.check_entropy_data([cases[name]]) == ["damaged"], name


def test_the_check_refuses_what_libjpeg_refuses_or_warns_about_in_the_headers():
    # The corruptions of the header and tables that test_bad_input.py reports: libjpeg raises or warns
    # while reading the markers or setting the decode up, and the check says so before walking.
    from test_bad_input import HEADER, _corruptions

    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 96, seed=11), quality=90)
    corruptions = _corruptions(data)
    found = testing.check_entropy_data([bad for bad, _ in corruptions.values()])
    for (name, (bad, kind)), check in zip(corruptions.items(), found):
        assert libjpeg_outcome(bad) != "clean", name
        assert check != "ok", (name, check)
        if kind == HEADER:
            assert check == "refused", (name, check)
    assert found.count("refused") >= 20, found


def test_the_check_passes_valid_files_and_leaves_other_codings_to_the_cpu_path():
    pixels = jpeg_factory.photo_like(90, 120, seed=4)
    valid = [
        jpeg_factory.encode(pixels, sampling=s, restart_interval=r, quality=q, optimize=o)
        for s, r, q, o in [("4:2:0", 0, 90, False), ("4:4:4", 5, 100, True), ("1x2,2x1,1x1", 1, 5, False)]
    ]
    valid += [
        jpeg_factory.encode(jpeg_factory.photo_like(90, 120, 4, seed=4), restart_interval=2),  # CMYK
        jpeg_factory.encode(pixels, color_space="rgb", sampling="4:4:4"),
        jpeg_factory.encode(pixels, restart_rows=1),
    ]
    not_walked = [jpeg_factory.encode(pixels, progressive=True), jpeg_factory.encode(pixels, arithmetic=True)]
    assert testing.check_entropy_data(valid + not_walked) == ["ok"] * len(valid) + ["not walked"] * 2
    assert testing.check_entropy_data([]) == []


def test_the_check_passes_the_sub_images_of_prepared_files():
    # nvJPEG gets the sub-image of a prepared file's restart segments; the check walks that, so it
    # must pass the sub-images of valid files.
    prepared = custom_op.prepare_jpeg(jpeg_factory.encode(jpeg_factory.photo_like(300, 260, seed=6)), restart_mcus=1)
    tensor = torch.frombuffer(bytearray(prepared), dtype=torch.uint8)
    subs = [ops._jpeg_sub_image(tensor, *window)[0] for window in windows(300, 260, np.random.default_rng(5))]
    subs = [s for s in subs if s.numel() > 0]
    assert len(subs) >= 5
    assert testing.check_entropy_data(subs + [prepared]) == ["ok"] * (len(subs) + 1)


def test_the_check_gives_nothing_back_and_ignores_the_decoder_switch():
    # It counts no give-up (it hands no scan to libjpeg's decoder), and it walks with our decoder
    # whether or not that is switched on for decoding.
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 64, seed=5))
    cut = data[: len(data) // 2] + b"\xff\xd9"
    before = give_ups()
    assert testing.check_entropy_data([data, cut]) == ["ok", "damaged"]
    with testing.own_entropy_decoder(False):
        assert testing.check_entropy_data([data, cut]) == ["ok", "damaged"]
    assert give_ups() == before


@pytest.mark.parametrize("threads", [1, 2])
def test_the_check_on_the_intra_op_pool_equals_one_file_at_a_time(threads):
    data = jpeg_factory.encode(jpeg_factory.photo_like(80, 120, seed=7), restart_interval=3)
    files = [data] + [case for _, case in damaged_jpegs.damaged(data, np.random.default_rng(7))]
    one_by_one = [testing.check_entropy_data([f])[0] for f in files]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        assert testing.check_entropy_data(files) == one_by_one
    finally:
        torch.set_num_threads(before)


def test_the_check_passes_the_photos(photos):
    files = [p.read_bytes() for p in photos]
    # Progressive and arithmetic-coded files are not ours to walk.
    walked = [not custom_op.read_jpeg_header(f).progressive and jm.find(f, jm.SOF_ARITHMETIC) is None for f in files]
    assert any(walked)
    assert testing.check_entropy_data(files) == ["ok" if w else "not walked" for w in walked]
