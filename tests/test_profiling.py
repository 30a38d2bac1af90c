"""profiling/: the step-time tool on tiny runs (files it writes, table it prints), its argument errors,
corrupt files, and its parts (model, step timer, report)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# profiling/ and datasets/ are used from the checkout, not installed (see test_datasets.py).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import custom_op  # noqa: E402
from datasets import PIPELINES, make_synthetic_set  # noqa: E402
from datasets.synthetic import encode_jpeg, photo_like  # noqa: E402
from profiling.cli import main  # noqa: E402
from profiling.model import build_model, small_cnn  # noqa: E402
from profiling.report import format_table, run_stats  # noqa: E402
from profiling.step_timer import StepTimer  # noqa: E402
from profiling.train_loop import RunResult  # noqa: E402

TINY = ["--batch-size", "4", "--steps", "3", "--warmup", "1", "--profile-steps", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    return make_synthetic_set(8, 72, 96, num_classes=2, cache_dir=tmp_path_factory.mktemp("cache"), show_progress=False)


def test_compare_run_writes_traces_events_summary_and_plot(tiny_set, tmp_path, capsys):
    logdir = tmp_path / "logs"
    rc = main(["--data", str(tiny_set), "--compare", "pil,roi", "--workers", "1", "--logdir", str(logdir), *TINY])
    out = capsys.readouterr().out
    assert rc == 0
    for pipeline in ("pil", "roi"):
        assert list((logdir / pipeline).glob("*.pt.trace.json")), f"no trace for {pipeline}"
        assert list((logdir / pipeline).glob("events.out.tfevents.*")), f"no TensorBoard events for {pipeline}"
    # the trace is Chrome-trace JSON with the loop's ranges in it
    trace = json.loads(next((logdir / "roi").glob("*.pt.trace.json")).read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"data_wait", "h2d", "compute"} <= names

    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["config"]["pipelines"] == ["pil", "roi"]
    for pipeline in ("pil", "roi"):
        p = summary["pipelines"][pipeline]
        assert p["measured_steps"] == 3 and len(p["steps_s"]["total"]) == 3
        assert set(p["phases_s"]) >= {"data_wait", "h2d", "compute", "total"}
        assert 0 <= p["data_wait_share"] <= 1
        assert p["worker_ms_per_sample"]["decode"] > 0
        assert p["trace_files"]
    assert summary["speedup_vs_first_p50"]["pil"] == 1.0
    assert (logdir / "step_times.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the plot says what it shows: the pipelines and the settings they ran under
    from PIL import Image

    with Image.open(logdir / "step_times.png") as png:
        title = png.text.get("Title", "")
    assert title.startswith("pil vs roi: 3 measured steps (after 1 warm-up)"), title
    assert "model small_cnn, device cpu, batch 4, workers 1" in title and "(8 JPEGs, imagefolder layout)" in title

    assert "speedup vs pil (p50 step)" in out and "data wait share of step" in out
    assert str(logdir) in out and "tensorboard --logdir" in out and "ui.perfetto.dev" in out


def test_prepared_synthetic_set_trains_on_the_prepared_copy(tmp_path, capsys):
    cache = tmp_path / "cache"
    args = ["--num-images", "8", "--image-size", "72x96", "--cache-dir", str(cache), "--prepared"]
    rc = main([*args, "--pipeline", "roi", "--workers", "1", "--logdir", str(tmp_path / "logs"), *TINY])
    out = capsys.readouterr().out
    assert rc == 0
    prepared = next(cache.glob("synthetic-*-prepared"))
    assert f"data: {prepared} (8 JPEGs" in out
    files = sorted(prepared.rglob("*.jpg"))
    assert len(files) == 8 and all(custom_op.read_jpeg_header(f.read_bytes()).random_access for f in files)
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert summary["config"]["data"] == str(prepared)


def test_tensorboard_events_hold_per_step_scalars(tiny_set, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "logs"
    assert main(["--data", str(tiny_set), "--pipeline", "roi", "--workers", "0", "--logdir", str(logdir), *TINY]) == 0
    acc = EventAccumulator(str(logdir / "roi"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"step_s/total", "step_s/data_wait", "step_s/compute", "worker_ms_per_sample/decode", "train/loss"} <= set(
        tags
    )
    # every step is logged, warm-up and profiled steps included (1 + 3 + 1 + 1)
    assert len(acc.Scalars("step_s/total")) == 6
    # with workers=0 the dataset's ranges are in the trace too
    trace = json.loads(next((logdir / "roi").glob("*.pt.trace.json")).read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"read", "decode", "transform"} <= names


def test_module_entry_point_runs_from_repo_root():
    r = subprocess.run(
        [sys.executable, "-m", "profiling", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "--compare" in r.stdout and "--on-error" in r.stdout
    # every pipeline there is has its line in the description
    described = re.findall(r"^  (\S+) +\S", r.stdout.split("Pipelines:")[1].split("options:")[0], re.MULTILINE)
    assert sorted(described) == sorted(PIPELINES)


def test_settings_line_counts_the_steps_the_profiler_traces(tiny_set, tmp_path, capsys):
    logdir = tmp_path / "logs"
    args = [
        "--data",
        str(tiny_set),
        "--pipeline",
        "roi",
        "--workers",
        "0",
        "--logdir",
        str(logdir),
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--profile-steps",
        "2",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 warm-up + 3 measured steps, then 2 profiled steps (after 1 profiler warm-up step)" in out
    trace = json.loads(next((logdir / "roi").glob("*.pt.trace.json")).read_text())
    traced = {e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(traced) == 2, traced


def test_profiler_marker_lines_stay_out_of_the_output(tiny_set, tmp_path, capfd):
    # kineto writes "USDT: ... profiler_start" / "profiler_stop" to file descriptor 2 around each trace
    logdir = tmp_path / "logs"
    assert main(["--data", str(tiny_set), "--pipeline", "roi", "--workers", "0", "--logdir", str(logdir), *TINY]) == 0
    out, err = capfd.readouterr()
    assert list((logdir / "roi").glob("*.pt.trace.json"))
    assert "USDT:" not in err and "profiler_start" not in err and "profiler_stop" not in err, err


def test_marker_filter_passes_every_other_line_on(capfd):
    from profiling.trace import without_kineto_markers

    with without_kineto_markers():
        os.write(
            2,
            b"USDT:2026-01-02 03:04:05 11:12 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
            b"ERROR:2026-01-02 03:04:05 11:12 CuptiActivityApi.cpp:7] CUPTI is not available\n"
            b"STAGE:2026-01-02 03:04:05 11:12 SyncActivityProfilerHandler.cpp:60] Completed Stage\n"
            b"another line\n",
        )
    err = capfd.readouterr().err
    assert err == "ERROR:2026-01-02 03:04:05 11:12 CuptiActivityApi.cpp:7] CUPTI is not available\nanother line\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pipeline", "cv2"], "unknown pipeline 'cv2'; choose from pil, roi, gpu"),
        (["--compare", "pil,nvjpeg"], "unknown pipeline 'nvjpeg'"),
        (["--compare", "pil,pil"], "lists a pipeline twice"),
        (["--pipeline", "pil", "--compare", "pil,roi"], "not allowed with argument"),
        (["--batch-size", "0"], "must be >= 1"),
        (["--image-size", "big"], "expected HEIGHTxWIDTH"),
        (["--device", "tpu"], "device"),
        (["--model", "nope"], "unknown model 'nope'"),
        (["--data", "somewhere", "--prepared"], "python -m custom_op prepare SRC DST"),
    ],
)
def test_bad_arguments_exit_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_gpu_pipeline_without_backend_is_refused(tiny_set, capsys):
    import custom_op

    if callable(getattr(custom_op, "cuda_available", None)) and custom_op.cuda_available():
        pytest.skip("this build has the GPU backend")
    with pytest.raises(SystemExit) as e:
        main(["--data", str(tiny_set), "--compare", "roi,gpu", *TINY])
    assert e.value.code == 2
    assert "needs the GPU backend of custom_op" in capsys.readouterr().err


def test_empty_and_non_jpeg_folders(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--data", str(empty), *TINY]) == 2
    err = capsys.readouterr().err
    assert "no JPEG files" in err and str(empty) in err

    pngs = tmp_path / "pngs"
    pngs.mkdir()
    (pngs / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert main(["--data", str(pngs), *TINY]) == 2
    err = capsys.readouterr().err
    assert "no JPEG files" in err and "x.png" in err

    assert main(["--data", str(tmp_path / "missing"), *TINY]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.fixture()
def folder_with_corrupt_file(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    for i in range(6):
        (root / f"img_{i}.jpg").write_bytes(encode_jpeg(photo_like(72, 96, seed=i)))
    bad = root / "img_3.jpg"
    bad.write_bytes(bad.read_bytes()[:300])
    return root, bad


@pytest.mark.parametrize("workers", ["1", "0"])
def test_corrupt_file_stops_the_run_with_one_line_naming_it_and_the_option(
    folder_with_corrupt_file, tmp_path, capsys, workers
):
    root, bad = folder_with_corrupt_file
    rc = main(["--data", str(root), "--pipeline", "roi", "--workers", workers, "--logdir", str(tmp_path / "l"), *TINY])
    assert rc == 1
    err = capsys.readouterr().err
    # one line, not the DataLoader worker's traceback
    assert err.startswith(f"python -m profiling: error: pipeline roi: corrupt file {bad}: cannot roi-decode it: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.rstrip().endswith("rerun with --on-error skip to skip such files and list them at the end")


def test_every_file_corrupt_with_skip_is_one_line_too(tmp_path, capsys):
    root = tmp_path / "data"
    root.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (root / name).write_bytes(b"not a JPEG")
    rc = main(
        [
            "--data",
            str(root),
            "--pipeline",
            "roi",
            "--workers",
            "1",
            "--on-error",
            "skip",
            "--logdir",
            str(tmp_path / "l"),
            *TINY,
        ]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith(f"python -m profiling: error: pipeline roi: {root}: every one of the 2 files failed")
    assert err.count("\n") == 1 and "--on-error" not in err


def test_dataset_message_of_an_error_from_a_worker():
    from datasets import CorruptImageError
    from datasets.errors import dataset_message

    wrapped = CorruptImageError(
        "Caught CorruptImageError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    g()\nValueError: inner\n\nThe above exception was the direct cause '
        'of the following exception:\n\nTraceback (most recent call last):\n  File "x.py", line 2, in h\n'
        "datasets.errors.CorruptImageError: /data/b.jpg: cannot roi-decode it: ValueError: inner\n"
    )
    assert dataset_message(wrapped) == "/data/b.jpg: cannot roi-decode it: ValueError: inner"
    assert dataset_message(CorruptImageError("/data/b.jpg: bad")) == "/data/b.jpg: bad"


def test_corrupt_file_skipped_is_reported(folder_with_corrupt_file, tmp_path, capsys):
    root, bad = folder_with_corrupt_file
    logdir = tmp_path / "l"
    # 6 steps of 4 samples draw every file at least once
    rc = main(
        [
            "--data",
            str(root),
            "--compare",
            "pil,roi",
            "--workers",
            "1",
            "--on-error",
            "skip",
            "--logdir",
            str(logdir),
            "--batch-size",
            "4",
            "--steps",
            "6",
            "--warmup",
            "0",
            "--profile-steps",
            "0",
            "--device",
            "cpu",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert f"skipped 1 corrupt file(s): {bad}" in out
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["pipelines"]["pil"]["skipped_files"] == [str(bad)]
    assert summary["pipelines"]["roi"]["skipped_files"] == [str(bad)]
    assert not list(logdir.rglob("*.pt.trace.json"))  # --profile-steps 0


@pytest.fixture()
def photos_and_a_damaged_sub_folder(tmp_path):
    """6 photos directly in the folder, and a sub-folder holding one damaged file."""
    root = tmp_path / "photos"
    root.mkdir()
    for i in range(6):
        (root / f"img_{i}.JPEG").write_bytes(encode_jpeg(photo_like(72, 96, seed=i)))
    (root / "rejects").mkdir()
    (root / "rejects" / "broken.jpg").write_bytes(b"\xff\xd8 not a JPEG")
    return root


@pytest.mark.parametrize("layout", ["flat", "auto"])
def test_run_trains_on_the_files_and_layout_it_reports(photos_and_a_damaged_sub_folder, tmp_path, capsys, layout):
    root = photos_and_a_damaged_sub_folder
    logdir = tmp_path / "l"
    rc = main(
        [
            "--data",
            str(root),
            "--layout",
            layout,
            "--compare",
            "pil,roi",
            "--workers",
            "1",
            "--logdir",
            str(logdir),
            *TINY,
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"data: {root} (6 JPEGs" in out and "flat layout" in out
    if layout == "auto":  # the sub-folder it leaves out is named
        assert "1 sub-folder(s)" in err and "'rejects/'" in err
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["dataset"]["layout"] == summary["config"]["layout"] == "flat"
    assert summary["pipelines"]["pil"]["num_files"] == summary["pipelines"]["roi"]["num_files"] == 6


def test_unread_files_are_warned_about_once_per_run(tiny_set, tmp_path, capsys, recwarn):
    root = tmp_path / "set"
    root.mkdir()
    for class_dir in tiny_set.iterdir():
        if class_dir.is_dir():
            (root / class_dir.name).symlink_to(class_dir, target_is_directory=True)
    (root / "stray.JPEG").write_bytes(encode_jpeg(photo_like(72, 96, seed=1)))
    assert (
        main(
            [
                "--data",
                str(root),
                "--layout",
                "imagefolder",
                "--compare",
                "pil,roi",
                "--workers",
                "1",
                "--logdir",
                str(tmp_path / "l"),
                *TINY,
            ]
        )
        == 0
    )
    messages = [str(w.message) for w in recwarn if "are not read" in str(w.message)]
    messages += [line for line in capsys.readouterr().err.splitlines() if "are not read" in line]
    assert len(messages) == 1 and "'stray.JPEG'" in messages[0], messages
    assert messages[0].startswith(f"python -m profiling: warning: 1 file(s) in {str(root)!r} are not read")


# ----------------------------------------------------------------------------- parts


def test_small_cnn_trains_on_uint8_batches():
    model = small_cnn(3)
    x = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    out = model(x)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    torch.nn.functional.cross_entropy(out, torch.tensor([0, 2])).backward()


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        build_model("nope", 2)


def test_step_timer_cpu_phases():
    timer = StepTimer(torch.device("cpu"))
    timer.start_step()
    with timer.phase("data_wait"):
        sum(range(1000))
    with timer.phase("compute"):
        torch.ones(10).sum()
    times = timer.end_step()
    assert set(times) == {"data_wait", "compute", "total"}
    assert 0 <= times["data_wait"] <= times["total"] and 0 <= times["compute"] <= times["total"]


def test_table_speedup_is_relative_to_first_pipeline():
    def result(name, total, wait):
        r = RunResult(pipeline=name)
        r.steps = {"total": [total] * 4, "data_wait": [wait] * 4, "h2d": [0.0] * 4, "compute": [total - wait] * 4}
        r.worker_ms = {k: [1.0] * 4 for k in ("read", "decode", "transform")}
        return r

    stats = {"pil": run_stats(result("pil", 0.72, 0.5), 32), "roi": run_stats(result("roi", 0.48, 0.26), 32)}
    table = format_table(stats)
    assert "1.00x" in table and "1.50x" in table
    assert stats["pil"]["data_wait_share"] == pytest.approx(0.5 / 0.72)
    assert stats["roi"]["images_per_s"] == pytest.approx(32 / 0.48)
    single = format_table({"roi": stats["roi"]})
    assert "speedup" not in single


def test_gpu_pipeline_loop_branch_runs_with_a_stand_in_backend(tiny_set, tmp_path, monkeypatch):
    # Without a GPU: pretend the backend is there and let the main-process decode run on the CPU, so the
    # loop's gpu branch (bytes from workers, decode in the training process) runs on any machine.
    import datasets.jpeg_dataset as jd

    monkeypatch.setattr(jd, "gpu_backend_available", lambda: True)
    for ahead in ("0", "2"):  # decoded in the step (timed as its phases), or ahead on background threads
        logdir = tmp_path / f"logs{ahead}"
        args = ["--data", str(tiny_set), "--compare", "roi,gpu", "--workers", "1", "--decode-ahead", ahead]
        assert main([*args, "--logdir", str(logdir), *TINY]) == 0
        summary = json.loads((logdir / "summary.json").read_text())
        phases = set(summary["pipelines"]["gpu"]["phases_s"])
        assert ({"gpu_decode", "gpu_transform"} <= phases) == (ahead == "0")
        # same samples, same model and seed: the losses match those of roi
        assert summary["pipelines"]["gpu"]["losses"] == pytest.approx(summary["pipelines"]["roi"]["losses"])


def test_gpu_rrc_pipeline_loop_branch_runs_with_a_stand_in_backend(tiny_set, tmp_path, monkeypatch):
    # As above for gpu-rrc: its decode in the training process gives rrc's samples, hence its losses;
    # with mixed precision and channels-last batches the loop still runs.
    import datasets.jpeg_dataset as jd

    monkeypatch.setattr(jd, "gpu_backend_available", lambda: True)
    for ahead in ("0", "2"):
        logdir = tmp_path / f"logs{ahead}"
        args = ["--data", str(tiny_set), "--compare", "rrc,gpu-rrc", "--workers", "1", "--decode-ahead", ahead]
        assert main([*args, "--logdir", str(logdir), *TINY]) == 0
        summary = json.loads((logdir / "summary.json").read_text())
        phases = set(summary["pipelines"]["gpu-rrc"]["phases_s"])
        assert ({"gpu_decode", "gpu_transform"} <= phases) == (ahead == "0")
        assert summary["pipelines"]["gpu-rrc"]["losses"] == pytest.approx(summary["pipelines"]["rrc"]["losses"])
    logdir = tmp_path / "amp"
    args = ["--data", str(tiny_set), "--pipeline", "rrc", "--amp", "--channels-last", "--logdir", str(logdir), *TINY]
    assert main(args) == 0
    config = json.loads((logdir / "summary.json").read_text())["config"]
    assert config["amp"] and config["channels_last"]


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device"
    from datasets.jpeg_dataset import gpu_backend_unavailable_reason

    return gpu_backend_unavailable_reason()


@pytest.mark.skipif(_cuda_skip_reason() is not None, reason=str(_cuda_skip_reason()))
def test_cuda_run_with_gpu_pipeline(tiny_set, tmp_path):
    logdir = tmp_path / "logs"
    args = [
        "--data",
        str(tiny_set),
        "--compare",
        "roi,gpu,gpu-rrc",
        "--workers",
        "1",
        "--decode-ahead",
        "0",
        "--logdir",
        str(logdir),
        "--batch-size",
        "4",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--profile-steps",
        "1",
        "--device",
        "cuda",
    ]
    assert main(args) == 0
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["config"]["device"] == "cuda"
    assert {"data_wait", "h2d", "compute", "total"} <= set(summary["pipelines"]["roi"]["phases_s"])
    assert {"gpu_decode", "gpu_transform"} <= set(summary["pipelines"]["gpu"]["phases_s"])
    assert {"gpu_decode", "gpu_transform"} <= set(summary["pipelines"]["gpu-rrc"]["phases_s"])
    # Decoded ahead (the default): the losses are the same.
    ahead = tmp_path / "ahead"
    assert main([*args[:6], "--logdir", str(ahead), *args[10:]]) == 0
    for name in ("gpu", "gpu-rrc"):
        losses = json.loads((ahead / "summary.json").read_text())["pipelines"][name]["losses"]
        assert losses == pytest.approx(summary["pipelines"][name]["losses"], rel=1e-3)  # cuDNN may reorder sums
    assert list((logdir / "gpu").glob("*.pt.trace.json"))
