"""The GPU backend (our CUDA decoder, and nvJPEG with gpu_decoder="nvjpeg"): same windows and pixels as
the CPU path, CPU fallback, batches, errors that name the item, stream order, chroma edges at window
borders, files prepared for random access, threads, and no leak. Tests that need a GPU skip with the
reason on machines without CUDA; run them on a GPU machine with bench/device_run.sh. The checks of the
operator's fake kernel and of the API's answers without a GPU run everywhere.

Pixels: our CUDA decoder ("cuda"), the JPEG engines' paths ("hardware-roi", "hardware-full") and the
CPU fallback ("cpu") must equal the CPU path exactly. nvJPEG's single-image hybrid decoders
("gpu-hybrid", "hybrid": the engines' leftovers, progressive files with gpu_decoder="nvjpeg", GPUs
without engines) do their own IDCT and chroma upsampling and are only held to a bound (measured: max 3
levels, PSNR 60-62 dB on progressive files).

Numbers worth keeping (accuracy per path and subsampling, the chroma edge with and without margin,
memory over many calls) go to the JSON file named by $CUSTOM_OP_GPU_REPORT when set.
"""

import io
import json
import os
import struct
import subprocess
import sys
import threading
import warnings
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
import damaged_jpegs
import photo_data
import restart_segments as rs
from conftest import assert_op_raises, held_on_another_thread, shared_dir
from custom_op import ImageReadMode, gpu, testing
from jpeg_factory import with_exif_orientation

REASON = gpu.unavailable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"GPU backend unavailable here: {REASON}")

REPORT = {}
# The bound for the hybrid decoders (the issue's accuracy bar); the other paths must be exact.
MIN_PSNR_DB = 40.0
MAX_MEAN_ABS = 0.5
EXACT_PATHS = {"cuda", "hardware-roi", "hardware-full", "cpu"}


@pytest.fixture(scope="module", autouse=True)
def write_report():
    yield
    path = os.environ.get("CUSTOM_OP_GPU_REPORT")
    if path and REPORT:
        with open(path, "w") as f:
            json.dump(REPORT, f, indent=1, sort_keys=True, default=str)


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def has_engines() -> bool:
    return gpu.backend_info().hardware


def base_path(path: str) -> str:
    """The decoder of a path name, without "+segments"."""
    return path.split("+")[0]


class Stats:
    """Accumulated |GPU - CPU| over many windows: max, mean and PSNR."""

    def __init__(self):
        self.max = 0
        self.sum = 0.0
        self.sq = 0.0
        self.n = 0
        self.windows = 0
        self.first_bad = None

    def add(self, a: torch.Tensor, b: torch.Tensor, label=None):
        assert a.shape == b.shape, (label, a.shape, b.shape)
        d = (a.cpu().to(torch.int32) - b.cpu().to(torch.int32)).abs()
        worst = int(d.max()) if d.numel() else 0
        if worst and self.first_bad is None:
            self.first_bad = (label, worst)
        self.max = max(self.max, worst)
        self.sum += float(d.sum())
        self.sq += float((d.to(torch.float64) ** 2).sum())
        self.n += d.numel()
        self.windows += 1

    @property
    def mean(self):
        return self.sum / max(self.n, 1)

    @property
    def psnr(self):
        mse = self.sq / max(self.n, 1)
        return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)

    def as_dict(self):
        return {
            "max_abs": self.max,
            "mean_abs": round(self.mean, 4),
            "psnr_db": round(self.psnr, 2),
            "values": self.n,
            "windows": self.windows,
            "first_differing": self.first_bad,
        }


class AgainstCpu:
    """GPU outputs against the CPU path's, grouped by the path that decoded them (and a label):
    identical for the exact paths, within the bound for the hybrid decoders."""

    def __init__(self):
        self.stats = defaultdict(Stats)

    def add(self, out: torch.Tensor, ref: torch.Tensor, path: str, key: str = "", label=None):
        assert out.device.type == "cuda" and out.dtype == torch.uint8 and out.is_contiguous(), (path, label)
        self.stats[(base_path(path), f"{path} {key}".strip())].add(out, ref, label)

    def check(self):
        for (decoder, name), s in self.stats.items():
            if decoder in EXACT_PATHS:
                assert s.max == 0, (name, s.as_dict())
            else:
                assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, (name, s.as_dict())

    def as_dict(self):
        return {name: s.as_dict() for (_, name), s in sorted(self.stats.items())}


def on_gpu_with_path(data, window, **options):
    """One window on the GPU and the path that decoded it."""
    (out,), (path,) = testing.decode_with_paths([data], *([v] for v in window), device="cuda", **options)
    return out, path


def whole_on_gpu(data, **options):
    """decode_jpeg(device="cuda") and its path (that of the same image asked for as one full window,
    which must give the same pixels)."""
    out = custom_op.decode_jpeg(data, device="cuda", **options)
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=options.get("apply_exif_orientation", False))
    full, path = on_gpu_with_path(data, (0, 0, info.height, info.width), **options)
    assert torch.equal(out, full), path
    return out, path


def random_window(rng, height, width, size=224):
    h, w = min(size, height), min(size, width)
    return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w


def subsampling_name(data: bytes) -> str:
    info = custom_op.read_jpeg_header(data)
    return ("progressive " if info.progressive else "") + info.subsampling


def small_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (10, 200, 30)).save(buf, "JPEG")
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------
# Without a GPU: importing stays CPU-only, and device="cuda" says why it cannot run


def test_import_does_not_load_the_gpu_backend():
    """The operator's schema and fake kernel exist from import; its kernel, CUDA and nvJPEG only come
    with the first device="cuda" call."""
    code = (
        "import torch, custom_op; from custom_op import gpu; "
        "has = torch._C._dispatch_has_kernel_for_dispatch_key; op = 'custom_op::decode_jpegs_cuda'; "
        "print(hasattr(torch.ops.custom_op, 'decode_jpegs_cuda'), has(op, 'Meta'), "
        "has(op, 'CompositeExplicitAutograd'), bool(gpu._loaded), torch.cuda.is_initialized())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "False", "False"]


@pytest.mark.skipif(REASON is None, reason="this machine has a working GPU backend")
def test_cuda_device_raises_with_the_reason():
    data = small_jpeg()
    with pytest.raises(RuntimeError, match="GPU .*backend cannot run here"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8, device="cuda")
    with pytest.raises(RuntimeError, match="GPU .*backend cannot run here"):
        custom_op.decode_and_crop_jpegs([data] * 2, 0, 0, 8, 8, device="cuda")
    with pytest.raises(RuntimeError, match="GPU .*backend cannot run here"):
        custom_op.decode_jpegs([data], device="cuda")
    assert not gpu.cuda_available()
    info = gpu.backend_info()  # never raises for a missing GPU
    assert not info.available and info.reason == REASON and not info.hardware and info.nvjpeg_version is None
    # The testing hooks load the GPU library, so they raise the same way (after checking their values).
    with pytest.raises(RuntimeError, match="GPU backend"):
        with testing.gpu_options(dedupe=False):
            pass
    # The batched form works on the CPU everywhere.
    out = custom_op.decode_and_crop_jpegs([data] * 2, 0, 0, 8, 8, device="cpu", stack=True)
    assert out.shape == (2, 3, 8, 8)


def test_calls_name_the_batched_api():
    """Checked before the device is, so on any machine."""
    data = small_jpeg()
    with pytest.raises(TypeError, match="custom_op.decode_and_crop_jpegs"):
        custom_op.decode_and_crop_jpeg([data, data], 0, 0, 8, 8, device="cuda")
    with pytest.raises(TypeError, match="custom_op.decode_jpegs"):
        custom_op.decode_jpeg([data], device="cuda")
    for name in ("decode_and_crop_jpegs", "decode_jpegs"):
        with pytest.raises(AttributeError, match=rf"custom_op\.{name}\(\.\.\., device='cuda'\)"):
            getattr(gpu, name)


def test_testing_options_check_their_values():
    for bad in (dict(force_path="failed"), dict(force_path="gpu-batched"), dict(force_path="hardware")):
        with pytest.raises(ValueError, match="force_path"):
            with testing.gpu_options(**bad):
                pass
    with pytest.raises(ValueError, match="segments"):
        with testing.gpu_options(segments="sometimes"):
            pass
    for bad in (0, -1, 1 << 21, 1.5):
        with pytest.raises(ValueError, match="chunk_bytes"):
            with testing.gpu_options(chunk_bytes=bad):
                pass
    with pytest.raises(ValueError, match="engines"):
        with testing.gpu_options(engines="no"):
            pass
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="window_bytes"):
            with testing.gpu_options(window_bytes=bad):
                pass


def _gpu_testing_now() -> list[int]:
    """The backend's testing options (the operator's codes), read by setting them back to what they are."""
    ops = torch.ops.custom_op
    now = ops._set_gpu_testing(
        force_path=-1, no_margin=False, no_dedupe=False, segments=0, chunk_bytes=0, hide_engines=False, window_bytes=0
    )
    ops._set_gpu_testing(
        force_path=now[0],
        no_margin=bool(now[1]),
        no_dedupe=bool(now[2]),
        segments=now[3],
        chunk_bytes=now[4],
        hide_engines=bool(now[5]),
        window_bytes=now[6],
    )
    return list(now)


@needs_gpu
def test_testing_options_held_by_overlapping_threads_come_back():
    """gpu_options entered on two threads at once (as a decode function under decode_ahead enters it), the
    first to enter ending first: the options hold until the second ends, then come back; other options
    asked for meanwhile raise (tests/test_testing.py has the rest, on any machine)."""
    defaults = _gpu_testing_now()
    with held_on_another_thread(lambda: testing.gpu_options(dedupe=False)) as release_first:
        with pytest.raises(RuntimeError, match="another thread"):
            with testing.gpu_options(force_path="cpu"):
                pass
        with testing.gpu_options(dedupe=False):
            release_first()
            assert _gpu_testing_now()[2] == 1  # no_dedupe: still the second block's
    assert _gpu_testing_now() == defaults


# ---------------------------------------------------------------------------------------------------
# The operator as PyTorch sees it: its fake kernel (on any machine: the schema comes with the CPU
# library), opcheck and torch.compile (on the GPU)


def _fake_call(n, heights, widths, mode, device=0, stack=False, whole=False):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as fake_mode:
        data = [fake_mode.from_tensor(torch.zeros(100, dtype=torch.uint8)) for _ in range(n)]
        windows = ([], [], [], []) if whole else ([0] * n, [0] * n, heights, widths)
        return torch.ops.custom_op.decode_jpegs_cuda(
            data, *windows, whole=whole, stack=stack, device=device, **_decode_options(mode)
        )


def test_fake_kernel_shapes_and_device():
    # Fake tensors on a device this machine has (FakeTensorMode checks the index where CUDA is there).
    index = 1 if not torch.cuda.is_available() or torch.cuda.device_count() > 1 else 0
    outs, statuses, messages, paths = _fake_call(3, [10, 20, 30], [5, 6, 7], ImageReadMode.RGB, device=index)
    assert [tuple(o.shape) for o in outs] == [(3, 10, 5), (3, 20, 6), (3, 30, 7)]
    assert all(o.dtype == torch.uint8 and o.device == torch.device("cuda", index) and o.is_contiguous() for o in outs)
    # Windows in RGB or GRAY: views of one allocation, each from a multiple of 256 bytes, as the operator
    # makes them (test_windows_of_a_list_are_views_of_one_allocation).
    assert len({o.untyped_storage()._cdata for o in outs}) == 1
    assert [o.storage_offset() for o in outs] == [0, 256, 256 + 512]
    # Whether an item decodes, and where, is known only once it has run.
    assert statuses == [0] * 3 and messages == [""] * 3 and paths == [-1] * 3
    (stacked,), _, _, _ = _fake_call(4, [16] * 4, [24] * 4, ImageReadMode.GRAY, stack=True)
    assert tuple(stacked.shape) == (4, 1, 16, 24) and stacked.device == torch.device("cuda", 0)
    # UNCHANGED: the channel count comes from each file; whole images: so does the size.
    outs, _, _, _ = _fake_call(2, [8, 8], [9, 9], ImageReadMode.UNCHANGED)
    assert [tuple(o.shape[1:]) for o in outs] == [(8, 9), (8, 9)]
    assert all(not isinstance(o.shape[0], int) for o in outs)
    assert len({o.untyped_storage()._cdata for o in outs}) == 2  # shapes from the files: one allocation each
    (whole,), _, _, _ = _fake_call(2, None, None, ImageReadMode.RGB, stack=True, whole=True)
    assert whole.shape[:2] == (2, 3) and not isinstance(whole.shape[2], int) and not isinstance(whole.shape[3], int)
    outs, _, _, _ = _fake_call(2, None, None, ImageReadMode.GRAY, whole=True)
    assert len(outs) == 2 and all(o.shape[0] == 1 and not isinstance(o.shape[1], int) for o in outs)
    (empty,), statuses, messages, paths = _fake_call(0, [], [], ImageReadMode.RGB, stack=True)
    assert empty.numel() == 0 and statuses == messages == paths == []
    outs, _, _, _ = _fake_call(0, [], [], ImageReadMode.RGB)
    assert outs == []


def test_fake_kernel_rejects_what_the_operator_rejects():
    with pytest.raises(ValueError, match="one entry per image"):
        _fake_call(2, [8], [8, 8], ImageReadMode.RGB)
    with pytest.raises(ValueError, match="one size"):
        _fake_call(2, [8, 9], [8, 8], ImageReadMode.RGB, stack=True)
    with pytest.raises(ValueError, match="mode code"):
        _fake_call(1, [8], [8], 7)


def _decode_options(mode) -> dict:
    """The decoding options as the operators take them: by name."""
    return dict(mode=int(mode), apply_exif_orientation=False, on_warning=0, max_pixels=0)


def _op_args(datas, wins, mode, stack=False, whole=False):
    """The CUDA operator's positional and keyword arguments."""
    windows = ([], [], [], []) if whole else tuple(list(v) for v in zip(*wins))
    kwargs = dict(whole=whole, stack=stack, device=torch.cuda.current_device(), **_decode_options(mode))
    return ([as_tensor(d) for d in datas], *windows), kwargs


# test_aot_dispatch_dynamic is left out: AOTAutograd (like Dynamo) cannot carry the operator's str[]
# output (its per-item messages), so the operator cannot be part of a compiled graph.
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
@pytest.mark.parametrize("form", ["list", "stack", "whole"])
def test_opcheck_batched_op(jpeg_writer, mode, form):
    color = [
        jpeg_writer.encode(jpeg_writer.photo_like(64 + 8 * i, 80, seed=i), **options)
        for i, options in enumerate([dict(sampling="4:2:0"), dict(sampling="4:4:4"), dict(arithmetic=True)])
    ]  # arithmetic coding takes the CPU path
    gray = jpeg_writer.encode(jpeg_writer.photo_like(72, 96, 1, seed=3))
    if form == "stack":  # one size and, for UNCHANGED, one channel count
        datas, wins = color, [(0, 0, 48, 64), (5, 7, 48, 64), (9, 3, 48, 64)]
    else:
        datas, wins = color + [gray], [(0, 0, 48, 64), (5, 7, 40, 33), (1, 2, 3, 4), (10, 20, 50, 60)]
    args, kwargs = _op_args(datas, wins, mode, stack=form == "stack", whole=form == "whole")
    outs, statuses, messages, paths = torch.ops.custom_op.decode_jpegs_cuda(*args, **kwargs)
    assert statuses == [0] * len(datas) and messages == [""] * len(datas), messages
    assert len(outs) == (1 if form == "stack" else len(datas))
    assert paths[2] == custom_op._device.CPU_PATH and all(p >= 0 for p in paths)
    op = torch.ops.custom_op.decode_jpegs_cuda.default
    torch.library.opcheck(op, args, kwargs, test_utils=OPCHECK_UTILS)
    torch.library.opcheck(op, args, dict(kwargs, check_entropy=True), test_utils=OPCHECK_UTILS)


@needs_gpu
def test_empty_batches_match_the_fake_kernel():
    dev = torch.cuda.current_device()
    options = _decode_options(ImageReadMode.RGB)
    (stacked,), statuses, messages, paths = torch.ops.custom_op.decode_jpegs_cuda(
        [], [], [], [], [], whole=False, stack=True, device=dev, **options
    )
    assert stacked.numel() == 0 and stacked.device == torch.device("cuda", dev)
    assert statuses == messages == paths == []
    assert (
        torch.ops.custom_op.decode_jpegs_cuda([], [], [], [], [], whole=False, stack=False, device=dev, **options)[0]
        == []
    )


@needs_gpu
def test_torch_compile_runs_the_batched_call(jpeg_writer):
    """The operator returns its messages as str[], which Dynamo cannot put in a graph ("torch.* op
    returned non-Tensor"), so torch.compile(fullgraph=True) fails for the operator and for the public
    call alike. With graph breaks allowed (the default), compiled code around a batched decode gives
    the eager result."""
    datas = [as_tensor(jpeg_writer.encode(jpeg_writer.photo_like(64, 80, seed=i))) for i in range(3)]

    def step(datas):
        batch = custom_op.decode_and_crop_jpegs(datas, [0, 3, 5], [1, 2, 4], 32, 40, device="cuda", stack=True)
        return batch.float().div(255).sub(0.5)

    expected = step(datas)
    compiled = torch.compile(step, backend="aot_eager")
    assert torch.equal(compiled(datas), expected)
    assert torch.equal(compiled(datas), expected)  # the second call runs the cached graphs


# ---------------------------------------------------------------------------------------------------
# Backend


@needs_gpu
def test_backend_info():
    info = gpu.backend_info()
    REPORT["backend"] = info._asdict()
    REPORT["device"] = torch.cuda.get_device_name()
    assert info.available and info.reason is None and info.library.get("path")
    assert info.nvjpeg_version.split(".")[0].isdigit()
    assert info.torch_allocators is True
    if any(name in torch.cuda.get_device_name() for name in ("H100", "H200", "A100")):
        assert info.hardware and info.hardware_engines >= 1, info
    if not info.hardware:
        assert info.hardware_note, info
    assert gpu.backend_info(torch.cuda.current_device()) == info
    with pytest.raises(ValueError, match="CUDA device"):
        gpu.backend_info("cpu")


# ---------------------------------------------------------------------------------------------------
# Accuracy and geometry against the CPU path


@needs_gpu
@pytest.mark.parametrize("gpu_decoder", ["auto", "nvjpeg"])
def test_imagenet_sample_against_cpu(gpu_decoder):
    files = sorted(shared_dir("imagenet-sample").iterdir())
    rng = np.random.default_rng(0)
    against = AgainstCpu()
    paths = defaultdict(int)
    datas = [f.read_bytes() for f in files]
    windows = []
    for data in datas:
        info = custom_op.read_jpeg_header(data)
        windows.append(random_window(rng, info.height, info.width))
    for start in range(0, len(datas), 64):
        chunk = datas[start : start + 64]
        wins = windows[start : start + 64]
        outs, used = testing.decode_with_paths(chunk, *zip(*wins), device="cuda", gpu_decoder=gpu_decoder)
        for k, (data, win, out, path) in enumerate(zip(chunk, wins, outs, used)):
            against.add(
                out,
                custom_op.decode_and_crop_jpeg(data, *win),
                path,
                subsampling_name(data),
                label=(files[start + k].name, win),
            )
            paths[path] += 1
    # Whole images too: every edge of the image is a window edge.
    for k in range(0, len(datas), 10):
        out, path = whole_on_gpu(datas[k], gpu_decoder=gpu_decoder)
        against.add(
            out,
            custom_op.decode_jpeg(datas[k]),
            path,
            subsampling_name(datas[k]) + " (whole image)",
            label=files[k].name,
        )
    REPORT[f"imagenet_sample_224_windows_{gpu_decoder}"] = against.as_dict()
    REPORT[f"imagenet_sample_paths_{gpu_decoder}"] = dict(paths)
    against.check()
    if gpu_decoder == "auto":
        assert paths["cuda"] > len(datas) * 9 // 10, dict(paths)
    elif has_engines():
        assert paths["hardware-roi"] + paths["hardware-full"] > len(datas) // 2, dict(paths)


VARIANTS = {
    "4:4:4": dict(sampling="4:4:4"),
    "4:2:2": dict(sampling="4:2:2"),
    "4:2:0": dict(sampling="4:2:0"),
    "4:4:0": dict(sampling="4:4:0"),
    "4:2:0 q75": dict(sampling="4:2:0", quality=75),
    "4:2:0 restarts": dict(sampling="4:2:0", restart_rows=1),
    "4:2:0 progressive": dict(sampling="4:2:0", progressive=True),
    "4:4:4 progressive": dict(sampling="4:4:4", progressive=True),
    "4:2:0 optimized": dict(sampling="4:2:0", optimize=True),
}


@needs_gpu
@pytest.mark.parametrize("gpu_decoder", ["auto", "nvjpeg"])
@pytest.mark.parametrize("size", [(301, 403), (64, 1000)])
def test_generated_variants_against_cpu(jpeg_writer, size, gpu_decoder):
    rng = np.random.default_rng(1)
    height, width = size
    pixels = jpeg_writer.photo_like(height, width, seed=4)
    against = AgainstCpu()
    for name, options in VARIANTS.items():
        data = jpeg_writer.encode(pixels, **options)
        wins = [random_window(rng, height, width, s) for s in (1, 7, 33, 100, 224, 1000) for _ in range(3)]
        wins += [(0, 0, height, width), (height - 1, width - 1, 1, 1), (0, width - 5, height, 5)]
        # One ROI decode per window (a repeated file is otherwise decoded once for all its windows).
        with testing.gpu_options(dedupe=False):
            outs, used = testing.decode_with_paths(
                [data] * len(wins), *zip(*wins), device="cuda", gpu_decoder=gpu_decoder
            )
        if gpu_decoder == "auto":  # our CUDA decoder; progressive files, exact only there, the CPU path
            assert set(used) == {"cpu" if "progressive" in name else "cuda"}, (name, used)
        else:
            assert "cpu" not in used, (name, used)
            if has_engines() and "progressive" not in name:
                assert {base_path(p) for p in used} <= {"hardware-roi", "hardware-full"}, (name, used)
        for win, out, path in zip(wins, outs, used):
            against.add(out, custom_op.decode_and_crop_jpeg(data, *win), path, name, label=win)
    gray = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 1, seed=5))
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED):
        win = (3, 5, height - 6, width - 9)
        out, path = on_gpu_with_path(gray, win, mode=mode, gpu_decoder=gpu_decoder)
        against.add(out, custom_op.decode_and_crop_jpeg(gray, *win, mode=mode), path, f"gray {mode.name}")
    REPORT[f"generated_{height}x{width}_{gpu_decoder}"] = against.as_dict()
    against.check()


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_modes_give_the_cpu_channels(jpeg_writer, mode):
    against = AgainstCpu()
    for sampling in ("4:2:0", "4:4:4", "4:2:2", "4:4:0"):
        data = jpeg_writer.encode(jpeg_writer.photo_like(90, 70, seed=2), sampling=sampling)
        out, path = on_gpu_with_path(data, (10, 20, 50, 40), mode=mode)
        against.add(out, custom_op.decode_and_crop_jpeg(data, 10, 20, 50, 40, mode=mode), path, sampling)
    gray = jpeg_writer.encode(jpeg_writer.photo_like(90, 70, 1, seed=2))
    out, path = on_gpu_with_path(gray, (10, 20, 50, 40), mode=mode)
    assert out.shape[0] == (3 if mode == ImageReadMode.RGB else 1)
    against.add(out, custom_op.decode_and_crop_jpeg(gray, 10, 20, 50, 40, mode=mode), path, "gray")
    against.check()


@needs_gpu
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation(jpeg_writer, orientation):
    data = with_exif_orientation(
        jpeg_writer.encode(jpeg_writer.photo_like(37, 61, seed=7), sampling="4:2:0"), orientation
    )
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
    rng = np.random.default_rng(orientation)
    wins = [random_window(rng, info.height, info.width, s) for s in (1, 5, 20, 64) for _ in range(4)]
    outs, used = testing.decode_with_paths([data] * len(wins), *zip(*wins), apply_exif_orientation=True, device="cuda")
    against = AgainstCpu()
    for win, out, path in zip(wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(data, *win, apply_exif_orientation=True), path, label=win)
    full, path = whole_on_gpu(data, apply_exif_orientation=True)
    assert full.shape[1:] == (info.height, info.width)
    against.add(full, custom_op.decode_jpeg(data, apply_exif_orientation=True), path, "whole image")
    against.check()
    with pytest.raises(ValueError, match="does not fit"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, info.height + 1, 1, apply_exif_orientation=True, device="cuda")


@needs_gpu
def test_real_exif_files():
    folder = shared_dir("odd-jpegs")
    against = AgainstCpu()
    for name in ("hopper_orientation_3.jpg", "hopper_orientation_6.jpg"):
        data = (folder / name).read_bytes()
        out, path = whole_on_gpu(data, apply_exif_orientation=True)
        against.add(out, custom_op.decode_jpeg(data, apply_exif_orientation=True), path, name)
    against.check()


@needs_gpu
@pytest.mark.parametrize("force_path", ["hardware-roi", "hardware-full", "gpu-hybrid", "hybrid", "cpu"])
def test_each_forced_path_against_cpu(jpeg_writer, force_path):
    """testing.gpu_options(force_path=...) sends every item nvJPEG may take to that decoder (an
    absent one passes its items on); each decoder's pixels against the CPU path; the settings are
    restored after the block."""
    datas = [
        jpeg_writer.encode(jpeg_writer.photo_like(120 + 8 * i, 150, seed=40 + i), sampling=s)
        for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:4:0"])
    ]
    datas.append(jpeg_writer.encode(jpeg_writer.photo_like(1100, 1000, seed=44), sampling="4:2:0"))  # > 1 Mpixel
    datas.append(jpeg_writer.encode(jpeg_writer.photo_like(100, 140, 1, seed=45)))
    wins = [(7, 9, 60, 70)] * len(datas)
    with testing.gpu_options(force_path=force_path):
        outs, used = testing.decode_with_paths(datas, *zip(*wins), device="cuda")
    allowed = {
        "hardware-roi": {"hardware-roi", "hardware-full", "gpu-hybrid", "hybrid"},
        "hardware-full": {"hardware-full", "gpu-hybrid", "hybrid"},
        "gpu-hybrid": {"gpu-hybrid", "hybrid"},
        "hybrid": {"hybrid"},
        "cpu": {"cpu"},
    }[force_path]
    assert set(used) <= allowed | {"cpu"}, used
    if force_path in ("hybrid", "cpu"):
        assert set(used) == {force_path}, used
    if force_path == "hardware-full" and has_engines():
        assert "hardware-full" in used and "hardware-roi" not in used, used
    if force_path == "gpu-hybrid":
        assert used[4] == "gpu-hybrid" and used[0] == "hybrid", used  # the hybrid decoders choose by size
    against = AgainstCpu()
    for data, win, out, path in zip(datas, wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(data, *win), path, subsampling_name(data))
    REPORT.setdefault("forced_paths", {})[force_path] = against.as_dict()
    against.check()
    _, after = testing.decode_with_paths(datas, *zip(*wins), device="cuda")
    assert "cpu" not in after, after


# ---------------------------------------------------------------------------------------------------
# CPU fallback: what nvJPEG should not or cannot decode comes back as CUDA tensors all the same


@needs_gpu
def test_cpu_fallback_is_transparent(jpeg_writer):
    pixels = jpeg_writer.photo_like(40, 52, seed=9)
    cmyk = jpeg_writer.photo_like(40, 52, 4, seed=9)
    cases = {
        "arithmetic": jpeg_writer.encode(pixels, arithmetic=True),
        "rgb stored": jpeg_writer.encode(pixels, color_space="rgb"),
        "cmyk": jpeg_writer.encode(cmyk),
        "ycck": jpeg_writer.encode(cmyk, color_space="ycck"),
        "4:1:1": jpeg_writer.encode(pixels, sampling="4:1:1"),
    }
    odd = photo_data.real_odd_dir()
    if odd is not None and (odd / "pil_sample_cmyk.jpg").is_file():
        cases["pil cmyk"] = (odd / "pil_sample_cmyk.jpg").read_bytes()
    for name, data in cases.items():
        for mode in ImageReadMode:
            info = custom_op.read_jpeg_header(data)
            h, w = min(info.height, 30), min(info.width, 30)
            # nvJPEG does not take 4:1:1; our CUDA decoder does, unless gpu_decoder="nvjpeg".
            out, path = on_gpu_with_path(data, (3, 2, h - 3, w - 2), mode=mode, gpu_decoder="nvjpeg")
            ref = custom_op.decode_and_crop_jpeg(data, 3, 2, h - 3, w - 2, mode=mode)
            assert path == "cpu", (name, path)
            assert out.device.type == "cuda" and torch.equal(out.cpu(), ref), name


@needs_gpu
def test_truncated_file_follows_on_warning_like_the_cpu(jpeg_writer):
    data = jpeg_writer.encode(jpeg_writer.photo_like(64, 64, seed=3))
    cut = data[: len(data) * 2 // 3]
    with pytest.raises(RuntimeError, match="(?i)premature end|corrupt"):
        custom_op.decode_jpeg(cut, device="cuda")
    out = custom_op.decode_jpeg(cut, on_warning="ignore", device="cuda")
    assert torch.equal(out.cpu(), custom_op.decode_jpeg(cut, on_warning="ignore"))
    with pytest.warns(UserWarning, match="(?i)premature end|corrupt"):
        warned = custom_op.decode_jpeg(cut, on_warning="warn", device="cuda")
    assert torch.equal(warned, out)
    with pytest.warns(UserWarning, match="batch item 1: .*(?i:premature end|corrupt)"):
        listed = custom_op.decode_jpegs([data, cut], on_warning="warn", device="cuda")
    assert torch.equal(listed[1], out)
    with pytest.raises(RuntimeError, match="batch item 1: .*(?i:premature end|corrupt)"):
        custom_op.decode_jpegs([data, cut], device="cuda")


# ---------------------------------------------------------------------------------------------------
# Batches: lists, stacks, errors naming the item, no sticky CUDA error


@needs_gpu
def test_list_and_stack_agree(jpeg_writer):
    datas = [
        jpeg_writer.encode(jpeg_writer.photo_like(80 + i, 90, seed=i), sampling=s)
        for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:2:0"])
    ]
    tops, lefts = [0, 5, 10, 15], [1, 2, 3, 4]
    listed, used = testing.decode_with_paths(datas, tops, lefts, 64, 48, device="cuda")
    stacked = custom_op.decode_and_crop_jpegs(datas, tops, lefts, 64, 48, device="cuda", stack=True)
    assert isinstance(listed, list) and len(listed) == 4
    assert stacked.shape == (4, 3, 64, 48) and stacked.is_contiguous() and stacked.device.type == "cuda"
    for i in range(4):
        assert torch.equal(listed[i], stacked[i])
    # Windows as tensors and arrays, as on the CPU.
    again = custom_op.decode_and_crop_jpegs(
        datas, torch.tensor(tops), np.array(lefts), 64, 48, device="cuda", stack=True
    )
    assert torch.equal(again, stacked)
    with pytest.raises(ValueError, match="one size"):
        custom_op.decode_and_crop_jpegs(datas, 0, 0, [64, 64, 63, 64], 48, device="cuda", stack=True)
    gray = jpeg_writer.encode(jpeg_writer.photo_like(80, 90, 1, seed=1))
    with pytest.raises(ValueError, match="channel"):
        custom_op.decode_and_crop_jpegs([datas[0], gray], 0, 0, 8, 8, mode="UNCHANGED", device="cuda", stack=True)
    # Same pixels whichever way the batch is split; against the CPU's batched call.
    singles = [custom_op.decode_and_crop_jpeg(d, t, l, 64, 48, device="cuda") for d, t, l in zip(datas, tops, lefts)]
    for a, b in zip(singles, listed):
        assert torch.equal(a, b)
    on_cpu = custom_op.decode_and_crop_jpegs(datas, tops, lefts, 64, 48, device="cpu", stack=True)
    against = AgainstCpu()
    for out, ref, path in zip(listed, on_cpu, used):
        against.add(out, ref, path)
    wholes = custom_op.decode_jpegs(datas, device="cuda")
    for whole, data in zip(wholes, datas):
        single, path = whole_on_gpu(data)
        assert torch.equal(whole, single)
        against.add(whole, custom_op.decode_jpeg(data), path, "whole image")
    against.check()
    assert custom_op.decode_and_crop_jpegs([], [], [], [], [], device="cuda") == []
    empty = custom_op.decode_and_crop_jpegs([], 0, 0, 64, 48, device="cuda", stack=True)
    assert empty.shape == (0, 3, 64, 48) and empty.device.type == "cuda"


@needs_gpu
def test_bad_item_is_named_and_the_next_batch_is_fine(jpeg_writer):
    good = jpeg_writer.encode(jpeg_writer.photo_like(50, 60, seed=1))
    expected = custom_op.decode_and_crop_jpegs([good] * 3, 0, 0, 40, 40, device="cuda", stack=True)
    garbage = bytes(range(256)) * 4
    with pytest.raises(RuntimeError, match="batch item 1: .*"):
        custom_op.decode_and_crop_jpegs([good, garbage, good], 0, 0, 40, 40, device="cuda")
    with pytest.raises(ValueError, match="batch item 2: crop window .* does not fit"):
        custom_op.decode_and_crop_jpegs([good, good, good], [0, 0, 30], 0, 40, 40, device="cuda")
    with pytest.raises(TypeError, match="batch item 0: .*data must"):
        custom_op.decode_and_crop_jpegs([np.zeros(8, np.int32), good], 0, 0, 4, 4, device="cuda")
    with pytest.raises(ValueError, match="batch item 1: .*max_pixels"):
        big = jpeg_writer.encode(jpeg_writer.photo_like(100, 100, seed=1))
        custom_op.decode_and_crop_jpegs([good, big], 0, 0, 4, 4, max_pixels=5000, device="cuda")
    # A single image's message names no item.
    with pytest.raises(ValueError, match=r"^custom_op: crop window"):
        custom_op.decode_and_crop_jpeg(good, 30, 0, 40, 40, device="cuda")
    again = custom_op.decode_and_crop_jpegs([good] * 3, 0, 0, 40, 40, device="cuda", stack=True)
    torch.cuda.synchronize()
    assert torch.equal(again, expected)


@needs_gpu
def test_errors_returned_in_place(jpeg_writer):
    good = jpeg_writer.encode(jpeg_writer.photo_like(50, 60, seed=1))
    out = custom_op.decode_and_crop_jpegs(
        [good, b"\xff\xd8junk", good, b""], 0, 0, 40, 40, device="cuda", on_error="return"
    )
    assert isinstance(out[0], torch.Tensor) and isinstance(out[2], torch.Tensor)
    assert isinstance(out[1], RuntimeError) and "batch item 1" in str(out[1])
    assert isinstance(out[3], RuntimeError) and "batch item 3" in str(out[3])
    stacked, errors = custom_op.decode_and_crop_jpegs(
        [good, b"nope", good], 0, 0, 40, 40, device="cuda", stack=True, on_error="return"
    )
    assert errors[0] is None and errors[2] is None and isinstance(errors[1], RuntimeError)
    assert stacked.shape == (3, 3, 40, 40) and int(stacked[1].max()) == 0
    assert torch.equal(stacked[0], out[0]) and torch.equal(stacked[2], out[2])


@needs_gpu
@pytest.mark.parametrize("on_error", ["raise", "return"])
def test_bad_tensors_are_their_items_type_errors(jpeg_writer, on_error):
    # A batch of tensors reaches the CUDA operator unchecked by Python; the operator checks each one.
    good = jpeg_writer.encode(jpeg_writer.photo_like(50, 60, seed=1))
    tensor = torch.frombuffer(bytearray(good), dtype=torch.uint8)
    doubled = torch.frombuffer(bytearray(bytes(b for b in good for _ in range(2))), dtype=torch.uint8)
    bad = {
        "float32": tensor.float(),
        "int8": tensor.to(torch.int8),
        "2-D": tensor[: tensor.numel() // 2 * 2].reshape(2, -1),
        "0-D": tensor[0],
        "non-contiguous": doubled[::2],
        "on the GPU": tensor.cuda(),
        "sparse": tensor.to_sparse(),
    }
    expected = custom_op.decode_and_crop_jpeg(good, 0, 0, 40, 40)
    for name, item in bad.items():
        files = [tensor, item, tensor]
        if on_error == "raise":
            with pytest.raises(TypeError, match="batch item 1: .*data must"):
                custom_op.decode_and_crop_jpegs(files, 0, 0, 40, 40, device="cuda")
            continue
        out = custom_op.decode_and_crop_jpegs(files, 0, 0, 40, 40, device="cuda", on_error="return")
        assert isinstance(out[1], TypeError) and "batch item 1: " in str(out[1]), (name, out[1])
        assert torch.equal(out[0].cpu(), expected) and torch.equal(out[2].cpu(), expected), name
    # A meta tensor cannot reach the operator's kernel (it dispatches to the fake one): the whole call's
    # TypeError, naming the item.
    with pytest.raises(TypeError, match="batch item 1: data must be on the CPU"):
        custom_op.decode_and_crop_jpegs([tensor, tensor.to("meta")], 0, 0, 40, 40, device="cuda", on_error=on_error)


@needs_gpu
def test_hostile_batches_leave_no_sticky_error(jpeg_writer):
    rng = np.random.default_rng(5)
    good = jpeg_writer.encode(jpeg_writer.photo_like(120, 160, seed=2))
    reference = custom_op.decode_and_crop_jpegs([good] * 4, 8, 8, 100, 100, device="cuda", stack=True).cpu()
    sos = good.index(b"\xff\xda")
    hostile = [b"", b"\xff\xd8", good[: sos + 20], good[: len(good) // 2] + b"\xff\xd9"]
    for _ in range(12):  # flipped bytes in the entropy-coded data, EOI kept
        b = bytearray(good)
        for k in rng.integers(sos + 20, len(good) - 2, size=8):
            b[k] = int(rng.integers(0, 256))
        hostile.append(bytes(b))
    results = custom_op.decode_and_crop_jpegs(hostile + [good], 8, 8, 100, 100, device="cuda", on_error="return")
    torch.cuda.synchronize()
    assert isinstance(results[-1], torch.Tensor)
    for r in results:
        assert isinstance(r, (torch.Tensor, ValueError, RuntimeError))
    after = custom_op.decode_and_crop_jpegs([good] * 4, 8, 8, 100, 100, device="cuda", stack=True)
    torch.cuda.synchronize()
    assert torch.equal(after.cpu(), reference)


# ---------------------------------------------------------------------------------------------------
# Damaged files: what nvJPEG makes of them, and check_entropy=True, which gives them the CPU path's
# outcome


def _recorded(call, *args, **kwargs):
    """call(*args, **kwargs)'s result and the messages of the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call(*args, **kwargs)
    return result, [str(w.message) for w in caught]


def _shown(results):
    """Each item as a tensor, or its exception as "Type: message"."""
    return [r if isinstance(r, torch.Tensor) else f"{type(r).__name__}: {r}" for r in results]


def _assert_cpu_outcomes(got, expected, used):
    """Each item of `got` (its path in `used`) is the CPU path's outcome in `expected`: the same pixels, or the
    same exception and message."""
    for i, (out, ref) in enumerate(zip(_shown(got), _shown(expected))):
        if isinstance(ref, str):
            assert out == ref, (i, used[i])
        else:
            assert isinstance(out, torch.Tensor) and torch.equal(out.cpu(), ref), (i, used[i], out)


@needs_gpu
def test_the_engines_report_no_damage(jpeg_writer):
    """Pinned, as the on_warning documentation says of gpu_decoder="nvjpeg" without check_entropy: files
    whose entropy-coded data is damaged, which the CPU path raises on, decode on the JPEG engines with
    no error and no warning, whatever on_warning (those nvJPEG fails on get the CPU path's outcome).
    With check_entropy=True every one of them raises as on the CPU. If nvJPEG comes to report such
    damage, this fails, and the documentation must follow."""
    if not has_engines():
        pytest.skip("this GPU has no JPEG engines (nvJPEG's hybrid decoders take these files)")
    data = jpeg_writer.encode(jpeg_writer.photo_like(120, 160, seed=2), sampling="4:2:0")
    window = (0, 0, 120, 160)
    names, files = [], []  # the CPU path raises on them, and their end-of-image marker is in place
    for name, case in damaged_jpegs.damaged(data, np.random.default_rng(2), flips=60):
        if not case.endswith(damaged_jpegs.EOI):
            continue  # cut short: the GPU backend hands these to the CPU path
        try:
            custom_op.decode_and_crop_jpeg(case, *window)
        except RuntimeError:
            names.append(name)
            files.append(case)
    assert len(files) >= 5, names
    windows = [[v] * len(files) for v in window]
    report = REPORT.setdefault("damaged_files_on_the_engines", {})
    for on_warning in ("raise", "warn"):
        options = {"on_error": "return", "on_warning": on_warning}
        (outs, used), caught = _recorded(
            testing.decode_with_paths, files, *windows, device="cuda", gpu_decoder="nvjpeg", **options
        )
        expected = _shown(custom_op.decode_and_crop_jpegs(files, *windows, **options))
        on_engines = [i for i, path in enumerate(used) if base_path(path) in ("hardware-roi", "hardware-full")]
        report[on_warning] = {"files": len(files), "paths": used, "decoded": [names[i] for i in on_engines]}
        assert on_engines, used
        for i, (out, path) in enumerate(zip(outs, used)):
            if base_path(path) in ("cpu", "failed"):  # nvJPEG failed on it: the CPU path's outcome
                (shown,) = _shown([out])
                same = (
                    torch.equal(shown.cpu(), expected[i]) if isinstance(shown, torch.Tensor) else shown == expected[i]
                )
                assert same, (names[i], shown, expected[i])
            else:  # decoded by nvJPEG, damage unreported
                assert isinstance(out, torch.Tensor) and out.shape == (3, 120, 160), (names[i], path, out)
                assert not any(f"batch item {i}:" in message for message in caught), (names[i], caught)
    expected = _shown(custom_op.decode_and_crop_jpegs(files, *windows, on_error="return"))
    for decoder in ("nvjpeg", "auto"):  # the check on demand, and what the default does without it
        checked = custom_op.decode_and_crop_jpegs(
            files, *windows, device="cuda", on_error="return", check_entropy=decoder == "nvjpeg", gpu_decoder=decoder
        )
        assert _shown(checked) == expected, decoder


def _hostile_batch(jpeg_writer, rng):
    """64 files, 40% of them damaged copies of the others, with one window each. The valid ones: the
    usual samplings, gray, restart markers, progressive, and a file prepared for random access. The
    damage: in the entropy-coded data (damaged_jpegs), and in headers the GPU backend's own header
    scan passes but libjpeg warns about or refuses."""
    from test_bad_input import _corruptions

    photo = jpeg_writer.photo_like
    bases = [
        jpeg_writer.encode(photo(120, 160, seed=51), sampling="4:2:0"),
        jpeg_writer.encode(photo(96, 128, seed=52), sampling="4:4:4", restart_interval=2),
        jpeg_writer.encode(photo(100, 140, seed=53), sampling="4:2:2", restart_rows=1),
        jpeg_writer.encode(photo(90, 120, 1, seed=54), restart_interval=3),
        jpeg_writer.encode(photo(110, 150, seed=55), sampling="4:2:0", progressive=True),
        custom_op.prepare_jpeg(jpeg_writer.encode(photo(300, 260, seed=56), sampling="4:2:0"), restart_mcus=1),
    ]
    sizes = [(120, 160), (96, 128), (100, 140), (90, 120), (110, 150), (300, 260)]
    damaged = [
        (case, size) for base, size in zip(bases, sizes) for _, case in damaged_jpegs.damaged(base, rng, flips=8)
    ]
    files = [(bases[i % len(bases)], sizes[i % len(bases)]) for i in range(38)]
    files += [damaged[i] for i in rng.choice(len(damaged), size=22, replace=False)]
    headers = _corruptions(bases[0])
    for name in ("SOS unknown component", "three 1-bit Huffman codes", "Huffman counts over 256"):
        files.append((headers[name][0], sizes[0]))
    jfif = bytearray(bases[0])
    jfif[jfif.index(b"JFIF\x00") + 5] = 2  # "Warning: unknown JFIF revision number 2.01"
    files.append((bytes(jfif), sizes[0]))
    files = [files[i] for i in rng.permutation(len(files))]
    windows = [random_window(rng, h, w, int(rng.choice([16, 64, 224]))) for _, (h, w) in files]
    return [data for data, _ in files], windows


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
@pytest.mark.parametrize("whole", [False, True], ids=["windows", "whole"])
def test_check_entropy_gives_every_item_the_cpu_paths_outcome(jpeg_writer, on_warning, whole):
    """A hostile batch with check_entropy=True and on_error="return": every item's exception (type
    and message) or pixels, and the warnings, are the CPU path's; the files the check passes still go
    to nvJPEG (to the JPEG engines, where the GPU has them)."""
    files, windows = _hostile_batch(jpeg_writer, np.random.default_rng(5))
    options = {"on_warning": on_warning, "on_error": "return"}
    checks = testing.check_entropy_data(files)
    used = None  # whole images: the paths are not reported
    # nvJPEG's choices: our own CUDA decoder (which would take the restart files) reports damage itself.
    if whole:
        expected, expected_warnings = _recorded(custom_op.decode_jpegs, files, **options)
        with testing.gpu_options(force_path="hardware-roi"):
            got, got_warnings = _recorded(custom_op.decode_jpegs, files, device="cuda", check_entropy=True, **options)
    else:
        expected, expected_warnings = _recorded(custom_op.decode_and_crop_jpegs, files, *zip(*windows), **options)
        # The prepared file's window through its segments.
        with testing.gpu_options(force_path="hardware-roi", segments="always"):
            (got, used), got_warnings = _recorded(
                testing.decode_with_paths, files, *zip(*windows), device="cuda", check_entropy=True, **options
            )
    assert got_warnings == expected_warnings
    expected, got = _shown(expected), _shown(got)
    assert len(got) == len(expected) == len(files)
    against = AgainstCpu()
    for i, (out, ref) in enumerate(zip(got, expected)):
        label = (i, checks[i], None if used is None else used[i])
        if isinstance(ref, str):
            assert out == ref, label
            continue
        assert isinstance(out, torch.Tensor), (label, out)
        # Whole images: with the engines, every file that passes the check goes to them.
        path = used[i] if used is not None else ("hardware-full" if has_engines() else "gpu-hybrid")
        against.add(out, ref, path, label=label)
    REPORT.setdefault("check_entropy_hostile_batch", {})[f"{on_warning} {'whole' if whole else 'windows'}"] = {
        "checks": {c: checks.count(c) for c in sorted(set(checks))},
        "paths": None if used is None else {p: used.count(p) for p in sorted(set(used))},
        "against_cpu": against.as_dict(),
    }
    against.check()
    # Not a vacuous comparison: the batch holds files the CPU path raises on or warns about, files
    # the check sends to the CPU path, and files it passes, which nvJPEG decodes.
    if on_warning == "raise":
        assert sum(isinstance(r, str) for r in expected) >= 5, expected
    if on_warning == "warn":
        assert len(expected_warnings) >= 5, expected_warnings
    assert checks.count("ok") >= 30 and checks.count("damaged") >= 8 and checks.count("refused") >= 4, checks
    if used is not None:
        for path, check in zip(used, checks):
            # A prepared file's window is checked on the sub-image of its segments, which may leave
            # out damage elsewhere in the file (the CPU path, which decodes that sub-image too,
            # reports none either): `checks` walked the whole file.
            if not path.endswith("+segments"):
                assert (base_path(path) in ("cpu", "failed")) == (check != "ok"), (path, check)
        assert any(p.endswith("+segments") for p in used), used
        if has_engines():
            engines = {base_path(p) for p, c in zip(used, checks) if c == "ok"}
            assert engines <= {"hardware-roi", "hardware-full"}, engines


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
def test_cuda_decoder_on_the_hostile_batch(jpeg_writer, on_warning):
    """The same hostile batch (damaged data and headers libjpeg warns about or refuses) with our own
    CUDA decoder taking what it can and the CPU path the rest: every item's outcome and the warnings
    are the CPU path's, without check_entropy."""
    files, windows = _hostile_batch(jpeg_writer, np.random.default_rng(7))
    options = {"on_warning": on_warning, "on_error": "return"}
    expected, expected_warnings = _recorded(custom_op.decode_and_crop_jpegs, files, *zip(*windows), **options)
    with testing.gpu_options(force_path="cuda"):
        (got, used), got_warnings = _recorded(
            testing.decode_with_paths, files, *zip(*windows), device="cuda", **options
        )
    assert got_warnings == expected_warnings
    expected, got = _shown(expected), _shown(got)
    for i, (out, ref, path) in enumerate(zip(got, expected, used)):
        if isinstance(ref, str):
            assert out == ref, (i, path)
        else:
            assert isinstance(out, torch.Tensor) and torch.equal(out.cpu(), ref), (i, path)
    assert used.count("cuda") >= 20, used


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
def test_check_entropy_on_single_images(jpeg_writer, on_warning):
    data = jpeg_writer.encode(jpeg_writer.photo_like(80, 112, seed=6), sampling="4:2:0", restart_interval=4)
    cases = [data] + [case for _, case in damaged_jpegs.damaged(data, np.random.default_rng(6), flips=10)]

    def each(decode, **options):
        out = []
        for case in cases:
            try:
                out.append(decode(case, on_warning=on_warning, **options))
            except RuntimeError as error:
                out.append(error)
        return _shown(out)

    for decode in (
        lambda d, **o: custom_op.decode_jpeg(d, **o),
        lambda d, **o: custom_op.decode_and_crop_jpeg(d, 30, 20, 40, 60, **o),
    ):
        expected, expected_warnings = _recorded(each, decode)
        got, got_warnings = _recorded(each, decode, device="cuda", check_entropy=True)
        assert got_warnings == expected_warnings
        for k, (out, ref) in enumerate(zip(got, expected)):
            if isinstance(ref, str):
                assert out == ref, k
            else:
                assert isinstance(out, torch.Tensor) and out.is_cuda and torch.equal(out.cpu(), ref), k


# ---------------------------------------------------------------------------------------------------
# Stream order: nvJPEG's hardware batched decode writes when called, not in stream order (measured
# with nvJPEG 13.0.1 on H100). Memory the caller's queued kernels still read must never be written
# early.


def _stream_race(datas, gpu_decoder):
    """Queue long work, then reductions over tensors that are freed while still queued, then decode:
    the decode's outputs are allocated from those freed blocks. Returns how many reductions saw
    their input change before they ran."""
    n = len(datas)
    side = 96
    expected = 3 * side * side
    sums = []
    for _ in range(3):
        bufs = [torch.ones(3, side, side, dtype=torch.uint8, device="cuda") for _ in range(n)]
        torch.cuda._sleep(200_000_000)  # ~0.1 s of queued GPU time
        sums += [b.sum(dtype=torch.int64) for b in bufs]
        del bufs
        custom_op.decode_and_crop_jpegs(datas, 0, 0, side, side, device="cuda", gpu_decoder=gpu_decoder)
    torch.cuda.synchronize()
    return sum(int(s) != expected for s in sums), len(sums)


@needs_gpu
@pytest.mark.parametrize("case", ["nvjpeg", "our-decoder-segments", "our-decoder-chunks"])
def test_outputs_are_written_in_stream_order(jpeg_writer, case):
    # Our CUDA decoder's decode kernels overlap the caller's queued work and its window kernels must
    # not: they write the outputs. The engines write when called.
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(192, 256, seed=i)) for i in range(8)]
    if case == "our-decoder-segments":
        datas = [custom_op.prepare_jpeg(d) for d in datas]
    gpu_decoder = "nvjpeg" if case == "nvjpeg" else "auto"
    _, paths = testing.decode_with_paths(datas, 0, 0, 96, 96, device="cuda", gpu_decoder=gpu_decoder)
    assert ("cuda" in paths) == (case != "nvjpeg") and "cpu" not in paths, paths
    bad, total = _stream_race(datas, gpu_decoder)
    REPORT[f"stream_order_{case}"] = {"corrupted_reductions": bad, "of": total}
    assert bad == 0


@needs_gpu
def test_stream_argument(jpeg_writer):
    data = jpeg_writer.encode(jpeg_writer.photo_like(64, 64, seed=8))
    expected = custom_op.decode_and_crop_jpeg(data, 4, 4, 32, 32, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
    out = custom_op.decode_and_crop_jpeg(data, 4, 4, 32, 32, device="cuda", stream=side)
    with torch.cuda.stream(side):
        total = out.sum(dtype=torch.int64)
    side.synchronize()
    assert int(total) == int(expected.sum(dtype=torch.int64))
    batch = custom_op.decode_and_crop_jpegs([data] * 3, 4, 4, 32, 32, device="cuda", stream=side, stack=True)
    side.synchronize()
    assert all(torch.equal(b, expected) for b in batch)
    with pytest.raises(ValueError, match="stream"):
        custom_op.decode_and_crop_jpeg(data, 4, 4, 32, 32, stream=side)
    with pytest.raises(TypeError, match="stream"):
        custom_op.decode_and_crop_jpegs([data], 4, 4, 32, 32, device="cuda", stream=0)


@needs_gpu
def test_windows_of_a_list_are_views_of_one_allocation(jpeg_writer):
    plain = jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=1), sampling="4:4:4")
    prepared = custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=2)))
    cpu_only = jpeg_writer.encode(jpeg_writer.photo_like(64, 80, seed=3), arithmetic=True)
    datas = [prepared, plain, cpu_only, plain, prepared]
    wins = [(0, 0, 40, 50), (3, 5, 33, 21), (1, 2, 17, 9), (500, 0, 8, 8), (7, 7, 40, 50)]  # item 3 lies outside
    outs, paths = testing.decode_with_paths(datas, *zip(*wins), device="cuda", on_error="return")
    assert isinstance(outs[3], ValueError)
    assert {paths[0], paths[2]} == {"cuda", "cpu"}
    good = [o for o in outs if isinstance(o, torch.Tensor)]
    for out, data, w in zip(outs, datas, wins):
        if isinstance(out, torch.Tensor):
            assert out.is_contiguous() and torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(data, *w))
    # One storage, item order, each window from a multiple of 256 bytes, none overlapping the next.
    assert len({o.untyped_storage().data_ptr() for o in good}) == 1
    starts = [o.storage_offset() for o in good]
    assert all(s % 256 == 0 for s in starts)
    assert all(a.storage_offset() + a.numel() <= b.storage_offset() for a, b in zip(good, good[1:]))
    # The storage is the caching allocator's, so record_stream keeps it for another stream's work.
    side = torch.cuda.Stream()
    good[0].record_stream(side)
    # Shapes only the files give (whole images, mode=UNCHANGED): an allocation each.
    whole = custom_op.decode_jpegs([prepared, plain], device="cuda")
    unchanged = custom_op.decode_and_crop_jpegs([prepared, plain], 0, 0, 8, 8, device="cuda", mode="unchanged")
    for pair in (whole, unchanged):
        assert pair[0].untyped_storage().data_ptr() != pair[1].untyped_storage().data_ptr()
        assert all(o.storage_offset() == 0 for o in pair)


# ---------------------------------------------------------------------------------------------------
# Chroma upsampling at window edges: a region of interest decoded with interpolated upsampling must
# equal the same decoder's whole image, sliced. A margin of whole MCUs makes it so; margin=False
# shows what it is for.


def _edge_mismatch(data, height, width, decoder, margin):
    rng = np.random.default_rng(11)
    wins = [(t, l, h, w) for t in (0, 1, 2, 7, 8, 9, 16, 17) for l in (1, 2, 3, 15, 16) for h, w in ((17, 19),)]
    wins += [random_window(rng, height, width, 64) for _ in range(16)]
    whole_path = "hardware-full" if decoder == "hardware" else "gpu-hybrid"
    window_path = None if decoder == "hardware" else "gpu-hybrid"  # None: the engines' regions of interest
    with testing.gpu_options(force_path=whole_path, margin=margin):
        (ref,), ref_used = testing.decode_with_paths([data], 0, 0, height, width, device="cuda")
    with testing.gpu_options(force_path=window_path, margin=margin, dedupe=False):
        outs, used = testing.decode_with_paths([data] * len(wins), *zip(*wins), device="cuda", gpu_decoder="nvjpeg")
    diff_values, worst = 0, 0
    for (t, l, h, w), out in zip(wins, outs):
        d = (out.int() - ref[:, t : t + h, l : l + w].int()).abs()
        diff_values += int((d > 0).sum())
        worst = max(worst, int(d.max()))
    return diff_values, worst, sorted(set(used) | set(ref_used))


@needs_gpu
@pytest.mark.parametrize("sampling", ["4:2:0", "4:2:2", "4:4:0"])
@pytest.mark.parametrize("decoder", ["hardware", "hybrid"])
def test_window_edges_match_the_whole_image(jpeg_writer, sampling, decoder):
    height, width = 96, 128
    data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, seed=6), sampling=sampling)
    if decoder == "hardware" and not has_engines():
        pytest.skip("no hardware JPEG decoder on this GPU")
    with_margin = _edge_mismatch(data, height, width, decoder, margin=True)
    without = _edge_mismatch(data, height, width, decoder, margin=False)
    REPORT.setdefault("chroma_edge", {})[f"{decoder} {sampling}"] = {
        "with_margin": {"differing_values": with_margin[0], "max_abs": with_margin[1], "paths": with_margin[2]},
        "without_margin": {"differing_values": without[0], "max_abs": without[1], "paths": without[2]},
    }
    expected = {"hardware-roi", "hardware-full"} if decoder == "hardware" else {"gpu-hybrid", "hybrid"}
    assert set(with_margin[2]) <= expected and set(without[2]) <= expected, (with_margin[2], without[2])
    assert with_margin[0] == 0, with_margin


@needs_gpu
def test_a_repeated_file_is_decoded_once_with_the_same_pixels(jpeg_writer):
    data = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=12), sampling="4:2:0")
    other = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=13), sampling="4:4:4")
    rng = np.random.default_rng(12)
    wins = [random_window(rng, 300, 400, s) for s in (1, 9, 50, 120) for _ in range(4)]
    batch = [data] * len(wins) + [other]
    wins.append((5, 6, 70, 80))
    shared, used = testing.decode_with_paths(batch, *zip(*wins), device="cuda")
    with testing.gpu_options(dedupe=False):
        separate = custom_op.decode_and_crop_jpegs(batch, *zip(*wins), device="cuda")
    assert "cpu" not in used
    against = AgainstCpu()
    for d, win, a, b, path in zip(batch, wins, shared, separate, used):
        assert torch.equal(a, b), win
        against.add(a, custom_op.decode_and_crop_jpeg(d, *win), path, label=win)
    against.check()


# ---------------------------------------------------------------------------------------------------
# Files prepared for random access, given to nvJPEG (force_path="hardware-roi": our own decoder would
# take them otherwise): nvJPEG decodes the sub-image of the segments around the windows


@needs_gpu
@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0", "gray"])
@pytest.mark.parametrize("restart_mcus", [1, 3, None])
def test_prepared_files_decode_their_segments_exactly(jpeg_writer, sampling, restart_mcus):
    channels = 1 if sampling == "gray" else 3
    options = {} if sampling == "gray" else {"sampling": sampling}
    original = jpeg_writer.encode(jpeg_writer.photo_like(301, 403, channels, seed=21), **options)
    data = custom_op.prepare_jpeg(original, restart_mcus=restart_mcus)
    rng = np.random.default_rng(21)
    wins = [random_window(rng, 301, 403, s) for s in (1, 2, 7, 33, 100, 224) for _ in range(4)]
    wins += [(300, 402, 1, 1), (150, 0, 20, 403), (0, 200, 301, 3)]
    with testing.gpu_options(force_path="hardware-roi", dedupe=False, segments="always"):
        outs, used = testing.decode_with_paths([data] * len(wins), *zip(*wins), device="cuda")
    with testing.gpu_options(force_path="hardware-roi", dedupe=False, segments="never"):
        whole, whole_used = testing.decode_with_paths([data] * len(wins), *zip(*wins), device="cuda")
    against = AgainstCpu()
    for win, out, path, ref_gpu in zip(wins, outs, used, whole):
        against.add(out, custom_op.decode_and_crop_jpeg(original, *win), path, label=win)
        if base_path(path) in EXACT_PATHS:
            assert torch.equal(out, ref_gpu), win
    against.check()
    # Windows whose segments start with the file's first one decode the whole file, as on the CPU.
    expected = [torch.ops.custom_op._jpeg_sub_image(as_tensor(data), *win)[0].numel() > 0 for win in wins]
    assert [p.endswith("+segments") for p in used] == expected, used
    assert sum(expected) >= len(wins) // 2
    assert not any(p.endswith("+segments") for p in whole_used)
    if has_engines():
        assert {base_path(p) for p in used} <= {"hardware-roi", "hardware-full"}, used


@needs_gpu
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_prepared_files_with_exif_orientation(jpeg_writer, orientation):
    original = with_exif_orientation(
        jpeg_writer.encode(jpeg_writer.photo_like(200, 260, seed=22), sampling="4:2:0"), orientation
    )
    data = custom_op.prepare_jpeg(original, restart_mcus=1)
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
    rng = np.random.default_rng(orientation)
    wins = [random_window(rng, info.height, info.width, s) for s in (5, 40, 90) for _ in range(3)]
    with testing.gpu_options(force_path="hardware-roi", dedupe=False, segments="always"):
        outs, used = testing.decode_with_paths(
            [data] * len(wins), *zip(*wins), apply_exif_orientation=True, device="cuda"
        )
    against = AgainstCpu()
    for win, out, path in zip(wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(original, *win, apply_exif_orientation=True), path, label=win)
    against.check()
    assert sum(p.endswith("+segments") for p in used) >= len(wins) - 2, used


@needs_gpu
def test_prepared_file_repeated_in_a_batch_and_mixed_with_others(jpeg_writer):
    """One sub-image around all of a repeated file's windows; plain and prepared files in one batch."""
    original = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=23), sampling="4:2:0")
    data = custom_op.prepare_jpeg(original, restart_mcus=2)
    plain = jpeg_writer.encode(jpeg_writer.photo_like(120, 90, seed=24), sampling="4:4:4")
    batch = [data, plain, data, data]
    wins = [(200, 250, 40, 60), (5, 6, 70, 80), (230, 300, 50, 90), (180, 260, 10, 10)]
    with testing.gpu_options(force_path="hardware-roi", segments="always"):
        outs, used = testing.decode_with_paths(batch, *zip(*wins), device="cuda")
    against = AgainstCpu()
    for d, win, out, path in zip([original, plain, original, original], wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(d, *win), path, label=win)
    against.check()
    assert used[0].endswith("+segments") and used[2].endswith("+segments") and used[3].endswith("+segments")
    assert not used[1].endswith("+segments")


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_prepared_files_in_every_mode(jpeg_writer, mode):
    color = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, seed=28), sampling="4:2:0")
    gray = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, 1, seed=29))
    originals = [color, gray]
    prepared = [custom_op.prepare_jpeg(d, restart_mcus=1) for d in originals]
    wins = [(70, 33, 50, 60), (90, 101, 40, 70)]
    with testing.gpu_options(force_path="hardware-roi", segments="always"):
        outs, used = testing.decode_with_paths(prepared, *zip(*wins), mode=mode, device="cuda")
    assert all(p.endswith("+segments") for p in used), used
    against = AgainstCpu()
    for original, win, out, path in zip(originals, wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(original, *win, mode=mode), path, label=win)
    against.check()


@needs_gpu
def test_segments_are_used_by_default_for_large_images_only(jpeg_writer):
    small_original = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=26), sampling="4:2:0")
    large_original = jpeg_writer.encode(jpeg_writer.photo_like(1200, 1700, seed=27), sampling="4:2:0")
    small = custom_op.prepare_jpeg(small_original, restart_mcus=2)
    large = custom_op.prepare_jpeg(large_original, restart_mcus=2)
    wins = [(200, 250, 50, 60), (900, 1300, 224, 224)]
    with testing.gpu_options(force_path="hardware-roi"):
        outs, used = testing.decode_with_paths([small, large], *zip(*wins), device="cuda")
    assert [p.endswith("+segments") for p in used] == [False, True], used
    against = AgainstCpu()
    for original, win, out, path in zip([small_original, large_original], wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(original, *win), path, label=win)
    against.check()


@needs_gpu
def test_prepared_file_with_damaged_segments_is_decoded_or_named_like_any_other(jpeg_writer):
    original = jpeg_writer.encode(jpeg_writer.photo_like(160, 200, seed=25), sampling="4:2:0")
    data = bytearray(custom_op.prepare_jpeg(original, restart_mcus=1))
    # A restart marker near the middle renumbered: the segments no longer add up, so nvJPEG gets the
    # whole file (or, if it refuses it, the CPU path decides), as for any file.
    rst = [i for i in range(len(data) // 2, len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7][0]
    data[rst + 1] = 0xD0 + (data[rst + 1] - 0xD0 + 3) % 8
    with testing.gpu_options(force_path="hardware-roi", segments="always"):
        outs, used = testing.decode_with_paths(
            [bytes(data), original],
            [120, 120],
            [150, 150],
            [20, 20],
            [30, 30],
            on_error="return",
            on_warning="ignore",
            device="cuda",
        )
    assert not used[0].endswith("+segments")
    assert isinstance(outs[0], (torch.Tensor, RuntimeError)), outs[0]
    against = AgainstCpu()
    against.add(outs[1], custom_op.decode_and_crop_jpeg(original, 120, 150, 20, 30), used[1])
    again, path = on_gpu_with_path(original, (0, 0, 16, 16))
    against.add(again, custom_op.decode_and_crop_jpeg(original, 0, 0, 16, 16), path, "the next call")
    against.check()


@needs_gpu
def test_fuzzed_prepared_files_through_their_segments(jpeg_writer):
    """Mutated prepared files (restart markers removed, renumbered, moved, segments swapped or cut,
    lying DRI and SOF, generic damage) through the segments path, in batches: a tensor or a clear error
    per item, never a sticky CUDA error. Where the CPU path decodes the window without a warning: after
    a mutation of the restart layout, the same pixels; after bytes changed anywhere, in a file libjpeg
    decodes whole without a warning (damage that leaves a valid scan, on which the JPEG engines may
    give other pixels than libjpeg: docs/guides/gpu.md), the pixels the engines give for the whole
    file, so that the segments path itself changes nothing."""
    import random

    import random_access_fuzz_worker as raw

    bases = [
        custom_op.prepare_jpeg(
            jpeg_writer.encode(jpeg_writer.photo_like(150, 230, seed=31), sampling="4:2:0"), restart_mcus=1
        ),
        custom_op.prepare_jpeg(
            jpeg_writer.encode(jpeg_writer.photo_like(90, 170, seed=32), sampling="4:4:4"), restart_mcus=3
        ),
    ]
    compared = segments = valid_scan = 0
    against = AgainstCpu()
    with testing.gpu_options(force_path="hardware-roi", segments="always"):
        for b, base in enumerate(bases):
            rng = random.Random(b)
            datas = [raw.mutate(rng, raw.MUTATIONS[i % len(raw.MUTATIONS)], base) for i in range(80)]
            info = custom_op.read_jpeg_header(base)
            wins = []
            for _ in datas:
                h, w = rng.randint(1, info.height // 2), rng.randint(1, info.width // 2)
                wins.append((rng.randint(info.height // 3, info.height - h), rng.randint(0, info.width - w), h, w))
            for k in range(0, len(datas), 20):
                outs, used = testing.decode_with_paths(
                    datas[k : k + 20], *zip(*wins[k : k + 20]), on_error="return", on_warning="ignore", device="cuda"
                )
                torch.cuda.synchronize()
                for i, (data, win, out, path) in enumerate(zip(datas[k : k + 20], wins[k : k + 20], outs, used), k):
                    assert isinstance(out, (torch.Tensor, ValueError, RuntimeError)), type(out)
                    segments += path.endswith("+segments")
                    if not isinstance(out, torch.Tensor):
                        continue
                    try:
                        ref = custom_op.decode_and_crop_jpeg(data, *win, on_warning="raise")
                    except (ValueError, RuntimeError):
                        continue
                    if raw.MUTATIONS[i % len(raw.MUTATIONS)] in raw.STRUCTURAL:
                        compared += 1
                        against.add(out, ref, path, label=(b, win))
                        continue
                    try:
                        custom_op.decode_jpeg(data, on_warning="raise")
                    except (ValueError, RuntimeError):
                        continue
                    with testing.gpu_options(force_path="hardware-roi", segments="never"):
                        (whole,), _ = testing.decode_with_paths([data], *([v] for v in win), device="cuda")
                    assert torch.equal(out, whole), (b, i, win, path)
                    valid_scan += 1
        good = bases[0]
        after, used = testing.decode_with_paths([good] * 3, 100, 8, 40, 100, device="cuda")
    for out, path in zip(after, used):
        against.add(out, custom_op.decode_and_crop_jpeg(good, 100, 8, 40, 100), path, "the next batch")
    REPORT["fuzzed_prepared_files"] = {
        "compared": compared,
        "valid_scan_damage_against_the_engines": valid_scan,
        "through_segments": segments,
        "against_cpu": against.as_dict(),
    }
    against.check()
    assert compared >= 30 and valid_scan >= 5 and segments >= 40, (compared, valid_scan, segments)


# Our own CUDA decoder ("cuda"): files whose restart segments are short, one GPU thread per segment.
# It must give the CPU path's pixels exactly, and for a damaged file the CPU path's outcome.


def restart_layouts(jpeg_writer, pixels, sampling):
    """The same photo with restart segments laid out four ways: prepared for random access, every 5
    MCUs (segments across MCU rows), every MCU row, and every MCU."""
    options = {} if sampling == "gray" else {"sampling": sampling}
    original = jpeg_writer.encode(pixels, **options)
    return {
        "prepared": custom_op.prepare_jpeg(original),
        "interval-5": jpeg_writer.encode(pixels, restart_interval=5, **options),
        "rows": jpeg_writer.encode(pixels, restart_rows=1, **options),
        "interval-1": jpeg_writer.encode(pixels, restart_interval=1, optimize=True, **options),
    }


def windows_everywhere(rng, height, width):
    wins = [random_window(rng, height, width, s) for s in (1, 2, 9, 33, 100, 224) for _ in range(3)]
    wins += [(0, 0, 1, 1), (height - 1, width - 1, 1, 1), (0, width - 17, 17, 17), (height - 16, 0, 16, 40)]
    wins += [(height // 2, 0, 20, width), (0, width // 3, height, 3), (0, 0, height, width)]
    return wins


def assert_exact_on_layouts(layouts, wins, **options):
    """Every window of each layout's file, each on its own and in one decode around them all, and the whole
    image twice: all decoded by our CUDA decoder (under testing.gpu_options(**options)), each the CPU path's,
    none sent to the CPU path."""
    fallbacks = testing.cuda_decoder_fallbacks()
    for layout, data in layouts.items():
        refs = [custom_op.decode_and_crop_jpeg(data, *win) for win in wins]
        for dedupe in (False, True):
            with testing.gpu_options(dedupe=dedupe, **options):
                outs, used = testing.decode_with_paths([data] * len(wins), *zip(*wins), device="cuda")
            assert set(used) == {"cuda"}, (layout, used)
            for win, out, ref in zip(wins, outs, refs):
                assert out.shape == ref.shape and torch.equal(out.cpu(), ref), (layout, dedupe, win)
        with testing.gpu_options(**options):
            whole = custom_op.decode_jpegs([data, data], device="cuda", stack=True)
        assert torch.equal(whole.cpu(), torch.stack([custom_op.decode_jpeg(data)] * 2)), layout
    assert testing.cuda_decoder_fallbacks() == fallbacks


@needs_gpu
@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0", "4:1:1", "gray"])
def test_cuda_decoder_is_exact_on_every_layout(jpeg_writer, sampling):
    pixels = jpeg_writer.photo_like(301, 403, 1 if sampling == "gray" else 3, seed=41)
    wins = windows_everywhere(np.random.default_rng(41), 301, 403)
    assert_exact_on_layouts(restart_layouts(jpeg_writer, pixels, sampling), wins)


@needs_gpu
@pytest.mark.parametrize("sampling", ["4x2,1x1,1x1", "3x1,1x1,1x1", "1x2,2x1,1x1", "2x2,1x2,2x1", "1x1,2x2,2x2"])
def test_cuda_decoder_takes_unusual_samplings(jpeg_writer, sampling):
    """4:1:0 and per-component sampling factors no camera writes (a ratio of 3, chroma sampled more
    finely than luma, or differently per component), in every restart layout and mode: our decoder
    takes them (nvJPEG must not), and each window is the CPU path's."""
    height, width = 150, 210
    pixels = jpeg_writer.photo_like(height, width, seed=47)
    wins = windows_everywhere(np.random.default_rng(47), height, width)
    for layout, data in restart_layouts(jpeg_writer, pixels, sampling).items():
        for mode in ImageReadMode:
            outs, used = testing.decode_with_paths([data] * len(wins), *zip(*wins), mode=mode, device="cuda")
            assert set(used) == {"cuda"}, (layout, mode, used)
            for win, out in zip(wins, outs):
                ref = custom_op.decode_and_crop_jpeg(data, *win, mode=mode)
                assert out.shape == ref.shape and torch.equal(out.cpu(), ref), (layout, mode, win)


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_cuda_decoder_in_every_mode_and_orientation(jpeg_writer, mode):
    color = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, seed=42), sampling="4:2:0", restart_interval=2)
    gray = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, 1, seed=43), restart_interval=3)
    wide = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, seed=44), sampling="4:1:1", restart_interval=2)
    for orientation in range(1, 9):
        datas = [with_exif_orientation(f, orientation) for f in (color, gray, wide)]
        wins = [(7, 13, 50, 60), (90, 101, 40, 70), (33, 61, 45, 95)]
        if orientation >= 5:
            wins = [(left, top, width, height) for top, left, height, width in wins]
        outs, used = testing.decode_with_paths(
            datas, *zip(*wins), mode=mode, apply_exif_orientation=True, device="cuda"
        )
        assert used == ["cuda"] * 3, used
        for data, win, out in zip(datas, wins, outs):
            ref = custom_op.decode_and_crop_jpeg(data, *win, mode=mode, apply_exif_orientation=True)
            assert torch.equal(out.cpu(), ref), (orientation, win)


@needs_gpu
def test_cuda_decoder_with_other_files_in_one_batch(jpeg_writer):
    """Restart files, a file without restart markers (in chunks), a progressive file (the CPU path)
    and a repeated file in one stacked batch."""
    prepared = custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(200, 300, seed=44)))
    plain = jpeg_writer.encode(jpeg_writer.photo_like(120, 90, seed=45), sampling="4:4:4")
    progressive = jpeg_writer.encode(jpeg_writer.photo_like(100, 100, seed=46), progressive=True)
    batch = [prepared, plain, prepared, progressive, prepared]
    wins = [(10, 20, 64, 64), (5, 6, 64, 64), (130, 230, 64, 64), (30, 30, 64, 64), (0, 0, 64, 64)]
    outs, used = testing.decode_with_paths(batch, *zip(*wins), device="cuda", stack=True)
    assert used == ["cuda", "cuda", "cuda", "cpu", "cuda"], used
    against = AgainstCpu()
    for data, win, out, path in zip(batch, wins, outs, used):
        against.add(out, custom_op.decode_and_crop_jpeg(data, *win), path, label=win)
    against.check()


def assert_cuda_decoder_exact(inputs, datas, wins, stack=False):
    """One batched call on `inputs` (the files `datas`, or the same bytes in other memory): every item
    is taken by our CUDA decoder and its window is the CPU path's."""
    outs, used = testing.decode_with_paths(inputs, *zip(*wins), device="cuda", stack=stack)
    assert used == ["cuda"] * len(wins), used
    for data, win, out in zip(datas, wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(data, *win)), win


@needs_gpu
def test_cuda_decoder_takes_pinned_inputs(jpeg_writer):
    """Files in pinned memory (a DataLoader with pin_memory=True) are copied from there, without a
    host copy: the same pixels as from ordinary memory, mixed in one batch."""
    datas = [
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(150 + 7 * i, 200 + 5 * i, seed=60 + i)))
        for i in range(6)
    ]
    tensors = [as_tensor(d) for d in datas]
    pinned = [t.pin_memory() if i % 2 == 0 else t for i, t in enumerate(tensors)]
    assert [t.is_pinned() for t in pinned] == [True, False] * 3
    windows = [(3 + i, 5 + 2 * i, 100, 120) for i in range(6)]
    assert_cuda_decoder_exact(pinned, datas, windows)


@needs_gpu
def test_cuda_decoder_takes_files_at_any_place_in_one_pinned_buffer(jpeg_writer):
    """Files that are views of one pinned buffer, at offsets 16-byte aligned or not, the last one
    ending where the buffer does, copied from where they lie: every window is the CPU path's."""
    datas = [
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(130 + 9 * i, 170 + 3 * i, seed=80 + i)))
        for i in range(5)
    ]
    offsets, at = [], 0
    for i, d in enumerate(datas):
        at += (16 - at % 16) % 16 + (0 if i % 2 == 0 else 16 + 2 * i + 1)
        offsets.append(at)
        at += len(d)
    buffer = torch.zeros(at, dtype=torch.uint8).pin_memory()
    views = []
    for off, d in zip(offsets, datas):
        buffer[off : off + len(d)] = torch.frombuffer(bytearray(d), dtype=torch.uint8)
        views.append(buffer[off : off + len(d)])
    assert [v.data_ptr() % 16 == 0 for v in views] == [True, False, True, False, True]
    assert views[-1].data_ptr() + len(datas[-1]) == buffer.data_ptr() + buffer.numel()
    windows = [(2 + i, 4 + 3 * i, 90, 110) for i in range(5)]
    assert_cuda_decoder_exact(views, datas, windows)


@needs_gpu
def test_cuda_decoder_on_a_batch_of_several_megabytes(jpeg_writer):
    """Large prepared photos (several megabytes in one batch, in ordinary memory): every window is the
    CPU path's."""
    datas = [
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(700 + 16 * i, 900, seed=70 + i), quality=95))
        for i in range(16)
    ]
    assert sum(len(d) for d in datas) > 2 << 20
    assert_cuda_decoder_exact(datas, datas, [(11 * i, 17 * i, 200, 300) for i in range(16)])


@needs_gpu
@pytest.mark.parametrize("stack", [False, True])
def test_cuda_decoder_on_a_batch_decoded_in_parts(jpeg_writer, stack):
    """A batch large enough to be decoded in several parts side by side: files of several samplings,
    some in pinned memory, some repeated with their windows far apart in the batch; every window is
    the CPU path's, in its place."""
    samplings = ["4:2:0", "4:4:4", "4:2:2", "4:4:0"]
    datas = [
        custom_op.prepare_jpeg(
            jpeg_writer.encode(
                jpeg_writer.photo_like(72 + 8 * (i % 5), 96 + 8 * (i % 3), seed=80 + i), sampling=samplings[i % 4]
            )
        )
        for i in range(60)
    ]
    tensors = [as_tensor(d) for d in datas]
    tensors = [t.pin_memory() if i % 3 == 0 else t for i, t in enumerate(tensors)]
    order = list(range(60)) + [59, 0, 31, 2, 45, 17, 0, 59]  # repeats: one decode for all their windows
    rng = np.random.default_rng(80)
    wins = [random_window(rng, 72, 96, size=40) for _ in order]
    assert_cuda_decoder_exact([tensors[i] for i in order], [datas[i] for i in order], wins, stack=stack)


@needs_gpu
def test_windows_of_one_call_are_separate_tensors(jpeg_writer):
    """Each window of a list result is its own contiguous tensor: writing one leaves the others as
    they were."""
    prepared = custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(200, 300, seed=47)))
    plain = jpeg_writer.encode(jpeg_writer.photo_like(120, 90, seed=48), sampling="4:4:4")
    batch = [prepared, plain, prepared, plain]
    wins = [(10, 20, 64, 48), (5, 6, 30, 40), (100, 200, 64, 48), (0, 0, 120, 90)]
    outs = custom_op.decode_and_crop_jpegs(batch, *zip(*wins), device="cuda")
    refs = [custom_op.decode_and_crop_jpeg(d, *w) for d, w in zip(batch, wins)]
    assert [tuple(o.shape) for o in outs] == [(3, h, w) for _, _, h, w in wins]
    assert all(o.is_contiguous() for o in outs)
    outs[0].fill_(0)
    outs[2].add_(1)
    assert torch.equal(outs[1].cpu(), refs[1]) and torch.equal(outs[3].cpu(), refs[3])
    assert torch.equal(outs[2].cpu(), refs[2] + 1) and not outs[0].any()


def outcome(item):
    if isinstance(item, torch.Tensor):
        return item.cpu()
    return (type(item), str(item))


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
def test_cuda_decoder_gives_damaged_files_the_cpu_paths_outcome(jpeg_writer, on_warning):
    """A hostile batch through our decoder (and the CPU path, for what it does not take): every item
    gets exactly what the CPU path gives it, pixels or the same exception; the next batch is clean.
    The largest file is one the CPU path decodes through a sub-image of each window's segments, which
    our decoder reads from the whole file."""
    rng = np.random.default_rng({"raise": 1, "warn": 2, "ignore": 3}[on_warning])
    bases = [
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(150, 230, seed=47), sampling="4:2:0")),
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(760, 1000, seed=46), sampling="4:2:0")),
        jpeg_writer.encode(jpeg_writer.photo_like(90, 170, seed=48), sampling="4:4:4", restart_interval=3),
        jpeg_writer.encode(jpeg_writer.photo_like(120, 100, 1, seed=49), restart_rows=1),
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(110, 260, seed=50), sampling="4:1:1")),
        custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(130, 200, seed=51), sampling="4x2,1x1,1x1")),
    ]
    datas, wins = [], []
    for base in bases:
        info = custom_op.read_jpeg_header(base)
        for d in damaged_jpegs.damaged_copies(base, rng, 40):
            h, w = int(rng.integers(1, info.height // 2)), int(rng.integers(1, info.width // 2))
            datas.append(d)
            wins.append((int(rng.integers(0, info.height - h + 1)), int(rng.integers(0, info.width - w + 1)), h, w))
    fallbacks = testing.cuda_decoder_fallbacks()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with testing.gpu_options(force_path="cuda", dedupe=False):
            outs, used = testing.decode_with_paths(
                datas, *zip(*wins), on_error="return", on_warning=on_warning, device="cuda"
            )
        refs = custom_op.decode_and_crop_jpegs(datas, *zip(*wins), on_error="return", on_warning=on_warning)
    torch.cuda.synchronize()
    decoded_on_gpu = 0
    for win, out, ref, path in zip(wins, outs, refs, used):
        assert path in ("cuda", "cpu", "failed"), path
        got, want = outcome(out), outcome(ref)
        if isinstance(want, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, want), (win, path)
        else:
            assert got == want, (win, path)
        decoded_on_gpu += path == "cuda"
    caught = testing.cuda_decoder_fallbacks() - fallbacks
    REPORT.setdefault("cuda_decoder_damaged", {})[on_warning] = {
        "items": len(datas),
        "decoded_on_gpu": decoded_on_gpu,
        "sent_to_cpu_by_the_kernels": caught,
    }
    assert decoded_on_gpu >= 10 and caught >= 10, (decoded_on_gpu, caught)
    # A clean file after the damaged ones: still our decoder's, still exact.
    assert_cuda_decoder_exact([bases[0]] * 3, [bases[0]] * 3, [(100, 8, 40, 100)] * 3)


def with_index_entries(data: bytes, entries) -> bytes:
    """A copy of a prepared file whose segment index (common/segment_index.h) says `entries(ends)`,
    given the true ones; the rest of the file is unchanged."""
    at = data.index(b"\xff\xe9\x00")
    count = struct.unpack(">I", data[at + 33 : at + 37])[0]
    true = list(struct.unpack(f">{count}I", data[at + 37 : at + 37 + 4 * count]))
    return data[: at + 37] + struct.pack(f">{count}I", *entries(true)) + data[at + 37 + 4 * count :]


@needs_gpu
def test_cuda_decoder_uploads_as_far_as_the_segment_index_says(jpeg_writer):
    """A prepared file is uploaded only through the MCU row of the last segment a window needs, as its
    segment index says. An index that lies short leaves the GPU too few markers: the item goes to the
    CPU path, with its pixels. One that lies long only uploads more."""
    data = custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(301, 403, seed=70), sampling="4:2:0"))
    scan_start = rs.scan(data).start
    wins = [(0, 0, 40, 50), (100, 200, 64, 64), (230, 10, 71, 390), (0, 0, 301, 403)]
    refs = [custom_op.decode_and_crop_jpeg(data, *win) for win in wins]

    def decoded(files):
        with testing.gpu_options(dedupe=False):
            outs, used = testing.decode_with_paths(files, *zip(*wins), device="cuda")
        for out, ref, win in zip(outs, refs, wins):
            assert torch.equal(out.cpu(), ref), win
        return used

    cases = {
        "honest": (data, 0),
        "long": (with_index_entries(data, lambda ends: [len(data)] * len(ends)), 0),
        # Each entry one row short: every window's last segment lies past what is uploaded.
        "short by a row": (with_index_entries(data, lambda ends: [scan_start] + ends[:-1]), len(wins)),
        "before the scan": (with_index_entries(data, lambda ends: [0] * len(ends)), len(wins)),
    }
    for name, (file, expected) in cases.items():
        for files in ([file] * len(wins), [as_tensor(file).pin_memory()] * len(wins)):
            fallbacks = testing.cuda_decoder_fallbacks()
            used = decoded(files)
            assert testing.cuda_decoder_fallbacks() - fallbacks == expected, name
            assert used == (["cuda"] * len(wins) if expected == 0 else ["cpu"] * len(wins)), (name, used)
    # A stale index (the file edited after it was prepared: bytes after EOI change its size) is not used.
    stale = with_index_entries(data, lambda ends: [0] * len(ends)) + b"\0"
    assert decoded([stale] * len(wins)) == ["cuda"] * len(wins)


@needs_gpu
def test_markers_past_the_window_are_the_cpu_paths_business(jpeg_writer):
    """A misnumbered restart marker below a window: the CPU path does not read it and decodes the
    window; our decoder, which checks the markers only as far as the window's segments, does the same."""
    data = custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(301, 403, seed=71), sampling="4:2:0"))
    ff, n = rs.scan(data).markers[-3]
    damaged = data[: ff + 1] + bytes([0xD0 + (n + 1) % 8]) + data[ff + 2 :]
    win = (10, 20, 60, 80)
    ref = custom_op.decode_and_crop_jpeg(damaged, *win, on_warning="raise")
    assert torch.equal(ref, custom_op.decode_and_crop_jpeg(data, *win))
    outs, used = testing.decode_with_paths([damaged], *([v] for v in win), device="cuda", on_warning="raise")
    assert used == ["cuda"] and torch.equal(outs[0].cpu(), ref)
    # The whole image reads that marker: the CPU path's outcome, not ours.
    with pytest.raises(RuntimeError, match="Corrupt JPEG data") as cpu_error:
        custom_op.decode_jpegs([damaged], on_warning="raise")
    with pytest.raises(RuntimeError, match="Corrupt JPEG data") as gpu_error:
        custom_op.decode_jpegs([damaged], device="cuda", on_warning="raise")
    assert str(gpu_error.value) == str(cpu_error.value)


def photo_windows(datas, seed):
    """A random window of each file."""
    rng = np.random.default_rng(seed)
    wins = []
    for d in datas:
        info = custom_op.read_jpeg_header(d)
        wins.append(random_window(rng, info.height, info.width))
    return wins


def paths_of_cpu_pixels(datas, wins, outs, used) -> dict:
    """Each GPU window equals the CPU path's; the count of each path."""
    refs = custom_op.decode_and_crop_jpegs(datas, *zip(*wins))
    counts = defaultdict(int)
    for out, ref, path in zip(outs, refs, used):
        counts[path] += 1
        assert torch.equal(out.cpu(), ref), path
    return counts


@needs_gpu
def test_cuda_decoder_on_prepared_imagenet_photos():
    files = sorted(shared_dir("imagenet-sample").iterdir())
    datas = [custom_op.prepare_jpeg(f.read_bytes()) for f in files]
    wins = photo_windows(datas, seed=50)
    outs, used = testing.decode_with_paths(datas, *zip(*wins), device="cuda")
    counts = paths_of_cpu_pixels(datas, wins, outs, used)
    REPORT["cuda_decoder_imagenet"] = dict(counts)
    # Photos whose windows the kernels cannot vouch for go to the CPU path; valid photos have none.
    assert counts["cuda"] == len(datas), dict(counts)


# ---------------------------------------------------------------------------------------------------
# Threads, memory


@needs_gpu
def test_threads_share_nothing(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(70 + i, 90, seed=i)) for i in range(16)]
    expected = custom_op.decode_and_crop_jpegs(datas, 3, 4, 60, 60, device="cuda", stack=True).cpu()
    failures = []

    def worker():
        try:
            stream = torch.cuda.Stream()
            for _ in range(20):
                out = custom_op.decode_and_crop_jpegs(datas, 3, 4, 60, 60, device="cuda", stack=True, stream=stream)
                stream.synchronize()
                if not torch.equal(out.cpu(), expected):
                    failures.append("mismatch")
        except Exception as e:  # reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


@needs_gpu
def test_no_leak_over_10000_batched_calls(jpeg_writer):
    import psutil

    datas = [
        jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=i), sampling=s)
        for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:2:0"])
    ]
    process = psutil.Process()

    def run(calls):
        for i in range(calls):
            custom_op.decode_and_crop_jpegs(datas, i % 7, i % 5, 64, 64, device="cuda", stack=True)

    run(300)
    torch.cuda.synchronize()
    before = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), process.memory_info().rss)
    run(10_000)
    torch.cuda.synchronize()
    after = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), process.memory_info().rss)
    REPORT["leak_10000_calls"] = {
        "allocated": [before[0], after[0]],
        "reserved": [before[1], after[1]],
        "rss": [before[2], after[2]],
    }
    assert after[0] == before[0] and after[1] == before[1], (before, after)
    assert after[2] - before[2] < 32 * 2**20, (before, after)


# ---------------------------------------------------------------------------------------------------
# Windows at a DCT scale (the operator's scales: 1/8, 2/8, 4/8, 8/8): our own CUDA decoder's pixels
# are the CPU operator's with scale_num; what it does not take goes to the CPU path (nvJPEG decodes at
# full size only).

# Samplings our CUDA decoder takes once prepared (grey, nvJPEG's four, and those only it takes).
SCALED_SAMPLINGS = ["gray", "4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4x2,1x1,1x1"]
SCALES = [1, 2, 4, 8]


def _scaled_file(jpeg_writer, sampling, height=157, width=203, seed=90, orientation=None, prepared=True):
    channels = 1 if sampling == "gray" else 3
    pixels = jpeg_writer.photo_like(height, width, channels, seed=seed)
    data = jpeg_writer.encode(pixels, **({} if sampling == "gray" else dict(sampling=sampling)))
    if orientation is not None:
        data = with_exif_orientation(data, orientation)
    return custom_op.prepare_jpeg(data) if prepared else data


def _scaled_size(data, scale, exif=False):
    """The displayed image's size at `scale` eighths (libjpeg's output size, rounded up)."""
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=exif)
    return -(-info.height * scale // 8), -(-info.width * scale // 8)


def _scaled_windows(rng, height, width):
    """Windows of a height x width image: whole, 1x1 at the corners, along the edges, random."""
    wins = [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1), (0, width - 1, height, 1)]
    wins += [(height - 1, 0, 1, width), (0, max(0, width - 5), height, min(5, width))]
    for size in (1, 3, 17, 64):
        wins.append(random_window(rng, height, width, size))
    return wins


def _every_scale(data, rng):
    """One batch of `data`'s windows at every scale (_scaled_windows at each): the files, windows, scales."""
    datas, wins, scales = [], [], []
    for scale in SCALES:
        for win in _scaled_windows(rng, *_scaled_size(data, scale)):
            datas.append(data)
            wins.append(win)
            scales.append(scale)
    return datas, wins, scales


def scaled_on_gpu(datas, wins, scales, mode=ImageReadMode.RGB, exif=False, gpu_decoder="auto"):
    """The CUDA operator's windows at per-item scales, and the name of the path of each item."""
    tops, lefts, heights, widths = (list(v) for v in zip(*wins))
    outs, statuses, messages, paths = torch.ops.custom_op.decode_jpegs_cuda(
        [as_tensor(d) for d in datas],
        tops,
        lefts,
        heights,
        widths,
        whole=False,
        stack=False,
        device=torch.cuda.current_device(),
        scales=list(scales),
        mode=int(mode),
        apply_exif_orientation=exif,
        on_warning=0,
        max_pixels=0,
        decoder=custom_op._args.GPU_DECODERS[gpu_decoder],
    )
    assert statuses == [0] * len(datas), messages
    return outs, [testing.path_name(p) for p in paths]


def scaled_on_cpu(data, win, scale, mode=ImageReadMode.RGB, exif=False):
    image, _ = torch.ops.custom_op.decode_and_crop_jpeg(
        as_tensor(data), *win, mode=int(mode), apply_exif_orientation=exif, on_warning=0, max_pixels=0, scale_num=scale
    )
    return image


def assert_scaled_exact(datas, wins, scales, used, outs, mode=ImageReadMode.RGB, exif=False):
    for data, win, scale, path, out in zip(datas, wins, scales, used, outs):
        want = scaled_on_cpu(data, win, scale, mode, exif)
        assert out.device.type == "cuda" and torch.equal(out.cpu(), want), (win, scale, path, mode)


@needs_gpu
@pytest.mark.parametrize("sampling", SCALED_SAMPLINGS)
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_cuda_decoder_at_every_scale_equals_the_cpu_operator(jpeg_writer, sampling, mode):
    """Prepared files of every sampling our decoder takes, every scale mixed in one batch, windows at
    the edges, 1x1 ones and whole images, in every output mode (GRAY from colour files: the luma
    alone): all decoded by our CUDA decoder, each equal to decode_and_crop_jpeg with scale_num."""
    data = _scaled_file(jpeg_writer, sampling)
    datas, wins, scales = _every_scale(data, np.random.default_rng(len(sampling)))
    for dedupe in (True, False):  # one decode per scale for all its windows, and one per window
        with testing.gpu_options(dedupe=dedupe):
            outs, used = scaled_on_gpu(datas, wins, scales, mode)
        assert set(used) == {"cuda"}, (sampling, mode, dedupe, used)
        assert_scaled_exact(datas, wins, scales, used, outs, mode)


@needs_gpu
@pytest.mark.parametrize("orientation", range(1, 9))
def test_cuda_decoder_at_every_scale_with_exif_orientation(jpeg_writer, orientation):
    """A window is in the displayed frame of the scaled image, as the CPU operator takes it."""
    datas, wins, scales = [], [], []
    rng = np.random.default_rng(orientation)
    for sampling in ("4:2:0", "4:2:2"):
        data = _scaled_file(jpeg_writer, sampling, 61, 93, seed=orientation, orientation=orientation)
        for scale in SCALES:
            for win in _scaled_windows(rng, *_scaled_size(data, scale, exif=True)):
                datas.append(data)
                wins.append(win)
                scales.append(scale)
    outs, used = scaled_on_gpu(datas, wins, scales, exif=True)
    assert set(used) == {"cuda"}, used
    assert_scaled_exact(datas, wins, scales, used, outs, exif=True)


@needs_gpu
@pytest.mark.parametrize("gpu_decoder", ["auto", "nvjpeg"])
def test_scaled_items_our_decoder_does_not_take_go_to_the_cpu_path(jpeg_writer, gpu_decoder):
    """Files without restart markers, a progressive file and a prepared file at scale 4, in one batch
    with the same plain files at scale 8: by default our decoder takes every baseline file at its scale
    and the CPU path the progressive one; with "nvjpeg", which decodes at full size only, every item at
    scale 4 goes to the CPU path, and the plain files at scale 8 to nvJPEG (4:1:1, which it does not
    take, to the CPU path). Every item has the CPU operator's pixels."""
    plain = [_scaled_file(jpeg_writer, s, 120, 150, seed=91, prepared=False) for s in ("4:2:0", "4:4:4", "4:1:1")]
    progressive = jpeg_writer.encode(jpeg_writer.photo_like(120, 150, seed=92), progressive=True)
    prepared = _scaled_file(jpeg_writer, "4:2:0", 120, 150, seed=93)
    datas = plain + [progressive, prepared] + plain
    scales = [4] * 5 + [8] * 3
    wins = [(3, 5, 40, 50) if s == 4 else (6, 10, 80, 100) for s in scales]
    outs, used = scaled_on_gpu(datas, wins, scales, gpu_decoder=gpu_decoder)
    if gpu_decoder == "auto":
        assert used == ["cuda"] * 3 + ["cpu"] + ["cuda"] * 4, used
    else:
        assert used[:5] == ["cpu"] * 5, used
        assert base_path(used[7]) == "cpu" and all(base_path(p) != "cuda" for p in used[5:]), used
    # (nvJPEG's hybrid decoders, on a GPU without engines, are held to a bound elsewhere.)
    exact = [i for i, p in enumerate(used) if base_path(p) in EXACT_PATHS]
    assert exact[:5] == [0, 1, 2, 3, 4] and len(exact) >= 6, used
    assert_scaled_exact(*([xs[i] for i in exact] for xs in (datas, wins, scales, used, outs)))


@needs_gpu
def test_one_file_at_two_scales_in_one_batch(jpeg_writer):
    """A file repeated in a batch shares a decode only among items of one scale: each item gets its own
    scale's pixels, with its duplicates shared or not."""
    data = _scaled_file(jpeg_writer, "4:2:0", 200, 240, seed=94)
    scales = [2, 8, 2, 8, 4, 1]
    wins = [(1, 2, 20, 30), (50, 60, 70, 80), (10, 11, 12, 13), (0, 0, 200, 240), (0, 0, 100, 120), (5, 7, 10, 9)]
    for dedupe in (True, False):
        with testing.gpu_options(dedupe=dedupe):
            outs, used = scaled_on_gpu([data] * len(wins), wins, scales)
        assert used == ["cuda"] * len(wins), used
        assert_scaled_exact([data] * len(wins), wins, scales, used, outs)


@needs_gpu
@pytest.mark.parametrize("bad", [3, 0, 16, -1])
def test_a_bad_scale_raises_before_any_work(jpeg_writer, bad):
    """A scale the GPU path does not give is the call's ValueError, before any item (a garbage one
    included) gets an outcome of its own."""
    good = as_tensor(_scaled_file(jpeg_writer, "4:2:0", 64, 64, seed=95))
    op = torch.ops.custom_op.decode_jpegs_cuda
    options = dict(stack=False, device=torch.cuda.current_device(), **_decode_options(ImageReadMode.RGB))
    windows = ([0, 0], [0, 0], [8, 8], [8, 8])
    files = [good, as_tensor(b"garbage")]
    says = "scale must be 1, 2, 4 or 8"
    assert_op_raises(ValueError, says, op, files, *windows, whole=False, scales=[8, bad], **options)
    assert_op_raises(ValueError, "one entry per image", op, files, *windows, whole=False, scales=[4], **options)
    assert_op_raises(ValueError, "windows only", op, [good], [], [], [], [], whole=True, scales=[4], **options)


@needs_gpu
def test_a_window_that_does_not_fit_the_scaled_image_raises_as_on_the_cpu(jpeg_writer):
    data = _scaled_file(jpeg_writer, "4:2:0", 64, 80, seed=96)
    height, width = _scaled_size(data, 2)
    tensor = as_tensor(data)
    options = dict(device=torch.cuda.current_device(), **_decode_options(ImageReadMode.RGB))
    _, statuses, messages, _ = torch.ops.custom_op.decode_jpegs_cuda(
        [tensor], [0], [0], [height + 1], [width], whole=False, stack=False, scales=[2], **options
    )
    assert statuses == [2] and "does not fit" in messages[0], messages
    outs, _ = scaled_on_gpu([data], [(0, 0, height, width)], [2])
    assert torch.equal(outs[0].cpu(), scaled_on_cpu(data, (0, 0, height, width), 2))


# Our CUDA decoder on files without short restart segments, decoded in chunks (jpeg_core/sync_decode.h),
# where a test forces our decoder (by default the JPEG engines take these files): the CPU path's pixels,
# and for a damaged file the CPU path's outcome.


def long_segment_layouts(jpeg_writer, pixels, sampling):
    """The same photo without restart markers (standard and optimised tables) and with restart segments too
    long for a thread each."""
    options = {} if sampling == "gray" else {"sampling": sampling}
    return {
        "plain": jpeg_writer.encode(pixels, **options),
        "optimized": jpeg_writer.encode(pixels, optimize=True, **options),
        "interval-300": jpeg_writer.encode(pixels, restart_interval=300, **options),
    }


@needs_gpu
@pytest.mark.parametrize("sampling", ["4:4:4", "4:2:0", "4:2:2", "4:4:0", "4:1:1", "gray"])
def test_chunked_decoding_is_exact_on_every_layout(jpeg_writer, sampling):
    pixels = jpeg_writer.photo_like(301, 403, 1 if sampling == "gray" else 3, seed=43)
    wins = windows_everywhere(np.random.default_rng(43), 301, 403)
    assert_exact_on_layouts(long_segment_layouts(jpeg_writer, pixels, sampling), wins, force_path="cuda")


@needs_gpu
@pytest.mark.parametrize("chunk_bytes", [61, 256])
def test_chunked_decoding_in_small_chunks(jpeg_writer, chunk_bytes):
    """Chunks far smaller than our decoder's put many chunk boundaries, with decoders out of step across them,
    all over a small image: every window is still the CPU path's (an image whose chunks the rounds and the walk
    do not bring in step goes to the CPU path), and in chunks of 256 bytes our decoder takes some."""
    pixels = jpeg_writer.photo_like(301, 403, 3, seed=44)
    layouts = long_segment_layouts(jpeg_writer, pixels, "4:2:0")
    wins = windows_everywhere(np.random.default_rng(44), 301, 403)
    datas = [data for data in layouts.values() for _ in wins]
    batch_wins = wins * len(layouts)
    with testing.gpu_options(force_path="cuda", chunk_bytes=chunk_bytes, dedupe=False):
        outs, used = testing.decode_with_paths(datas, *zip(*batch_wins), device="cuda")
    for data, win, out in zip(datas, batch_wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(data, *win)), (chunk_bytes, win)
    REPORT[f"chunked_decoding_chunks_of_{chunk_bytes}"] = dict(Counter(used))
    if chunk_bytes >= 256:  # in chunks of 61 bytes, decoders may not fall in step within the sweep's budget
        assert "cuda" in used, used


@needs_gpu
@pytest.mark.parametrize("sampling", SCALED_SAMPLINGS)
def test_chunked_decoding_at_every_scale(jpeg_writer, sampling):
    data = _scaled_file(jpeg_writer, sampling, prepared=False)
    datas, wins, scales = _every_scale(data, np.random.default_rng(len(sampling) + 7))
    with testing.gpu_options(force_path="cuda"):
        outs, used = scaled_on_gpu(datas, wins, scales)
    assert set(used) == {"cuda"}, (sampling, used)
    assert_scaled_exact(datas, wins, scales, used, outs)


@needs_gpu
@pytest.mark.parametrize("gpu_decoder", ["auto", "cuda", "nvjpeg"])
def test_gpu_decoder_chooses_who_decodes(jpeg_writer, gpu_decoder):
    """The public option, without any testing override: "cuda" and "auto" (the default) give our CUDA decoder
    files without restart markers too (in chunks), "nvjpeg" gives nvJPEG prepared files too; every window the
    CPU path's."""
    pixels = jpeg_writer.photo_like(240, 320, 3, seed=61)
    originals = [jpeg_writer.encode(pixels, sampling="4:2:0"), jpeg_writer.encode(pixels, optimize=True)]
    prepared = [custom_op.prepare_jpeg(f) for f in originals]
    datas = originals + prepared
    wins = [(5, 7, 120, 200), (100, 30, 140, 280)] * 2
    outs, used = testing.decode_with_paths(datas, *zip(*wins), device="cuda", gpu_decoder=gpu_decoder)
    for data, win, out in zip(datas, wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(data, *win)), (gpu_decoder, used)
    ours = [path == "cuda" for path in used]
    assert ours == {"cuda": [True] * 4, "nvjpeg": [False] * 4, "auto": [True] * 4}[gpu_decoder], used
    whole = custom_op.decode_jpegs(originals, device="cuda", stack=True, gpu_decoder=gpu_decoder)
    assert torch.equal(whole.cpu(), torch.stack([custom_op.decode_jpeg(f) for f in originals]))
    one = custom_op.decode_and_crop_jpeg(originals[0], *wins[0], device="cuda", gpu_decoder=gpu_decoder)
    assert torch.equal(one.cpu(), custom_op.decode_and_crop_jpeg(originals[0], *wins[0]))


@needs_gpu
def test_gpu_decoder_on_a_gpu_without_engines(jpeg_writer):
    """As on a GPU without JPEG engines (testing.gpu_options(engines=False)): the default gives our CUDA decoder
    the files without restart markers too, as everywhere, and a progressive file, which the check before nvJPEG
    does not pass, to the CPU path; every window the CPU path's. "nvjpeg" gives the baseline files to the hybrid
    decoders, the JPEG engines taking nothing."""
    pixels = jpeg_writer.photo_like(240, 320, 3, seed=62)
    originals = [jpeg_writer.encode(pixels, sampling="4:2:0"), jpeg_writer.encode(pixels, optimize=True)]
    datas = originals + [custom_op.prepare_jpeg(f) for f in originals]
    datas.append(jpeg_writer.encode(pixels, sampling="4:2:0", progressive=True))
    wins = [(5, 7, 120, 200), (100, 30, 140, 280)] * 2 + [(8, 16, 64, 64)]
    with testing.gpu_options(engines=False):
        outs, used = testing.decode_with_paths(datas, *zip(*wins), device="cuda")
        _, nvjpeg_used = testing.decode_with_paths(originals, *zip(*wins[:2]), device="cuda", gpu_decoder="nvjpeg")
    for data, win, out in zip(datas, wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(data, *win)), used
    assert used == ["cuda"] * 4 + ["cpu"], used
    assert set(nvjpeg_used) <= {"gpu-hybrid", "hybrid"}, nvjpeg_used


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "warn", "ignore"])
def test_gpu_decoder_cuda_gives_the_hostile_batch_the_cpu_paths_outcome(jpeg_writer, on_warning):
    """The hostile batch with gpu_decoder="cuda" and no check_entropy: every item's exception (type and
    message) or pixels, and the warnings, are the CPU path's. Our CUDA decoder takes the valid baseline
    files, restart markers or not; what it leaves is checked before nvJPEG could get it, and the
    progressive files, which the check does not pass, go to the CPU path."""
    files, windows = _hostile_batch(jpeg_writer, np.random.default_rng(7))
    options = {"on_warning": on_warning, "on_error": "return"}
    expected, expected_warnings = _recorded(custom_op.decode_and_crop_jpegs, files, *zip(*windows), **options)
    (got, used), got_warnings = _recorded(
        testing.decode_with_paths, files, *zip(*windows), device="cuda", gpu_decoder="cuda", **options
    )
    assert got_warnings == expected_warnings
    expected, got = _shown(expected), _shown(got)
    for i, (out, ref) in enumerate(zip(got, expected)):
        if isinstance(ref, str):
            assert out == ref, (i, used[i])
        else:
            assert isinstance(out, torch.Tensor) and torch.equal(out.cpu(), ref), (i, used[i], out)
    assert set(used) <= {"cuda", "cpu", "failed"}, used  # "failed": the CPU path raised
    assert sum(path == "cuda" for path in used) >= 25, used
    REPORT.setdefault("gpu_decoder_cuda_hostile_batch", {})[on_warning] = {
        "paths": {p: used.count(p) for p in sorted(set(used))}
    }


@needs_gpu
@pytest.mark.parametrize("on_warning", ["raise", "ignore"])
def test_chunked_decoding_of_a_large_scan(jpeg_writer, on_warning):
    """A photo whose entropy-coded data is past jpeg_core's kLargeScanBytes (512 KB) is decoded in the larger
    chunks with one guess a chunk (segment_executor.cpp's kLargeChunkBytes, sync_decode.h's slot_layout): each
    window, one decode a window, is the CPU path's, from the top rows to the last; damaged copies of it get the
    CPU path's outcome (exception or pixels, and warnings)."""
    height, width = 1800, 2400
    data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 3, seed=71), sampling="4:2:0", quality=95)
    assert len(data) > 600_000, len(data)
    rng = np.random.default_rng(71)
    damaged = [case for _, case in damaged_jpegs.damaged(data, rng, flips=6)]
    wins = [(0, 0, 224, 224), (height - 512, width - 512, 512, 512), (900, 1200, 300, 400)]
    wins += [random_window(rng, height, width, 224) for _ in range(5)]
    files = [data] * len(wins) + damaged
    windows = wins + [wins[i % len(wins)] for i in range(len(damaged))]
    options = {"on_warning": on_warning, "on_error": "return"}
    expected, expected_warnings = _recorded(custom_op.decode_and_crop_jpegs, files, *zip(*windows), **options)
    retries = testing.cuda_decoder_retries()
    with testing.gpu_options(force_path="cuda", dedupe=False):
        (got, used), got_warnings = _recorded(
            testing.decode_with_paths, files, *zip(*windows), device="cuda", **options
        )
        # The windows' first tries (jpeg_core's window_scan_bytes) take enough of this photo's scan: the
        # valid windows are never decoded again (the damaged copies may be).
        clean = testing.cuda_decoder_retries()
        custom_op.decode_and_crop_jpegs([data] * len(wins), *zip(*wins), device="cuda")
        assert testing.cuda_decoder_retries() == clean, "a valid window's first try fell short"
    assert clean >= retries
    assert got_warnings == expected_warnings
    _assert_cpu_outcomes(got, expected, used)
    assert used[: len(wins)] == ["cuda"] * len(wins), used


@needs_gpu
@pytest.mark.parametrize("window_bytes", [1, 30_000])
def test_a_windows_first_try_is_decoded_again_where_it_falls_short(jpeg_writer, window_bytes):
    """A window of a file decoded in chunks first takes only the scan's first bytes (here window_bytes of them,
    whatever the scan's size): a window whose rows need more is decoded again with the whole file in the same call
    (cuda_decoder_retries counts it), so that every window is still the CPU path's, and damaged copies get the CPU
    path's outcome. With one byte every window falls short; with 30,000 of about 60,000 the top windows do not."""
    height, width = 600, 800
    data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 3, seed=73), sampling="4:2:0", quality=90)
    assert 40_000 < len(data) < 120_000, len(data)
    rng = np.random.default_rng(73)
    damaged = [case for _, case in damaged_jpegs.damaged(data, rng, flips=4)]
    wins = [(0, 0, 64, 64), (16, 400, 100, 100), (height - 224, width - 224, 224, 224), (250, 300, 200, 200)]
    wins += [random_window(rng, height, width, 96) for _ in range(6)]
    files = [data] * len(wins) + damaged
    windows = wins + [wins[i % len(wins)] for i in range(len(damaged))]
    options = {"on_warning": "raise", "on_error": "return"}
    expected, expected_warnings = _recorded(custom_op.decode_and_crop_jpegs, files, *zip(*windows), **options)
    retries = testing.cuda_decoder_retries()
    with testing.gpu_options(force_path="cuda", dedupe=False, window_bytes=window_bytes):
        (got, used), got_warnings = _recorded(
            testing.decode_with_paths, files, *zip(*windows), device="cuda", **options
        )
        retried = testing.cuda_decoder_retries() - retries
        # The next call through the same slot waits for the one before, its second decode included.
        again = custom_op.decode_and_crop_jpegs([data] * len(wins), *zip(*wins), device="cuda")
    assert got_warnings == expected_warnings
    _assert_cpu_outcomes(got, expected, used)
    assert used[: len(wins)] == ["cuda"] * len(wins), used
    for out, ref in zip(again, expected[: len(wins)]):
        assert torch.equal(out.cpu(), ref)
    if window_bytes == 1:
        assert retried >= len(wins), retried
    else:
        assert 0 < retried < len(files), retried


@needs_gpu
def test_chunked_decoding_of_imagenet_photos():
    """The sample's photos as they come (no restart markers): every baseline one decoded by our decoder,
    each window the CPU path's; the resized crop of the same windows too."""
    datas = [f.read_bytes() for f in sorted(shared_dir("imagenet-sample").iterdir())]
    wins = photo_windows(datas, seed=51)
    with testing.gpu_options(force_path="cuda"):
        outs, used = testing.decode_with_paths(datas, *zip(*wins), device="cuda")
        resized = custom_op.decode_and_resized_crop_jpegs(datas, *zip(*wins), 64, device="cuda")
    counts = paths_of_cpu_pixels(datas, wins, outs, used)
    REPORT["chunked_decoding_imagenet"] = dict(counts)
    # Photos the chunks do not bring in step within the sweep's budget go to the CPU path, with the same
    # pixels; nearly none do.
    baseline = sum(not custom_op.read_jpeg_header(d).progressive for d in datas)
    assert counts["cuda"] >= baseline * 95 // 100, (dict(counts), baseline)
    assert torch.equal(resized.cpu(), custom_op.decode_and_resized_crop_jpegs(datas, *zip(*wins), 64))
