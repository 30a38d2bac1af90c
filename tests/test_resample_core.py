"""The GPU resized crop's per-sample code (custom_op/csrc/jpeg_core/resample.h), run on the CPU by
tests/resample_check.cpp with the host's taps: its uint8 output equals resize_box's (the CPU path's
resampler) on random boxes, filters, flips and pass orders, and its float outputs equal torch's
x / 255, Normalize and dtype conversion of that, bit for bit."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import custom_op  # noqa: F401  (loads the ops)
import host_checks

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests" / "resample_check.cpp", ROOT / "custom_op" / "csrc" / "common" / "resample_taps.cpp"]
DTYPES = {0: torch.uint8, 1: torch.float32, 2: torch.float16, 3: torch.bfloat16}
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    return host_checks.build(tmp_path_factory.mktemp("resample"), "resample_check", SOURCES, ["-O2"])


def _case(rng: random.Random) -> dict:
    channels = rng.choice([1, 3])
    h, w = rng.randint(1, 90), rng.randint(1, 90)
    origin = (rng.choice([0, 0, rng.randint(0, 40)]), rng.choice([0, 0, rng.randint(0, 40)]))

    def edges(n: int, start: int) -> tuple[float, float]:
        a = start + rng.uniform(0, n - 0.5) * rng.choice([0, 1])
        b = rng.uniform(a + 0.25, start + n)
        return (round(a * 8) / 8, max(round(a * 8) / 8 + 0.125, round(b * 8) / 8))

    r0, r1 = edges(h, origin[0])
    c0, c1 = edges(w, origin[1])
    size = (rng.randint(1, 70), rng.randint(1, 70))
    top, left = rng.randint(0, size[0] - 1), rng.randint(0, size[1] - 1)
    window = (top, left, rng.randint(1, size[0] - top), rng.randint(1, size[1] - left))
    pixels = torch.Generator().manual_seed(rng.randint(0, 1 << 30))
    return dict(
        image=torch.randint(0, 256, (channels, h, w), dtype=torch.uint8, generator=pixels),
        box=[r0, c0, r1, c1],
        size=list(size),
        out_window=list(window),
        origin=list(origin),
        filter=rng.randint(0, 5),
        antialias=rng.random() < 0.8,
        flip=rng.random() < 0.5,
    )


def _run(check: Path, tmp_path: Path, case: dict, dtype: int, mean, std) -> torch.Tensor:
    image = case["image"]
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(image.numpy().tobytes())
    c = image.shape[0]
    args = [str(check), str(src), str(dst), str(c), *map(str, image.shape[1:]), *map(repr, case["box"])]
    args += [*map(str, case["size"]), *map(str, case["out_window"]), *map(str, case["origin"])]
    args += [str(case["filter"]), str(int(case["antialias"])), str(int(case["flip"])), str(dtype)]
    for m, s in zip(mean[:c], std[:c]):
        args += [repr(m), repr(s)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if done.returncode == 1:
        raise ValueError(done.stderr)
    assert done.returncode == 0, done.stderr
    shape = (c, case["out_window"][2], case["out_window"][3])
    raw = np.frombuffer(dst.read_bytes(), dtype=np.uint8).copy()
    return torch.from_numpy(raw).view(DTYPES[dtype]).reshape(shape)


def _resize_box(case: dict) -> torch.Tensor:
    return torch.ops.custom_op.resize_box(
        case["image"],
        box=case["box"],
        size=case["size"],
        out_window=case["out_window"],
        origin=case["origin"],
        filter=case["filter"],
        antialias=case["antialias"],
        flip=case["flip"],
    )


@pytest.mark.parametrize("seed", range(4))
def test_core_resample_equals_resize_box(check, tmp_path, seed):
    rng = random.Random(seed)
    compared = 0
    for _ in range(60):
        case = _case(rng)
        try:
            expected = _resize_box(case)
        except ValueError:
            with pytest.raises(ValueError):
                _run(check, tmp_path, case, 0, MEAN, STD)
            continue
        assert torch.equal(_run(check, tmp_path, case, 0, MEAN, STD), expected), case
        compared += 1
    assert compared >= 40


@pytest.mark.parametrize("dtype", [1, 2, 3])
def test_core_normalisation_equals_torch(check, tmp_path, dtype):
    rng = random.Random(dtype)
    for _ in range(20):
        case = _case(rng)
        try:
            resized = _resize_box(case)
        except ValueError:
            continue
        c = resized.shape[0]
        for mean, std in ((MEAN, STD), ((0.0,) * 3, (1.0,) * 3)):
            expected = (resized.float() / 255 - torch.tensor(mean[:c])[:, None, None]) / torch.tensor(std[:c])[
                :, None, None
            ]
            got = _run(check, tmp_path, case, dtype, mean, std)
            assert torch.equal(got, expected.to(DTYPES[dtype])), case
