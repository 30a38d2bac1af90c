"""The test JPEG factory writes what it is asked for (checked with Pillow and by reading the markers)."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import jpeg_factory
import jpeg_markers as jm

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)


def _open(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize(
    "sampling, luma",
    [("4:4:4", (1, 1)), ("4:2:2", (2, 1)), ("4:2:0", (2, 2)), ("4:4:0", (1, 2)), ("4:1:1", (4, 1))],
)
def test_sampling_names_set_luma_factors(sampling, luma):
    data = jpeg_factory.encode(jpeg_factory.photo_like(48, 64), sampling=sampling)
    image = _open(data)
    assert [(h, v) for _, h, v, _ in image.layer] == [luma, (1, 1), (1, 1)]
    assert image.size == (64, 48)


def test_explicit_sampling_factors_per_component():
    data = jpeg_factory.encode(jpeg_factory.photo_like(40, 40), sampling="2x1,1x2,1x1")
    assert [(h, v) for _, h, v in jm.sof_info(data)[3]] == [(2, 1), (1, 2), (1, 1)]
    assert _open(data).size == (40, 40)


def test_decoded_pixels_are_close_to_the_input():
    pixels = jpeg_factory.photo_like(64, 96, seed=3)
    image = _open(jpeg_factory.encode(pixels, sampling="4:4:4", quality=95))
    diff = np.abs(np.asarray(image).astype(np.int16) - pixels.astype(np.int16))
    assert diff.mean() < 4.0


@pytest.mark.parametrize("height, width", [(1, 1), (17, 9), (9, 17), (1, 300), (300, 1)])
def test_odd_sizes(height, width):
    data = jpeg_factory.encode(jpeg_factory.photo_like(height, width), sampling="4:1:1")
    assert _open(data).size == (width, height)


def test_progressive():
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 64), progressive=True)
    image = _open(data)
    assert image.info.get("progressive") == 1
    assert jm.find(data, jm.SOF).marker == 0xC2
    assert sum(s.marker == jm.SOS for s in jm.segments(data)) > 1
    assert jm.find(jpeg_factory.encode(jpeg_factory.photo_like(64, 64)), jm.SOF).marker == 0xC0


@pytest.mark.parametrize("progressive", [False, True])
def test_restart_interval_in_mcus(progressive):
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 64), restart_interval=3, progressive=progressive)
    dri = jm.find(data, jm.DRI)
    assert dri is not None
    assert data[dri.offset + 4 : dri.offset + 6] == (3).to_bytes(2, "big")
    assert jm.restart_marker_count(data) > 0
    _open(data)


def test_restart_in_rows_and_none_by_default():
    data = jpeg_factory.encode(jpeg_factory.photo_like(64, 64), restart_rows=1)  # 4:2:0: 4 MCUs per row
    dri = jm.find(data, jm.DRI)
    assert dri is not None and int.from_bytes(data[dri.offset + 4 : dri.offset + 6], "big") == 4
    # 4 MCU rows -> 3 restart markers between them.
    assert jm.restart_marker_count(data) == 3
    plain = jpeg_factory.encode(jpeg_factory.photo_like(64, 64))
    assert jm.find(plain, jm.DRI) is None and jm.restart_marker_count(plain) == 0


@pytest.mark.parametrize("progressive, sof", [(False, 0xC9), (True, 0xCA)])
def test_arithmetic_coding(progressive, sof):
    pixels = jpeg_factory.photo_like(48, 48)
    data = jpeg_factory.encode(pixels, arithmetic=True, progressive=progressive)
    assert jm.find(data, jm.SOF).marker == sof
    assert jm.find(data, jm.DHT) is None
    assert _open(data).size == (48, 48)


@pytest.mark.parametrize("color_space, transform", [("cmyk", 0), ("ycck", 2)])
def test_four_component_spaces_write_adobe_marker(color_space, transform):
    data = jpeg_factory.encode(jpeg_factory.photo_like(32, 32, channels=4), color_space=color_space, sampling="4:4:4")
    adobe = jm.find(data, jm.APP14)
    assert adobe is not None
    assert data[adobe.offset + 4 : adobe.offset + 9] == b"Adobe"
    assert data[adobe.offset + 15] == transform
    image = _open(data)
    assert image.mode == "CMYK"
    assert image.info.get("adobe_transform") == transform


def test_rgb_without_transform():
    pixels = jpeg_factory.photo_like(32, 32)
    data = jpeg_factory.encode(pixels, color_space="rgb", sampling="4:4:4", quality=95)
    adobe = jm.find(data, jm.APP14)
    assert adobe is not None and data[adobe.offset + 15] == 0
    assert [cid for cid, _, _ in jm.sof_info(data)[3]] == [ord("R"), ord("G"), ord("B")]
    diff = np.abs(np.asarray(_open(data)).astype(np.int16) - pixels.astype(np.int16))
    assert diff.mean() < 4.0


def test_gray():
    data = jpeg_factory.encode(jpeg_factory.photo_like(20, 30, channels=1))
    image = _open(data)
    assert image.mode == "L" and image.size == (30, 20)
    assert len(jm.sof_info(data)[3]) == 1


def test_rgb_input_to_gray_jpeg():
    assert _open(jpeg_factory.encode(jpeg_factory.photo_like(20, 30), color_space="gray")).mode == "L"


def test_jfif_and_adobe_switches():
    pixels = jpeg_factory.photo_like(16, 16)
    default = jpeg_factory.encode(pixels)
    assert jm.find(default, jm.APP0) is not None and jm.find(default, jm.APP14) is None
    swapped = jpeg_factory.encode(pixels, jfif=False, adobe=True)
    assert jm.find(swapped, jm.APP0) is None and jm.find(swapped, jm.APP14) is not None
    _open(swapped)


def test_optimize_and_quality():
    pixels = jpeg_factory.photo_like(128, 128)
    plain = jpeg_factory.encode(pixels)
    assert len(jpeg_factory.encode(pixels, optimize=True)) < len(plain)
    assert len(jpeg_factory.encode(pixels, quality=30)) < len(plain)


def test_libjpeg_refusal_is_value_error_with_message():
    with pytest.raises(ValueError, match="Sampling factors too large"):
        jpeg_factory.encode(jpeg_factory.photo_like(16, 16), sampling="4x4,4x4,1x1")
    with pytest.raises(ValueError, match="color conversion"):
        jpeg_factory.encode(jpeg_factory.photo_like(16, 16, channels=1), color_space="ycbcr")


def test_bad_pixels():
    with pytest.raises(TypeError):
        jpeg_factory.encode(np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError):
        jpeg_factory.encode(np.zeros((4, 4, 2), dtype=np.uint8))


def test_photo_like_is_deterministic_and_smooth():
    a = jpeg_factory.photo_like(120, 160, seed=7)
    assert a.shape == (120, 160, 3) and a.dtype == np.uint8
    assert np.array_equal(a, jpeg_factory.photo_like(120, 160, seed=7))
    assert not np.array_equal(a, jpeg_factory.photo_like(120, 160, seed=8))
    assert jpeg_factory.photo_like(5, 6, channels=1).shape == (5, 6)
    assert jpeg_factory.photo_like(5, 6, channels=4).shape == (5, 6, 4)
    # A photo's neighbouring pixels are close; uniform noise's are ~85 apart on average.
    step = np.abs(np.diff(a.astype(np.int16), axis=1)).mean()
    assert step < 20
    assert a.std() > 20  # and it is not flat either


def test_concurrent_builds_into_a_fresh_cache(tmp_path):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import jpeg_factory; "
        "print(jpeg_factory.writer_path()); "
        "jpeg_factory.encode(jpeg_factory.photo_like(8, 8))"
    )
    env = dict(os.environ, CUSTOM_OP_JPEG_WRITER_DIR=str(tmp_path))
    tests_dir = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, tests_dir], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), results
    assert len({out for out, _, _ in results}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [Path(results[0][0].decode().strip()).name]


def test_writer_cache_outside_pytest_is_a_per_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("CUSTOM_OP_JPEG_WRITER_DIR", raising=False)
    monkeypatch.delenv("CUSTOM_OP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jpeg_factory.cache_dir() == tmp_path / "xdg" / "custom_op" / "jpeg_writer"
    monkeypatch.setenv("CUSTOM_OP_CACHE_DIR", str(tmp_path / "cache"))
    assert jpeg_factory.cache_dir() == tmp_path / "cache" / "custom_op" / "jpeg_writer"
    monkeypatch.setenv("CUSTOM_OP_JPEG_WRITER_DIR", str(tmp_path / "mine"))
    assert jpeg_factory.cache_dir() == tmp_path / "mine"
