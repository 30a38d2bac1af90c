"""custom_op.prepare_jpeg and `python -m custom_op prepare`: the rewrite is lossless, sequential and
random-access, keeps the metadata asked for, stays within its size budget, and decode_and_crop_jpeg on
the rewritten files equals a full decode of the originals, sliced.

The references are the originals' full decodes (Pillow and custom_op agree on them, see test_decode.py).
"""

import io
import os
import struct
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import custom_op
import jpeg_factory
import jpeg_markers as jm
import restart_segments as rs
from custom_op import ImageReadMode
from test_decode import pillow_reference, windows

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

SUBSAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "1x2,2x1,1x1"]
SIZES = [(1, 1), (17, 9), (9, 17), (61, 47), (130, 211)]


@cache
def generated(height, width, channels=3, seed=0, **options):
    return jpeg_factory.encode(jpeg_factory.photo_like(height, width, channels, seed=seed), **options)


def full(data: bytes, mode=ImageReadMode.RGB) -> np.ndarray:
    return custom_op.decode_jpeg(data, mode=mode).numpy()


def assert_prepared_matches(original: bytes, prepared: bytes, rng, mode=ImageReadMode.RGB, n_random=6):
    """Whole decode and windows touching every edge of `prepared` equal the original's full decode."""
    reference = full(original, mode)
    assert np.array_equal(full(prepared, mode), reference)
    _, H, W = reference.shape
    for top, left, h, w in windows(H, W, rng, n_random):
        out = custom_op.decode_and_crop_jpeg(prepared, top, left, h, w, mode=mode)
        if not np.array_equal(out.numpy(), reference[:, top : top + h, left : left + w]):
            pytest.fail(
                f"window (top={top}, left={left}, height={h}, width={w}) of a prepared {H}x{W} "
                f"file differs from the original's full decode"
            )


def sof_marker(data: bytes) -> int:
    return jm.find(data, jm.SOF).marker


# ---------------------------------------------------------------------------------------------------
# Lossless, sequential, random-access


@pytest.mark.parametrize("sampling", SUBSAMPLINGS)
def test_every_subsampling_and_odd_size(sampling):
    rng = np.random.default_rng(0)
    for height, width in SIZES:
        original = generated(height, width, sampling=sampling)
        for restart_mcus in (None, 1, 3):
            prepared = custom_op.prepare_jpeg(original, restart_mcus=restart_mcus)
            info = custom_op.read_jpeg_header(prepared)
            assert info.random_access and not info.progressive
            assert info[:5] == custom_op.read_jpeg_header(original)[:5]
            assert_prepared_matches(original, prepared, rng, n_random=3)


@pytest.mark.parametrize("height,width", [(8193, 3), (3, 8193)])
def test_long_thin_images(height, width):
    original = generated(height, width, sampling="4:2:0")
    prepared = custom_op.prepare_jpeg(original, restart_mcus=1)
    assert custom_op.read_jpeg_header(prepared).random_access
    assert_prepared_matches(original, prepared, np.random.default_rng(1), n_random=4)


@pytest.mark.parametrize(
    "color_space,channels,sampling",
    [("gray", 1, "4:4:4"), ("rgb", 3, "4:4:4"), ("cmyk", 4, "4:4:4"), ("ycck", 4, "2x2,1x1,1x1,2x2")],
)
def test_color_spaces(color_space, channels, sampling):
    original = generated(61, 47, channels, color_space=color_space, sampling=sampling)
    prepared = custom_op.prepare_jpeg(original, restart_mcus=2)
    assert custom_op.read_jpeg_header(prepared).color_space == color_space
    for mode in (ImageReadMode.UNCHANGED, ImageReadMode.RGB, ImageReadMode.GRAY):
        assert_prepared_matches(original, prepared, np.random.default_rng(2), mode=mode, n_random=3)


@pytest.mark.parametrize(
    "coding",
    [
        {"progressive": True},
        {"arithmetic": True},
        {"arithmetic": True, "progressive": True, "restart_interval": 3},
        {"restart_rows": 1, "progressive": True},
        {"restart_interval": 7},
    ],
)
def test_progressive_and_arithmetic_inputs_become_baseline_huffman(coding):
    original = generated(77, 93, sampling="4:2:0", **coding)
    prepared = custom_op.prepare_jpeg(original)
    assert sof_marker(prepared) in (0xC0, 0xC1)  # sequential Huffman
    assert len([s for s in jm.segments(prepared) if s.marker == jm.SOS]) == 1
    info = custom_op.read_jpeg_header(prepared)
    assert info.random_access and not info.progressive
    assert_prepared_matches(original, prepared, np.random.default_rng(3))


def test_pillow_decodes_prepared_files_to_the_same_pixels():
    for sampling in ("4:2:0", "4:4:4"):
        original = generated(61, 83, sampling=sampling, progressive=True)
        prepared = custom_op.prepare_jpeg(original, restart_mcus=1)
        assert np.array_equal(pillow_reference(prepared), pillow_reference(original))
        assert Image.open(io.BytesIO(prepared)).info.get("progressive", 0) == 0


def smallest_within_bound(original: bytes, mcus_per_row: int) -> int:
    """The size of the smallest prepared file, over every restart interval, whose segments are within
    the default bound."""
    sizes = []
    for k in range(1, mcus_per_row + 1):
        prepared = custom_op.prepare_jpeg(original, restart_mcus=k)
        if max(segment_lengths(prepared)) <= custom_op.prepare.DEFAULT_MAX_SEGMENT_BYTES:
            sizes.append(len(prepared))
    return min(sizes)


def test_photos_lossless_small_and_random_access(photos):
    files = photos[::4]
    rng = np.random.default_rng(4)
    before = after = 0
    for path in files:
        original = path.read_bytes()
        prepared = custom_op.prepare_jpeg(original)
        before, after = before + len(original), after + len(prepared)
        # Within the budget of the input's size, or of the coarsest layout when that is larger already;
        # or else no interval within the segment bound, which comes first, keeps the file within it.
        one_per_row = custom_op.prepare_jpeg(original, restart_mcus=65535)  # its interval: the MCUs per row
        budget = max(len(original), len(one_per_row)) * (1 + custom_op.prepare.DEFAULT_MAX_GROWTH) + 1
        if len(prepared) > budget:
            assert smallest_within_bound(original, rs.restart_interval(one_per_row)) > budget, path.name
        assert custom_op.read_jpeg_header(prepared).random_access, path.name
        assert max(segment_lengths(prepared)) <= custom_op.prepare.DEFAULT_MAX_SEGMENT_BYTES, path.name
        reference = pillow_reference(original)
        assert np.array_equal(pillow_reference(prepared), reference), path.name
        assert np.array_equal(full(prepared), reference), path.name
        _, H, W = reference.shape
        for size in (224, 128, 64):
            h, w = min(size, H), min(size, W)
            top, left = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
            out = custom_op.decode_and_crop_jpeg(prepared, top, left, h, w)
            assert np.array_equal(out.numpy(), reference[:, top : top + h, left : left + w]), (path.name, size)
    assert after <= before * 1.025


@pytest.mark.parametrize(
    "name",
    [
        "exif_gps.jpg",
        "flower.jpg",
        "hopper.jpg",
        "hopper_gray.jpg",
        "hopper_orientation_6.jpg",
        "icc-after-SOF.jpg",
        "testimgint.jpg",
        "testorig.jpg",
    ],
)
def test_odd_files(odd_jpegs, name):
    original = (odd_jpegs / name).read_bytes()
    prepared = custom_op.prepare_jpeg(original)
    assert custom_op.read_jpeg_header(prepared).random_access
    assert_prepared_matches(original, prepared, np.random.default_rng(5), mode=ImageReadMode.UNCHANGED, n_random=4)
    exif = custom_op.decode_jpeg(original, apply_exif_orientation=True)
    assert np.array_equal(custom_op.decode_jpeg(prepared, apply_exif_orientation=True).numpy(), exif.numpy())


def test_damaged_odd_file_is_refused(odd_jpegs):
    data = (odd_jpegs / "truncated_jpeg.jpg").read_bytes()
    with pytest.raises(RuntimeError, match="Premature end"):
        custom_op.prepare_jpeg(data)


# ---------------------------------------------------------------------------------------------------
# Restart interval and size


def test_restart_mcus_is_the_interval_up_to_one_segment_per_row():
    original = generated(40, 16 * 12, sampling="4:2:0")  # 12 MCUs per row
    for asked, expected in [(1, 1), (2, 2), (5, 5), (7, 7), (11, 11), (12, 12), (500, 12)]:
        prepared = custom_op.prepare_jpeg(original, restart_mcus=asked)
        assert rs.restart_interval(prepared) == expected
        assert custom_op.read_jpeg_header(prepared).random_access
    prime = generated(16, 8 * 13, sampling="4:4:4")  # 13 MCUs per row
    assert rs.restart_interval(custom_op.prepare_jpeg(prime, restart_mcus=4)) == 4


def test_markers_are_where_the_layout_says():
    original = generated(70, 100, sampling="4:2:0")  # 7 x 5 MCUs
    prepared = custom_op.prepare_jpeg(original, restart_mcus=1)
    scan = rs.scan(prepared)
    assert len(scan.segments) == 35 and [n for _, n in scan.markers] == [i % 8 for i in range(34)]


def test_automatic_interval_stays_within_the_size_budget():
    for seed, sampling in enumerate(SUBSAMPLINGS[:4]):
        original = generated(300, 400, seed=seed, sampling=sampling, quality=85)
        for growth in (0.0, 0.01, 0.05):
            prepared = custom_op.prepare_jpeg(original, max_growth=growth)
            coarsest = custom_op.prepare_jpeg(original, restart_mcus=65535)
            assert len(prepared) <= max(len(original), len(coarsest)) * (1 + growth) + 1
        # A large budget buys finer segments than a small one.
        fine = rs.restart_interval(custom_op.prepare_jpeg(original, max_growth=0.5))
        coarse = rs.restart_interval(custom_op.prepare_jpeg(original, max_growth=0.0))
        assert fine <= coarse


def segment_lengths(data: bytes) -> list:
    return [end - begin for begin, end in rs.scan(data).segments]


@pytest.mark.parametrize(
    "height,width,sampling,quality",
    [
        (375, 8 * 47, "4:4:4", 95),  # 47 MCUs per row, a prime: only 1 and 47 divide it
        (500, 8 * 53, "4:4:4", 90),
        (333, 16 * 29, "4:2:0", 97),
        (480, 640, "4:2:0", 92),
        (300, 16 * 31, "4:2:2", 95),
        (257, 8 * 41, "4:4:0", 95),
        (200, 8 * 37, "4:4:4", 100),  # the most detailed: a few hundred bytes per MCU
    ],
)
def test_default_layout_keeps_every_segment_short(height, width, sampling, quality):
    """Photo-like images, detailed ones included, whatever their MCUs per row: every restart segment
    within DEFAULT_MAX_SEGMENT_BYTES, the file within its size budget, windows exact."""
    channels = 3
    original = generated(height, width, channels, seed=height, sampling=sampling, quality=quality)
    prepared = custom_op.prepare_jpeg(original)
    lengths = segment_lengths(prepared)
    assert max(lengths) <= custom_op.prepare.DEFAULT_MAX_SEGMENT_BYTES, max(lengths)
    coarsest = custom_op.prepare_jpeg(original, restart_mcus=65535)
    assert max(segment_lengths(coarsest)) > 2 * max(lengths)  # one segment per row would be far longer
    assert len(prepared) <= max(len(original), len(coarsest)) * (1 + custom_op.prepare.DEFAULT_MAX_GROWTH) + 1
    assert custom_op.read_jpeg_header(prepared).random_access
    assert_prepared_matches(original, prepared, np.random.default_rng(height), n_random=4)


def test_max_segment_bytes_comes_before_the_size_budget():
    # A detailed band on a flat image: with no size budget at all (max_growth=0), the segments in the
    # band would be whole rows, several KB each.
    pixels = np.full((256, 8 * 43, 3), 120, np.uint8)
    pixels[:48] = np.random.default_rng(9).integers(0, 256, (48, 8 * 43, 3), dtype=np.uint8)
    original = jpeg_factory.encode(pixels, sampling="4:4:4", quality=95, optimize=True)
    loose = custom_op.prepare_jpeg(original, max_growth=0.0, max_segment_bytes=None)
    assert max(segment_lengths(loose)) > 4096
    for bound in (2048, 600):
        prepared = custom_op.prepare_jpeg(original, max_growth=0.0, max_segment_bytes=bound)
        assert max(segment_lengths(prepared)) <= bound
        assert len(prepared) > len(loose)  # the bound costs markers the budget had no room for
        assert np.array_equal(full(prepared), full(original))
    # No interval gets below a single MCU: then every MCU is a segment of its own.
    finest = custom_op.prepare_jpeg(original, max_segment_bytes=1)
    assert rs.restart_interval(finest) == 1
    assert np.array_equal(full(finest), full(original))


def test_optimize_false_still_lossless():
    original = generated(61, 83, sampling="4:2:2")
    prepared = custom_op.prepare_jpeg(original, optimize=False, restart_mcus=2)
    assert_prepared_matches(original, prepared, np.random.default_rng(6), n_random=3)


# ---------------------------------------------------------------------------------------------------
# Metadata


def with_segment(data: bytes, marker: int, payload: bytes) -> bytes:
    return data[:2] + bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload + data[2:]


def exif_payload(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = exif.tobytes()
    return payload if payload.startswith(b"Exif\x00\x00") else b"Exif\x00\x00" + payload


def test_exif_and_icc_are_kept_by_default_and_dropped_on_request():
    icc = b"ICC_PROFILE\x00\x01\x01" + bytes(range(256)) * 3
    original = generated(45, 70, sampling="4:2:0")
    original = with_segment(original, 0xE2, icc)
    original = with_segment(original, 0xE1, exif_payload(6))
    original = with_segment(original, 0xFE, b"a comment")
    prepared = custom_op.prepare_jpeg(original)
    markers = {s.marker for s in jm.segments(prepared)}
    assert jm.APP1 in markers and 0xE2 in markers and 0xFE not in markers
    info = custom_op.read_jpeg_header(prepared, apply_exif_orientation=True)
    assert info.orientation == 6 and (info.height, info.width) == (70, 45)
    assert Image.open(io.BytesIO(prepared)).info["icc_profile"] == icc[14:]
    rotated = custom_op.decode_jpeg(original, apply_exif_orientation=True).numpy()
    assert np.array_equal(custom_op.decode_jpeg(prepared, apply_exif_orientation=True).numpy(), rotated)
    out = custom_op.decode_and_crop_jpeg(prepared, 20, 5, 33, 31, apply_exif_orientation=True)
    assert np.array_equal(out.numpy(), rotated[:, 20:53, 5:36])

    bare = custom_op.prepare_jpeg(original, keep_exif=False, keep_icc=False)
    markers = {s.marker for s in jm.segments(bare)}
    assert jm.APP1 not in markers and 0xE2 not in markers
    assert custom_op.read_jpeg_header(bare).orientation == 1
    assert np.array_equal(full(bare), full(original))


# ---------------------------------------------------------------------------------------------------
# Errors


def test_bad_input_and_options():
    good = generated(17, 9)
    for data in (b"", b"not a jpeg", good[: len(good) // 2]):
        with pytest.raises(RuntimeError):
            custom_op.prepare_jpeg(data)
    with pytest.raises(TypeError):
        custom_op.prepare_jpeg([1, 2, 3])
    for bad in (
        {"restart_mcus": 0},
        {"restart_mcus": 70000},
        {"max_growth": -0.1},
        {"max_segment_bytes": 0},
        {"max_segment_bytes": -5},
    ):
        with pytest.raises(ValueError):
            custom_op.prepare_jpeg(good, **bad)
    for bad in ({"max_segment_bytes": 1.5}, {"max_segment_bytes": "2048"}, {"max_growth": "a lot"}):
        with pytest.raises(TypeError):
            custom_op.prepare_jpeg(good, **bad)
    with pytest.raises(ValueError, match="max_pixels"):
        custom_op.prepare_jpeg(jm.patch_sof(good, height=60000, width=60000))


def test_progressive_file_missing_its_last_scans_is_refused():
    data = generated(64, 64, sampling="4:2:0", progressive=True)
    scans = [s for s in jm.segments(data) if s.marker == jm.SOS]
    incomplete = data[: scans[3].offset] + b"\xff\xd9"  # DC and a few AC scans, then EOI
    custom_op.decode_jpeg(incomplete)  # a valid file libjpeg decodes (with block smoothing)
    with pytest.raises(RuntimeError, match="incomplete"):
        custom_op.prepare_jpeg(incomplete)


# ---------------------------------------------------------------------------------------------------
# The folder command


def run_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    package_parent = str(Path(custom_op.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "custom_op", "prepare", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=cwd,
    )


@pytest.fixture()
def source_tree(tmp_path):
    src = tmp_path / "src"
    (src / "cats").mkdir(parents=True)
    (src / "dogs" / "deep").mkdir(parents=True)
    files = {
        "cats/a.jpg": generated(61, 83, sampling="4:2:0"),
        "cats/b.JPEG": generated(50, 66, sampling="4:2:2", seed=1, progressive=True),
        "dogs/c.jpg": with_segment(generated(45, 70, seed=2), 0xE1, exif_payload(3)),
        "dogs/deep/d.jpg": generated(40, 40, 1, seed=3),
        "dogs/ready.jpg": custom_op.prepare_jpeg(generated(33, 35, seed=4)),
        "dogs/broken.jpg": generated(64, 64, seed=5)[:400],
        "labels.txt": b"cat\ndog\n",
    }
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return src, files


def test_folder_to_folder_with_verify_and_resume(source_tree, tmp_path):
    src, files = source_tree
    dst = tmp_path / "dst"
    result = run_cli(src, dst, "--workers", "2", "--verify", "--report", tmp_path / "report.jsonl")
    assert result.returncode == 0, result.stderr
    assert "prepared 4 of 7 files" in result.stdout
    assert "already random-access" in result.stdout and "not a JPEG" in result.stdout
    assert "dogs/broken.jpg" in result.stdout and "cannot prepare" in result.stdout
    assert "%" in result.stdout  # the size change
    for rel, data in files.items():
        out = (dst / rel).read_bytes()
        if rel in ("dogs/ready.jpg", "dogs/broken.jpg", "labels.txt"):
            assert out == data, rel  # left as it was
            continue
        assert custom_op.read_jpeg_header(out).random_access, rel
        assert np.array_equal(full(out, ImageReadMode.UNCHANGED), full(data, ImageReadMode.UNCHANGED)), rel
    assert custom_op.read_jpeg_header((dst / "dogs/c.jpg").read_bytes()).orientation == 3
    assert len((tmp_path / "report.jsonl").read_text().splitlines()) == 7
    assert not [p for p in dst.rglob("*") if "tmp" in p.name]

    # Resume: what exists is not redone; a missing output (and a stale temporary file) are handled.
    (dst / "cats/a.jpg").unlink()
    (dst / "cats" / ".a.jpg.custom_op-tmp-123-abcdef01").write_bytes(b"partial")
    stamp = (dst / "dogs/c.jpg").stat().st_mtime_ns
    result = run_cli(src, dst, "--workers", "1", "--quiet")
    assert result.returncode == 0, result.stderr
    assert "prepared 1 of 7 files" in result.stdout and "already there from an earlier run: 6" in result.stdout
    assert (dst / "dogs/c.jpg").stat().st_mtime_ns == stamp
    assert custom_op.read_jpeg_header((dst / "cats/a.jpg").read_bytes()).random_access
    assert not (dst / "cats" / ".a.jpg.custom_op-tmp-123-abcdef01").exists()


def test_folder_in_place_and_options(source_tree):
    src, files = source_tree
    result = run_cli(src, "--in-place", "--workers", "1", "--restart-mcus", "1", "--no-keep-exif")
    assert result.returncode == 0, result.stderr
    assert "prepared 4 of 7 files" in result.stdout
    c = (src / "dogs/c.jpg").read_bytes()
    assert rs.restart_interval(c) == 1 and custom_op.read_jpeg_header(c).orientation == 1
    assert (src / "dogs/broken.jpg").read_bytes() == files["dogs/broken.jpg"]
    assert np.array_equal(full((src / "cats/b.JPEG").read_bytes()), full(files["cats/b.JPEG"]))
    # A second run finds everything done.
    result = run_cli(src, "--in-place", "--workers", "1")
    assert "prepared 0 of 7 files" in result.stdout
    assert result.stdout.count("already random-access") == 1


def test_folder_segment_bound(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    original = generated(200, 8 * 37, sampling="4:4:4", quality=95)
    (src / "a.jpg").write_bytes(original)
    result = run_cli(src, tmp_path / "dst", "--workers", "1", "--max-segment-bytes", "300", "--max-growth", "0")
    assert result.returncode == 0, result.stderr
    out = (tmp_path / "dst" / "a.jpg").read_bytes()
    assert max(segment_lengths(out)) <= 300
    assert np.array_equal(full(out), full(original))
    # The default layout has the default bound; 0 lifts it.
    result = run_cli(src, tmp_path / "loose", "--workers", "1", "--max-segment-bytes", "0", "--max-growth", "0")
    assert result.returncode == 0, result.stderr
    loose = (tmp_path / "loose" / "a.jpg").read_bytes()
    assert loose == custom_op.prepare_jpeg(original, max_segment_bytes=None, max_growth=0.0)


def test_folder_argument_errors(tmp_path):
    assert run_cli(tmp_path / "missing", tmp_path / "out").returncode == 2
    assert "DST is required" in run_cli(tmp_path).stderr
    assert "--in-place" in run_cli(tmp_path, tmp_path).stderr
    assert "--max-segment-bytes" in run_cli(tmp_path, tmp_path / "out", "--max-segment-bytes", "-1").stderr
