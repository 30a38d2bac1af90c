"""What of bench/gpu_decoder_checks.sh runs without a GPU: the damaged copies it decodes
(tests/damaged_jpegs.py, which tests/test_gpu.py uses too), its worker's files and batches
(bench/gpu_decoder_soak.py soak --dry-run), the soak's counting and checking with the CPU path standing
in for the GPU (so that a run on a GPU machine is not spent on a bug of the script), and its report,
written from what the script leaves in its output folder (here made by hand, as a GPU machine would
leave it)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import custom_op
from damaged_jpegs import KINDS, damaged_copies
from jpeg_factory import photo_like, unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
SOAK = ROOT / "bench" / "gpu_decoder_soak.py"


def restart_file(subsampling: int, restart_mcus, seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo_like(120, 170, seed=seed)).save(buf, "JPEG", quality=90, subsampling=subsampling)
    return custom_op.prepare_jpeg(buf.getvalue(), restart_mcus=restart_mcus)


def test_damaged_copies_damage_the_entropy_coded_data_only():
    """Every kind of damage in turn, the header left as it was (a window chosen from it stays inside
    the image), and damage that libjpeg notices: with on_warning="raise", the whole image's decode
    fails for most copies, and always for a broken marker sequence or a missing end."""
    outcomes = Counter()
    for seed, (subsampling, restart_mcus) in enumerate([(2, None), (0, 3), (1, 1)]):
        data = restart_file(subsampling, restart_mcus, seed)
        start = data.index(b"\xff\xda")
        info = custom_op.read_jpeg_header(data)
        copies = damaged_copies(data, np.random.default_rng(seed), 60)
        assert len(copies) == 60
        for k, copy in enumerate(copies):
            kind = KINDS[k % len(KINDS)]
            assert copy != data and copy[: start + 10] == data[: start + 10], kind
            assert custom_op.read_jpeg_header(copy) == info, kind
            try:
                custom_op.decode_jpeg(copy, on_warning="raise")
                outcomes[kind, "decoded"] += 1
            except RuntimeError:
                outcomes[kind, "raised"] += 1
    for kind in ("restart marker renumbered", "restart marker removed", "end cut off"):
        assert outcomes[kind, "decoded"] == 0, dict(outcomes)
    raised = sum(n for (_, outcome), n in outcomes.items() if outcome == "raised")
    assert raised >= 0.6 * sum(outcomes.values()), dict(outcomes)
    assert all(outcomes[kind, "raised"] > 0 for kind in KINDS), dict(outcomes)


def test_damaged_copies_are_reproducible():
    data = restart_file(2, 1, 7)
    assert damaged_copies(data, np.random.default_rng(3), 12) == damaged_copies(data, np.random.default_rng(3), 12)


def test_soak_dry_run_makes_its_files_and_batches(tmp_path):
    """The worker's CPU side: the files (in each restart layout, and without restart markers), and batches
    whose windows lie inside their images (no ValueError), with damaged copies that the CPU path
    rejects and clean files that it decodes."""
    out = tmp_path / "dry.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, str(SOAK), "soak", "--dry-run", "--batches", "6", "--json", str(out)],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    result = json.loads(out.read_text())
    files = result["files"]
    # Pillow's samplings, and 4:1:1 and 4:1:0 from the tests' JPEG writer where it compiles (as here, where
    # the tests that use it run).
    samplings = {"4:4:4", "4:2:2", "4:2:0", "gray"} | ({"4:1:1", "4:1:0"} if unavailable_reason() is None else set())
    assert len(files) == 6 * len(samplings)
    assert all((f["restart interval (MCUs)"] > 0) == (f["name"].split()[1] != "plain") for f in files)
    assert {f["name"].split()[0] for f in files} == samplings
    layouts = Counter(f["name"].split()[1] for f in files)
    assert layouts == {
        layout: len(samplings)
        for layout in ("prepared", "prepared-1", "prepared-3", "every-7-mcus", "every-row", "plain")
    }
    assert any(not f["random-access layout"] for f in files) and any(f["random-access layout"] for f in files)
    outcomes = result["cpu outcomes"]
    assert set(outcomes) <= {"clean decoded", "damaged decoded", "damaged RuntimeError", "warnings"}, outcomes
    assert outcomes["clean decoded"] > 0 and outcomes["damaged RuntimeError"] > 0, outcomes
    items = sum(n for k, n in outcomes.items() if k != "warnings")
    assert items == 6 * 64


def test_soak_refuses_to_run_without_cuda_but_names_the_dry_run():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the soak would run")
    done = subprocess.run(
        [sys.executable, str(SOAK), "soak", "--batches", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode == 2 and "--dry-run" in done.stderr, done.stderr


# ---------------------------------------------------------------------------------------------------
# The soak's bookkeeping, with the CPU path standing in for the GPU


def load_soak():
    spec = importlib.util.spec_from_file_location("gpu_decoder_soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_gpu(monkeypatch, soak, damage_item_0: bool = False):
    """testing.decode_with_paths decoding on the CPU (path "cuda" for what it decodes), and the CUDA
    calls the soak makes answered here; with damage_item_0, the first item's pixels come out wrong."""
    import torch

    def decode_with_paths(data, tops, lefts, heights, widths, device, **options):
        assert device == "cuda"
        data = [bytes(d.numpy()) if isinstance(d, torch.Tensor) else d for d in data]
        result = custom_op.decode_and_crop_jpegs(data, tops, lefts, heights, widths, **options)
        if options.get("stack") and options.get("on_error") == "return":
            images, errors = result
            items = [images[i] if e is None else e for i, e in enumerate(errors)]
        else:
            items = list(result)
        if damage_item_0 and isinstance(items[0], torch.Tensor):
            items[0].view(-1)[0] ^= 1  # in place: the stacked tensor's first slice too
        return result, ["failed" if isinstance(x, Exception) else "cuda" for x in items]

    monkeypatch.setattr(soak.testing, "decode_with_paths", decode_with_paths)
    monkeypatch.setattr(soak.testing, "gpu_options", lambda **options: contextlib.nullcontext())
    monkeypatch.setattr(soak.testing, "cuda_decoder_fallbacks", lambda: 0)
    monkeypatch.setattr(soak.testing, "cuda_decoder_retries", lambda: 0)
    monkeypatch.setattr(soak.Sentinel, "to_gpu", lambda self: None)
    monkeypatch.setattr(soak, "machine", lambda: "a fake GPU")
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 2**20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 2**21)


def soak_args(**changes) -> argparse.Namespace:
    args = argparse.Namespace(
        batches=6,
        batch_size=16,
        damaged=0.4,
        pinned=0.25,
        compare_every=2,
        warmup=2,
        allocated_tolerance_mib=1.0,
        reserved_tolerance_mib=48.0,
        rss_tolerance_mib=48.0,
        seed=0,
        short=False,
    )
    vars(args).update(changes)
    return args


def test_soak_counts_compares_and_samples(monkeypatch):
    soak = load_soak()
    fake_gpu(monkeypatch, soak)
    result = soak.soak(soak_args())
    assert result["ok"], result["failures"]
    counts = result["counts"]
    assert counts["batches"] == 6 and counts["items"] == 96 and counts["damaged copies"] == 6 * 6
    assert counts["batches compared with the CPU path"] == 3 and counts["items compared"] == 48
    assert counts["clean batches after a batch"] == 6 and counts["mismatches"] == 0
    assert counts["decoded by our decoder (path cuda)"] + counts["errors returned (path failed)"] == 96
    by_damage = result["by damage"]
    assert sum(sum(c.values()) for c in by_damage.values()) == 96 and by_damage[soak.CLEAN]["cuda"] > 0
    assert [m["growth"] for m in result["memory"][:2]] == [0, 0] and all(m["ok"] for m in result["memory"])
    assert json.loads(json.dumps(result)) == result


def test_soak_finds_wrong_pixels(monkeypatch):
    soak = load_soak()
    fake_gpu(monkeypatch, soak, damage_item_0=True)
    result = soak.soak(soak_args())
    assert not result["ok"] and result["counts"]["mismatches"] >= 1
    assert any(f.startswith("the clean batch after batch 0: pixels differ") for f in result["failures"])
    assert any("mismatches with the CPU path" in f for f in result["failures"])
    assert result["mismatch examples"][0].startswith("batch 0 item 0 (")


# ---------------------------------------------------------------------------------------------------
# The report, from an output folder as the script leaves it


RUN = "2026-01-02T03:04:05+00:00"


def soak_result(**changes) -> dict:
    result = {
        "ok": True,
        "failures": [],
        "run": RUN,
        "settings": {
            "batches": 10000,
            "batch size": 64,
            "damaged share": 0.4,
            "pinned share": 0.25,
            "compare every": 100,
            "warm-up batches": 200,
            "seed": 0,
            "short": False,
        },
        "files": [],
        "counts": {"batches": 10000, "items": 640000, "decoded by our decoder (path cuda)": 500000, "mismatches": 0},
        "by damage": {"bit flips": {"cuda": 10, "cpu": 5, "failed": 1}, "none (the file itself)": {"cuda": 100}},
        "mismatch examples": [],
        "memory": [
            {
                "name": "torch.cuda.memory_allocated()",
                "first": 2**20,
                "last": 2**20,
                "max": 2**21,
                "growth": 0,
                "tolerance": 2**20,
                "ok": True,
            }
        ],
        "time": {"seconds": 123.4, "decode ms per batch, median": 5.1},
        "machine": "a GPU; a CPU",
        "versions": "Python 3, torch 2",
    }
    result.update(changes)
    return result


def leave(outdir: Path, stem: str, code: int, result=None, log: str = "", run: str = RUN) -> None:
    (outdir / f"{stem}.exit").write_text(f"exit_code={code} seconds=12 run={run}\n")
    (outdir / f"{stem}.log").write_text(log)
    if result is not None:
        (outdir / f"{stem}.json").write_text(json.dumps(result))


def write_report(outdir: Path, run: str = RUN) -> tuple[int, dict, str]:
    out = outdir / "report" / "gpu_decoder_checks.md"
    done = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "report",
            str(outdir),
            "--out",
            str(out),
            "--command",
            "bash x.sh",
            "--commit",
            "c",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GPU_CHECKS_RUN": run},
        timeout=300,
    )
    assert out.is_file(), done.stderr
    return done.returncode, json.loads(out.with_suffix(".json").read_text()), out.read_text()


def tables(report: dict) -> list[dict]:
    return [block for block in report["body"] if block["type"] == "table"]


def test_report_of_a_run_that_passed(tmp_path):
    leave(tmp_path, "soak", 0, soak_result())
    (tmp_path / "sanitizer.txt").write_text("compute-sanitizer Version 2025.1.0\n")
    short = soak_result(counts={"items": 192, "decoded by our decoder (path cuda)": 150, "mismatches": 0})
    leave(tmp_path, "sanitizer_memcheck", 0, short, "========= ERROR SUMMARY: 0 errors\n")
    leave(
        tmp_path,
        "sanitizer_racecheck",
        0,
        short,
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n",
    )
    code, report, text = write_report(tmp_path)
    assert code == 0
    assert {k: report[k] for k in ("command", "commit", "machine")} == {
        "command": "bash x.sh",
        "commit": "c",
        "machine": "a GPU; a CPU",
    }
    assert "compute-sanitizer Version 2025.1.0" in report["details"]["versions"]
    assert report["body"][:2] == [
        {"type": "heading", "level": 2, "text": "Verdict"},
        {"type": "text", "text": "**pass**"},
    ]
    assert report["body"][2]["type"] == "heading" and "earlier run" not in text
    sanitizers = tables(report)[-1]
    assert sanitizers["columns"][:4] == ["tool", "errors", "warnings", "exit code"]
    assert [row[:4] + row[-1:] for row in sanitizers["rows"]] == [
        ["memcheck", "0", "-", "0", "pass"],
        ["racecheck", "0", "0", "0", "pass"],
    ]
    counts = tables(report)[0]
    assert ["items", "640,000"] in counts["rows"] and counts["numbers"][1] == [None, 640000]


def test_report_names_every_failure(tmp_path):
    failed = soak_result(ok=False, failures=["3 mismatches with the CPU path"], run="2026-01-01T00:00:00+00:00")
    leave(tmp_path, "soak", 1, failed, run="2026-01-01T00:00:00+00:00")
    (tmp_path / "sanitizer.txt").write_text("compute-sanitizer Version 2025.1.0\n")
    leave(tmp_path, "sanitizer_memcheck", 86, soak_result(), "========= ERROR SUMMARY: 2 errors\n")
    leave(tmp_path, "sanitizer_initcheck", 124, None, "partial output\n")
    code, report, text = write_report(tmp_path)
    assert code == 1
    assert report["body"][1]["text"] == "**FAIL**"
    failures = report["body"][2]["items"]
    assert failures[0] == "soak: exit code 1; 3 mismatches with the CPU path"
    assert failures[1] == "compute-sanitizer memcheck: 2 errors; exit code 86"
    assert failures[2].startswith("compute-sanitizer initcheck: timed out after 12 s; no result (see ")
    assert len(failures) == 3
    assert "From an earlier run of the script, started 2026-01-01T00:00:00+00:00" in text


def test_report_says_what_did_not_run(tmp_path):
    note = "compute-sanitizer not found (looked on PATH)"
    (tmp_path / "sanitizer.txt").write_text(note + "\n")
    code, report, text = write_report(tmp_path)
    assert code == 1 and report["body"][1]["text"] == "**no check ran**"
    assert "## Soak\n\nNot run." in text and f"## compute-sanitizer\n\nNot run: {note}." in text
    assert "not found" not in report["details"]["versions"]

    leave(tmp_path, "soak", 0, soak_result())
    code, report, text = write_report(tmp_path)
    assert code == 0 and report["body"][1]["text"] == "**pass**"
    assert report["body"][2]["items"] == [f"compute-sanitizer did not run: {note}"]
