"""The GPU (nvJPEG) backend: same windows as the CPU path, pixels within JPEG-decoder rounding of it,
CPU fallback, batches, errors that name the item, stream order, chroma edges at window borders, threads,
and no leak. Tests that need a GPU skip with the reason on machines without CUDA; run them on the GPU
machine with bench/device_run.sh.

Numbers worth keeping (accuracy per subsampling, whether this nvJPEG writes out of stream order, the
chroma edge with and without margin) go to the JSON file named by $CUSTOM_OP_GPU_REPORT when set.
"""

import io
import json
import os
import re
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import custom_op
from jpeg_factory import with_exif_orientation
from conftest import SHARED_DATA, shared_dir
from custom_op import ImageReadMode, gpu

REASON = gpu.unavailable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"GPU backend unavailable here: {REASON}")

REPORT = {}
MIN_PSNR_DB = 40.0
MAX_MEAN_ABS = 0.5


@pytest.fixture(scope="module", autouse=True)
def write_report():
    yield
    path = os.environ.get("CUSTOM_OP_GPU_REPORT")
    if path and REPORT:
        with open(path, "w") as f:
            json.dump(REPORT, f, indent=1, sort_keys=True, default=str)


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)




class Stats:
    """Accumulated |GPU - CPU| over many windows: max, mean and PSNR."""

    def __init__(self):
        self.max = 0
        self.sum = 0.0
        self.sq = 0.0
        self.n = 0

    def add(self, a: torch.Tensor, b: torch.Tensor):
        assert a.shape == b.shape, (a.shape, b.shape)
        d = (a.cpu().to(torch.int32) - b.cpu().to(torch.int32)).abs()
        self.max = max(self.max, int(d.max()) if d.numel() else 0)
        self.sum += float(d.sum())
        self.sq += float((d.to(torch.float64) ** 2).sum())
        self.n += d.numel()

    @property
    def mean(self):
        return self.sum / max(self.n, 1)

    @property
    def psnr(self):
        mse = self.sq / max(self.n, 1)
        return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)

    def as_dict(self):
        return {"max_abs": self.max, "mean_abs": round(self.mean, 4), "psnr_db": round(self.psnr, 2),
                "values": self.n}


def random_window(rng, height, width, size=224):
    h, w = min(size, height), min(size, width)
    return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w


def subsampling_name(data: bytes) -> str:
    info = custom_op.read_jpeg_header(data)
    return ("progressive " if info.progressive else "") + info.subsampling


# ---------------------------------------------------------------------------------------------------
# Without a GPU: importing stays CPU-only and device="cuda" says why it cannot run


def test_import_does_not_load_the_gpu_backend():
    code = ("import sys, custom_op, torch; "
            "print('custom_op.gpu' in sys.modules, hasattr(torch.ops.custom_op, '_decode_jpegs_cuda'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.skipif(REASON is None, reason="this machine has a working GPU backend")
def test_cuda_device_raises_with_the_reason():
    data = Image.new("RGB", (32, 24), (10, 200, 30))
    buf = io.BytesIO()
    data.save(buf, "JPEG")
    with pytest.raises(RuntimeError, match="GPU .*backend cannot run here"):
        custom_op.decode_and_crop_jpeg(buf.getvalue(), 0, 0, 8, 8, device="cuda")
    assert not gpu.cuda_available()
    # The batched form works on the CPU everywhere.
    out = custom_op.decode_and_crop_jpeg([buf.getvalue()] * 2, 0, 0, 8, 8, device="cpu", stack=True)
    assert out.shape == (2, 3, 8, 8)


# ---------------------------------------------------------------------------------------------------
# The operator as PyTorch sees it: its fake kernel (checked here on any machine, against the schema in
# the C++ source), opcheck and torch.compile (on the GPU)


def _cuda_op_schema() -> str:
    """The schema of custom_op::_decode_jpegs_cuda, read from its m.def(...) in the C++ source."""
    text = (Path(__file__).resolve().parents[1] / "custom_op" / "csrc" / "cuda" / "decode_cuda.cpp").read_text()
    for literals in re.findall(r'm\.def\(\s*((?:"[^"]*"\s*)+)', text):
        schema = "".join(re.findall(r'"([^"]*)"', literals))
        if schema.startswith("_decode_jpegs_cuda("):
            return schema
    raise AssertionError("no m.def of _decode_jpegs_cuda in decode_cuda.cpp")


@pytest.fixture(scope="module")
def fake_only_op():
    """An operator with the GPU operator's schema and fake kernel but no real kernel, in a namespace of
    its own: what FakeTensor tracing sees of the real one, without CUDA."""
    from custom_op import _ops

    lib = torch.library.Library("custom_op_fake_only", "FRAGMENT")
    lib.define(_cuda_op_schema())
    torch.library.register_fake("custom_op_fake_only::_decode_jpegs_cuda", _ops._decode_jpegs_cuda_fake, lib=lib)
    yield torch.ops.custom_op_fake_only._decode_jpegs_cuda.default
    lib._destroy()


def _fake_call(op, n, heights, widths, mode, device=0, stack=False, debug=0):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as fake_mode:
        data = [fake_mode.from_tensor(torch.zeros(100, dtype=torch.uint8)) for _ in range(n)]
        return op(data, [0] * n, [0] * n, heights, widths, int(mode), False, 0, 0, device, stack, False, debug)


def test_fake_kernel_shapes_and_device(fake_only_op):
    # Fake tensors on a device this machine has (FakeTensorMode checks it when CUDA is there).
    index = 1 if not torch.cuda.is_available() or torch.cuda.device_count() > 1 else 0
    outs, errors, paths = _fake_call(fake_only_op, 3, [10, 20, 30], [5, 6, 7], ImageReadMode.RGB, device=index)
    assert [tuple(o.shape) for o in outs] == [(3, 10, 5), (3, 20, 6), (3, 30, 7)]
    assert all(o.dtype == torch.uint8 and o.device == torch.device("cuda", index) and o.is_contiguous() for o in outs)
    assert len(errors) == len(paths) == 3
    (stacked,), _, _ = _fake_call(fake_only_op, 4, [16] * 4, [24] * 4, ImageReadMode.GRAY, stack=True)
    assert tuple(stacked.shape) == (4, 1, 16, 24) and stacked.device == torch.device("cuda", 0)
    # UNCHANGED: the channel count comes from each file; decode_jpeg (debug bit _WHOLE): so does the size.
    outs, _, _ = _fake_call(fake_only_op, 2, [8, 8], [9, 9], ImageReadMode.UNCHANGED)
    assert [tuple(o.shape[1:]) for o in outs] == [(8, 9), (8, 9)]
    assert all(not isinstance(o.shape[0], int) for o in outs)
    (whole,), _, _ = _fake_call(fake_only_op, 2, [0, 0], [0, 0], ImageReadMode.RGB, stack=True, debug=gpu._WHOLE)
    assert whole.shape[:2] == (2, 3) and not isinstance(whole.shape[2], int)
    outs, errors, paths = _fake_call(fake_only_op, 0, [], [], ImageReadMode.RGB, stack=True)
    assert outs == [] and errors == [] and paths == []


def test_fake_kernel_rejects_what_the_operator_rejects(fake_only_op):
    with pytest.raises(ValueError, match="one entry per image"):
        _fake_call(fake_only_op, 2, [8], [8, 8], ImageReadMode.RGB)
    with pytest.raises(ValueError, match="one size"):
        _fake_call(fake_only_op, 2, [8, 9], [8, 8], ImageReadMode.RGB, stack=True)
    with pytest.raises(ValueError, match="mode code"):
        _fake_call(fake_only_op, 1, [8], [8], 7)


def _op_args(datas, wins, mode, stack=False, whole=False):
    tops, lefts, heights, widths = (list(v) for v in zip(*wins))
    return ([as_tensor(d) for d in datas], tops, lefts, heights, widths, int(mode), False, 0, 0,
            torch.cuda.current_device(), stack, False, gpu._WHOLE if whole else 0)


# test_aot_dispatch_dynamic is left out: AOTAutograd (like Dynamo) cannot carry the operator's str[]
# output (its per-item error texts), so the operator cannot be part of a compiled graph.
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
@pytest.mark.parametrize("form", ["list", "stack", "whole"])
def test_opcheck_batched_op(jpeg_writer, mode, form):
    color = [jpeg_writer.encode(jpeg_writer.photo_like(64 + 8 * i, 80, seed=i), sampling=s)
             for i, s in enumerate(["4:2:0", "4:4:4", "4:1:1"])]  # 4:1:1 takes the CPU path
    gray = jpeg_writer.encode(jpeg_writer.photo_like(72, 96, 1, seed=3))
    if form == "stack":  # one size and, for UNCHANGED, one channel count
        datas, wins = color, [(0, 0, 48, 64), (5, 7, 48, 64), (9, 3, 48, 64)]
    else:
        datas, wins = color + [gray], [(0, 0, 48, 64), (5, 7, 40, 33), (1, 2, 3, 4), (10, 20, 50, 60)]
    args = _op_args(datas, wins, mode, stack=form == "stack", whole=form == "whole")
    outs, errors, paths = torch.ops.custom_op._decode_jpegs_cuda(*args)
    assert errors == [""] * len(datas) and len(outs) == (1 if form == "stack" else len(datas))
    torch.library.opcheck(torch.ops.custom_op._decode_jpegs_cuda.default, args, test_utils=OPCHECK_UTILS)


@needs_gpu
def test_torch_compile_runs_the_batched_call(jpeg_writer):
    """The operator returns its error texts as str[], which Dynamo cannot put in a graph ("torch.* op
    returned non-Tensor"), so torch.compile(fullgraph=True) fails for the operator and for the public
    call alike. With graph breaks allowed (the default), compiled code around a batched decode gives
    the eager result."""
    datas = [as_tensor(jpeg_writer.encode(jpeg_writer.photo_like(64, 80, seed=i))) for i in range(3)]

    def step(datas):
        batch = custom_op.decode_and_crop_jpeg(datas, [0, 3, 5], [1, 2, 4], 32, 40, device="cuda", stack=True)
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
    REPORT["backend"] = info
    REPORT["device"] = torch.cuda.get_device_name()
    assert info["nvjpeg_version"].split(".")[0].isdigit()
    assert info["torch_allocators"] == "1"
    if "H100" in torch.cuda.get_device_name() or "A100" in torch.cuda.get_device_name():
        assert info["hardware"] == "1", info


# ---------------------------------------------------------------------------------------------------
# Accuracy and geometry against the CPU path


@needs_gpu
def test_imagenet_sample_against_cpu():
    files = sorted(shared_dir("imagenet-sample").iterdir())
    rng = np.random.default_rng(0)
    stats = defaultdict(Stats)
    paths = defaultdict(int)
    datas = [f.read_bytes() for f in files]
    windows = []
    for data in datas:
        info = custom_op.read_jpeg_header(data)
        windows.append(random_window(rng, info.height, info.width))
    for start in range(0, len(datas), 64):
        chunk = datas[start:start + 64]
        wins = windows[start:start + 64]
        outs, used = gpu.decode_and_crop_jpegs(chunk, *zip(*wins), device="cuda", _return_paths=True)
        for data, win, out, path in zip(chunk, wins, outs, used):
            ref = custom_op.decode_and_crop_jpeg(data, *win)
            assert out.device.type == "cuda" and out.dtype == torch.uint8 and out.is_contiguous()
            assert out.shape == ref.shape
            stats[subsampling_name(data)].add(out, ref)
            paths[path] += 1
    # Whole images too: every edge of the image is a window edge.
    for data in datas[::10]:
        full = custom_op.decode_jpeg(data, device="cuda")
        stats[subsampling_name(data) + " (whole image)"].add(full, custom_op.decode_jpeg(data))
    REPORT["imagenet_sample_224_windows"] = {k: v.as_dict() for k, v in stats.items()}
    REPORT["imagenet_sample_paths"] = dict(paths)
    for name, s in stats.items():
        assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, (name, s.as_dict())
    if gpu.backend_info()["hardware"] == "1":
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
@pytest.mark.parametrize("size", [(301, 403), (64, 1000)])
def test_generated_variants_against_cpu(jpeg_writer, size):
    rng = np.random.default_rng(1)
    height, width = size
    pixels = jpeg_writer.photo_like(height, width, seed=4)
    results = {}
    for name, options in VARIANTS.items():
        data = jpeg_writer.encode(pixels, **options)
        wins = [random_window(rng, height, width, s) for s in (1, 7, 33, 100, 224, 1000) for _ in range(3)]
        wins += [(0, 0, height, width), (height - 1, width - 1, 1, 1), (0, width - 5, height, 5)]
        # One ROI decode per window (a repeated file is otherwise decoded once for all its windows).
        outs, used = gpu.decode_and_crop_jpegs([data] * len(wins), *zip(*wins), device="cuda",
                                               _debug=gpu.DEBUG_NO_DEDUPE, _return_paths=True)
        s = Stats()
        for win, out in zip(wins, outs):
            s.add(out, custom_op.decode_and_crop_jpeg(data, *win))
        results[name] = {**s.as_dict(), "paths": sorted(set(used))}
        assert "cpu" not in used, (name, used)
        assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, (name, s.as_dict())
    gray = jpeg_writer.encode(jpeg_writer.photo_like(height, width, 1, seed=5))
    s = Stats()
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED):
        out = custom_op.decode_and_crop_jpeg(gray, 3, 5, height - 6, width - 9, mode=mode, device="cuda")
        s.add(out, custom_op.decode_and_crop_jpeg(gray, 3, 5, height - 6, width - 9, mode=mode))
    results["gray"] = s.as_dict()
    assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, s.as_dict()
    REPORT[f"generated_{height}x{width}"] = results


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_modes_give_the_cpu_channels(jpeg_writer, mode):
    color = jpeg_writer.encode(jpeg_writer.photo_like(90, 70, seed=2), sampling="4:2:0")
    gray = jpeg_writer.encode(jpeg_writer.photo_like(90, 70, 1, seed=2))
    for data in (color, gray):
        out = custom_op.decode_and_crop_jpeg(data, 10, 20, 50, 40, mode=mode, device="cuda")
        ref = custom_op.decode_and_crop_jpeg(data, 10, 20, 50, 40, mode=mode)
        assert out.shape == ref.shape
        assert (out.cpu().int() - ref.int()).abs().float().mean() < 1.0


@needs_gpu
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation(jpeg_writer, orientation):
    data = with_exif_orientation(jpeg_writer.encode(jpeg_writer.photo_like(37, 61, seed=7), sampling="4:2:0"), orientation)
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
    rng = np.random.default_rng(orientation)
    wins = [random_window(rng, info.height, info.width, s) for s in (1, 5, 20, 64) for _ in range(4)]
    outs = custom_op.decode_and_crop_jpeg([data] * len(wins), *zip(*wins), apply_exif_orientation=True,
                                         device="cuda")
    s = Stats()
    for win, out in zip(wins, outs):
        s.add(out, custom_op.decode_and_crop_jpeg(data, *win, apply_exif_orientation=True))
    full = custom_op.decode_jpeg(data, apply_exif_orientation=True, device="cuda")
    s.add(full, custom_op.decode_jpeg(data, apply_exif_orientation=True))
    assert full.shape[1:] == (info.height, info.width)
    # A wrong orientation would move whole regions: far beyond decoder rounding.
    assert s.mean < MAX_MEAN_ABS and s.psnr >= MIN_PSNR_DB, s.as_dict()
    with pytest.raises(ValueError, match="does not fit"):
        custom_op.decode_and_crop_jpeg(data, 0, 0, info.height + 1, 1, apply_exif_orientation=True, device="cuda")


@needs_gpu
def test_real_exif_files(jpeg_writer):
    folder = shared_dir("odd-jpegs")
    for name in ("hopper_orientation_3.jpg", "hopper_orientation_6.jpg"):
        data = (folder / name).read_bytes()
        out = custom_op.decode_jpeg(data, apply_exif_orientation=True, device="cuda")
        ref = custom_op.decode_jpeg(data, apply_exif_orientation=True)
        s = Stats()
        s.add(out, ref)
        assert s.mean < MAX_MEAN_ABS, (name, s.as_dict())


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
    odd = SHARED_DATA / "odd-jpegs" / "pil_sample_cmyk.jpg"
    if odd.is_file():
        cases["pil cmyk"] = odd.read_bytes()
    for name, data in cases.items():
        for mode in ImageReadMode:
            info = custom_op.read_jpeg_header(data)
            h, w = min(info.height, 30), min(info.width, 30)
            (out,), used = gpu.decode_and_crop_jpegs([data], 3, 2, h - 3, w - 2, mode=mode, _return_paths=True)
            ref = custom_op.decode_and_crop_jpeg(data, 3, 2, h - 3, w - 2, mode=mode)
            assert used == ["cpu"], (name, used)
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
        listed = custom_op.decode_jpeg([data, cut], on_warning="warn", device="cuda")
    assert torch.equal(listed[1], out)


# ---------------------------------------------------------------------------------------------------
# Batches: lists, stacks, errors naming the item, no sticky CUDA error


@needs_gpu
def test_list_and_stack_agree(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(80 + i, 90, seed=i), sampling=s)
             for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:2:0"])]
    tops, lefts = [0, 5, 10, 15], [1, 2, 3, 4]
    listed = custom_op.decode_and_crop_jpeg(datas, tops, lefts, 64, 48, device="cuda")
    stacked = custom_op.decode_and_crop_jpeg(datas, tops, lefts, 64, 48, device="cuda", stack=True)
    assert isinstance(listed, list) and len(listed) == 4
    assert stacked.shape == (4, 3, 64, 48) and stacked.is_contiguous()
    for i in range(4):
        assert torch.equal(listed[i], stacked[i])
    with pytest.raises(ValueError, match="one size"):
        custom_op.decode_and_crop_jpeg(datas, 0, 0, [64, 64, 63, 64], 48, device="cuda", stack=True)
    gray = jpeg_writer.encode(jpeg_writer.photo_like(80, 90, 1, seed=1))
    with pytest.raises(ValueError, match="channel"):
        custom_op.decode_and_crop_jpeg([datas[0], gray], 0, 0, 8, 8, mode="UNCHANGED", device="cuda", stack=True)
    # Same pixels whichever way the batch is split.
    singles = [custom_op.decode_and_crop_jpeg(d, t, l, 64, 48, device="cuda") for d, t, l in zip(datas, tops, lefts)]
    for a, b in zip(singles, listed):
        assert torch.equal(a, b)


@needs_gpu
def test_bad_item_is_named_and_the_next_batch_is_fine(jpeg_writer):
    good = jpeg_writer.encode(jpeg_writer.photo_like(50, 60, seed=1))
    expected = custom_op.decode_and_crop_jpeg([good] * 3, 0, 0, 40, 40, device="cuda", stack=True)
    garbage = bytes(range(256)) * 4
    with pytest.raises(RuntimeError, match="batch item 1: .*"):
        custom_op.decode_and_crop_jpeg([good, garbage, good], 0, 0, 40, 40, device="cuda")
    with pytest.raises(ValueError, match="batch item 2: crop window .* does not fit"):
        custom_op.decode_and_crop_jpeg([good, good, good], [0, 0, 30], 0, 40, 40, device="cuda")
    with pytest.raises(TypeError, match="batch item 0|data must"):
        custom_op.decode_and_crop_jpeg([np.zeros(8, np.int32), good], 0, 0, 4, 4, device="cuda")
    with pytest.raises(ValueError, match="batch item 1: .*max_pixels"):
        big = jpeg_writer.encode(jpeg_writer.photo_like(100, 100, seed=1))
        custom_op.decode_and_crop_jpeg([good, big], 0, 0, 4, 4, max_pixels=5000, device="cuda")
    again = custom_op.decode_and_crop_jpeg([good] * 3, 0, 0, 40, 40, device="cuda", stack=True)
    torch.cuda.synchronize()
    assert torch.equal(again, expected)


@needs_gpu
def test_errors_returned_in_place(jpeg_writer):
    good = jpeg_writer.encode(jpeg_writer.photo_like(50, 60, seed=1))
    out = custom_op.decode_and_crop_jpeg([good, b"\xff\xd8junk", good, b""], 0, 0, 40, 40, device="cuda",
                                         on_error="return")
    assert isinstance(out[0], torch.Tensor) and isinstance(out[2], torch.Tensor)
    assert isinstance(out[1], RuntimeError) and "batch item 1" in str(out[1])
    assert isinstance(out[3], RuntimeError) and "batch item 3" in str(out[3])
    stacked, errors = custom_op.decode_and_crop_jpeg([good, b"nope", good], 0, 0, 40, 40, device="cuda",
                                                     stack=True, on_error="return")
    assert errors[0] is None and errors[2] is None and isinstance(errors[1], RuntimeError)
    assert stacked.shape == (3, 3, 40, 40) and int(stacked[1].max()) == 0
    assert torch.equal(stacked[0], out[0]) and torch.equal(stacked[2], out[2])


@needs_gpu
def test_hostile_batches_leave_no_sticky_error(jpeg_writer):
    rng = np.random.default_rng(5)
    good = jpeg_writer.encode(jpeg_writer.photo_like(120, 160, seed=2))
    reference = custom_op.decode_and_crop_jpeg([good] * 4, 8, 8, 100, 100, device="cuda", stack=True).cpu()
    sos = good.index(b"\xff\xda")
    hostile = [b"", b"\xff\xd8", good[:sos + 20], good[: len(good) // 2] + b"\xff\xd9"]
    for _ in range(12):  # flipped bytes in the entropy-coded data, EOI kept
        b = bytearray(good)
        for k in rng.integers(sos + 20, len(good) - 2, size=8):
            b[k] = int(rng.integers(0, 256))
        hostile.append(bytes(b))
    results = custom_op.decode_and_crop_jpeg(hostile + [good], 8, 8, 100, 100, device="cuda", on_error="return")
    torch.cuda.synchronize()
    assert isinstance(results[-1], torch.Tensor)
    for r in results:
        assert isinstance(r, (torch.Tensor, ValueError, RuntimeError))
    after = custom_op.decode_and_crop_jpeg([good] * 4, 8, 8, 100, 100, device="cuda", stack=True)
    torch.cuda.synchronize()
    assert torch.equal(after.cpu(), reference)


# ---------------------------------------------------------------------------------------------------
# Stream order: the hardware decoder writes when called, not in stream order (reported for nvJPEG
# 12.3 to 13.2 on H100). Memory the caller's queued kernels still read must never be written early.


def _stream_race(datas, debug):
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
        gpu.decode_and_crop_jpegs(datas, 0, 0, side, side, device="cuda", _debug=debug)
    torch.cuda.synchronize()
    return sum(int(s) != expected for s in sums), len(sums)


@needs_gpu
def test_outputs_are_written_in_stream_order(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(128, 128, seed=i)) for i in range(8)]
    bad, total = _stream_race(datas, 0)
    REPORT["stream_order_guarded"] = {"corrupted_reductions": bad, "of": total}
    assert bad == 0


@needs_gpu
def test_whether_this_nvjpeg_writes_out_of_stream_order(jpeg_writer):
    """Diagnostic: the hardware decoder allowed to write straight into the outputs (no guard)."""
    if gpu.backend_info()["hardware"] != "1":
        pytest.skip("no hardware JPEG decoder on this GPU")
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(128, 128, seed=i)) for i in range(8)]
    _, used = gpu.decode_and_crop_jpegs(datas, 0, 0, 96, 96, _debug=gpu.DEBUG_UNGUARDED | gpu.DEBUG_NO_MARGIN,
                                        _return_paths=True)
    assert set(used) == {"hardware-roi"}, used
    bad, total = _stream_race(datas, gpu.DEBUG_UNGUARDED | gpu.DEBUG_NO_MARGIN)
    REPORT["stream_order_unguarded"] = {"corrupted_reductions": bad, "of": total,
                                        "nvjpeg": gpu.backend_info()["nvjpeg_version"]}
    print(f"unguarded hardware decode corrupted {bad} of {total} queued reductions")


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
    with pytest.raises(ValueError, match="stream"):
        custom_op.decode_and_crop_jpeg(data, 4, 4, 32, 32, stream=side)


# ---------------------------------------------------------------------------------------------------
# Chroma upsampling at window edges: a region of interest decoded with interpolated upsampling must
# equal the same decoder's whole image, sliced. A one-pixel margin makes it so; without it, nvJPEG
# releases reported to get the window's edge wrong show it here.


def _edge_mismatch(data, height, width, debug):
    rng = np.random.default_rng(11)
    wins = [(t, l, h, w) for t in (0, 1, 2, 7, 8, 9, 16, 17) for l in (1, 2, 3, 15, 16) for h, w in ((17, 19),)]
    wins += [random_window(rng, height, width, 64) for _ in range(16)]
    full, _ = gpu.decode_and_crop_jpegs([data], 0, 0, height, width, _debug=debug | gpu.DEBUG_NO_ROI,
                                        _return_paths=True)
    outs, used = gpu.decode_and_crop_jpegs([data] * len(wins), *zip(*wins), _debug=debug | gpu.DEBUG_NO_DEDUPE,
                                           _return_paths=True)
    ref = full[0]
    diff_values, worst = 0, 0
    for (t, l, h, w), out in zip(wins, outs):
        d = (out.int() - ref[:, t:t + h, l:l + w].int()).abs()
        diff_values += int((d > 0).sum())
        worst = max(worst, int(d.max()))
    return diff_values, worst, sorted(set(used))


@needs_gpu
@pytest.mark.parametrize("sampling", ["4:2:0", "4:2:2", "4:4:0"])
@pytest.mark.parametrize("decoder", ["hardware", "hybrid"])
def test_window_edges_match_the_whole_image(jpeg_writer, sampling, decoder):
    height, width = 96, 128
    data = jpeg_writer.encode(jpeg_writer.photo_like(height, width, seed=6), sampling=sampling)
    debug = gpu.DEBUG_NO_HARDWARE if decoder == "hybrid" else 0
    if decoder == "hardware" and gpu.backend_info()["hardware"] != "1":
        pytest.skip("no hardware JPEG decoder on this GPU")
    with_margin = _edge_mismatch(data, height, width, debug)
    without = _edge_mismatch(data, height, width, debug | gpu.DEBUG_NO_MARGIN)
    REPORT.setdefault("chroma_edge", {})[f"{decoder} {sampling}"] = {
        "with_margin": {"differing_values": with_margin[0], "max_abs": with_margin[1], "paths": with_margin[2]},
        "without_margin": {"differing_values": without[0], "max_abs": without[1], "paths": without[2]},
    }
    assert with_margin[0] == 0, with_margin


@needs_gpu
def test_a_repeated_file_is_decoded_once_with_the_same_pixels(jpeg_writer):
    data = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=12), sampling="4:2:0")
    other = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=13), sampling="4:4:4")
    rng = np.random.default_rng(12)
    wins = [random_window(rng, 300, 400, s) for s in (1, 9, 50, 120) for _ in range(4)]
    batch = [data] * len(wins) + [other]
    wins.append((5, 6, 70, 80))
    shared, used = gpu.decode_and_crop_jpegs(batch, *zip(*wins), _return_paths=True)
    separate = gpu.decode_and_crop_jpegs(batch, *zip(*wins), _debug=gpu.DEBUG_NO_DEDUPE)
    assert "cpu" not in used
    for a, b in zip(shared, separate):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------------
# Files prepared for random access: nvJPEG decodes the sub-image of the segments around the windows


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
    outs, used = gpu.decode_and_crop_jpegs([data] * len(wins), *zip(*wins),
                                           _debug=gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_ALWAYS_SEGMENTS, _return_paths=True)
    whole, whole_used = gpu.decode_and_crop_jpegs([data] * len(wins), *zip(*wins),
                                                  _debug=gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_NO_SEGMENTS,
                                                  _return_paths=True)
    for win, out, ref_gpu in zip(wins, outs, whole):
        ref = custom_op.decode_and_crop_jpeg(original, *win)
        assert torch.equal(out.cpu(), ref), win  # the hardware path is exact: so is its sub-image
        assert torch.equal(out, ref_gpu), win
    # Windows whose segments start with the file's first one decode the whole file, as on the CPU.
    expected = [torch.ops.custom_op._jpeg_sub_image(as_tensor(data), *win)[0].numel() > 0 for win in wins]
    assert [p.endswith("+segments") for p in used] == expected, used
    assert sum(expected) >= len(wins) // 2
    assert not any(p.endswith("+segments") for p in whole_used)
    if gpu.backend_info()["hardware"] == "1":
        assert {p.split("+")[0] for p in used} <= {"hardware-roi", "hardware-full"}, used


@needs_gpu
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_prepared_files_with_exif_orientation(jpeg_writer, orientation):
    original = with_exif_orientation(
        jpeg_writer.encode(jpeg_writer.photo_like(200, 260, seed=22), sampling="4:2:0"), orientation)
    data = custom_op.prepare_jpeg(original, restart_mcus=1)
    info = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
    rng = np.random.default_rng(orientation)
    wins = [random_window(rng, info.height, info.width, s) for s in (5, 40, 90) for _ in range(3)]
    outs, used = gpu.decode_and_crop_jpegs([data] * len(wins), *zip(*wins), apply_exif_orientation=True,
                                           _debug=gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_ALWAYS_SEGMENTS, _return_paths=True)
    for win, out in zip(wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(original, *win, apply_exif_orientation=True))
    assert sum(p.endswith("+segments") for p in used) >= len(wins) - 2, used


@needs_gpu
def test_prepared_file_repeated_in_a_batch_and_mixed_with_others(jpeg_writer):
    """One sub-image around all of a repeated file's windows; plain and prepared files in one batch."""
    original = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=23), sampling="4:2:0")
    data = custom_op.prepare_jpeg(original, restart_mcus=2)
    plain = jpeg_writer.encode(jpeg_writer.photo_like(120, 90, seed=24), sampling="4:4:4")
    wins = [(200, 250, 40, 60), (230, 300, 50, 90), (180, 260, 10, 10)]
    batch = [data, plain, data, data]
    wins = [wins[0], (5, 6, 70, 80), wins[1], wins[2]]
    outs, used = gpu.decode_and_crop_jpegs(batch, *zip(*wins), _debug=gpu.DEBUG_ALWAYS_SEGMENTS, _return_paths=True)
    for d, win, out in zip([original, plain, original, original], wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(d, *win))
    assert used[0].endswith("+segments") and used[2].endswith("+segments") and used[3].endswith("+segments")
    assert not used[1].endswith("+segments")


@needs_gpu
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_prepared_files_in_every_mode(jpeg_writer, mode):
    color = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, seed=28), sampling="4:2:0")
    gray = jpeg_writer.encode(jpeg_writer.photo_like(140, 190, 1, seed=29))
    originals = [color, gray]
    prepared = [custom_op.prepare_jpeg(d, restart_mcus=1) for d in originals]
    outs, used = gpu.decode_and_crop_jpegs(prepared, [70, 90], [33, 101], [50, 40], [60, 70], mode=mode,
                                           _debug=gpu.DEBUG_ALWAYS_SEGMENTS, _return_paths=True)
    assert all(p.endswith("+segments") for p in used), used
    for original, win, out in zip(originals, [(70, 33, 50, 60), (90, 101, 40, 70)], outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(original, *win, mode=mode))


@needs_gpu
def test_segments_are_used_by_default_for_large_images_only(jpeg_writer):
    small_original = jpeg_writer.encode(jpeg_writer.photo_like(300, 400, seed=26), sampling="4:2:0")
    large_original = jpeg_writer.encode(jpeg_writer.photo_like(1200, 1700, seed=27), sampling="4:2:0")
    small = custom_op.prepare_jpeg(small_original, restart_mcus=2)
    large = custom_op.prepare_jpeg(large_original, restart_mcus=2)
    wins = [(200, 250, 50, 60), (900, 1300, 224, 224)]
    outs, used = gpu.decode_and_crop_jpegs([small, large], *zip(*wins), _return_paths=True)
    assert [p.endswith("+segments") for p in used] == [False, True], used
    for original, win, out in zip([small_original, large_original], wins, outs):
        assert torch.equal(out.cpu(), custom_op.decode_and_crop_jpeg(original, *win))


@needs_gpu
def test_prepared_file_with_damaged_segments_is_decoded_or_named_like_any_other(jpeg_writer):
    original = jpeg_writer.encode(jpeg_writer.photo_like(160, 200, seed=25), sampling="4:2:0")
    data = bytearray(custom_op.prepare_jpeg(original, restart_mcus=1))
    # A restart marker near the middle renumbered: the segments no longer add up, so nvJPEG gets the
    # whole file (or, if it refuses it, the CPU path decides), as for any file.
    rst = [i for i in range(len(data) // 2, len(data) - 1) if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7][0]
    data[rst + 1] = 0xD0 + (data[rst + 1] - 0xD0 + 3) % 8
    outs, used = gpu.decode_and_crop_jpegs([bytes(data), original], [120, 120], [150, 150], [20, 20], [30, 30],
                                           on_error="return", on_warning="ignore",
                                           _debug=gpu.DEBUG_ALWAYS_SEGMENTS, _return_paths=True)
    assert not used[0].endswith("+segments")
    assert torch.equal(outs[1].cpu(), custom_op.decode_and_crop_jpeg(original, 120, 150, 20, 30))
    again = gpu.decode_and_crop_jpegs([original], [0], [0], [16], [16])
    assert torch.equal(again[0].cpu(), custom_op.decode_and_crop_jpeg(original, 0, 0, 16, 16))


@needs_gpu
def test_fuzzed_prepared_files_through_their_segments(jpeg_writer):
    """Mutated prepared files (restart markers removed, renumbered, moved, segments swapped or cut,
    lying DRI and SOF, generic damage) through the segments path, in batches: a tensor or a clear error
    per item, never a sticky CUDA error; where the CPU path decodes the window without a warning, the
    same pixels."""
    import random

    import random_access_fuzz_worker as raw

    bases = [custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(150, 230, seed=31), sampling="4:2:0"),
                                    restart_mcus=1),
             custom_op.prepare_jpeg(jpeg_writer.encode(jpeg_writer.photo_like(90, 170, seed=32), sampling="4:4:4"),
                                    restart_mcus=3)]
    compared = segments = 0
    for b, base in enumerate(bases):
        rng = random.Random(b)
        datas = [raw.mutate(rng, raw.MUTATIONS[i % len(raw.MUTATIONS)], base) for i in range(80)]
        info = custom_op.read_jpeg_header(base)
        wins = []
        for _ in datas:
            h, w = rng.randint(1, info.height // 2), rng.randint(1, info.width // 2)
            wins.append((rng.randint(info.height // 3, info.height - h), rng.randint(0, info.width - w), h, w))
        for k in range(0, len(datas), 20):
            outs, used = gpu.decode_and_crop_jpegs(datas[k:k + 20], *zip(*wins[k:k + 20]), on_error="return",
                                                   on_warning="ignore", _debug=gpu.DEBUG_ALWAYS_SEGMENTS,
                                                   _return_paths=True)
            torch.cuda.synchronize()
            for data, win, out, path in zip(datas[k:k + 20], wins[k:k + 20], outs, used):
                assert isinstance(out, (torch.Tensor, ValueError, RuntimeError)), type(out)
                segments += path.endswith("+segments")
                if not isinstance(out, torch.Tensor):
                    continue
                try:
                    ref = custom_op.decode_and_crop_jpeg(data, *win, on_warning="raise")
                except (ValueError, RuntimeError):
                    continue
                compared += 1
                assert torch.equal(out.cpu(), ref), (path, win)
    good = bases[0]
    after = gpu.decode_and_crop_jpegs([good] * 3, 100, 8, 40, 100, _debug=gpu.DEBUG_ALWAYS_SEGMENTS)
    assert all(torch.equal(a.cpu(), custom_op.decode_and_crop_jpeg(good, 100, 8, 40, 100)) for a in after)
    REPORT["fuzzed_prepared_files"] = {"compared_exact": compared, "through_segments": segments}
    assert compared >= 40 and segments >= 40, (compared, segments)


# ---------------------------------------------------------------------------------------------------
# Threads, memory


@needs_gpu
def test_threads_share_nothing(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(70 + i, 90, seed=i)) for i in range(16)]
    expected = custom_op.decode_and_crop_jpeg(datas, 3, 4, 60, 60, device="cuda", stack=True).cpu()
    failures = []

    def worker():
        try:
            stream = torch.cuda.Stream()
            for _ in range(20):
                out = custom_op.decode_and_crop_jpeg(datas, 3, 4, 60, 60, device="cuda", stack=True, stream=stream)
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

    datas = [jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=i), sampling=s)
             for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:2:0"])]
    process = psutil.Process()

    def run(calls):
        for i in range(calls):
            custom_op.decode_and_crop_jpeg(datas, i % 7, i % 5, 64, 64, device="cuda", stack=True)

    run(300)
    torch.cuda.synchronize()
    before = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), process.memory_info().rss)
    run(10_000)
    torch.cuda.synchronize()
    after = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), process.memory_info().rss)
    REPORT["leak_10000_calls"] = {"allocated": [before[0], after[0]], "reserved": [before[1], after[1]],
                                  "rss": [before[2], after[2]]}
    assert after[0] == before[0] and after[1] == before[1], (before, after)
    assert after[2] - before[2] < 32 * 2**20, (before, after)


# ---------------------------------------------------------------------------------------------------
# How a batch is shared out (gpu._set_tuning): how the engines' support is asked (parse_mode), several
# concurrent hardware calls (hardware_jobs), and a share for the GPU-hybrid batched decoder
# (gpu_percent). The engines' pixels are the same whichever way; the GPU-hybrid decoder's are within
# the bound of the CPU path, and are checked on the items that actually took it.


class tuned:
    """Context manager: gpu._set_tuning for the block, the previous settings restored after."""

    def __init__(self, **settings):
        self.settings = settings

    def __enter__(self):
        self.before = gpu._set_tuning(**self.settings)

    def __exit__(self, *exc):
        gpu._set_tuning(**self.before)


def _sample_batch(n=64, seed=0):
    files = sorted(shared_dir("imagenet-sample").iterdir())[:n]
    datas = [f.read_bytes() for f in files]
    rng = np.random.default_rng(seed)
    wins = []
    for data in datas:
        info = custom_op.read_jpeg_header(data)
        wins.append(random_window(rng, info.height, info.width))
    return datas, wins


def _generated_batch(jpeg_writer):
    pixels = jpeg_writer.photo_like(301, 403, seed=4)
    datas = [jpeg_writer.encode(pixels, **options) for options in VARIANTS.values()]
    datas.append(jpeg_writer.encode(jpeg_writer.photo_like(301, 403, 1, seed=5)))
    rng = np.random.default_rng(3)
    return datas, [random_window(rng, 301, 403, 100) for _ in datas]


@needs_gpu
def test_set_tuning_checks_its_values():
    before = gpu._set_tuning()
    assert set(before) == set(gpu._TUNING_KEYS)
    with pytest.raises(ValueError, match="hardware_jobs"):
        gpu._set_tuning(hardware_jobs=9)
    with pytest.raises(ValueError, match="parse_mode"):
        gpu._set_tuning(parse_mode=3)
    with pytest.raises(ValueError, match="one_format"):
        gpu._set_tuning(one_format=2)
    with pytest.raises(TypeError, match="unknown tuning keys"):
        gpu._set_tuning(threads=2)
    assert gpu._set_tuning() == before


@needs_gpu
@pytest.mark.parametrize("setting", [dict(parse_mode=1, one_format=1), dict(parse_mode=2, one_format=1),
                                     dict(parse_mode=1, one_format=0), dict(hardware_jobs=2),
                                     dict(hardware_jobs=3, parse_mode=2)])
def test_engine_settings_give_the_same_pixels_and_paths(jpeg_writer, setting):
    """Against session 2's way (nvJPEG parses whole files; RGB from the engines for 4:4:4 and gray files,
    YCbCr for subsampled ones): same paths, same pixels, in every mode."""
    if gpu.backend_info()["hardware"] != "1":
        pytest.skip("no hardware JPEG decoder on this GPU")
    for (datas, wins), mode in ((_sample_batch(), ImageReadMode.RGB), (_generated_batch(jpeg_writer), ImageReadMode.RGB),
                                (_generated_batch(jpeg_writer), ImageReadMode.UNCHANGED),
                                (_sample_batch(40, 1), ImageReadMode.GRAY)):
        with tuned(parse_mode=0, hardware_jobs=1, gpu_percent=0, one_format=0):
            ref, ref_paths = gpu.decode_and_crop_jpegs(datas, *zip(*wins), mode=mode, _return_paths=True)
        with tuned(gpu_percent=0, **setting):
            outs, paths = gpu.decode_and_crop_jpegs(datas, *zip(*wins), mode=mode, _return_paths=True)
            again = gpu.decode_and_crop_jpegs(datas, *zip(*wins), mode=mode)  # the same batch size again
        assert paths == ref_paths
        for a, b, c in zip(outs, ref, again):
            assert torch.equal(a, b) and torch.equal(c, b)
        REPORT.setdefault("engine_settings_paths", {})[str(setting)] = dict(
            (p, paths.count(p)) for p in set(paths))


@needs_gpu
def test_gpu_batched_decoder_against_cpu(jpeg_writer):
    """Every item the engines would take sent to the GPU-hybrid batched decoder instead."""
    if gpu.backend_info().get("gpu_batched") != "1" or gpu.backend_info()["hardware"] != "1":
        pytest.skip("no GPU-hybrid batched handle or no hardware decoder here")
    files = sorted(shared_dir("imagenet-sample").iterdir())
    datas = [f.read_bytes() for f in files]
    rng = np.random.default_rng(0)
    wins = []
    for data in datas:
        info = custom_op.read_jpeg_header(data)
        wins.append(random_window(rng, info.height, info.width))
    stats = defaultdict(Stats)
    used_all = []
    for start in range(0, len(datas), 64):
        chunk, cw = datas[start:start + 64], wins[start:start + 64]
        outs, used = gpu.decode_and_crop_jpegs(chunk, *zip(*cw), _debug=gpu.DEBUG_GPU_BATCHED_ALL,
                                               _return_paths=True)
        used_all += used
        for data, win, out, path in zip(chunk, cw, outs, used):
            stats[f"{path} {subsampling_name(data)}"].add(out, custom_op.decode_and_crop_jpeg(data, *win))
    gen, gen_wins = _generated_batch(jpeg_writer)
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY):
        outs, used = gpu.decode_and_crop_jpegs(gen, *zip(*gen_wins), mode=mode, _debug=gpu.DEBUG_GPU_BATCHED_ALL,
                                               _return_paths=True)
        for data, win, out, path in zip(gen, gen_wins, outs, used):
            stats[f"{path} generated {subsampling_name(data)} {mode.name}"].add(
                out, custom_op.decode_and_crop_jpeg(data, *win, mode=mode))
    REPORT["gpu_batched_vs_cpu"] = {k: v.as_dict() for k, v in stats.items()}
    assert used_all.count("gpu-batched") > len(datas) // 2, dict((p, used_all.count(p)) for p in set(used_all))
    for name, s in stats.items():
        assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, (name, s.as_dict())


@needs_gpu
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_batch_shared_between_engines_and_gpu(jobs):
    if gpu.backend_info().get("gpu_batched") != "1" or gpu.backend_info()["hardware"] != "1":
        pytest.skip("no GPU-hybrid batched handle or no hardware decoder here")
    datas, wins = _sample_batch()
    with tuned(parse_mode=1, hardware_jobs=jobs, gpu_percent=30, gpu_min_items=0):
        outs, paths = gpu.decode_and_crop_jpegs(datas, *zip(*wins), _return_paths=True)
        stacked = gpu.decode_and_crop_jpegs(datas, 0, 0, 64, 64, stack=True)
    counts = dict((p, paths.count(p)) for p in set(paths))
    assert 10 <= counts.get("gpu-batched", 0) <= 30 and counts.get("hardware-roi", 0) >= 30, counts
    # The smallest images are the ones shared out.
    pixels = [custom_op.read_jpeg_header(d).height * custom_op.read_jpeg_header(d).width for d in datas]
    shared = [p for p, path in zip(pixels, paths) if path == "gpu-batched"]
    kept = [p for p, path in zip(pixels, paths) if path == "hardware-roi"]
    assert max(shared) <= min(kept)
    stats = defaultdict(Stats)
    for data, win, out, path in zip(datas, wins, outs, paths):
        stats[path].add(out, custom_op.decode_and_crop_jpeg(data, *win))
    REPORT.setdefault("shared_batch", {})[f"jobs={jobs}"] = {k: v.as_dict() for k, v in stats.items()}
    assert stats["hardware-roi"].max == 0  # the engines' items stay exact
    assert stats["gpu-batched"].psnr >= MIN_PSNR_DB and stats["gpu-batched"].mean < MAX_MEAN_ABS
    ref = torch.stack([custom_op.decode_and_crop_jpeg(d, 0, 0, 64, 64) for d in datas])
    s = Stats()
    s.add(stacked, ref)
    assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS, s.as_dict()


@needs_gpu
def test_shared_batches_keep_stream_order_and_name_bad_items(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(128, 128, seed=i)) for i in range(24)]
    with tuned(parse_mode=2, hardware_jobs=2, gpu_percent=40, gpu_min_items=0):
        bad, total = _stream_race(datas, 0)
        REPORT["stream_order_shared"] = {"corrupted_reductions": bad, "of": total}
        assert bad == 0
        good = datas[0]
        sos = good.index(b"\xff\xda")
        broken = bytearray(good)
        for k in range(sos + 20, len(good) - 2, 7):
            broken[k] = 0xFF if k % 2 else 0x13
        batch = datas[:10] + [bytes(broken)] + datas[10:]
        results = custom_op.decode_and_crop_jpeg(batch, 8, 8, 100, 100, device="cuda", on_error="return")
        torch.cuda.synchronize()
        for r in results:
            assert isinstance(r, (torch.Tensor, RuntimeError))
        expected = [custom_op.decode_and_crop_jpeg(d, 8, 8, 100, 100) for d in datas]
        good_results = results[:10] + results[11:]
        for r, e in zip(good_results, expected):
            s = Stats()
            s.add(r, e)
            assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS
        if isinstance(results[10], RuntimeError):
            assert "batch item 10" in str(results[10])
        after, paths = gpu.decode_and_crop_jpegs(datas, 8, 8, 100, 100, _return_paths=True)
        torch.cuda.synchronize()
        assert "cpu" not in paths
        for r, e in zip(after, expected):
            s = Stats()
            s.add(r, e)
            assert s.psnr >= MIN_PSNR_DB and s.mean < MAX_MEAN_ABS


@needs_gpu
def test_threads_with_shared_batches(jpeg_writer):
    datas = [jpeg_writer.encode(jpeg_writer.photo_like(70 + i, 90, seed=i)) for i in range(32)]
    with tuned(hardware_jobs=2, gpu_percent=30, gpu_min_items=0):
        expected = custom_op.decode_and_crop_jpeg(datas, 3, 4, 60, 60, device="cuda", stack=True).cpu()
        failures = []

        def worker():
            try:
                stream = torch.cuda.Stream()
                for _ in range(10):
                    out = custom_op.decode_and_crop_jpeg(datas, 3, 4, 60, 60, device="cuda", stack=True,
                                                         stream=stream)
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
