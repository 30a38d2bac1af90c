"""Pixel exactness of custom_op.decode (decode_and_crop_jpeg, decode_jpeg, read_jpeg_header).

The reference is Pillow: Image.open(...).convert(mode) and slicing, the full decode that users crop
today. Both sides run libjpeg-turbo with the ISLOW IDCT and fancy upsampling, so every pixel must be
equal, byte for byte.
"""

import io
import struct
from functools import cache

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import custom_op
from custom_op import ImageReadMode
from jpeg_factory import with_exif_orientation
from photo_data import spread

MODES = {"RGB": ImageReadMode.RGB, "L": ImageReadMode.GRAY, "UNCHANGED": ImageReadMode.UNCHANGED}


def pillow_reference(data: bytes, mode: str = "RGB", exif: bool = False) -> np.ndarray:
    """Pillow's full decode as a [C, H, W] array. GRAY is libjpeg's own luma (draft), as ours."""
    image = Image.open(io.BytesIO(data))
    if mode == "L":
        image.draft("L", image.size)
    if exif:
        image = ImageOps.exif_transpose(image)
    array = np.asarray(image if mode == "UNCHANGED" else image.convert(mode))
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def windows(height: int, width: int, rng: np.random.Generator, n_random: int = 12):
    """Windows that touch every edge and corner, 1x1 ones, the whole image, windows starting off the
    iMCU grid (offsets around multiples of 8, 16 and 32), single rows and columns, and random ones."""
    H, W = height, width
    out = {
        (0, 0, H, W),
        (0, 0, 1, 1),
        (0, W - 1, 1, 1),
        (H - 1, 0, 1, 1),
        (H - 1, W - 1, 1, 1),
        (H // 2, W // 2, 1, 1),
        (0, 0, 1, W),
        (H - 1, 0, 1, W),
        (0, 0, H, 1),
        (0, W - 1, H, 1),
    }
    for _ in range(3):
        h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
        t, l = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
        out |= {(0, l, h, w), (H - h, l, h, w), (t, 0, h, w), (t, W - w, h, w)}
    for offset in (1, 7, 8, 9, 15, 16, 17, 31, 32, 33):
        if offset < H and offset < W:
            h = int(rng.integers(1, H - offset + 1))
            w = int(rng.integers(1, W - offset + 1))
            out |= {(offset, offset, h, w), (offset, 0, 1, w), (0, offset, h, 1)}
    for _ in range(n_random):
        h, w = int(rng.integers(1, H + 1)), int(rng.integers(1, W + 1))
        out.add((int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1)), h, w))
    return sorted(out)


def assert_crops_exact(data: bytes, reference: np.ndarray, rng, mode=ImageReadMode.RGB, exif=False, n_random=12):
    _, H, W = reference.shape
    for top, left, h, w in windows(H, W, rng, n_random):
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w, mode=mode, apply_exif_orientation=exif)
        assert out.dtype == torch.uint8 and out.is_contiguous()
        expected = reference[:, top : top + h, left : left + w]
        assert out.shape == expected.shape, (top, left, h, w)
        if not np.array_equal(out.numpy(), expected):
            diff = np.argwhere(out.numpy() != expected)
            pytest.fail(
                f"window (top={top}, left={left}, height={h}, width={w}) of a {H}x{W} image "
                f"differs from Pillow at {len(diff)} values, first at [c, y, x] = {diff[0]}"
            )


# ---------------------------------------------------------------------------------------------------
# Photos: the real ones of CUSTOM_OP_TEST_DATA, else the generated set (conftest's `photos`)


def test_every_photo_many_windows(photos):
    rng = np.random.default_rng(0)
    for path in photos:
        data = path.read_bytes()
        reference = pillow_reference(data)
        assert np.array_equal(custom_op.decode_jpeg(data).numpy(), reference), path.name
        assert_crops_exact(data, reference, rng, n_random=10)


@pytest.mark.parametrize("mode", ["L", "UNCHANGED"])
def test_photos_other_modes(photos, mode):
    rng = np.random.default_rng(1)
    for path in spread(photos, 20):
        data = path.read_bytes()
        assert_crops_exact(data, pillow_reference(data, mode), rng, mode=MODES[mode], n_random=4)


def test_photos_with_their_exif_orientation(photos):
    rng = np.random.default_rng(8)
    for path in spread(photos, 20):
        data = path.read_bytes()
        reference = pillow_reference(data, exif=True)
        assert np.array_equal(custom_op.decode_jpeg(data, apply_exif_orientation=True).numpy(), reference), path.name
        assert_crops_exact(data, reference, rng, exif=True, n_random=4)


def test_photos_batched_equal_one_at_a_time(photos):
    datas = [p.read_bytes() for p in spread(photos, 64)]
    rng = np.random.default_rng(9)
    for mode, exif in ((ImageReadMode.RGB, False), (ImageReadMode.GRAY, True), (ImageReadMode.UNCHANGED, False)):
        windows = []
        for data in datas:
            info = custom_op.read_jpeg_header(data, apply_exif_orientation=exif)
            h, w = int(rng.integers(1, info.height + 1)), int(rng.integers(1, info.width + 1))
            windows.append((int(rng.integers(0, info.height - h + 1)), int(rng.integers(0, info.width - w + 1)), h, w))
        batch = custom_op.decode_and_crop_jpegs(datas, *zip(*windows), mode=mode, apply_exif_orientation=exif)
        for data, window, out in zip(datas, windows, batch):
            one = custom_op.decode_and_crop_jpeg(data, *window, mode=mode, apply_exif_orientation=exif)
            assert torch.equal(out, one), (window, mode, exif)
    for data, out in zip(datas, custom_op.decode_jpegs(datas)):
        assert torch.equal(out, custom_op.decode_jpeg(data))


ODD_FILES = [
    "exif_gps.jpg",
    "flower.jpg",
    "hopper.jpg",
    "hopper_gray.jpg",
    "hopper_orientation_3.jpg",
    "hopper_orientation_6.jpg",
    "icc-after-SOF.jpg",
    "pil_sample_cmyk.jpg",
    "testimgint.jpg",
    "testorig.jpg",
]


@pytest.mark.parametrize("name", ODD_FILES)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("exif", [False, True])
def test_odd_jpegs(odd_jpegs, name, mode, exif):
    data = (odd_jpegs / name).read_bytes()
    reference = pillow_reference(data, mode, exif)
    out = custom_op.decode_jpeg(data, mode=MODES[mode], apply_exif_orientation=exif)
    assert np.array_equal(out.numpy(), reference)
    assert_crops_exact(data, reference, np.random.default_rng(2), mode=MODES[mode], exif=exif, n_random=6)


def test_odd_jpegs_headers(odd_jpegs):
    info = custom_op.read_jpeg_header((odd_jpegs / "hopper_orientation_6.jpg").read_bytes())
    assert info.orientation == 6 and (info.height, info.width) == (128, 128)
    cmyk = custom_op.read_jpeg_header((odd_jpegs / "pil_sample_cmyk.jpg").read_bytes())
    assert cmyk.channels == 4 and cmyk.color_space in ("cmyk", "ycck")
    gray = custom_op.read_jpeg_header((odd_jpegs / "hopper_gray.jpg").read_bytes())
    assert gray.channels == 1 and gray.subsampling == "gray"


# ---------------------------------------------------------------------------------------------------
# Generated variants: every subsampling, progressive, restart markers, arithmetic coding, odd sizes

SUBSAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1"]
CODINGS = {
    "baseline": {},
    "progressive": {"progressive": True},
    "restart-interval": {"restart_interval": 3},
    "restart-rows": {"restart_rows": 1},
    "arithmetic": {"arithmetic": True},
    "optimized": {"optimize": True, "quality": 75},
}
SIZES = [(1, 1), (17, 9), (9, 17), (61, 47), (200, 333)]


@cache
def generated(writer, height, width, channels=3, seed=0, **options):
    return writer.encode(writer.photo_like(height, width, channels, seed=seed), **options)


@pytest.mark.parametrize("subsampling", SUBSAMPLINGS)
@pytest.mark.parametrize("coding", list(CODINGS))
def test_generated_subsampling_and_coding(jpeg_writer, subsampling, coding):
    rng = np.random.default_rng(3)
    for height, width in SIZES:
        data = generated(jpeg_writer, height, width, sampling=subsampling, **CODINGS[coding])
        info = custom_op.read_jpeg_header(data)
        assert (info.height, info.width, info.channels) == (height, width, 3)
        assert info.subsampling == subsampling and info.progressive == (coding == "progressive")
        reference = pillow_reference(data)
        assert np.array_equal(custom_op.decode_jpeg(data).numpy(), reference)
        assert_crops_exact(data, reference, rng)


@pytest.mark.parametrize("height,width", [(8193, 3), (3, 8193)])
@pytest.mark.parametrize("subsampling", ["4:2:0", "4:4:0", "4:2:2"])
def test_generated_long_thin_images(jpeg_writer, height, width, subsampling):
    data = generated(jpeg_writer, height, width, sampling=subsampling)
    assert_crops_exact(data, pillow_reference(data), np.random.default_rng(4))


@pytest.mark.parametrize(
    "subsampling,widths",
    [("4:2:0", (129, 130, 131, 132, 133)), ("4:2:2", (130, 132)), ("4:1:1", (161, 164, 166, 168, 169))],
)
def test_windows_in_a_narrow_last_imcu(jpeg_writer, subsampling, widths):
    # Widths just past a multiple of the iMCU: a crop of the last columns alone would hand libjpeg a
    # chroma plane of 1 or 2 samples, which it upsamples without the fancy filter.
    for width in widths:
        data = generated(jpeg_writer, 83, width, sampling=subsampling, seed=width)
        reference = pillow_reference(data)
        for k in (1, 2, 3, 4, 5, 9):
            for top, height in ((0, 83), (40, 1), (17, 66)):
                out = custom_op.decode_and_crop_jpeg(data, top, width - k, height, k)
                assert np.array_equal(out.numpy(), reference[:, top : top + height, width - k :]), (width, k, top)


def test_generated_large_image_window_far_from_the_top(jpeg_writer):
    data = generated(jpeg_writer, 1500, 2000, sampling="4:2:0", seed=5)
    reference = pillow_reference(data)
    for window in [(1200, 1700, 300, 300), (1499, 1999, 1, 1), (733, 917, 241, 303)]:
        top, left, h, w = window
        out = custom_op.decode_and_crop_jpeg(data, *window)
        assert np.array_equal(out.numpy(), reference[:, top : top + h, left : left + w]), window


@pytest.mark.parametrize("color_space,channels", [("gray", 1), ("rgb", 3), ("cmyk", 4), ("ycck", 4)])
@pytest.mark.parametrize("mode", list(MODES))
def test_generated_color_spaces(jpeg_writer, color_space, channels, mode):
    rng = np.random.default_rng(6)
    for coding in ("baseline", "progressive"):
        data = generated(jpeg_writer, 61, 47, channels, color_space=color_space, sampling="4:4:4", **CODINGS[coding])
        assert custom_op.read_jpeg_header(data).color_space == color_space
        reference = pillow_reference(data, mode)
        expected_channels = {"RGB": 3, "L": 1, "UNCHANGED": 1 if channels == 1 else 3 if channels == 3 else 4}
        assert reference.shape[0] == expected_channels[mode]
        assert np.array_equal(custom_op.decode_jpeg(data, mode=MODES[mode]).numpy(), reference)
        assert_crops_exact(data, reference, rng, mode=MODES[mode], n_random=6)


def test_generated_subsampled_cmyk(jpeg_writer):
    data = generated(jpeg_writer, 61, 47, 4, color_space="ycck", sampling="2x2,1x1,1x1,2x2")
    assert_crops_exact(data, pillow_reference(data), np.random.default_rng(7))


# ---------------------------------------------------------------------------------------------------
# EXIF orientation


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_every_exif_orientation(jpeg_writer, orientation, mode):
    data = with_exif_orientation(generated(jpeg_writer, 45, 70, sampling="4:2:0"), orientation)
    swapped = orientation >= 5
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
    assert info.orientation == orientation
    assert (info.height, info.width) == ((70, 45) if swapped else (45, 70))
    assert custom_op.read_jpeg_header(data)[:2] == (45, 70)
    reference = pillow_reference(data, mode, exif=True)
    assert reference.shape[1:] == (info.height, info.width)
    full = custom_op.decode_jpeg(data, mode=MODES[mode], apply_exif_orientation=True)
    assert np.array_equal(full.numpy(), reference)
    assert_crops_exact(data, reference, np.random.default_rng(orientation), mode=MODES[mode], exif=True)
    # Without the option the stored frame is used and EXIF is ignored.
    assert np.array_equal(custom_op.decode_jpeg(data, mode=MODES[mode]).numpy(), pillow_reference(data, mode))


def test_window_outside_the_displayed_frame_is_refused(jpeg_writer):
    data = with_exif_orientation(generated(jpeg_writer, 45, 70), 6)  # displayed 70 tall, 45 wide
    custom_op.decode_and_crop_jpeg(data, 60, 0, 10, 45, apply_exif_orientation=True)
    with pytest.raises(ValueError, match="EXIF"):
        custom_op.decode_and_crop_jpeg(data, 0, 50, 10, 10, apply_exif_orientation=True)


# ---------------------------------------------------------------------------------------------------
# Inputs and options


def test_every_input_type_gives_the_same_pixels(jpeg_writer):
    data = generated(jpeg_writer, 61, 47)
    expected = custom_op.decode_and_crop_jpeg(data, 3, 5, 40, 30)
    as_numpy = np.frombuffer(data, dtype=np.uint8)
    for value in (
        bytearray(data),
        memoryview(data),
        as_numpy,
        torch.from_numpy(as_numpy.copy()),
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
    ):
        assert torch.equal(custom_op.decode_and_crop_jpeg(value, 3, 5, 40, 30), expected)
    # numpy integers and 0-d tensors are integers too
    out = custom_op.decode_and_crop_jpeg(data, np.int64(3), torch.tensor(5), 40, 30)
    assert torch.equal(out, expected)


def test_mode_by_name(jpeg_writer):
    data = generated(jpeg_writer, 17, 9)
    assert custom_op.decode_jpeg(data, mode="gray").shape == (1, 17, 9)
    assert custom_op.decode_jpeg(data, mode="RGB").shape == (3, 17, 9)
    with pytest.raises(ValueError, match="mode"):
        custom_op.decode_jpeg(data, mode="HSV")


def test_header_reads_no_pixels_and_reports_format(jpeg_writer):
    data = generated(jpeg_writer, 61, 47, sampling="4:2:2", progressive=True)
    info = custom_op.read_jpeg_header(data)
    assert info == custom_op.JpegInfo(61, 47, 3, "ycbcr", "4:2:2", True, 1)
    # The header is all it needs: the scans can be missing.
    sos = data.index(b"\xff\xda")
    sos_end = sos + 2 + struct.unpack(">H", data[sos + 2 : sos + 4])[0]
    assert custom_op.read_jpeg_header(data[:sos_end]) == info


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: tests/test_gpu.py covers it")
def test_cuda_device_is_refused_clearly_without_the_gpu_backend(jpeg_writer):
    data = generated(jpeg_writer, 17, 9)
    with pytest.raises(RuntimeError, match="GPU"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 4, 4, device="cuda")
    with pytest.raises(ValueError, match="device"):
        custom_op.decode_jpeg(data, device="tpu")
