"""decode_and_crop_jpeg on random-access files: the restart-segment path is taken, reads only the
segments around the window, gives exactly the full decode's pixels (every subsampling, scale, mode and
EXIF orientation), and anything in the markers or headers that does not add up falls back to the
ordinary path or raises a clear error. read_jpeg_header's random_access field.
"""

import json
import os
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

import custom_op
import jpeg_factory
import jpeg_markers as jm
import restart_segments as rs
from custom_op import ImageReadMode
from custom_op.testing import random_access_decodes
from jpeg_factory import with_exif_orientation
from test_decode import windows

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

WORKER = Path(__file__).with_name("random_access_fuzz_worker.py")


@cache
def generated(height, width, channels=3, seed=0, **options):
    return jpeg_factory.encode(jpeg_factory.photo_like(height, width, channels, seed=seed), **options)


@cache
def prepared(height, width, channels=3, seed=0, restart_mcus=1, **options):
    return custom_op.prepare_jpeg(generated(height, width, channels, seed, **options), restart_mcus=restart_mcus)


def scaled_full(data: bytes, scale: int, mode=ImageReadMode.RGB) -> np.ndarray:
    """The whole image decoded at scale/8 by the ordinary path (a window covering everything)."""
    info = custom_op.read_jpeg_header(data)
    h, w = -(-info.height * scale // 8), -(-info.width * scale // 8)
    return torch.ops.custom_op.decode_and_crop_jpeg(
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
        0,
        0,
        h,
        w,
        mode=int(mode),
        apply_exif_orientation=False,
        on_warning=0,
        max_pixels=0,
        scale_num=scale,
    )[0].numpy()


def crop(data: bytes, window, scale=8, mode=ImageReadMode.RGB, exif=False, policy=0) -> np.ndarray:
    return torch.ops.custom_op.decode_and_crop_jpeg(
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
        *window,
        mode=int(mode),
        apply_exif_orientation=exif,
        on_warning=policy,
        max_pixels=0,
        scale_num=scale,
    )[0].numpy()


def assert_windows_exact(data: bytes, reference: np.ndarray, rng, n_random=8, **kwargs):
    _, H, W = reference.shape
    for top, left, h, w in windows(H, W, rng, n_random):
        out = crop(data, (top, left, h, w), **kwargs)
        if not np.array_equal(out, reference[:, top : top + h, left : left + w]):
            pytest.fail(f"window (top={top}, left={left}, height={h}, width={w}) of {H}x{W} {kwargs} differs")


# ---------------------------------------------------------------------------------------------------
# The header field


def test_header_says_which_files_are_random_access():
    assert custom_op.read_jpeg_header(prepared(61, 83)).random_access
    assert custom_op.read_jpeg_header(prepared(50, 77, 1, restart_mcus=2)).random_access
    # 100 pixels of 4:2:0 are 7 MCUs per row: any interval up to 7 (a marker at least once a row) will
    # do, whether it divides them or not; 8 or more will not.
    assert custom_op.read_jpeg_header(generated(64, 100, restart_interval=7)).random_access
    assert custom_op.read_jpeg_header(generated(64, 100, restart_rows=1)).random_access
    assert custom_op.read_jpeg_header(generated(64, 100, restart_interval=3)).random_access
    assert not custom_op.read_jpeg_header(generated(64, 100, restart_interval=8)).random_access
    assert not custom_op.read_jpeg_header(generated(64, 100, restart_rows=2)).random_access
    assert not custom_op.read_jpeg_header(generated(64, 100)).random_access
    assert not custom_op.read_jpeg_header(generated(64, 100, restart_rows=1, progressive=True)).random_access
    assert not custom_op.read_jpeg_header(generated(64, 112, restart_interval=7, arithmetic=True)).random_access
    # The header alone is enough: the field does not look at the scan.
    data = prepared(61, 83)
    sos = jm.find(data, jm.SOS)
    assert custom_op.read_jpeg_header(data[: sos.offset + sos.length]).random_access


def test_header_info_positional_fields_are_unchanged():
    info = custom_op.read_jpeg_header(prepared(61, 47, sampling="4:2:2"))
    assert info == custom_op.JpegInfo(61, 47, 3, "ycbcr", "4:2:2", False, 1, True)
    assert info[:7] == (61, 47, 3, "ycbcr", "4:2:2", False, 1)


# ---------------------------------------------------------------------------------------------------
# The path is taken, and reads only the segments around the window


def test_windows_of_random_access_files_take_the_restart_segment_path():
    data, original = prepared(200, 300, sampling="4:2:0"), generated(200, 300, sampling="4:2:0")
    before = random_access_decodes()
    for window in [(100, 120, 40, 60), (150, 0, 50, 300), (0, 100, 20, 20), (199, 299, 1, 1)]:
        custom_op.decode_and_crop_jpeg(data, *window)
    assert random_access_decodes() == before + 4
    # Nothing to gain: windows from the top spanning every column, whole decodes, ordinary files.
    custom_op.decode_and_crop_jpeg(data, 0, 0, 30, 300)
    custom_op.decode_jpeg(data)
    custom_op.decode_and_crop_jpeg(original, 100, 120, 40, 60)
    assert random_access_decodes() == before + 4
    # Segments crossing rows (19 MCUs per row, a marker every 4): the same.
    crossing = prepared(200, 300, sampling="4:2:0", restart_mcus=4)
    for window in [(100, 120, 40, 60), (150, 0, 50, 300), (0, 100, 20, 20), (199, 299, 1, 1)]:
        custom_op.decode_and_crop_jpeg(crossing, *window)
    assert random_access_decodes() == before + 8


@pytest.mark.parametrize(
    "sampling,restart_mcus", [("4:2:0", 1), ("4:4:4", 1), ("4:2:2", 1), ("4:2:0", 3), ("4:4:4", 3)]
)
def test_segments_away_from_the_window_are_never_decoded(sampling, restart_mcus):
    """Overwriting every segment whose MCUs all lie away from the window (more than two MCUs away, or
    more than two segments away across the columns) with zero bytes leaves the window's pixels exact
    (on_warning="raise": libjpeg saw nothing wrong), while a full decode, which reads them, fails on
    the same file. With 3 MCUs per segment, segments run from one row into the next (20 or 40 MCUs per
    row)."""
    original = generated(256, 320, sampling=sampling, seed=7)
    data = custom_op.prepare_jpeg(original, restart_mcus=restart_mcus)
    reference = custom_op.decode_jpeg(original).numpy()
    top, left, h, w = 100, 130, 40, 60
    info = custom_op.read_jpeg_header(data)
    mcu_w, mcu_h = {"4:2:0": (16, 16), "4:4:4": (8, 8), "4:2:2": (16, 8)}[sampling]
    per_row = -(-info.width // mcu_w)
    slack = 2 * restart_mcus * mcu_w
    layout = rs.scan(data)
    damaged = bytearray(data)
    zeroed = 0
    for index, (begin, end) in enumerate(layout.segments):
        near = False
        for mcu in range(index * restart_mcus, (index + 1) * restart_mcus):
            row, column = divmod(mcu, per_row)
            near_rows = top - 2 * mcu_h <= row * mcu_h < top + h + 2 * mcu_h
            near_columns = left - 2 * mcu_w - slack <= column * mcu_w < left + w + 2 * mcu_w + slack
            near |= near_rows and near_columns
        if not near:
            damaged[begin:end] = bytes(end - begin)
            zeroed += 1
    damaged = bytes(damaged)
    assert zeroed > 0.6 * len(layout.segments)
    out = custom_op.decode_and_crop_jpeg(damaged, top, left, h, w)
    assert np.array_equal(out.numpy(), reference[:, top : top + h, left : left + w])
    with pytest.raises(RuntimeError, match="Corrupt JPEG data"):
        custom_op.decode_jpeg(damaged)


# ---------------------------------------------------------------------------------------------------
# Exactness


SUBSAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "1x2,2x1,1x1", "2x2,1x2,2x1"]
SIZES = [(1, 1), (17, 9), (9, 17), (33, 65), (61, 47), (97, 131), (130, 211)]


@pytest.mark.parametrize("sampling", SUBSAMPLINGS)
def test_every_window_equals_the_full_decode(sampling):
    rng = np.random.default_rng(10)
    for height, width in SIZES:
        reference = custom_op.decode_jpeg(generated(height, width, sampling=sampling)).numpy()
        for restart_mcus in (1, 2, 3):
            assert_windows_exact(
                prepared(height, width, sampling=sampling, restart_mcus=restart_mcus), reference, rng, n_random=6
            )


@pytest.mark.parametrize("sampling", SUBSAMPLINGS + ["gray"])
def test_segments_crossing_rows_every_window_equals_the_full_decode(sampling):
    """Restart intervals that do not divide the MCUs per row (segments running from the end of one MCU
    row into the next, the default layout's for most photos whose MCUs per row are prime), at sizes
    with 3 to 27 MCUs per row: windows anywhere, at every edge and corner, 1x1, whole rows and
    columns, equal the full decode, and most take the restart-segment path."""
    channels, options = (1, {}) if sampling == "gray" else (3, {"sampling": sampling})
    rng = np.random.default_rng(15)
    before = random_access_decodes()
    count = 0
    for height, width in [(45, 83), (97, 131), (130, 211), (33, 65)]:
        reference = custom_op.decode_jpeg(generated(height, width, channels, seed=3, **options)).numpy()
        for restart_mcus in (2, 3, 4, 5, 7):
            data = prepared(height, width, channels, seed=3, restart_mcus=restart_mcus, **options)
            assert custom_op.read_jpeg_header(data).random_access
            assert_windows_exact(data, reference, rng, n_random=6)
            count += 1
    assert random_access_decodes() - before > 10 * count


@pytest.mark.parametrize("sampling", SUBSAMPLINGS + ["gray"])
def test_default_layout_every_window_equals_the_full_decode(sampling):
    """prepare_jpeg's default layout on photo-like images whose MCUs per row are prime (23, 29 or 47):
    windows anywhere, at every edge and corner, 1x1, whole rows and columns, equal the full decode."""
    channels, options = (1, {}) if sampling == "gray" else (3, {"sampling": sampling})
    rng = np.random.default_rng(16)
    for height, width in [(150, 8 * 47 - 3), (201, 16 * 23), (97, 32 * 29 - 5)]:
        original = generated(height, width, channels, seed=5, quality=95, **options)
        data = custom_op.prepare_jpeg(original)
        assert custom_op.read_jpeg_header(data).random_access
        assert_windows_exact(data, custom_op.decode_jpeg(original).numpy(), rng, n_random=8)


@pytest.mark.parametrize("scale", [1, 2, 3, 4, 5, 6, 7, 9, 12, 16])
def test_dct_scaled_windows_equal_the_ordinary_path(scale):
    rng = np.random.default_rng(11)
    for sampling in ("4:2:0", "4:2:2", "4:4:4", "4:4:0"):
        original = generated(97, 131, sampling=sampling, seed=2)
        reference = scaled_full(original, scale)
        for restart_mcus in (1, 4):  # 4 divides no row here (9 or 17 MCUs per row)
            data = prepared(97, 131, seed=2, sampling=sampling, restart_mcus=restart_mcus)
            assert_windows_exact(data, reference, rng, n_random=4, scale=scale)


@pytest.mark.parametrize("sampling", ["4:2:0", "4:1:1", "4x2,1x1,1x1", "2x4,1x1,1x1", "4x1,2x1,2x1"])
def test_scaled_windows_of_any_file_equal_the_whole_scaled_decode(sampling):
    """Windows of the original file and of the prepared one, at every DCT scale, against the whole
    image decoded at that scale: also where a component is enlarged by its IDCT and then upsampled
    (4x2 and 2x4 luma at 2/8 to 7/8), whose cropped decode libjpeg gets wrong."""
    rng = np.random.default_rng(5)
    original = generated(157, 203, sampling=sampling, seed=90)
    data = prepared(157, 203, seed=90, sampling=sampling)
    for scale in range(1, 17):
        reference = scaled_full(original, scale)
        assert_windows_exact(original, reference, rng, n_random=6, scale=scale)
        assert_windows_exact(data, reference, rng, n_random=6, scale=scale)


@pytest.mark.parametrize("sampling", SUBSAMPLINGS)
def test_every_row_and_column_at_every_scale(sampling):
    """Single columns and rows (and pairs) at every offset, where a sub-image's edges come closest to
    the window, for the 16 DCT scales libjpeg offers."""
    height, width = 45, 83
    original = generated(height, width, sampling=sampling, seed=6)
    for restart_mcus in (1, 2, 3):
        data = prepared(height, width, seed=6, sampling=sampling, restart_mcus=restart_mcus)
        for scale in range(1, 17):
            reference = scaled_full(original, scale)
            _, H, W = reference.shape
            for left in range(W):
                for w in (1, 2):
                    if left + w <= W:
                        window = (H // 3, left, max(1, H // 3), w)
                        out = crop(data, window, scale=scale)
                        assert np.array_equal(out, reference[:, H // 3 : H // 3 + window[2], left : left + w]), (
                            restart_mcus,
                            scale,
                            window,
                        )
            for top in range(H):
                window = (top, W // 4, 1, max(1, W // 2))
                out = crop(data, window, scale=scale)
                assert np.array_equal(out, reference[:, top : top + 1, W // 4 : W // 4 + window[3]]), (
                    restart_mcus,
                    scale,
                    window,
                )


@pytest.mark.parametrize(
    "color_space,channels,sampling",
    [("gray", 1, "4:4:4"), ("rgb", 3, "4:4:4"), ("cmyk", 4, "4:4:4"), ("ycck", 4, "2x2,1x1,1x1,2x2")],
)
@pytest.mark.parametrize("mode", [ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED])
def test_color_spaces_and_modes(color_space, channels, sampling, mode):
    original = generated(61, 47, channels, color_space=color_space, sampling=sampling)
    reference = custom_op.decode_jpeg(original, mode=mode).numpy()
    data = prepared(61, 47, channels, color_space=color_space, sampling=sampling)
    assert_windows_exact(data, reference, np.random.default_rng(12), n_random=4, mode=mode)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations(orientation):
    original = with_exif_orientation(generated(45, 70, sampling="4:2:0"), orientation)
    reference = custom_op.decode_jpeg(original, apply_exif_orientation=True).numpy()
    for restart_mcus in (1, 2):  # 2 does not divide the 5 MCUs per row
        data = custom_op.prepare_jpeg(original, restart_mcus=restart_mcus)
        assert_windows_exact(data, reference, np.random.default_rng(orientation), n_random=6, exif=True)


def test_resized_crop_is_the_same_on_prepared_files():
    original = generated(300, 400, sampling="4:2:0", seed=3)
    data = custom_op.prepare_jpeg(original)
    for box, size in [((10, 20, 200, 300), (64, 64)), ((150, 100, 150, 299), (224, 224)), ((0, 0, 300, 400), (32, 48))]:
        a = custom_op.decode_and_resized_crop_jpeg(original, *box, size)
        b = custom_op.decode_and_resized_crop_jpeg(data, *box, size)
        assert torch.equal(a, b), box


def test_photos_windows(photos):
    files = photos[1::8]
    rng = np.random.default_rng(13)
    before = random_access_decodes()
    for path in files:
        original = path.read_bytes()
        data = custom_op.prepare_jpeg(original)
        reference = custom_op.decode_jpeg(original).numpy()
        assert_windows_exact(data, reference, rng, n_random=4)
    assert random_access_decodes() > before


# ---------------------------------------------------------------------------------------------------
# Damaged and lying files


def damaged_variants(data: bytes):
    """(name, bytes) of targeted damage to a prepared file's restart structure and headers."""
    layout = rs.scan(data)
    segments, markers = layout.segments, layout.markers
    middle = len(markers) // 2
    (m_at, m_n) = markers[middle]
    yield "missing RST", data[:m_at] + data[m_at + 2 :]
    yield "missing first RST", data[: markers[0][0]] + data[markers[0][0] + 2 :]
    yield "misnumbered RST", data[: m_at + 1] + bytes((0xD0 + (m_n + 3) % 8,)) + data[m_at + 2 :]
    yield "eight RSTs missing", data[: markers[2][0]] + data[markers[10][0] :] if len(markers) > 12 else data
    begin, end = segments[middle]
    yield "extra RST", data[: begin + (end - begin) // 2] + b"\xff\xd4" + data[begin + (end - begin) // 2 :]
    yield "empty segment", data[:begin] + data[end:]
    a0, a1 = segments[3]
    b0, b1 = segments[middle]
    yield "swapped segments", data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]
    for fraction in (0.1, 0.5, 0.9, 0.999):
        yield f"truncated at {fraction}", data[: layout.start + int((layout.end - layout.start) * fraction)]
    yield "no EOI", data[: layout.end]
    interval = rs.restart_interval(data)
    for lie in (0, 2 * interval, interval + 1, 3):
        yield f"DRI says {lie}", rs.with_restart_interval(data, lie)
    _, height, width, _ = jm.sof_info(data)
    for h, w in (
        (height + 16, width),
        (height - 16, width),
        (height, width + 16),
        (height, width - 16),
        (height * 2, width * 2),
    ):
        yield f"SOF says {h}x{w}", jm.patch_sof(data, height=h, width=w)
    dqt = jm.find(data, jm.DQT)
    yield "garbage before DQT", data[: dqt.offset] + b"\x00\x13" + data[dqt.offset :]


@pytest.mark.parametrize("sampling", ["4:2:0", "4:4:4"])
def test_damaged_restart_structure_falls_back_or_raises(sampling):
    data = prepared(97, 131, seed=4, sampling=sampling)
    rng = np.random.default_rng(14)
    for name, bad in damaged_variants(data):
        try:
            info = custom_op.read_jpeg_header(bad)
        except RuntimeError:
            continue
        try:
            full = custom_op.decode_jpeg(bad, on_warning="raise", max_pixels=1 << 22).numpy()
        except (RuntimeError, ValueError):
            full = None
        for top, left, h, w in windows(info.height, info.width, rng, n_random=3)[::3]:
            for policy in ("raise", "warn", "ignore"):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out = custom_op.decode_and_crop_jpeg(
                            bad, top, left, h, w, on_warning=policy, max_pixels=1 << 22
                        )
                except (RuntimeError, ValueError):
                    continue
                assert out.shape == (3, h, w), name
                if policy == "raise" and full is not None:
                    # libjpeg found nothing wrong on either path: the pixels must agree.
                    assert np.array_equal(out.numpy(), full[:, top : top + h, left : left + w]), (name, top, left, h, w)


@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0"])
def test_segment_path_reads_no_more_of_a_damaged_file_than_the_ordinary_path(sampling):
    """Where segments cross MCU rows, the segment holding the last MCU the ordinary path decodes runs on
    into rows it never decodes, and the marker after it is never read. Damage there (bytes before that
    marker, or the segment's second half zeroed), and in the segments around it, must not make the
    segment path fail where a decode of the whole width down to the window's last row (the ordinary
    path) does not; where both decode, the pixels agree."""
    mcu_w, mcu_h = {"4:2:0": (16, 16), "4:4:4": (8, 8), "4:2:2": (16, 8), "4:4:0": (8, 16)}[sampling]
    checked = 0
    for height, width in [(97, 131), (77, 101)]:
        original = generated(height, width, sampling=sampling, seed=8)
        per_row = -(-width // mcu_w)
        for restart_mcus in (k for k in (2, 3, 4, 5) if per_row % k):
            data = custom_op.prepare_jpeg(original, restart_mcus=restart_mcus)
            layout = rs.scan(data)
            rng = np.random.default_rng(restart_mcus)
            for _ in range(10):
                h, w = int(rng.integers(1, 40)), int(rng.integers(1, 60))
                top, left = int(rng.integers(1, height - h + 1)), int(rng.integers(0, width - w + 1))
                last_row = (top + h - 1) // mcu_h
                near = {mcu // restart_mcus for mcu in range(max(0, last_row - 1) * per_row, (last_row + 3) * per_row)}
                for index in sorted(g for g in near if g < len(layout.segments) - 1):
                    begin, end = layout.segments[index]
                    for damaged in (
                        data[:end] + b"\x12\x34\x56" + data[end:],
                        data[: (begin + end) // 2] + bytes(end - (begin + end) // 2) + data[end:],
                    ):
                        try:
                            whole = custom_op.decode_and_crop_jpeg(damaged, 0, 0, top + h, width, on_warning="raise")
                        except RuntimeError:
                            continue  # the ordinary path sees the damage: either outcome is right for the window
                        out = custom_op.decode_and_crop_jpeg(damaged, top, left, h, w, on_warning="raise")
                        assert torch.equal(out, whole[:, top:, left : left + w]), (restart_mcus, top, left, h, w, index)
                        checked += 1
    assert checked > 100


def test_marker_damage_above_the_window_falls_back_to_the_ordinary_path():
    data = prepared(97, 131, seed=5, sampling="4:2:0")
    layout = rs.scan(data)
    at, _ = layout.markers[2]  # in the first MCU row
    missing = data[:at] + data[at + 2 :]
    before = random_access_decodes()
    with pytest.raises(RuntimeError, match="Corrupt JPEG data"):
        custom_op.decode_and_crop_jpeg(missing, 60, 60, 20, 20)  # the ordinary path's complaint
    assert random_access_decodes() == before
    truncated = data[: layout.start + (layout.end - layout.start) // 3]
    with pytest.raises(RuntimeError):
        custom_op.decode_and_crop_jpeg(truncated, 80, 60, 10, 10)
    assert random_access_decodes() == before
    # Truncation below the window is not seen, as on the ordinary path (which stops early too).
    out = custom_op.decode_and_crop_jpeg(truncated, 0, 60, 10, 10)
    assert np.array_equal(out.numpy(), custom_op.decode_jpeg(data).numpy()[:, 0:10, 60:70])


def test_fuzzed_prepared_files_in_a_child_process(tmp_path):
    package_parent = str(Path(custom_op.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]))
    count = int(os.environ.get("CUSTOM_OP_FUZZ_COUNT_RA", "250"))
    seed = int(os.environ.get("CUSTOM_OP_FUZZ_SEED", "0"))
    result = subprocess.run(
        [sys.executable, str(WORKER), "--seed", str(seed), "--count", str(count)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = result.stdout.splitlines()
    summary = [json.loads(line[len("SUMMARY ") :]) for line in lines if line.startswith("SUMMARY ")]
    if result.returncode != 0 or not summary:
        cases = [line for line in lines if line.startswith("CASE ")]
        pytest.fail(
            f"fuzz child died (exit status {result.returncode}); last case started: "
            f"{cases[-1] if cases else '(none)'}\nstderr tail:\n{result.stderr[-3000:]}"
        )
    bad = [line for line in lines if line.startswith("BAD ")]
    assert not bad, f"{len(bad)} contract violations (first 30):\n" + "\n".join(bad[:30])
    assert summary[0]["random_access_decodes"] > summary[0]["cases"] // 4


def sub_image(data: bytes, top, left, height, width):
    out, where = torch.ops.custom_op._jpeg_sub_image(
        torch.frombuffer(bytearray(data), dtype=torch.uint8), top, left, height, width
    )
    return out.numpy().tobytes(), list(where)


@pytest.mark.parametrize("restart_mcus", [2, 3])
@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0"])
def test_sub_image_op_gives_the_window_at_its_offset(sampling, restart_mcus):
    """The GPU path's source of sub-images (_jpeg_sub_image): a JPEG of its own whose decode holds the
    window, at the offset returned, with exactly the full decode's pixels, and fewer bytes. 2 MCUs per
    segment divide the 20 or 40 MCUs per row, 3 do not."""
    data = prepared(203, 317, sampling=sampling, restart_mcus=restart_mcus)
    rng = np.random.default_rng(5)
    used = 0
    for _ in range(12):
        h, w = int(rng.integers(1, 120)), int(rng.integers(1, 160))
        top, left = int(rng.integers(0, 203 - h + 1)), int(rng.integers(0, 317 - w + 1))
        sub, where = sub_image(data, top, left, h, w)
        if not sub:  # only when its segments start at the file's start: nothing to gain
            assert top <= 17 and w >= 317 - 70, (top, left, h, w)
            continue
        info = custom_op.read_jpeg_header(sub)
        assert [info.height, info.width] == where[2:] and info.subsampling == sampling
        assert len(sub) < len(data)
        np.testing.assert_array_equal(crop(sub, (top - where[0], left - where[1], h, w)), crop(data, (top, left, h, w)))
        used += 1
    assert used >= 8


def test_headers_declaring_more_segments_than_the_data_holds_are_refused_cleanly():
    """A random-access header whose frame promises far more segments than the bytes could hold (a
    decompression-bomb size, one MCU per segment) is refused by the segment path before it plans
    anything, and the ordinary path reports the file as it always does."""
    data = prepared(97, 131, sampling="4:2:0", restart_mcus=1)
    for height, width in [(60000, 60000), (8, 65000), (65000, 16)]:
        lying = jm.patch_sof(data, height=height, width=width)
        assert custom_op.read_jpeg_header(lying).random_access
        assert sub_image(lying, height - 20, width - 20, 10, 10) == (b"", [])
        before = random_access_decodes()
        with pytest.raises((RuntimeError, ValueError)):
            custom_op.decode_and_crop_jpeg(lying, height - 20, width - 20, 10, 10, on_warning="raise")
        assert random_access_decodes() == before
    # An interval above the MCUs per row is not the layout: the ordinary path decodes the file.
    too_long = rs.with_restart_interval(prepared(97, 131, sampling="4:2:0", restart_mcus=9), 10)
    assert not custom_op.read_jpeg_header(too_long).random_access
    assert sub_image(too_long, 40, 40, 10, 10) == (b"", [])


def test_sub_image_op_declines_what_it_cannot_use():
    plain = generated(120, 160, sampling="4:2:0")
    assert sub_image(plain, 40, 40, 20, 20) == (b"", [])  # no restart markers
    data = prepared(120, 160, sampling="4:2:0")
    assert sub_image(data, 100, 150, 30, 30) == (b"", [])  # window outside the image
    assert sub_image(data, -1, 0, 10, 10) == (b"", [])
    assert sub_image(b"\xff\xd8\xff", 0, 0, 1, 1) == (b"", [])  # not a JPEG: never an error here
    damaged = bytearray(data)
    damaged[len(damaged) // 2 :] = bytes(len(damaged) - len(damaged) // 2)  # restart markers gone
    assert sub_image(bytes(damaged), 100, 100, 10, 10) == (b"", [])


# ---------------------------------------------------------------------------------------------------
# Which segments a window's decode reads (common/restart_plan.h), and our CUDA decoder's superset


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def segments_read(data: bytes, window):
    """(last MCU row, []) when the CPU path decodes every segment from the first through that row's
    last, (-1, the original segments its sub-image holds) otherwise."""
    last_row, segments = torch.ops.custom_op._jpeg_segments_read(as_tensor(data), *window)
    return last_row, segments.tolist()


def decoder_segments(data: bytes, windows) -> set:
    """The segments our CUDA decoder decodes when one decode serves these windows (the operator lists
    its runs one after another: in order, each segment once, which is asserted here)."""
    listed = torch.ops.custom_op._cuda_decoder_segments(as_tensor(data), *map(list, zip(*windows))).tolist()
    assert listed == sorted(set(listed)), listed
    return set(listed)


class Geometry(NamedTuple):
    mcu_h: int
    mcu_w: int
    per_row: int
    rows: int
    interval: int
    subsampled_down: bool  # chroma subsampled down the rows: libjpeg's context rows may read one more


def geometry(data: bytes) -> Geometry:
    height, width, channels, *_, sampling, _ = torch.ops.custom_op.read_jpeg_header(
        as_tensor(data), apply_exif_orientation=False
    )
    hs, vs = sampling[0::2], sampling[1::2]
    mcu_h, mcu_w = (8, 8) if channels == 1 else (8 * max(vs), 8 * max(hs))
    per_row = -(-width // mcu_w)
    return Geometry(mcu_h, mcu_w, per_row, -(-height // mcu_h), rs.restart_interval(data), min(vs) < max(vs))


def damaged_outside(data: bytes, keep) -> bytes:
    """Every segment but those in `keep` overwritten with stuffed FF bytes (all-ones bits: no Huffman code
    of a valid table, so libjpeg warns at the first it reads), the markers left as they are."""
    layout = rs.scan(data)
    out, at = [], 0
    for index, (begin, end) in enumerate(layout.segments):
        if index in keep:
            continue
        n = end - begin
        out += [data[at:begin], b"\xff\x00" * (n // 2) + b"\x00" * (n % 2)]
        at = end
    return b"".join(out) + data[at:]


def cpu_segments(data: bytes, window, geo: Geometry, contents) -> tuple[bool, set]:
    """Whether the CPU path decodes the window the ordinary way, and the segments it reads: found from
    _jpeg_sub_image's output (its slots' bytes, matched to the original's segments) or, for the ordinary
    path, from the window's rows. Checks on the way that _jpeg_segments_read agrees."""
    last_row, listed = segments_read(data, window)
    sub, _ = sub_image(data, *window)
    if last_row >= 0:
        # The ordinary path exactly when no sub-image is built (the file is valid: no refusal here
        # depends on its bytes).
        assert sub == b"" and listed == [], window
        top, _, h, _ = window
        expected = (top + h - 1) // geo.mcu_h + geo.subsampled_down
        assert last_row == min(expected, geo.rows - 1), (window, last_row)
        return True, set(range(((last_row + 1) * geo.per_row - 1) // geo.interval + 1))
    assert sub != b"" and listed == sorted(set(listed)), window
    slots = {sub[b:e] for b, e in rs.scan(sub).segments}
    assert {contents[g] for g in listed} == slots, window  # the same segments, by content
    return False, set(listed)


def rectangle_segments(geo: Geometry, window, height, width) -> set:
    """The segments holding our CUDA decoder's rectangle for a window decoded alone: the planner's
    margin (a pixel, out to whole MCUs) and one MCU more all round (cuda/planner.cpp, segment_executor.cpp)."""
    top, left, h, w = window
    t = max(0, top - 1) // geo.mcu_h * geo.mcu_h
    l = max(0, left - 1) // geo.mcu_w * geo.mcu_w
    b = min(height, -(-(top + h + 1) // geo.mcu_h) * geo.mcu_h)
    r = min(width, -(-(left + w + 1) // geo.mcu_w) * geo.mcu_w)
    r0, c0 = max(0, t // geo.mcu_h - 1), max(0, l // geo.mcu_w - 1)
    r1, c1 = min(geo.rows, -(-b // geo.mcu_h) + 1), min(geo.per_row, -(-r // geo.mcu_w) + 1)
    k, P = geo.interval, geo.per_row
    return {s for row in range(r0, r1) for s in range((row * P + c0) // k, (row * P + c1 - 1) // k + 1)}


@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0", "1x2,2x1,1x1", "gray"])
def test_segments_read_are_those_of_the_cpu_paths_decode(sampling):
    """For windows everywhere in prepared files of several sizes, with intervals that divide the MCUs
    per row and intervals that do not: _jpeg_segments_read names exactly the segments of the sub-image
    _jpeg_sub_image builds, and says "ordinary" exactly when it builds none; the CPU path's decode
    reads nothing else (every other segment damaged, it decodes the window without a warning); and our
    CUDA decoder's segments, for each window alone and for windows sharing one decode, include them
    all, where the rectangle around the window alone often does not."""
    channels, options = (1, {}) if sampling == "gray" else (3, {"sampling": sampling})
    rng = np.random.default_rng(17)
    counts = {"sub-image": 0, "ordinary": 0, "beyond the rectangle": 0}
    for height, width in [(45, 83), (97, 131), (130, 211)]:
        reference = custom_op.decode_jpeg(generated(height, width, channels, seed=9, **options)).numpy()
        for restart_mcus in (1, 2, 3, 4, 5, 7):
            data = prepared(height, width, channels, seed=9, restart_mcus=restart_mcus, **options)
            geo = geometry(data)
            contents = [data[b:e] for b, e in rs.scan(data).segments]
            wins = windows(height, width, rng, n_random=4)
            read = {}
            for window in wins:
                ordinary, read[window] = cpu_segments(data, window, geo, contents)
                counts["ordinary" if ordinary else "sub-image"] += 1
                counts["beyond the rectangle"] += not read[window] <= rectangle_segments(geo, window, height, width)
                top, left, h, w = window
                out = crop(damaged_outside(data, read[window]), window, policy=0)
                assert np.array_equal(out, reference[:, top : top + h, left : left + w]), (restart_mcus, window)
                first = ((top // geo.mcu_h) * geo.per_row + left // geo.mcu_w) // geo.interval  # read, surely
                with pytest.raises(RuntimeError, match="Corrupt JPEG data"):  # the damage is seen where read
                    crop(damaged_outside(data, read[window] - {first}), window, policy=0)
                decoded = decoder_segments(data, [window])
                assert read[window] <= decoded, (restart_mcus, window, sorted(read[window] - decoded))
            for _ in range(6):  # a file repeated in a batch: one decode for all its windows
                group = [wins[int(i)] for i in rng.choice(len(wins), size=int(rng.integers(2, 5)), replace=False)]
                decoded = decoder_segments(data, group)
                assert set().union(*(read[window] for window in group)) <= decoded, (restart_mcus, group)
    assert counts["sub-image"] > counts["ordinary"] > 0, counts
    assert counts["beyond the rectangle"] > 0, counts


def test_files_without_the_layout_are_read_from_the_top():
    """Restart markers less often than once a row: the CPU path reads every segment from the first down
    to the window (and the row below where chroma is subsampled down the rows), and so does our CUDA
    decoder."""
    for sampling in ("4:2:0", "4:4:4"):
        data = generated(97, 131, sampling=sampling, restart_rows=2)
        assert not custom_op.read_jpeg_header(data).random_access
        geo = geometry(data)
        for window in windows(97, 131, np.random.default_rng(18), n_random=4):
            last_row, listed = segments_read(data, window)
            top, _, h, _ = window
            assert listed == [] and last_row == min((top + h - 1) // geo.mcu_h + geo.subsampled_down, geo.rows - 1)
            last = ((last_row + 1) * geo.per_row - 1) // geo.interval
            assert decoder_segments(data, [window]) == set(range(last + 1)), window
