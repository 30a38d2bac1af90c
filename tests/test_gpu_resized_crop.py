"""The batched fused resized crop on the GPU (decode_and_resized_crop_jpegs(..., device="cuda")): the CPU
call's pixels, exactly, for every item (uint8 and the normalised float dtypes), the path each item took,
both requests (crop then resize, resize then centre crop), flips, scales, and bad input. Skips without
a GPU; run on a GPU machine with bench/device_run.sh."""

from __future__ import annotations

import random

import pytest
import torch

import custom_op
import jpeg_factory
from custom_op import ImageReadMode, gpu
from jpeg_factory import with_exif_orientation

REASON = gpu.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU backend unavailable here: {REASON}")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1"]


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _photo(height: int, width: int, sampling: str, seed: int, prepared: bool, gray: bool = False) -> torch.Tensor:
    pixels = jpeg_factory.photo_like(height, width, seed=seed)
    if gray:
        pixels = pixels[:, :, 0]
    data = jpeg_factory.encode(pixels, sampling=sampling, quality=90)
    if prepared:
        data = custom_op.prepare_jpeg(data)
    return _tensor(data)


def _windows(files: list[torch.Tensor], rng: random.Random, exif: bool = False) -> list[tuple[int, int, int, int]]:
    windows = []
    for f in files:
        info = custom_op.read_jpeg_header(f, apply_exif_orientation=exif)
        h = rng.randint(1, info.height)
        w = rng.randint(1, info.width)
        windows.append((rng.randint(0, info.height - h), rng.randint(0, info.width - w), h, w))
    return windows


def _both(files, windows, size, **kwargs):
    tops, lefts, heights, widths = (list(v) for v in zip(*windows))
    cpu = custom_op.decode_and_resized_crop_jpegs(files, tops, lefts, heights, widths, size, **kwargs)
    cuda = custom_op.decode_and_resized_crop_jpegs(files, tops, lefts, heights, widths, size, device="cuda", **kwargs)
    return cpu, cuda


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_prepared_files_give_the_cpu_pixels_at_every_scale(sampling):
    rng = random.Random(SAMPLINGS.index(sampling))
    files = [_photo(rng.randint(40, 400), rng.randint(40, 400), sampling, i, prepared=True) for i in range(12)]
    windows = _windows(files, rng)
    flips = [rng.random() < 0.5 for _ in files]
    for size in (224, (31, 57), 8):
        for scale in (None, 1, 2, 4, 8):
            cpu, cuda = _both(files, windows, size, flips=flips, scale=scale)
            assert cuda.device.type == "cuda"
            assert torch.equal(cuda.cpu(), cpu), (size, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_normalised_outputs_are_the_cpu_ones(dtype):
    rng = random.Random(7)
    files = [_photo(rng.randint(64, 300), rng.randint(64, 300), "4:2:0", i, prepared=True) for i in range(10)]
    windows = _windows(files, rng)
    cpu, cuda = _both(files, windows, 224, mean=MEAN, std=STD, dtype=dtype, flips=[True, False] * 5)
    assert cuda.dtype == dtype
    assert torch.equal(cuda.cpu(), cpu)


def test_original_files_grey_output_and_exif_give_the_cpu_pixels():
    rng = random.Random(3)
    files = [_photo(rng.randint(30, 260), rng.randint(30, 260), s, i, prepared=False) for i, s in enumerate(SAMPLINGS)]
    files += [_photo(120, 90, "4:4:4", 9, prepared=True, gray=True)]
    files = [_tensor(with_exif_orientation(bytes(f.numpy()), o)) for f, o in zip(files, [1, 3, 5, 6, 8, 2])]
    windows = _windows(files, rng, exif=True)
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY):
        cpu, cuda = _both(files, windows, (40, 50), mode=mode, apply_exif_orientation=True, flips=[True] * 6)
        assert torch.equal(cuda.cpu(), cpu), mode


def test_centre_crop_transform_batch_on_the_gpu_equals_the_cpu():
    sizes = [(300, 400), (500, 333), (257, 256)]
    files = [_photo(h, w, "4:2:0", i, prepared=True) for i, (h, w) in enumerate(sizes)]
    t = custom_op.ResizeCenterCropJpeg(256, 224)
    cpu = t.batch(files)
    cuda = t.batch(files, device="cuda")
    assert torch.equal(cuda.cpu(), cpu)
    assert torch.equal(cpu, torch.stack([t(f) for f in files]))


def _resized_crop_on_gpu(files, windows, **options):
    """The CUDA operator's 64x64 RGB uint8 resized crop of each window (top, left, height, width), at the
    automatic scale, with `options` (the operator's decoder, say): the images, the statuses and the name of
    each item's path."""
    images, status, _, paths = torch.ops.custom_op.decode_and_resized_crop_jpegs_cuda(
        files,
        *(list(v) for v in zip(*windows)),
        size=[64, 64],
        resize_shorter=0,
        scale=0,
        filter=1,
        antialias=True,
        flips=[],
        mean=[],
        std=[],
        dtype=0,
        mode=int(ImageReadMode.RGB),
        apply_exif_orientation=False,
        on_warning=0,
        max_pixels=0,
        device=torch.cuda.current_device(),
        **options,
    )
    return images, status, [gpu.PATH_NAMES[p & ~gpu.SEGMENTS_FLAG] for p in paths]


def test_prepared_files_take_our_cuda_decoder():
    files = [_photo(200, 300, "4:2:0", i, prepared=True) for i in range(4)]
    images, status, names = _resized_crop_on_gpu(files, [(10, 20, 150, 200)] * 4)
    assert status == [0] * 4
    assert images.shape == (4, 3, 64, 64)
    assert all(name == "cuda" for name in names), names


@pytest.mark.parametrize("gpu_decoder", ["auto", "cuda", "nvjpeg"])
def test_gpu_decoder_chooses_who_decodes_and_at_what_scale(gpu_decoder):
    """Files without restart markers and prepared copies of them: with gpu_decoder="auto" (the default) or
    "cuda" our CUDA decoder takes both, at the automatic scale, with the CPU call's pixels; with "nvjpeg"
    nvJPEG takes both (scale 8, the CPU call's pixels with scale=8)."""
    originals = [_photo(240, 320, "4:2:0", 20 + i, prepared=False) for i in range(3)]
    files = originals + [_tensor(custom_op.prepare_jpeg(f.numpy().tobytes())) for f in originals]
    windows = [(10, 20, 200, 260)] * len(files)
    images, status, names = _resized_crop_on_gpu(files, windows, decoder=custom_op._args.GPU_DECODERS[gpu_decoder])
    assert status == [0] * len(files)
    ours = [name == "cuda" for name in names]
    expected = {"cuda": [True] * 6, "nvjpeg": [False] * 6, "auto": [True] * 6}[gpu_decoder]
    assert ours == expected, names
    for image, f, window, by_us in zip(images, files, windows, ours):
        cpu = custom_op.decode_and_resized_crop_jpeg(f, *window, 64, scale=None if by_us else 8)
        assert torch.equal(image.cpu(), cpu), (gpu_decoder, names)
    public = custom_op.decode_and_resized_crop_jpegs(
        files, *(list(v) for v in zip(*windows)), 64, device="cuda", gpu_decoder=gpu_decoder
    )
    assert torch.equal(public.cpu(), images.cpu())


@pytest.mark.parametrize("window_bytes", [1, 3_000])
def test_windows_decoded_again_after_their_first_try_give_the_cpu_pixels(window_bytes):
    """Original files (decoded in chunks) whose windows' first tries take only window_bytes of the scan, at every
    scale: the windows they fall short for are decoded again with the whole file, with the CPU call's pixels."""
    from custom_op import testing

    rng = random.Random(11)
    files = [_photo(rng.randint(200, 400), rng.randint(200, 400), "4:2:0", 40 + i, prepared=False) for i in range(6)]
    windows = _windows(files, rng)
    retries = testing.cuda_decoder_retries()
    for scale in (None, 2, 8):
        with testing.gpu_options(force_path="cuda", window_bytes=window_bytes):
            cpu, cuda = _both(files, windows, 64, scale=scale, flips=[True, False] * 3)
        assert torch.equal(cuda.cpu(), cpu), scale
    assert testing.cuda_decoder_retries() > retries


def test_a_damaged_item_fails_alone_and_its_slot_is_zero():
    good = [_photo(200, 200, "4:2:0", i, prepared=True) for i in range(3)]
    bad = good[1].clone()
    bad[len(bad) // 2 :] = 0
    files = [good[0], bad, good[2]]
    windows = [(0, 0, 150, 150)] * 3
    tops, lefts, heights, widths = (list(v) for v in zip(*windows))
    kwargs = dict(on_error="return", on_warning="raise")
    cpu, cpu_errors = custom_op.decode_and_resized_crop_jpegs(files, tops, lefts, heights, widths, 64, **kwargs)
    cuda, cuda_errors = custom_op.decode_and_resized_crop_jpegs(
        files, tops, lefts, heights, widths, 64, device="cuda", **kwargs
    )
    assert torch.equal(cuda.cpu(), cpu)
    assert [type(e) for e in cuda_errors] == [type(e) for e in cpu_errors]
    assert cuda_errors[1] is not None and cuda_errors[0] is None and cuda_errors[2] is None
    assert not cuda[1].any()


@pytest.mark.parametrize("on_error", ["raise", "return"])
def test_bad_tensors_are_their_items_type_errors(on_error):
    # A batch of tensors reaches the CUDA operator unchecked by Python, as in the window decode; the
    # operator checks each one.
    good = _photo(120, 120, "4:2:0", 0, prepared=True)
    doubled = good.repeat_interleave(2)
    bad = {
        "float32": good.float(),
        "2-D": good[: good.numel() // 2 * 2].reshape(2, -1),
        "0-D": good[0],
        "non-contiguous": doubled[::2],
        "on the GPU": good.cuda(),
        "sparse": good.to_sparse(),
    }
    expected = custom_op.decode_and_resized_crop_jpegs([good], 0, 0, 100, 100, 32)[0]
    for name, item in bad.items():
        files = [good, item, good]
        if on_error == "raise":
            with pytest.raises(TypeError, match="batch item 1: .*data must"):
                custom_op.decode_and_resized_crop_jpegs(files, 0, 0, 100, 100, 32, device="cuda")
            continue
        out, errors = custom_op.decode_and_resized_crop_jpegs(
            files, 0, 0, 100, 100, 32, device="cuda", on_error="return"
        )
        assert isinstance(errors[1], TypeError) and "batch item 1: " in str(errors[1]), (name, errors[1])
        assert errors[0] is None and errors[2] is None, name
        assert torch.equal(out[0].cpu(), expected) and torch.equal(out[2].cpu(), expected), name
        assert not out[1].any(), name


@pytest.mark.parametrize(
    "kwargs",
    [dict(scale=3), dict(size=0), dict(mean=MEAN, std=STD), dict(mean=MEAN, std=(1, 0, 1), dtype=torch.float32)],
)
def test_bad_arguments_raise_before_any_work(kwargs):
    files = [_photo(64, 64, "4:2:0", 0, prepared=True)]
    args = dict(size=32)
    args.update(kwargs)
    size = args.pop("size")
    with pytest.raises((ValueError, TypeError)):
        custom_op.decode_and_resized_crop_jpegs(files, [0], [0], [64], [64], size, device="cuda", **args)


@pytest.mark.parametrize("filter_code", range(6))
def test_resize_box_on_cuda_equals_the_cpu_kernel(filter_code):
    """resize_box on CUDA tensors: the CPU kernel's pixels, for every filter (Hamming's and Lanczos's
    taps come from the host, the others' from the GPU), boxes with fractional edges, windows of the
    output, flips, and a batch [N, C, H, W] in one call."""
    rng = random.Random(filter_code)
    for _ in range(12):
        c, h, w = rng.choice([1, 3]), rng.randint(1, 300), rng.randint(1, 300)
        image = torch.randint(0, 256, (rng.randint(1, 4), c, h, w), dtype=torch.uint8)
        top, left = rng.uniform(0, h / 3), rng.uniform(0, w / 3)
        box = [top, left, rng.uniform(top + 0.5, h), rng.uniform(left + 0.5, w)]
        size = [rng.randint(1, 250), rng.randint(1, 250)]
        wt, wl = rng.randint(0, size[0] - 1), rng.randint(0, size[1] - 1)
        kwargs = dict(
            box=box,
            size=size,
            out_window=[wt, wl, rng.randint(1, size[0] - wt), rng.randint(1, size[1] - wl)],
            origin=[0, 0],
            filter=filter_code,
            antialias=rng.random() < 0.8,
            flip=rng.random() < 0.5,
        )
        cpu = torch.ops.custom_op.resize_box(image, **kwargs)
        cuda = torch.ops.custom_op.resize_box(image.cuda(), **kwargs)
        assert cuda.device.type == "cuda" and torch.equal(cuda.cpu(), cpu), kwargs
        assert torch.equal(torch.ops.custom_op.resize_box(image[0].cuda(), **kwargs).cpu(), cpu[0])
