"""sm_job's pieces without torchrun: the SageMaker environment, hyperparameters, the build cache choice,
the step plan and the staged source directory. The runs themselves are in test_sagemaker_rehearsal.py."""

import argparse
import json
import os
from pathlib import Path

import pytest

from sm_job import env as sm_env
from sm_job import extension, hyperparameters, source_dir

ROOT = Path(__file__).resolve().parents[1]


def fake_container(tmp_path, hps=None, resources=None):
    base = tmp_path / "opt_ml"
    (base / "input" / "config").mkdir(parents=True)
    (base / "input" / "data" / "train").mkdir(parents=True)
    # As the SDK v2 writes them: every value JSON-encoded into a string.
    (base / "input" / "config" / "hyperparameters.json").write_text(
        json.dumps({k: json.dumps(v) for k, v in (hps or {}).items()})
    )
    (base / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps(resources or {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]})
    )
    return base


def test_outside_sagemaker_defaults_to_local_folders():
    job = sm_env.read_job_env({})
    assert not job.in_sagemaker
    assert job.train_dir is None and job.hyperparameters == {}
    assert job.model_dir.endswith(os.path.join("runs", "sm_job", "model"))
    assert job.output_data_dir.endswith(os.path.join("runs", "sm_job", "output"))


def test_reads_the_container_tree_when_sm_variables_are_missing(tmp_path):
    base = fake_container(tmp_path, hps={"batch-size": 8, "pipeline": "roi", "sagemaker_program": "train.py"})
    job = sm_env.read_job_env({"SAGEMAKER_BASE_DIR": str(base)})
    assert job.in_sagemaker
    assert job.hyperparameters == {"batch-size": 8, "pipeline": "roi"}  # the SDK's own keys dropped
    assert job.train_dir == str(base / "input" / "data" / "train")
    assert job.model_dir == str(base / "model")
    assert job.output_data_dir == str(base / "output" / "data")
    assert job.hosts == ["algo-1", "algo-2"] and job.current_host == "algo-2" and job.host_index == 1


def test_sm_variables_win_over_the_files(tmp_path):
    base = fake_container(tmp_path, hps={"steps": 5})
    job = sm_env.read_job_env(
        {
            "SAGEMAKER_BASE_DIR": str(base),
            "SM_HPS": json.dumps({"steps": 7}),
            "SM_MODEL_DIR": "/m",
            "SM_OUTPUT_DATA_DIR": "/o",
            "SM_CHANNEL_TRAIN": "/d",
            "SM_NUM_GPUS": "4",
            "SM_HOSTS": '["h1"]',
            "SM_CURRENT_HOST": "h1",
        }
    )
    assert job.hyperparameters == {"steps": 7}
    assert (job.model_dir, job.output_data_dir, job.train_dir, job.num_gpus) == ("/m", "/o", "/d", 4)
    assert job.hosts == ["h1"] and job.current_host == "h1"


def test_bad_sm_json_names_the_variable():
    with pytest.raises(ValueError, match="SM_HPS"):
        sm_env.read_job_env({"SM_HPS": "{not json"})


def test_command_line_wins_over_job_hyperparameters():
    args = hyperparameters.parse(["--batch-size", "16"], {"batch-size": 8, "steps": 9, "image_size": "64x96"})
    assert args.batch_size == 16 and args.steps == 9 and args.image_size == (64, 96)
    args = hyperparameters.parse(["--batch_size", "3"], {})
    assert args.batch_size == 3


def test_job_hyperparameters_are_checked_like_options():
    with pytest.raises(SystemExit):
        hyperparameters.parse([], {"no-such-option": 1})
    with pytest.raises(SystemExit):
        hyperparameters.parse([], {"pipeline": "tensorflow"})
    with pytest.raises(SystemExit):
        hyperparameters.parse([], {"batch-size": 0})


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("", None),
        ("none", None),
        ("1:3", (1, 3, 0.0)),
        ("0:start", (0, "start", 0.0)),
        ("1:start:8", (1, "start", 8.0)),
    ],
)
def test_inject_failure_forms(text, parsed):
    assert hyperparameters.parse_failure(text) == parsed


@pytest.mark.parametrize("text", ["1", "x:3", "1:-2", "1:later", "1:start:x", "-1:2"])
def test_inject_failure_rejects_bad_forms(text):
    with pytest.raises(argparse.ArgumentTypeError, match="(?i)rank"):
        hyperparameters.parse_failure(text)


def test_build_cache_on_sagemaker_is_local_scratch_and_never_uploaded(tmp_path):
    base = fake_container(tmp_path)
    job = sm_env.read_job_env({"SAGEMAKER_BASE_DIR": str(base)})
    assert extension.choose_build_cache(None, job, environ={}) == sm_env.SAGEMAKER_BUILD_CACHE
    assert extension.choose_build_cache(None, job, environ={"CUSTOM_OP_CACHE_DIR": "/x"}) == "/x"
    assert extension.choose_build_cache("/y", job, environ={"CUSTOM_OP_CACHE_DIR": "/x"}) == "/y"
    for inside in (base / "model" / "cache", base / "output" / "data", base / "output" / "x"):
        with pytest.raises(ValueError, match="uploads"):
            extension.choose_build_cache(str(inside), job, environ={})
    laptop = sm_env.read_job_env({})
    assert extension.choose_build_cache(None, laptop, environ={}) is None  # custom_op's own default


def test_step_plan_keeps_profiled_steps_out_of_the_statistics():
    training = pytest.importorskip("sm_job.training", reason="needs torch, tensorboard and the checkout's packages")
    assert training.step_plan(10, 2, 3) == (4, 6)  # 2 warm-up, 4 measured, 1 + 3 profiled
    assert training.step_plan(10, 2, 0) == (8, 10)
    with pytest.raises(ValueError, match="no measured step"):
        training.step_plan(4, 2, 1)


def test_staged_source_dir_has_the_entry_point_at_its_root(tmp_path):
    code = source_dir.stage(tmp_path / "code")
    files = source_dir.staged_files(code)
    assert "train.py" in files and "requirements.txt" in files
    assert (code / "train.py").read_bytes() == (ROOT / "sm_job" / "train.py").read_bytes()
    for pkg in source_dir.PACKAGES:
        assert f"{pkg}/__init__.py" in files
    assert any(f.startswith("custom_op/csrc/") and f.endswith(".cpp") for f in files)
    assert not any(f.endswith((".so", ".pyc")) or "__pycache__" in f for f in files)
    assert not any(f.startswith(("tests/", "bench/")) or f == "setup.py" for f in files)
    requirements = [line.split("#")[0].strip() for line in (code / "requirements.txt").read_text().splitlines()]
    assert "filelock>=3.10" in requirements and "ninja" in requirements
    assert not any(r.startswith("torch") for r in requirements), "pip would replace the image's CUDA torch"
    with pytest.raises(FileExistsError):
        source_dir.stage(code)


@pytest.mark.parametrize("command", [["sm_job/train.py"], ["sm_job/launch.py"], ["-m", "sm_job.rehearse"]])
def test_commands_start_from_the_checkout(command):
    """--help of each command, run the way the README says (launch.py needs no SDK for that)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_rehearsal_keeps_the_jobs_temporary_files_in_its_folder(tmp_path):
    """torchrun writes its torchelastic_* logs, and the ranks their temporary files, under TMPDIR."""
    from sm_job import rehearse

    layout = rehearse.Layout(tmp_path / "job")
    env = rehearse.job_environment(layout, dict(rehearse.DEFAULT_HYPERPARAMETERS), 0, None, tmp_path / "cache")
    assert Path(env["TMPDIR"]) == layout.tmp and layout.tmp.is_dir() and layout.root in layout.tmp.parents
    assert env["CUSTOM_OP_CACHE_DIR"] == str(tmp_path / "cache") and env["SM_MODEL_DIR"] == str(layout.model)


@pytest.mark.parametrize("ok, argv, kept", [(True, [], False), (True, ["--keep"], True), (False, [], True)])
def test_rehearsal_removes_its_temporary_folder_only_after_a_pass(tmp_path, monkeypatch, capsys, ok, argv, kept):
    import tempfile

    from sm_job import rehearse

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def fake_run(root, **kwargs):
        layout = rehearse.Layout(Path(root))
        layout.tmp.mkdir(parents=True)
        (layout.tmp / "torchelastic_x").mkdir()
        seen.append(layout.root)
        return rehearse.Rehearsal(
            command=["torchrun"],
            returncode=0 if ok else 1,
            seconds=1.0,
            timed_out=False,
            log="",
            layout=layout,
            cache_dir=layout.default_cache,
            nproc=2,
            steps=6,
            problems=[] if ok else ["a rank failed"],
        )

    monkeypatch.setattr(rehearse, "run", fake_run)
    assert rehearse.main(argv) == (0 if ok else 1)
    (root,) = seen
    assert root.parent == tmp_path and root.name.startswith("sm_job-rehearsal-")
    assert root.exists() == kept
    out = capsys.readouterr().out
    assert (f"rehearsal folder kept: {root}" if kept else f"rehearsal folder removed: {root}") in out
