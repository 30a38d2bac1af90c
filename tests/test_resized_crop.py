"""custom_op.resized_crop: decode_and_resized_crop_jpeg and the resize_box operator under it.

References: at DCT scale 8/8 the result must equal, byte for byte, a full decode, a crop and the same
resize (our resize_box on the crop; and Pillow's Image.resize, which is what torchvision's
RandomResizedCrop runs on PIL images). At reduced scales, PSNR against full decode + crop + Pillow's
antialiased resize, with the bounds below (measured on ../shared/data/imagenet-sample: means 39 to 44 dB).
The photos are the real ones of CUSTOM_OP_TEST_DATA, else generated (conftest's `photos` and `odd_jpegs`).
"""

import io
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

import custom_op
from conftest import ROOT, assert_op_raises, jpeg_size
from custom_op import ImageReadMode, decode_and_resized_crop_jpeg
from custom_op.resized_crop import AUTO_SCALES, INTERPOLATIONS, choose_scale
from photo_data import spread

PIL_FILTERS = {
    "nearest": Image.NEAREST,
    "bilinear": Image.BILINEAR,
    "bicubic": Image.BICUBIC,
    "box": Image.BOX,
    "hamming": Image.HAMMING,
    "lanczos": Image.LANCZOS,
}
# Pillow 13 picks the order of its two resampling passes (vertical first when the height shrinks by more
# than twice as many pixels as the width); resize_box follows that rule. Older Pillow always went
# horizontal first, so its uint8 intermediate, and a few output values, can differ.
PILLOW_ORDER = int(Image.__version__.split(".")[0]) >= 13
needs_pillow_13 = pytest.mark.skipif(
    not PILLOW_ORDER, reason=f"Pillow {Image.__version__} < 13 orders its resampling passes differently from resize_box"
)

# Per-scale PSNR bounds (dB) against full decode + crop + Pillow resize, with the automatic scale choice.
MEAN_PSNR_BOUND = 37.0
MIN_PSNR_BOUND = 30.0


def chw(image: Image.Image) -> np.ndarray:
    array = np.asarray(image)
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def pillow_resized_crop(image: Image.Image, window, size, interpolation="bilinear") -> np.ndarray:
    """torchvision's F.resized_crop on a PIL image: crop, then resize (Pillow, antialiased)."""
    top, left, h, w = window
    crop = image.crop((left, top, left + w, top + h))
    return chw(crop.resize((size[1], size[0]), PIL_FILTERS[interpolation]))


def resize_box(image: torch.Tensor, size, filter_name="bilinear", antialias=True) -> torch.Tensor:
    """Our resampler on a whole image, as the fused call applies it at scale 8/8."""
    _, h, w = image.shape
    return torch.ops.custom_op.resize_box(
        image.contiguous(),
        box=[0.0, 0.0, float(h), float(w)],
        size=list(size),
        out_window=[0, 0, *size],
        origin=[0, 0],
        filter=INTERPOLATIONS[filter_name],
        antialias=antialias,
    )


def random_windows(height, width, rng, n):
    out = [(0, 0, height, width), (height - 1, width - 1, 1, 1)]
    for _ in range(n):
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        out.append((int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w))
    return out


def at_least(photos, height, width):
    """The photos of at least height x width."""
    return [p for p in photos if all(a >= b for a, b in zip(jpeg_size(p), (height, width)))]


# ---------------------------------------------------------------------------------------------------
# The resampler alone (no JPEG): Pillow's arithmetic


@needs_pillow_13
@pytest.mark.parametrize("filter_name", list(PIL_FILTERS))
def test_resize_box_equals_pillow_resize(filter_name):
    rng = np.random.default_rng(0)
    shapes = [
        (37, 41, 13, 17),
        (40, 30, 20, 45),
        (120, 16, 30, 90),
        (5, 97, 72, 16),
        (1, 1, 3, 5),
        (64, 64, 64, 64),
        (300, 200, 224, 224),
        (7, 300, 1, 1),
        (200, 640, 20, 30),
        (640, 90, 16, 90),
    ]
    for height, width, out_h, out_w in shapes:
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        expected = chw(Image.fromarray(pixels).resize((out_w, out_h), PIL_FILTERS[filter_name]))
        out = resize_box(torch.from_numpy(pixels).permute(2, 0, 1), (out_h, out_w), filter_name)
        assert np.array_equal(out.numpy(), expected), (filter_name, height, width, out_h, out_w)


@pytest.mark.parametrize("filter_name", ["bilinear", "bicubic", "nearest", "lanczos"])
def test_resize_box_window_of_the_output_equals_cropping_the_output(filter_name):
    # Resize-then-crop computed from only the input the crop needs (origin), as the evaluation transform.
    rng = np.random.default_rng(1)
    image = torch.from_numpy(rng.integers(0, 256, (3, 150, 211), dtype=np.uint8))
    size = (97, 131)
    whole = resize_box(image, size, filter_name)
    for top, left, h, w in [(0, 0, 97, 131), (10, 20, 50, 60), (96, 130, 1, 1), (30, 0, 67, 131)]:
        first_row, first_col = max(0, int(top * 150 / 97) - 8), max(0, int(left * 211 / 131) - 8)
        last_row = min(150, int((top + h) * 150 / 97) + 9)
        last_col = min(211, int((left + w) * 211 / 131) + 9)
        part = image[:, first_row:last_row, first_col:last_col].contiguous()
        out = torch.ops.custom_op.resize_box(
            part,
            box=[0.0, 0.0, 150.0, 211.0],
            size=list(size),
            out_window=[top, left, h, w],
            origin=[first_row, first_col],
            filter=INTERPOLATIONS[filter_name],
            antialias=True,
        )
        assert torch.equal(out, whole[:, top : top + h, left : left + w]), (top, left, h, w)


def test_resize_box_portable_kernels_give_the_same_bytes(tmp_path):
    # The AVX2 kernels are what runs here; the portable ones run on other CPUs. Both must agree.
    rng = np.random.default_rng(2)
    image = torch.from_numpy(rng.integers(0, 256, (3, 301, 233), dtype=np.uint8))
    cases = [((224, 224), "bilinear"), ((100, 220), "bicubic"), ((301, 50), "lanczos"), ((17, 233), "box")]
    torch.save({"image": image, "outputs": [resize_box(image, s, f) for s, f in cases]}, tmp_path / "ref.pt")
    script = (
        "import torch, custom_op\n"
        "from custom_op.resized_crop import INTERPOLATIONS\n"
        f"ref = torch.load({str(tmp_path / 'ref.pt')!r})\n"
        "im = ref['image']\n"
        f"for (size, f), expected in zip({cases!r}, ref['outputs']):\n"
        "    out = torch.ops.custom_op.resize_box(im, box=[0.0, 0.0, 301.0, 233.0], size=list(size),\n"
        "        out_window=[0, 0, *size], origin=[0, 0], filter=INTERPOLATIONS[f], antialias=True)\n"
        "    assert torch.equal(out, expected), (size, f)\n"
        "print('same')\n"
    )
    env = dict(os.environ, CUSTOM_OP_RESIZE_NO_SIMD="1")
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and "same" in result.stdout, result.stderr[-2000:]


def test_resize_box_without_antialias_is_plain_bilinear_sampling():
    rng = np.random.default_rng(3)
    image = torch.from_numpy(rng.integers(0, 256, (3, 180, 240), dtype=np.uint8))
    out = resize_box(image, (50, 70), "bilinear", antialias=False)
    expected = F.interpolate(image[None].float(), size=(50, 70), mode="bilinear", align_corners=False, antialias=False)[
        0
    ]
    # Same sample positions; fixed point and two uint8-rounded passes against float.
    assert (out.int() - expected.round().int()).abs().max() <= 1


def test_resize_box_fake_kernel_and_schema():
    image = torch.zeros(3, 20, 30, dtype=torch.uint8)
    kwargs = dict(box=[0.0, 0.0, 20.0, 30.0], size=[10, 12], out_window=[1, 2, 5, 6], origin=[0, 0], filter=1)
    torch.library.opcheck(torch.ops.custom_op.resize_box, (image,), dict(kwargs, antialias=True))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"box": [5.0, 0.0, 5.0, 30.0]}, "empty box"),
        ({"box": [0.0, 0.0, float("nan"), 30.0]}, "box values"),
        ({"size": [0, 10]}, "output size"),
        ({"out_window": [0, 0, 11, 12]}, "out_window"),
        ({"origin": [-1, 0]}, "origin"),
        ({"filter": 9}, "filter"),
        ({"box": [100.0, 0.0, 120.0, 30.0]}, "no input pixel"),
    ],
)
def test_resize_box_rejects_bad_arguments(kwargs, message):
    args = {
        "image": torch.zeros(3, 20, 30, dtype=torch.uint8),
        "box": [0.0, 0.0, 20.0, 30.0],
        "size": [10, 12],
        "out_window": [0, 0, 10, 12],
        "origin": [0, 0],
        "filter": 1,
        "antialias": True,
    }
    args.update(kwargs)
    assert_op_raises(ValueError, message, torch.ops.custom_op.resize_box, args.pop("image"), **args)


_NOT_AN_IMAGE = r"^resize_box: image must be a uint8 CPU tensor \[C, H, W\] or \[N, C, H, W\]"


@pytest.mark.parametrize(
    "image, says",
    [
        (torch.zeros(3, 4, 4), _NOT_AN_IMAGE + r", got Float of shape \[3, 4, 4\] on cpu$"),
        (torch.zeros(4, 4, dtype=torch.uint8), _NOT_AN_IMAGE),
        (torch.zeros(1, 1, 3, 4, 4, dtype=torch.uint8), _NOT_AN_IMAGE),
    ],
    ids=["float", "rank 2", "rank 5"],
)
def test_resize_box_rejects_other_dtypes_and_ranks(image, says):
    assert_op_raises(
        TypeError,
        says,
        torch.ops.custom_op.resize_box,
        image,
        box=[0.0, 0.0, 4.0, 4.0],
        size=[2, 2],
        out_window=[0, 0, 2, 2],
        origin=[0, 0],
        filter=1,
        antialias=True,
    )


# ---------------------------------------------------------------------------------------------------
# Scale choice


def test_choose_scale_is_the_smallest_that_keeps_the_window_at_least_size():
    assert AUTO_SCALES == (1, 2, 4, 8)
    assert choose_scale(1792, 1792, 224) == 1
    assert choose_scale(1791, 1792, 224) == 2
    assert choose_scale(896, 2000, 224) == 2
    assert choose_scale(895, 2000, 224) == 4
    assert choose_scale(448, 448, 224) == 4
    assert choose_scale(447, 448, 224) == 8
    assert choose_scale(100, 100, 224) == 8  # smaller than the output: full resolution, then upsampled
    assert choose_scale(1000, 300, (100, 40)) == 2
    assert choose_scale(300, 300, 224, scales=range(1, 9)) == 6


def test_forced_scale_is_used(odd_jpegs):
    data = (odd_jpegs / "flower.jpg").read_bytes()
    auto = decode_and_resized_crop_jpeg(data, 10, 20, 200, 300, 64)
    assert torch.equal(auto, decode_and_resized_crop_jpeg(data, 10, 20, 200, 300, 64, scale=choose_scale(200, 300, 64)))
    assert not torch.equal(auto, decode_and_resized_crop_jpeg(data, 10, 20, 200, 300, 64, scale=8))


# ---------------------------------------------------------------------------------------------------
# Exactness at scale 8/8


def test_scale_8_equals_full_decode_crop_and_the_same_resize(photos):
    rng = np.random.default_rng(4)
    for path in photos[::4]:
        data = path.read_bytes()
        full = custom_op.decode_jpeg(data)
        _, height, width = full.shape
        for window in random_windows(height, width, rng, 6):
            top, left, h, w = window
            for size in [(224, 224), (96, 160)]:
                expected = resize_box(full[:, top : top + h, left : left + w], size)
                out = decode_and_resized_crop_jpeg(data, *window, size, scale=8)
                assert torch.equal(out, expected), (path.name, window, size)


@needs_pillow_13
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest", "lanczos"])
def test_scale_8_equals_torchvision_resized_crop_on_pil(photos, interpolation):
    rng = np.random.default_rng(5)
    for path in photos[::3]:
        data = path.read_bytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        for window in random_windows(image.height, image.width, rng, 3):
            expected = pillow_resized_crop(image, window, (224, 224), interpolation)
            out = decode_and_resized_crop_jpeg(data, *window, 224, interpolation=interpolation, scale=8)
            assert np.array_equal(out.numpy(), expected), (path.name, window)


@needs_pillow_13
@pytest.mark.parametrize("name", ["hopper_orientation_3.jpg", "hopper_orientation_6.jpg"])
def test_scale_8_with_exif_orientation(odd_jpegs, name):
    data = (odd_jpegs / name).read_bytes()
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    rng = np.random.default_rng(6)
    for window in random_windows(image.height, image.width, rng, 5):
        expected = pillow_resized_crop(image, window, (40, 56))
        out = decode_and_resized_crop_jpeg(data, *window, (40, 56), apply_exif_orientation=True, scale=8)
        assert np.array_equal(out.numpy(), expected), window


@needs_pillow_13
def test_scale_8_other_modes(odd_jpegs):
    cmyk = (odd_jpegs / "pil_sample_cmyk.jpg").read_bytes()
    out = decode_and_resized_crop_jpeg(cmyk, 5, 7, 60, 80, 32, mode=ImageReadMode.UNCHANGED, scale=8)
    full = custom_op.decode_jpeg(cmyk, mode=ImageReadMode.UNCHANGED)
    assert out.shape == (4, 32, 32)
    assert torch.equal(out, resize_box(full[:, 5:65, 7:87], (32, 32)))
    gray = (odd_jpegs / "hopper.jpg").read_bytes()
    out = decode_and_resized_crop_jpeg(gray, 0, 0, 100, 90, (20, 30), mode=ImageReadMode.GRAY, scale=8)
    full = custom_op.decode_jpeg(gray, mode=ImageReadMode.GRAY)
    assert out.shape == (1, 20, 30) and torch.equal(out, resize_box(full[:, :100, :90], (20, 30)))


@needs_pillow_13
def test_window_smaller_than_size_is_upsampled_from_full_resolution(photos):
    data = at_least(photos, 130, 160)[0].read_bytes()
    image = Image.open(io.BytesIO(data)).convert("RGB")
    window = (30, 40, 100, 120)
    out = decode_and_resized_crop_jpeg(data, *window, 224)
    assert np.array_equal(out.numpy(), pillow_resized_crop(image, window, (224, 224)))


# ---------------------------------------------------------------------------------------------------
# Reduced scales: accuracy


def rrc_windows(height, width, generator, n):
    transform = custom_op.RandomResizedCropJpeg(224)
    return [transform.get_params(height, width, generator) for _ in range(n)]


def test_reduced_scales_psnr_on_photos(photos):
    """RandomResizedCrop windows with the automatic scale; smaller outputs make the small scales occur
    on these ~500-pixel photos. Measured: mean 39 (s=1) to 44 dB (s=4), minimum 32 dB."""
    generator = torch.Generator().manual_seed(0)
    by_scale = {}
    for path in photos[::2]:
        data = path.read_bytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        for size in (224, 112, 56):
            for window in rrc_windows(image.height, image.width, generator, 1):
                s = choose_scale(window[2], window[3], size)
                if s == 8:
                    continue
                out = decode_and_resized_crop_jpeg(data, *window, size)
                by_scale.setdefault(s, []).append(psnr(out.numpy(), pillow_resized_crop(image, window, (size, size))))
    assert set(by_scale) >= {2, 4}, sorted(by_scale)
    for s, values in by_scale.items():
        assert np.mean(values) >= MEAN_PSNR_BOUND, (s, np.mean(values))
        assert min(values) >= MIN_PSNR_BOUND, (s, min(values))


@pytest.mark.parametrize("sampling", ["4:2:0", "4:4:4", "4:2:2"])
def test_reduced_scales_psnr_on_generated_photos(jpeg_writer, sampling):
    data = jpeg_writer.encode(jpeg_writer.photo_like(1536, 2048, 3, seed=11), sampling=sampling, quality=92)
    image = Image.open(io.BytesIO(data)).convert("RGB")
    generator = torch.Generator().manual_seed(1)
    by_scale = {}
    for window in rrc_windows(1536, 2048, generator, 16) + [(0, 0, 1536, 2048), (1, 3, 1535, 2045)]:
        for size in (224, 160):
            s = choose_scale(window[2], window[3], size)
            out = decode_and_resized_crop_jpeg(data, *window, size)
            expected = pillow_resized_crop(image, window, (size, size))
            by_scale.setdefault(s, []).append(psnr(out.numpy(), expected))
    assert set(by_scale) >= {1, 2}, sorted(by_scale)
    for s, values in by_scale.items():
        assert np.mean(values) >= MEAN_PSNR_BOUND, (s, np.mean(values))
        assert min(values) >= MIN_PSNR_BOUND, (s, min(values))


def test_window_maps_without_half_pixel_shift(photos):
    """Moving the mapped box by a quarter of a scaled pixel either way must make the result worse: the
    exact mapping is where the reduced-scale decode lines up with the full-resolution one."""
    s, size = 2, 56
    scores = {}
    for path in spread(at_least(photos, 64, 64), 10):
        data = path.read_bytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        top, left, h, w = 12, 20, image.height - 30, image.width - 40
        reference = pillow_resized_crop(image, (top, left, h, w), (size, size))
        # The scaled pixels the window touches, and one more on each side so that the shifted boxes
        # stay inside: rows [first, last) of the image decoded at s / 8.
        r0, c0 = (top - 4) * s // 8, (left - 4) * s // 8
        r1, c1 = -(-(top + h + 4) * s // 8), -(-(left + w + 4) * s // 8)
        region = torch.ops.custom_op.decode_and_crop_jpeg(
            torch.frombuffer(bytearray(data), dtype=torch.uint8),
            r0,
            c0,
            r1 - r0,
            c1 - c0,
            mode=2,
            apply_exif_orientation=False,
            on_warning=0,
            max_pixels=0,
            scale_num=s,
        )[0]
        for shift in (-0.25, 0.0, 0.25):
            box = [top * s / 8 - r0 + shift, left * s / 8 - c0 + shift]
            box += [(top + h) * s / 8 - r0 + shift, (left + w) * s / 8 - c0 + shift]
            out = torch.ops.custom_op.resize_box(
                region,
                box=box,
                size=[size, size],
                out_window=[0, 0, size, size],
                origin=[0, 0],
                filter=1,
                antialias=True,
            )
            scores.setdefault(shift, []).append(psnr(out.numpy(), reference))
    means = {shift: np.mean(v) for shift, v in scores.items()}
    assert means[0.0] > means[0.25] + 3 and means[0.0] > means[-0.25] + 3, means


# ---------------------------------------------------------------------------------------------------
# Arguments and bad input: the core's rules


@pytest.fixture(scope="module")
def valid(odd_jpegs):
    return (odd_jpegs / "hopper.jpg").read_bytes()


def test_output_shape_and_size_forms(valid):
    assert decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, 24).shape == (3, 24, 24)
    assert decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, (24, 31)).shape == (3, 24, 31)
    assert decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, [17]).shape == (3, 17, 17)
    assert decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, torch.Size([5, 6])).shape == (3, 5, 6)
    out = decode_and_resized_crop_jpeg(np.frombuffer(valid, np.uint8), 0, 0, 50, 60, 24, mode="gray")
    assert out.dtype == torch.uint8 and out.is_contiguous() and out.shape == (1, 24, 24)


def test_interpolation_accepts_enum_values(valid):
    class Mode(str):
        value = "bicubic"

    out = decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, 24, interpolation=Mode("x"))
    assert torch.equal(out, decode_and_resized_crop_jpeg(valid, 0, 0, 50, 60, 24, interpolation="bicubic"))


@pytest.mark.parametrize(
    "window", [(-1, 0, 10, 10), (0, -1, 10, 10), (0, 0, 129, 10), (0, 0, 10, 129), (120, 0, 9, 10), (0, 125, 10, 4)]
)
def test_window_outside_the_image_is_value_error(valid, window):
    with pytest.raises(ValueError, match=r"crop window .* does not fit in the image of height 128 and width 128"):
        decode_and_resized_crop_jpeg(valid, *window, 24)


def test_window_in_the_displayed_frame_with_exif(odd_jpegs):
    data = (odd_jpegs / "hopper_orientation_6.jpg").read_bytes()
    with pytest.raises(ValueError, match="after EXIF orientation"):
        decode_and_resized_crop_jpeg(data, 0, 0, 129, 10, 8, apply_exif_orientation=True)


@pytest.mark.parametrize(
    "size,error",
    [
        (0, ValueError),
        (-3, ValueError),
        ((0, 5), ValueError),
        ((1, 2, 3), ValueError),
        ((), ValueError),
        ("24", TypeError),
        (2.5, TypeError),
        ((2, 2.5), TypeError),
        (2**25, ValueError),
    ],
)
def test_bad_size(valid, size, error):
    with pytest.raises(error):
        decode_and_resized_crop_jpeg(valid, 0, 0, 10, 10, size)


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"scale": 0}, ValueError),
        ({"scale": 17}, ValueError),
        ({"scale": 2.0}, TypeError),
        ({"interpolation": "cubic"}, ValueError),
        ({"interpolation": 2}, ValueError),
        ({"mode": "CMYK"}, ValueError),
        ({"on_warning": "loud"}, ValueError),
        ({"max_pixels": 0}, ValueError),
        ({"device": "tpu"}, ValueError),
    ],
)
def test_bad_options(valid, kwargs, error):
    with pytest.raises(error):
        decode_and_resized_crop_jpeg(valid, 0, 0, 10, 10, 8, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: device='cuda' is accepted there")
def test_cuda_without_a_gpu_is_runtime_error(valid):
    with pytest.raises(RuntimeError, match="cuda"):
        decode_and_resized_crop_jpeg(valid, 0, 0, 10, 10, 8, device="cuda")


def test_non_integer_window_is_type_error(valid):
    with pytest.raises(TypeError):
        decode_and_resized_crop_jpeg(valid, 0.5, 0, 10, 10, 8)


@pytest.mark.parametrize("data", [[1, 2, 3], "abc", torch.zeros(10), torch.zeros(2, 5, dtype=torch.uint8), 3])
def test_bad_data_is_type_error(data):
    with pytest.raises(TypeError):
        decode_and_resized_crop_jpeg(data, 0, 0, 1, 1, 8)


@pytest.mark.parametrize("data", [b"", b"not a jpeg at all", b"\xff\xd8\xff\xe0" + b"\x00" * 40])
def test_corrupt_data_is_runtime_error(data):
    with pytest.raises(RuntimeError):
        decode_and_resized_crop_jpeg(data, 0, 0, 1, 1, 8)


def test_truncated_data_follows_on_warning(valid):
    cut = valid[: len(valid) * 2 // 3]
    with pytest.raises(RuntimeError):
        decode_and_resized_crop_jpeg(cut, 100, 0, 28, 128, 16)
    with pytest.warns(UserWarning):
        out = decode_and_resized_crop_jpeg(cut, 100, 0, 28, 128, 16, on_warning="warn")
    assert out.shape == (3, 16, 16)


def test_max_pixels_applies(valid):
    with pytest.raises(ValueError, match="max_pixels"):
        decode_and_resized_crop_jpeg(valid, 0, 0, 10, 10, 8, max_pixels=1000)
    assert decode_and_resized_crop_jpeg(valid, 0, 0, 10, 10, 8, max_pixels=None).shape == (3, 8, 8)


@pytest.mark.parametrize("filter_name", list(INTERPOLATIONS))
def test_resize_box_flip_mirrors_the_window(filter_name):
    """flip=True gives the same window mirrored left-right, bit for bit, in either pass order (height
    shrinking most, or width), for a copy (identity columns), a fractional box and a window of the
    output read from part of the input."""
    rng = np.random.default_rng(7)
    image = torch.from_numpy(rng.integers(0, 256, (3, 150, 211), dtype=np.uint8))
    cases = [
        ([0.0, 0.0, 150.0, 211.0], [150, 211], [0, 0, 150, 211], [0, 0]),  # a copy
        ([0.0, 0.0, 150.0, 211.0], [37, 180], [0, 0, 37, 180], [0, 0]),  # height shrinks most: vertical first
        ([0.0, 0.0, 150.0, 211.0], [140, 51], [0, 0, 140, 51], [0, 0]),  # width shrinks most
        ([3.25, 7.5, 140.75, 200.125], [64, 96], [5, 9, 40, 70], [0, 0]),  # fractional box, part of the output
        ([20.0, 30.0, 150.0, 211.0], [300, 400], [0, 0, 1, 1], [0, 0]),  # upscale, one pixel
    ]
    for box, size, out_window, origin in cases:
        kwargs = dict(
            box=box, size=size, out_window=out_window, origin=origin, filter=INTERPOLATIONS[filter_name], antialias=True
        )
        plain = torch.ops.custom_op.resize_box(image, **kwargs)
        flipped = torch.ops.custom_op.resize_box(image, flip=True, **kwargs)
        assert torch.equal(flipped, plain.flip(-1)), (box, size, out_window)


# ---------------------------------------------------------------------------------------------------
# Batches: decode_and_resized_crop_jpegs
#
# The reference below is the resized crop written out in Python from public operators (decode_and_crop_jpeg
# at a scale, then resize_box): what the C++ plan (csrc/common/resized_crop_plan.h) must decode and how it
# must map the window, for both requests.

from custom_op import decode_and_resized_crop_jpegs  # noqa: E402

MEAN = torch.tensor([0.485, 0.456, 0.406])
STD = torch.tensor([0.229, 0.224, 0.225])
SUPPORT = {"nearest": 0.0, "bilinear": 1.0, "bicubic": 2.0, "box": 0.5, "hamming": 1.0, "lanczos": 3.0}


def crop_axis(start, length, s, out):
    """(first, count, in0, in1, out_size, out_start, out_count, origin) of crop then resize, one axis."""
    first, last = start * s // 8, -(-(start + length) * s // 8)
    return first, last - first, (start * s - 8 * first) / 8, ((start + length) * s - 8 * first) / 8, out, 0, out, 0


def resize_crop_axis(image_size, s, resized, crop_start, crop, filter_name, antialias=True):
    """The same for resize then centre crop."""
    scaled_size, in1 = -(-image_size * s // 8), image_size * s / 8
    step = in1 / resized
    support = SUPPORT[filter_name] * (max(step, 1.0) if antialias else 1.0)
    first = max(0, math.floor((crop_start + 0.5) * step - support) - 1)
    last = min(scaled_size, math.ceil((crop_start + crop - 0.5) * step + support) + 2)
    return first, last - first, 0.0, in1, resized, crop_start, crop, first


def reference(data, rows, cols, s, filter_name="bilinear", flip=False, **options):
    kwargs = {**dict(mode=2, apply_exif_orientation=False, on_warning=0, max_pixels=0), **options}
    region, _ = torch.ops.custom_op.decode_and_crop_jpeg(
        torch.frombuffer(bytearray(data), dtype=torch.uint8), rows[0], cols[0], rows[1], cols[1], scale_num=s, **kwargs
    )
    return torch.ops.custom_op.resize_box(
        region,
        box=[rows[2], cols[2], rows[3], cols[3]],
        size=[rows[4], cols[4]],
        out_window=[rows[5], cols[5], rows[6], cols[6]],
        origin=[rows[7], cols[7]],
        filter=INTERPOLATIONS[filter_name],
        antialias=True,
        flip=flip,
    )


def crop_reference(data, window, size, s=None, filter_name="bilinear", flip=False, **options):
    top, left, h, w = window
    s = s or choose_scale(h, w, size)
    return reference(
        data, crop_axis(top, h, s, size[0]), crop_axis(left, w, s, size[1]), s, filter_name, flip, **options
    )


def batch_case(photos, n, seed, size=(40, 56)):
    """n (data, window) pairs over the photos, windows of every size, and a flip for each."""
    rng = np.random.default_rng(seed)
    files = [p.read_bytes() for p in spread(list(photos), n)]
    files = [files[i % len(files)] for i in range(n)]
    windows = []
    for data in files:
        height, width = custom_op.read_jpeg_header(data)[:2]
        windows.append(random_windows(height, width, rng, 1)[2 if rng.random() < 0.8 else int(rng.integers(0, 2))])
    flips = [bool(f) for f in rng.integers(0, 2, n)]
    return files, windows, flips


@pytest.mark.parametrize("filter_name", list(INTERPOLATIONS))
def test_batch_equals_single_calls_and_the_reference(photos, filter_name, two_threads):
    files, windows, flips = batch_case(photos, 12, seed=list(INTERPOLATIONS).index(filter_name))
    out = decode_and_resized_crop_jpegs(files, *zip(*windows), (40, 56), flips=flips, interpolation=filter_name)
    assert out.shape == (12, 3, 40, 56) and out.dtype == torch.uint8 and out.is_contiguous()
    for i, (data, window, flip) in enumerate(zip(files, windows, flips)):
        single = decode_and_resized_crop_jpeg(data, *window, (40, 56), interpolation=filter_name)
        assert torch.equal(out[i], single.flip(-1) if flip else single), (i, window)
        assert torch.equal(out[i], crop_reference(data, window, (40, 56), filter_name=filter_name, flip=flip)), i


@pytest.mark.parametrize("scale", [1, 2, 3, 4, 8, 12])
def test_batch_with_a_forced_scale_equals_the_reference(photos, scale, two_threads):
    files, windows, flips = batch_case(photos, 8, seed=scale, size=(32, 32))
    out = decode_and_resized_crop_jpegs(files, *zip(*windows), 32, flips=flips, scale=scale)
    for i, (data, window, flip) in enumerate(zip(files, windows, flips)):
        assert torch.equal(out[i], crop_reference(data, window, (32, 32), s=scale, flip=flip)), (i, window)
        single = decode_and_resized_crop_jpeg(data, *window, 32, scale=scale)
        assert torch.equal(out[i], single.flip(-1) if flip else single), (i, window)


def test_choose_scale_is_the_operators_automatic_choice(jpeg_writer):
    """Windows on either side of each threshold of the automatic choice, for a 64 x 48 output: the
    operator's result without a scale is the one at choose_scale's, and not the one at the next scale."""
    data = jpeg_writer.encode(jpeg_writer.photo_like(600, 800, seed=3), sampling="4:2:0")
    for h, w in [(512, 384), (511, 384), (512, 383), (256, 192), (255, 300), (128, 96), (127, 96), (60, 40)]:
        s = choose_scale(h, w, (64, 48))
        auto = decode_and_resized_crop_jpeg(data, 7, 9, h, w, (64, 48))
        assert torch.equal(auto, decode_and_resized_crop_jpeg(data, 7, 9, h, w, (64, 48), scale=s)), (h, w)
        other = 8 if s < 8 else 4
        assert not torch.equal(auto, decode_and_resized_crop_jpeg(data, 7, 9, h, w, (64, 48), scale=other)), (h, w)
    assert [choose_scale(h, w, (64, 48)) for h, w in [(512, 384), (511, 384), (255, 300), (127, 96)]] == [1, 2, 4, 8]


def test_batch_with_exif_orientation_and_grey_mode(odd_jpegs, two_threads):
    files = [
        (odd_jpegs / n).read_bytes() for n in ("hopper_orientation_3.jpg", "hopper_orientation_6.jpg", "hopper.jpg")
    ]
    windows = [(3, 5, 100, 90), (20, 0, 60, 128), (0, 10, 128, 100)]
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY):
        out = decode_and_resized_crop_jpegs(
            files, *zip(*windows), (24, 20), flips=[True, False, True], mode=mode, apply_exif_orientation=True
        )
        assert out.shape == (3, 1 if mode == ImageReadMode.GRAY else 3, 24, 20)
        for i, (data, window) in enumerate(zip(files, windows)):
            single = decode_and_resized_crop_jpeg(data, *window, (24, 20), mode=mode, apply_exif_orientation=True)
            assert torch.equal(out[i], single.flip(-1) if i != 1 else single), (mode, i)
            expected = crop_reference(data, window, (24, 20), flip=i != 1, apply_exif_orientation=True)
            if mode == ImageReadMode.RGB:
                assert torch.equal(out[i], expected), i


def test_batch_mode_unchanged_needs_one_channel_count(odd_jpegs):
    cmyk = (odd_jpegs / "pil_sample_cmyk.jpg").read_bytes()
    rgb = (odd_jpegs / "hopper.jpg").read_bytes()
    out = decode_and_resized_crop_jpegs([cmyk, cmyk], 5, 7, 60, 80, 32, mode=ImageReadMode.UNCHANGED)
    single = decode_and_resized_crop_jpeg(cmyk, 5, 7, 60, 80, 32, mode=ImageReadMode.UNCHANGED)
    assert out.shape == (2, 4, 32, 32) and torch.equal(out[0], single) and torch.equal(out[1], single)
    with pytest.raises(ValueError, match="one channel count"):
        decode_and_resized_crop_jpegs([cmyk, rgb], 5, 7, 60, 80, 32, mode=ImageReadMode.UNCHANGED)
    with pytest.raises(ValueError, match="channel count"):
        decode_and_resized_crop_jpegs([], 5, 7, 60, 80, 32, mode=ImageReadMode.UNCHANGED)
    assert decode_and_resized_crop_jpegs([], 5, 7, 60, 80, (4, 5)).shape == (0, 3, 4, 5)


def normalised(image: torch.Tensor, mean=MEAN, std=STD) -> torch.Tensor:
    """ToTensor then Normalize, as torchvision computes them."""
    return (image.float() / 255 - mean[:, None, None]) / std[:, None, None]


def test_float_outputs_are_torchvisions_to_tensor_and_normalize(photos, two_threads):
    files, windows, flips = batch_case(photos, 6, seed=21)
    plain = decode_and_resized_crop_jpegs(files, *zip(*windows), (40, 56), flips=flips)
    mean, std = MEAN.tolist(), STD.tolist()
    out = decode_and_resized_crop_jpegs(
        files, *zip(*windows), (40, 56), flips=flips, dtype=torch.float32, mean=mean, std=std
    )
    assert out.dtype == torch.float32 and torch.equal(out, normalised(plain))
    for dtype in (torch.float16, torch.bfloat16):
        out = decode_and_resized_crop_jpegs(
            files, *zip(*windows), (40, 56), flips=flips, dtype=dtype, mean=mean, std=std
        )
        assert out.dtype == dtype and torch.equal(out, normalised(plain).to(dtype)), dtype
    scaled = decode_and_resized_crop_jpegs(files, *zip(*windows), (40, 56), flips=flips, dtype=torch.float32)
    assert torch.equal(scaled, plain.float() / 255)
    one = decode_and_resized_crop_jpegs(
        files, *zip(*windows), (40, 56), flips=flips, dtype=torch.bfloat16, mean=0.5, std=0.25
    )
    assert torch.equal(one, normalised(plain, torch.full((3,), 0.5), torch.full((3,), 0.25)).to(torch.bfloat16))


def test_normalisation_of_every_value_is_torchs():
    """Nearly every uint8 value (a grey ramp, decoded at full size) through each dtype, with means and
    stds that reach float16's subnormals and its overflow to infinity."""
    buffer = io.BytesIO()
    Image.fromarray(np.arange(256, dtype=np.uint8).reshape(16, 16).repeat(4, 0).repeat(4, 1), mode="L").save(
        buffer, "JPEG", quality=100
    )
    data = buffer.getvalue()
    plain = decode_and_resized_crop_jpegs([data], 0, 0, 64, 64, 64, mode="GRAY")
    assert len(plain.unique()) > 200
    for mean, std in [(0.0, 1.0), (0.485, 0.229), (0.5, 1e-6), (-3.0, 7e3), (0.999, 3e-3), (0.5, 2e5)]:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            out = decode_and_resized_crop_jpegs([data], 0, 0, 64, 64, 64, mode="GRAY", dtype=dtype, mean=mean, std=std)
            expected = normalised(plain[0], torch.tensor([mean]), torch.tensor([std])).to(dtype)
            assert torch.equal(out[0], expected), (mean, std, dtype)


def test_on_error_return_zeros_the_bad_items(photos, two_threads):
    files, windows, flips = batch_case(photos, 5, seed=8)
    good = decode_and_resized_crop_jpegs(files, *zip(*windows), (40, 56), flips=flips, dtype=torch.float32)
    cut = files[1][: files[1].index(b"\xff\xda")]  # cut before the scan: no image data
    bad_window = (0, 0, 10**6, 10)
    damaged = [files[0], cut, files[2], b"not a jpeg", files[4]]
    wins = [windows[0], windows[1], windows[2], windows[3], bad_window]
    out, errors = decode_and_resized_crop_jpegs(
        damaged, *zip(*wins), (40, 56), flips=flips, dtype=torch.float32, on_error="return"
    )
    assert [type(e) for e in errors] == [type(None), RuntimeError, type(None), RuntimeError, ValueError]
    assert str(errors[1]).startswith("custom_op: batch item 1: ") and "does not fit" in str(errors[4])
    for i in (0, 2):
        assert torch.equal(out[i], good[i])
    for i in (1, 3, 4):
        assert not out[i].any()
    with pytest.raises(RuntimeError, match="batch item 1: "):
        decode_and_resized_crop_jpegs(damaged, *zip(*wins), (40, 56))


def test_windows_far_outside_the_image_fail_alone(photos):
    """Window values near int64's limits or negative: each such item gets its ValueError (the batch's
    largest-first order and the plan must not overflow on them), the others decode."""
    files, windows, _ = batch_case(photos, 4, seed=9)
    huge = [(0, 0, 2**62, 2**62), (-(2**62), 0, 10, 10), (0, 2**62, 10, 10)]
    wins = [windows[0], *huge]
    out, errors = decode_and_resized_crop_jpegs(files[:4], *zip(*wins), (40, 56), on_error="return")
    assert errors[0] is None and all(isinstance(e, ValueError) for e in errors[1:]), errors
    assert torch.equal(out[0], decode_and_resized_crop_jpegs(files[:1], *zip(windows[0]), (40, 56))[0])
    assert not out[1:].any()


def test_on_warning_applies_per_item(odd_jpegs):
    valid = (odd_jpegs / "hopper.jpg").read_bytes()
    cut = valid[: len(valid) * 2 // 3]
    with pytest.raises(RuntimeError, match="batch item 1: "):
        decode_and_resized_crop_jpegs([valid, cut], 100, 0, 28, 128, 16)
    with pytest.warns(UserWarning, match="batch item 1: "):
        out = decode_and_resized_crop_jpegs([valid, cut], 100, 0, 28, 128, 16, on_warning="warn")
    assert out.shape == (2, 3, 16, 16)
    assert decode_and_resized_crop_jpegs([valid, cut], 100, 0, 28, 128, 16, on_warning="ignore").shape == (2, 3, 16, 16)


@pytest.mark.parametrize(
    "kwargs, error, says",
    [
        (dict(tops=[0, 0]), ValueError, "tops has 2 entries for 3 images"),
        (dict(heights=0), ValueError, "at least 1"),
        (dict(size=(0, 4)), ValueError, "size"),
        (dict(flips=[True]), ValueError, "flips has 1 entries"),
        (dict(flips=[0, 2, 1]), ValueError, r"flips\[1\] must be 0 or 1"),
        (dict(dtype=torch.int32), TypeError, "dtype must be one of"),
        (dict(mean=[0.5] * 3, std=[0.2] * 3), TypeError, "floating-point dtype"),
        (dict(mean=[0.5, 0.5], std=[0.2, 0.2], dtype=torch.float32), ValueError, "2 values for 3 channels"),
        (dict(mean=[0.5] * 3, dtype=torch.float32), ValueError, "one value per channel each"),
        (dict(mean=0.5, std=0.0, dtype=torch.float32), ValueError, "non-zero"),
        (dict(mean=0.5, std=float("nan"), dtype=torch.float32), ValueError, "non-zero"),
        (dict(mean=float("inf"), std=1.0, dtype=torch.float32), ValueError, "finite"),
        (dict(mean="a", std=1.0, dtype=torch.float32), TypeError, "mean must be a number"),
        (dict(interpolation="cubic"), ValueError, "interpolation"),
        (dict(scale=0), ValueError, "scale"),
        (dict(on_error="skip"), ValueError, "on_error"),
        (dict(mode="CMYK"), ValueError, "mode"),
    ],
)
def test_bad_arguments_raise_before_any_decode(kwargs, error, says):
    """Every file is not a JPEG: an argument error is raised instead of the items' RuntimeError."""
    args = dict(tops=0, lefts=0, heights=8, widths=8, size=4)
    args.update({k: kwargs.pop(k) for k in list(kwargs) if k in args})
    with pytest.raises(error, match=says):
        decode_and_resized_crop_jpegs(
            [b"no", b"no", b"no"], args["tops"], args["lefts"], args["heights"], args["widths"], args["size"], **kwargs
        )


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(filter=6), "unknown filter code 6"),
        (dict(dtype=4), "dtype code must be"),
        (dict(size=[3]), "size must be"),
        (dict(resize_shorter=-1), "resize_shorter"),
        (dict(scale=17), "scale must be"),
        (dict(flips=[1]), "flips must be empty or have one entry per image"),
        (dict(mean=[0.5], std=[0.5, 0.5]), "one value per channel each"),
        (dict(resize_shorter=10), "no entry when resize_shorter > 0"),
    ],
)
def test_operator_checks_its_arguments(bad, says):
    kwargs = dict(
        size=[4, 4],
        resize_shorter=0,
        scale=0,
        filter=1,
        antialias=True,
        flips=[],
        mean=[],
        std=[],
        dtype=1,
        mode=2,
        apply_exif_orientation=False,
        on_warning=0,
        max_pixels=0,
    )
    kwargs.update(bad)
    data = [torch.frombuffer(bytearray(b"no"), dtype=torch.uint8)] * 2
    op = torch.ops.custom_op.decode_and_resized_crop_jpegs
    assert_op_raises(ValueError, says, op, data, [0, 0], [0, 0], [8, 8], [8, 8], **kwargs)
