"""custom_op.transforms: RandomResizedCropJpeg and ResizeCenterCropJpeg.

The window distribution is checked against an independent implementation of torchvision's
RandomResizedCrop.get_params algorithm (numpy's RNG, many draws: area and aspect histograms and means,
and the centre fallback); when torchvision can be imported, also draw for draw against it. Pixels: at
decode_scale=8 both transforms equal torchvision's on PIL images (Pillow crop/resize), and at the
automatic scales their PSNR against that is bounded as in test_resized_crop.
"""

import io
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

import custom_op
from conftest import ROOT, jpeg_size
from custom_op import RandomResizedCropJpeg, ResizeCenterCropJpeg, decode_and_resized_crop_jpeg
from test_resized_crop import MEAN_PSNR_BOUND, MIN_PSNR_BOUND, chw, needs_pillow_13, pillow_resized_crop, psnr


def numpy_rrc_window(height, width, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, written from its description with numpy's RNG."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def summaries(windows, height, width):
    hs = np.array([w[2] for w in windows], dtype=np.float64)
    ws = np.array([w[3] for w in windows], dtype=np.float64)
    tops = np.array([w[0] for w in windows], dtype=np.float64)
    area = hs * ws / (height * width)
    log_aspect = np.log(ws / hs)
    area_hist = np.histogram(area, bins=10, range=(0, 1))[0] / len(windows)
    aspect_hist = np.histogram(log_aspect, bins=10, range=(-0.3, 0.3))[0] / len(windows)
    # Where the window sits: the centre's position as a fraction of the image height.
    centre = (tops + hs / 2) / height
    return area, log_aspect, area_hist, aspect_hist, centre


@pytest.mark.parametrize("height,width", [(375, 500), (500, 333), (120, 120), (60, 400)])
def test_window_distribution_matches_torchvisions_algorithm(height, width):
    n = 12000
    transform = RandomResizedCropJpeg(224)
    generator = torch.Generator().manual_seed(0)
    ours = [transform.get_params(height, width, generator) for _ in range(n)]
    rng = np.random.default_rng(0)
    reference = [numpy_rrc_window(height, width, rng) for _ in range(n)]
    for window in ours:
        top, left, h, w = window
        assert 0 <= top and 0 <= left and 0 < h and 0 < w and top + h <= height and left + w <= width, window
    a_area, a_aspect, a_area_hist, a_aspect_hist, a_centre = summaries(ours, height, width)
    b_area, b_aspect, b_area_hist, b_aspect_hist, b_centre = summaries(reference, height, width)
    # Bin proportions have a standard deviation of at most 0.005 at this n; 0.02 is four of them.
    assert np.abs(a_area_hist - b_area_hist).max() < 0.02, (a_area_hist, b_area_hist)
    assert np.abs(a_aspect_hist - b_aspect_hist).max() < 0.02, (a_aspect_hist, b_aspect_hist)
    assert abs(a_area.mean() - b_area.mean()) < 0.01
    assert abs(a_aspect.mean() - b_aspect.mean()) < 0.01
    assert abs(a_centre.mean() - b_centre.mean()) < 0.01

    # The fraction of draws that fell back to the centred crop agrees too.
    def fallback(ws):
        return np.mean([w[0] == (height - w[2]) // 2 and w[1] == (width - w[3]) // 2 for w in ws])

    assert abs(fallback(ours) - fallback(reference)) < 0.02


def test_area_and_aspect_within_the_ranges_on_a_large_image():
    # On a large square image every attempt fits: the area is uniform in scale, the log-aspect uniform.
    transform = RandomResizedCropJpeg(224, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    generator = torch.Generator().manual_seed(1)
    windows = [transform.get_params(4000, 4000, generator) for _ in range(5000)]
    area = np.array([h * w for _, _, h, w in windows]) / 4000**2
    log_aspect = np.log(np.array([w / h for _, _, h, w in windows]))
    assert 0.195 < area.min() and area.max() < 0.605 and abs(area.mean() - 0.4) < 0.01
    assert abs(log_aspect.min() + math.log(2)) < 0.02 and abs(log_aspect.max() - math.log(2)) < 0.02
    assert abs(log_aspect.mean()) < 0.03
    assert np.abs(np.histogram(area, bins=8, range=(0.2, 0.6))[0] / 5000 - 1 / 8).max() < 0.025


@pytest.mark.parametrize(
    "height,width,expected",
    [
        (10, 1000, (0, 493, 10, 13)),  # too wide for any attempt: full height, aspect clamped to 4/3
        (1000, 10, (493, 0, 13, 10)),  # too tall: full width, aspect clamped to 3/4
        (50, 1000, (0, 466, 50, 67)),
        (1, 1, (0, 0, 1, 1)),
    ],
)
def test_centre_fallback_on_extreme_aspect_ratios(height, width, expected):
    transform = RandomResizedCropJpeg(224)
    generator = torch.Generator().manual_seed(2)
    assert {transform.get_params(height, width, generator) for _ in range(200)} == {expected}


def test_fallback_keeps_the_whole_image_when_its_aspect_is_in_range():
    transform = RandomResizedCropJpeg(224, scale=(2.0, 3.0))  # no attempt can fit
    assert transform.get_params(300, 350, 0) == (0, 0, 300, 350)


def test_matches_torchvision_draw_for_draw_when_available():
    try:
        from torchvision.transforms import RandomResizedCrop
    except Exception as e:  # absent, or a build that does not load against this torch
        pytest.skip(f"torchvision is not importable here: {type(e).__name__}: {e}")
    for scale, ratio in [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.9), (0.2, 5.0))]:
        ours = RandomResizedCropJpeg(224, scale=scale, ratio=ratio)
        for height, width in [(375, 500), (10, 1000), (1000, 10), (224, 224)]:
            image = torch.zeros(1, height, width)
            torch.manual_seed(123)
            expected = [RandomResizedCrop.get_params(image, list(scale), list(ratio)) for _ in range(200)]
            torch.manual_seed(123)
            assert [ours.get_params(height, width) for _ in range(200)] == expected


# ---------------------------------------------------------------------------------------------------
# Reproducibility and RNG use


@pytest.fixture(scope="module")
def photo(photos):
    """A landscape photo larger than the crops on both sides (as most ImageNet photos: 375x500)."""
    return next(p for p in photos[3:] + photos[:3] if 256 <= jpeg_size(p)[0] < jpeg_size(p)[1]).read_bytes()


def test_same_seed_or_generator_state_gives_the_same_output(photo):
    transform = RandomResizedCropJpeg(160, hflip_p=0.5)
    assert torch.equal(transform(photo, generator=7), transform(photo, generator=7))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    first = [transform(photo, generator=g1) for _ in range(5)]
    assert all(torch.equal(a, transform(photo, generator=g2)) for a in first)
    assert torch.equal(first[0], transform(photo, generator=7))
    assert not all(torch.equal(first[0], b) for b in first[1:])


def test_global_seed_gives_the_same_output(photo):
    transform = RandomResizedCropJpeg(160, hflip_p=0.5)
    torch.manual_seed(11)
    a = [transform(photo) for _ in range(4)]
    torch.manual_seed(11)
    assert all(torch.equal(x, transform(photo)) for x in a)


def test_generator_leaves_the_global_rng_alone(photo):
    transform = RandomResizedCropJpeg(160, hflip_p=0.5)
    state = torch.get_rng_state()
    transform(photo, generator=torch.Generator().manual_seed(3))
    transform(photo, generator=4)
    assert torch.equal(torch.get_rng_state(), state)


def test_draw_order_is_get_params_then_flip(photo):
    # As Compose([RandomResizedCrop, RandomHorizontalFlip(p)]) draws from the global RNG.
    transform = RandomResizedCropJpeg(96, hflip_p=0.5)
    info = custom_op.read_jpeg_header(photo)
    flips = 0
    for seed in range(12):
        torch.manual_seed(seed)
        window = transform.get_params(info.height, info.width)
        flip = bool(torch.rand(1) < 0.5)
        expected = decode_and_resized_crop_jpeg(photo, *window, 96)
        expected = expected.flip(-1) if flip else expected
        torch.manual_seed(seed)
        assert torch.equal(transform(photo), expected), seed
        flips += flip
    assert 0 < flips < 12


def test_flip_probability_one_flips_and_zero_draws_nothing_more(photo):
    never, always = RandomResizedCropJpeg(96), RandomResizedCropJpeg(96, hflip_p=1.0)
    assert torch.equal(always(photo, generator=5), never(photo, generator=5).flip(-1))
    g = torch.Generator().manual_seed(5)
    never(photo, generator=g)
    after_one = g.get_state()
    g2 = torch.Generator().manual_seed(5)
    never.get_params(*custom_op.read_jpeg_header(photo)[:2], g2)
    assert torch.equal(after_one, g2.get_state())


def test_transform_pickles_for_dataloader_workers(photo):
    transform = RandomResizedCropJpeg((128, 96), hflip_p=0.3, interpolation="bicubic")
    copy = pickle.loads(pickle.dumps(transform))
    assert torch.equal(copy(photo, generator=1), transform(photo, generator=1))
    assert copy(photo).shape == (3, 128, 96)
    evaluation = pickle.loads(pickle.dumps(ResizeCenterCropJpeg(256, 224)))
    assert evaluation(photo).shape == (3, 224, 224)


# ---------------------------------------------------------------------------------------------------
# Pixels


@needs_pillow_13
def test_random_resized_crop_at_scale_8_equals_torchvision_on_pil(photos):
    transform = RandomResizedCropJpeg(224, hflip_p=0.5, decode_scale=8)
    for k, path in enumerate(photos[::5]):
        data = path.read_bytes()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        torch.manual_seed(k)
        window = transform.get_params(image.height, image.width)
        expected = pillow_resized_crop(image, window, (224, 224))
        if torch.rand(1) < 0.5:
            expected = expected[:, :, ::-1]
        torch.manual_seed(k)
        assert np.array_equal(transform(data).numpy(), expected), path.name


def test_random_resized_crop_psnr_at_automatic_scales(jpeg_writer):
    data = jpeg_writer.encode(jpeg_writer.photo_like(1200, 1600, 3, seed=21), sampling="4:2:0", quality=90)
    image = Image.open(io.BytesIO(data)).convert("RGB")
    transform = RandomResizedCropJpeg(224)
    generator = torch.Generator().manual_seed(0)
    values = []
    for _ in range(20):
        state = generator.get_state()
        out = transform(data, generator=generator)
        window = transform.get_params(1200, 1600, torch.Generator().set_state(state))
        values.append(psnr(out.numpy(), pillow_resized_crop(image, window, (224, 224))))
    assert np.mean(values) >= MEAN_PSNR_BOUND and min(values) >= MIN_PSNR_BOUND, values


def test_exif_orientation_windows_are_in_the_displayed_frame(odd_jpegs):
    data = (odd_jpegs / "hopper_orientation_6.jpg").read_bytes()
    transform = RandomResizedCropJpeg(48, apply_exif_orientation=True, decode_scale=8)
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    window = transform.get_params(image.height, image.width, 3)
    out = transform(data, generator=3)
    assert psnr(out.numpy(), pillow_resized_crop(image, window, (48, 48))) > 60


def pillow_resize_center_crop(image: Image.Image, resize_size: int, crop: int) -> np.ndarray:
    """torchvision's Resize(resize_size) + CenterCrop(crop) on a PIL image, spelled out."""
    w, h = image.size
    if w <= h:
        rw, rh = resize_size, int(resize_size * h / w)
    else:
        rh, rw = resize_size, int(resize_size * w / h)
    resized = image.resize((rw, rh), Image.BILINEAR)
    top, left = int(round((rh - crop) / 2.0)), int(round((rw - crop) / 2.0))
    return chw(resized.crop((left, top, left + crop, top + crop)))


def test_resized_size_follows_torchvision():
    t = ResizeCenterCropJpeg(256, 224)
    assert t.resized_size(375, 500) == (256, 341)
    assert t.resized_size(500, 375) == (341, 256)
    assert t.resized_size(333, 500) == (256, 384)
    assert t.resized_size(256, 256) == (256, 256)
    assert t.resized_size(100, 1000) == (256, 2560)
    assert t.resized_size(1, 1) == (256, 256)


@needs_pillow_13
def test_resize_center_crop_at_scale_8_equals_resize_then_crop(photos):
    transform = ResizeCenterCropJpeg(256, 224, decode_scale=8)
    for path in photos[::4]:
        data = path.read_bytes()
        expected = pillow_resize_center_crop(Image.open(io.BytesIO(data)).convert("RGB"), 256, 224)
        assert np.array_equal(transform(data).numpy(), expected), path.name


@needs_pillow_13
def test_resize_center_crop_odd_cases(jpeg_writer, odd_jpegs):
    transform = ResizeCenterCropJpeg(256, 224, decode_scale=8)
    # 257 x 256: the centre offset is round(16.5) = 16 (Python rounds halves to even, as torchvision).
    # 90 x 120: smaller than the resized size, upsampled.
    for height, width in [(257, 256), (90, 120), (1000, 64)]:
        data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 3, seed=height), sampling="4:2:0")
        expected = pillow_resize_center_crop(Image.open(io.BytesIO(data)).convert("RGB"), 256, 224)
        assert np.array_equal(transform(data).numpy(), expected), (height, width)
    data = (odd_jpegs / "hopper_orientation_6.jpg").read_bytes()
    t = ResizeCenterCropJpeg(64, 48, apply_exif_orientation=True, decode_scale=8)
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    assert np.array_equal(t(data).numpy(), pillow_resize_center_crop(image, 64, 48))


def test_resize_center_crop_psnr_at_automatic_scales(jpeg_writer):
    transform = ResizeCenterCropJpeg(256, 224)
    for height, width, sampling in [(1200, 1600, "4:2:0"), (2100, 1500, "4:4:4"), (700, 900, "4:2:2")]:
        data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 3, seed=width), sampling=sampling)
        expected = pillow_resize_center_crop(Image.open(io.BytesIO(data)).convert("RGB"), 256, 224)
        assert psnr(transform(data).numpy(), expected) >= MEAN_PSNR_BOUND, (height, width)


def test_resize_center_crop_psnr_on_photos(photos):
    transform = ResizeCenterCropJpeg(256, 224)
    values = []
    for path in photos[::5]:
        data = path.read_bytes()
        expected = pillow_resize_center_crop(Image.open(io.BytesIO(data)).convert("RGB"), 256, 224)
        values.append(psnr(transform(data).numpy(), expected))
    assert np.mean(values) >= MEAN_PSNR_BOUND and min(values) >= MIN_PSNR_BOUND


# ---------------------------------------------------------------------------------------------------
# Bad arguments and data


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"size": 0}, ValueError),
        ({"size": (1, 2, 3)}, ValueError),
        ({"size": "224"}, TypeError),
        ({"scale": (0.5, 0.1)}, ValueError),
        ({"scale": (0.0, 1.0)}, ValueError),
        ({"scale": 0.5}, TypeError),
        ({"ratio": (2.0, 1.0)}, ValueError),
        ({"ratio": (-1.0, 1.0)}, ValueError),
        ({"hflip_p": 1.5}, ValueError),
        ({"interpolation": "cubic"}, ValueError),
        ({"mode": "CMYK"}, ValueError),
        ({"on_warning": "loud"}, ValueError),
        ({"decode_scale": 0}, ValueError),
        ({"max_pixels": -1}, ValueError),
    ],
)
def test_random_resized_crop_bad_arguments(kwargs, error):
    args = {"size": 224, **kwargs}
    with pytest.raises(error):
        RandomResizedCropJpeg(**args)


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"resize_size": 0}, ValueError),
        ({"crop_size": 300}, ValueError),
        ({"resize_size": 2.5}, TypeError),
        ({"crop_size": 0}, ValueError),
        ({"interpolation": "fast"}, ValueError),
    ],
)
def test_resize_center_crop_bad_arguments(kwargs, error):
    with pytest.raises(error):
        ResizeCenterCropJpeg(**kwargs)


def test_non_square_crop_must_fit_the_resized_image(photo):
    assert ResizeCenterCropJpeg(256, (224, 300))(photo).shape == (3, 224, 300)  # 375x500: resized 256x341
    with pytest.raises(ValueError, match="does not fit"):
        ResizeCenterCropJpeg(256, (300, 224))(photo)


def test_get_params_bad_sizes():
    transform = RandomResizedCropJpeg(224)
    with pytest.raises(ValueError):
        transform.get_params(0, 10)
    with pytest.raises(TypeError):
        transform.get_params(10.5, 10)
    with pytest.raises(TypeError):
        transform.get_params(10, 10, generator="seed")


@pytest.mark.parametrize("transform", [RandomResizedCropJpeg(64), ResizeCenterCropJpeg(72, 64)], ids=["rrc", "eval"])
def test_transforms_bad_data(odd_jpegs, transform):
    for data in ([1, 2], torch.zeros(4), 7):
        with pytest.raises(TypeError):
            transform(data)
    for data in (b"", b"definitely not a jpeg", b"\xff\xd8\xff\xdb" + b"\x00" * 10):
        with pytest.raises(RuntimeError):
            transform(data)
    valid = (odd_jpegs / "hopper.jpg").read_bytes()
    assert transform(valid).shape == (3, 64, 64)
    with pytest.raises(RuntimeError):
        transform(valid[: valid.index(b"\xff\xda")])  # cut before the scan: no image data at all


def test_per_image_transforms_stay_on_the_calling_thread(jpeg_writer):
    """A per-image call runs on the calling thread: no intra-op parallel region, whose thread team
    stalls when the machine's cores are busy (the batched calls are where parallelism belongs). In a
    fresh process with an intra-op pool of 4, the transforms start none of its threads."""
    data = jpeg_writer.encode(jpeg_writer.photo_like(600, 800, seed=5), sampling="4:2:0")
    script = (
        "import os, sys, torch, custom_op\n"
        "torch.set_num_threads(4)\n"
        "data = sys.stdin.buffer.read()\n"
        "threads = lambda: len(os.listdir('/proc/self/task'))\n"
        "train = custom_op.RandomResizedCropJpeg(224, hflip_p=0.5)\n"
        "evaluate = custom_op.ResizeCenterCropJpeg(256, 224)\n"
        "before = threads()\n"
        "for seed in range(20):\n"
        "    train(data, generator=seed)\n"
        "    evaluate(data)\n"
        "    custom_op.decode_and_resized_crop_jpeg(data, 0, 0, 600, 800, 224, scale=8)\n"
        "print(before, threads())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], input=data, capture_output=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    before, after = map(int, result.stdout.split()[-2:])
    assert after == before, f"the per-image calls started {after - before} threads"


# ---------------------------------------------------------------------------------------------------
# Batches and float outputs

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def batch_files(photos):
    files = [p.read_bytes() for p in photos[:10]]
    return files + files[:3]


@pytest.mark.parametrize("decode_scale", [None, 8])
def test_random_resized_crop_batch_equals_a_loop_of_single_calls(batch_files, decode_scale, two_threads):
    """Same windows and flips (the same draws in the same order), same pixels, same RNG state after."""
    transform = RandomResizedCropJpeg((96, 80), hflip_p=0.5, decode_scale=decode_scale, interpolation="bicubic")
    g1, g2 = torch.Generator().manual_seed(13), torch.Generator().manual_seed(13)
    batch = transform.batch(batch_files, generator=g1)
    loop = torch.stack([transform(d, generator=g2) for d in batch_files])
    assert batch.shape == (len(batch_files), 3, 96, 80) and torch.equal(batch, loop)
    assert torch.equal(g1.get_state(), g2.get_state())
    # The global RNG, as the loop draws from it; an int seed is one generator for the whole batch.
    torch.manual_seed(5)
    batch = transform.batch(batch_files)
    after = torch.get_rng_state()
    torch.manual_seed(5)
    assert torch.equal(batch, torch.stack([transform(d) for d in batch_files]))
    assert torch.equal(after, torch.get_rng_state())
    g = torch.Generator().manual_seed(21)
    assert torch.equal(
        transform.batch(batch_files, generator=21), torch.stack([transform(d, generator=g) for d in batch_files])
    )


def test_resize_center_crop_batch_equals_single_calls(batch_files, odd_jpegs, two_threads):
    for transform in (ResizeCenterCropJpeg(160, 128), ResizeCenterCropJpeg(100, (96, 64), decode_scale=8)):
        batch = transform.batch(batch_files)
        assert torch.equal(batch, torch.stack([transform(d) for d in batch_files]))
    oriented = [(odd_jpegs / n).read_bytes() for n in ("hopper_orientation_3.jpg", "hopper_orientation_6.jpg")]
    transform = ResizeCenterCropJpeg(64, (60, 48), apply_exif_orientation=True, mode="GRAY")
    assert torch.equal(transform.batch(oriented), torch.stack([transform(d) for d in oriented]))


def test_float_transforms_are_to_tensor_and_normalize(batch_files, two_threads):
    """dtype, mean and std give torchvision's ToTensor + Normalize (+ .to(dtype)) of the uint8 output,
    from a single call and from a batch."""
    mean, std = torch.tensor(MEAN)[:, None, None], torch.tensor(STD)[:, None, None]
    plain_rrc, plain_eval = RandomResizedCropJpeg(64, hflip_p=0.5), ResizeCenterCropJpeg(72, 64)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        rrc = RandomResizedCropJpeg(64, hflip_p=0.5, dtype=dtype, mean=MEAN, std=STD)
        expected = ((plain_rrc.batch(batch_files, generator=3).float() / 255 - mean) / std).to(dtype)
        assert torch.equal(rrc.batch(batch_files, generator=3), expected), dtype
        assert torch.equal(rrc(batch_files[0], generator=3), expected[0]), dtype
        evaluate = ResizeCenterCropJpeg(72, 64, dtype=dtype, mean=MEAN, std=STD)
        expected = ((plain_eval.batch(batch_files).float() / 255 - mean) / std).to(dtype)
        assert torch.equal(evaluate.batch(batch_files), expected), dtype
        assert torch.equal(evaluate(batch_files[1]), expected[1]), dtype
    scaled = RandomResizedCropJpeg(64, hflip_p=0.5, dtype=torch.float32)(batch_files[0], generator=4)
    assert torch.equal(scaled, plain_rrc(batch_files[0], generator=4).float() / 255)


def test_batch_on_error_return(batch_files, odd_jpegs):
    """A file whose header cannot be read draws nothing and comes back as its exception (slot zeros);
    one that fails in the decode likewise; the others are what the loop gives."""
    valid = (odd_jpegs / "hopper.jpg").read_bytes()
    no_header, no_scan = b"not a jpeg", valid[: valid.index(b"\xff\xda")]
    files = [batch_files[0], no_header, batch_files[1], no_scan, batch_files[2]]
    transform = RandomResizedCropJpeg(48, hflip_p=0.5)
    out, errors = transform.batch(files, generator=9, on_error="return")
    assert [type(e) for e in errors] == [type(None), RuntimeError, type(None), RuntimeError, type(None)]
    assert str(errors[1]).startswith("custom_op: batch item 1: ") and str(errors[3]).startswith(
        "custom_op: batch item 3: "
    )
    # The good files' draws are the loop's without the unreadable file, which draws nothing.
    g = torch.Generator().manual_seed(9)
    expected = [transform(d, generator=g) for d in (files[0], files[2])]
    assert torch.equal(out[0], expected[0]) and torch.equal(out[2], expected[1])
    assert not out[1].any() and not out[3].any()
    with pytest.raises(RuntimeError, match="batch item 1: "):
        transform.batch(files, generator=9)
    evaluate = ResizeCenterCropJpeg(72, 64)
    out, errors = evaluate.batch(files, on_error="return")
    assert [type(e) for e in errors] == [type(None), RuntimeError, type(None), RuntimeError, type(None)]
    assert torch.equal(out[2], evaluate(files[2])) and not out[1].any()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"dtype": torch.float64}, TypeError),
        ({"mean": MEAN, "std": STD}, TypeError),  # uint8
        ({"mean": MEAN, "dtype": torch.float32}, ValueError),
        ({"mean": (0.5, 0.5), "std": (1.0, 1.0), "dtype": torch.float32}, ValueError),
        ({"mean": MEAN, "std": (0.2, 0.0, 0.2), "dtype": torch.float32}, ValueError),
    ],
)
def test_bad_output_options_fail_when_the_transform_is_built(kwargs, error):
    with pytest.raises(error):
        RandomResizedCropJpeg(64, **kwargs)
    with pytest.raises(error):
        ResizeCenterCropJpeg(72, 64, **kwargs)
