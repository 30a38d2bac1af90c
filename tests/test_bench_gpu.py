"""bench/bench_gpu.py's first-calls table, built from probe results without a GPU (each probe is a
process of its own; here a stand-in answers for it)."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_gpu  # noqa: E402


def test_warmup_table_shows_each_first_and_steady_call(monkeypatch):
    probe = {
        "setup_s": 0.2,
        "first_call": [0.5, 0.4],
        "first": [[0.002, 0.001], [0.004, 0.001]],  # (wall s, CPU s) per call
        "steady": [[0.001, 0.0005], [0.003, 0.0005]],
        "reserved": [2**20, 2 * 2**20, 3 * 2**20],
    }
    commands = []

    def probe_process(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="a log line\n" + json.dumps(probe) + "\n", stderr="")

    monkeypatch.setattr(bench_gpu.subprocess, "run", probe_process)
    lines = bench_gpu.warmup_section(argparse.Namespace(imagenet="/photos", warmup_calls=2, batches=[64]))
    assert len(commands) == len(bench_gpu.WARMUP_METHODS)
    header = next(line for line in lines if line.startswith("| method"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    row = next(line for line in lines if line.startswith("| ours | 64 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == len(columns)
    got = dict(zip(columns, cells))
    assert got["first 2: images/s"] == "21,333" and got["steady 2: images/s"] == "32,000"
    assert got["steady / first"] == "1.50x"
    assert got["each of the first 2 calls, ms"] == "2.0 4.0"
    assert got["each of the steady 2 calls, ms"] == "1.0 3.0"
    assert got["reserved MiB (after warm-up, first, steady)"] == "1, 2, 3"


def test_the_sample_re_encoded_at_420(tmp_path):
    """--reencode-420: every section that reads the sample gets its photos at 4:2:0, and the table says so."""
    rng = np.random.default_rng(3)
    for i in range(2):
        pixels = rng.integers(0, 256, (40 + 8 * i, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"photo{i}.jpg", "JPEG", quality=95, subsampling=0)
    args = argparse.Namespace(imagenet=str(tmp_path), reencode_420=True)
    files, prepared, windows = bench_gpu.load_sample(args)
    assert len(files) == len(prepared) == len(windows) == 2
    for data in files:
        layers = Image.open(io.BytesIO(data)).layer  # (component id, h, v, quantisation table)
        assert [(h, v) for _, h, v, _ in layers] == [(2, 2), (1, 1), (1, 1)]
    assert "4:2:0" in bench_gpu.sample_name(args)
    assert bench_gpu.sample_name(argparse.Namespace(reencode_420=False)) == "ImageNet sample"
