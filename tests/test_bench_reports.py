"""The benchmark reports' writer (bench/common.py's Report), the SageMaker rehearsal's report
(bench/sm_job_report.py, run on fake output of bench/sm_job_gpu_rehearsal.sh) and the chunk time probe's
(bench/chunk_time_probe_report.py, on fake probe output): both files written, the Markdown and the JSON
saying the same, the tables as rows and columns with their numbers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import chunk_time_probe_report  # noqa: E402
import common  # noqa: E402
import sm_job_report  # noqa: E402


def small_report(**kwargs) -> common.Report:
    report = common.Report(
        "A benchmark",
        machine="a test machine",
        command="python bench/a.py --out x.md",
        commit="0123abcd",
        date="2026-01-02T03:04:05+00:00",
        details={"versions": "Python 3", "each figure": "ms per image"},
        echo=False,
        **kwargs,
    )
    report.heading("Case one")
    report.text("outputs identical: True")
    report.table(["method", "ms/image", "speed-up"], [["ours", "0.427 (0.434)", "2.75x"], ["Pillow", "1,175.5", "-"]])
    report.items(["a note", "another"])
    report.code("line 1\nline 2\n")
    return report


def test_write_gives_the_markdown_and_the_json_beside_it(tmp_path):
    md, data = small_report().write(tmp_path / "sub" / "a.md")
    assert (md, data) == (tmp_path / "sub" / "a.md", tmp_path / "sub" / "a.json")
    text = md.read_text()
    assert text.startswith(
        "# A benchmark\n\n- date: 2026-01-02T03:04:05+00:00\n- command: `python bench/a.py --out x.md`\n"
        "- machine: a test machine\n- commit: 0123abcd\n- versions: Python 3\n- each figure: ms per image\n\n"
    )
    assert "| method | ms/image | speed-up |\n| --- | ---: | ---: |\n| ours | 0.427 (0.434) | 2.75x |\n" in text
    assert "- a note\n- another\n" in text and "```text\nline 1\nline 2\n```" in text
    report = json.loads(data.read_text())
    assert {k: report[k] for k in ("title", "date", "command", "machine", "commit")} == {
        "title": "A benchmark",
        "date": "2026-01-02T03:04:05+00:00",
        "command": "python bench/a.py --out x.md",
        "machine": "a test machine",
        "commit": "0123abcd",
    }
    assert report["details"] == {"versions": "Python 3", "each figure": "ms per image"}
    assert [b["type"] for b in report["body"]] == ["heading", "text", "table", "items", "code"]
    table = report["body"][2]
    assert table["columns"] == ["method", "ms/image", "speed-up"]
    assert table["align"] == ["left", "right", "right"]
    assert table["rows"] == [["ours", "0.427 (0.434)", "2.75x"], ["Pillow", "1,175.5", "-"]]
    assert table["numbers"] == [[None, 0.427, 2.75], [None, 1175.5, None]]


def test_the_header_defaults_to_this_run():
    report = common.Report("t", machine="m", echo=False)
    assert report.date[:2] == "20" and "T" in report.date
    assert report.command.startswith("python ")
    assert report.commit  # the checkout's commit, or what says there is none


def test_markdown_lines_become_the_same_blocks():
    """A script that builds its report as Markdown lines (bench_gpu.py's sections) gets the blocks that
    the structured calls give, so its JSON file has its tables as rows and columns."""
    built = small_report()
    parsed = common.Report("A benchmark", machine="m", commit="c", echo=False)
    lines = built.to_markdown().split("\n\n", 1)[1].splitlines()[7:]  # the body, after the header lines
    parsed.markdown(lines)
    assert parsed.body == built.body


def test_markdown_tables_keep_their_alignment_and_pad_short_rows():
    report = common.Report("t", machine="m", commit="c", echo=False)
    report.markdown(
        [
            "### a section",
            "",
            "a paragraph",
            "over two lines",
            "",
            "| method | batch | images/s |",
            "| --- | ---: | ---: |",
            "| ours | 64 | 12,745 |",
            "| theirs | 64 | failed (exit 1): out of memory |",
            "| broken | 256 |",
            "",
            "- a list item",
            "  continued",
        ]
    )
    heading, text, table, items = report.body
    assert heading == {"type": "heading", "level": 3, "text": "a section"}
    assert text["text"] == "a paragraph over two lines"
    assert table["align"] == ["left", "right", "right"]
    assert table["rows"][2] == ["broken", "256", ""]
    assert table["numbers"][0] == [None, 64, 12745]
    assert items["items"] == ["a list item continued"]


def test_bad_tables_and_names_are_refused(tmp_path):
    report = common.Report("t", machine="m", commit="c", echo=False)
    with pytest.raises(ValueError, match="a row of 2 cells"):
        report.table(["a", "b", "c"], [["1", "2"]])
    with pytest.raises(ValueError, match="align"):
        report.table(["a", "b"], [["1", "2"]], align="lx")
    with pytest.raises(ValueError, match=r"\.md"):
        report.write(tmp_path / "a.json")


def test_a_cell_bar_is_escaped_in_the_markdown_and_kept_in_the_json(tmp_path):
    report = common.Report("t", machine="m", commit="c", echo=False)
    report.table(["a", "b"], [["x | y", "1"]])
    md, data = report.write(tmp_path / "r.md")
    assert "| x \\| y | 1 |" in md.read_text()
    assert json.loads(data.read_text())["body"][0]["rows"] == [["x | y", "1"]]
    again = common.Report("t", machine="m", commit="c", echo=False)
    again.markdown(md.read_text().splitlines()[7:])
    assert again.body == report.body


# ------------------------------------------------------------------------------------------------------------
# bench/sm_job_report.py on what bench/sm_job_gpu_rehearsal.sh leaves in OUTDIR


def rehearsal_outdir(tmp_path: Path, roi_ok: bool = True) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "env.txt").write_text(
        "date: 2026-11-22T16:39:40+00:00\n"
        "gpu: NVIDIA H200, 580.159.04, 143771 MiB\n"
        "gpu: NVIDIA H200, 580.159.04, 143771 MiB\n"
        "torch: 2.11.0+cu130\ncuda: 13.0\nranks: 2\ncpus: 32\ncompiler: /usr/bin/g++\n"
        "libjpeg-turbo prefix: system\nnvjpeg: from the CUDA toolkit\n"
    )
    for name, p50, rate, compiled, ok in (("gpu", 0.018, 738.4, 1, True), ("roi", 0.005, 831.0, 0, roi_ok)):
        facts = {
            "builds_before": 0 if name == "gpu" else 2,
            "builds": 2,
            "ranks_that_compiled": compiled,
            "ranks_that_loaded": 2,
            "rank0_steps": 40,
            "rank0_traces": 1,
            "rank1_steps": 40 if ok else 12,
            "rank1_traces": 1,
            "world_size": 2,
        }
        verdict = {
            "ok": ok,
            "returncode": 0 if ok else 1,
            "seconds": 40.2,
            "facts": facts,
            "problems": [] if ok else ["rank 1 logged 12 steps in steps.jsonl, expected 40"],
            "dir": f"/tmp/sm_job_rehearsal_{name}",
        }
        (out / f"rehearsal_{name}.log").write_text(
            "rehearsal in /tmp/x\n[sm_job rank 0/2 algo-1] step 10/40 ...\n"
            + json.dumps(verdict, indent=2)
            + "\nrehearsal folder kept: /tmp/x\n"
        )
        summary = {
            "config": {
                "workers": 8,
                "num_images": 256,
                "image_size": [533, 800],
                "batch_size": 32,
                "warmup": 5,
                "steps": 40,
                "model": "small_cnn",
            },
            "world_size": 2,
            "images_per_s_all_ranks": rate,
            "step_p50_s_slowest_rank": p50,
            "ranks": [{"extension": {"libjpeg_turbo_version": "2.1.5"}}, {"extension": {}}],
        }
        (out / f"summary_{name}.json").write_text(json.dumps(summary))
    (out / "builds.log").write_text("2026-11-22T16:40:06 key=ba50 name=custom_op_cpu seconds=12.2\n")
    return out


def test_the_rehearsal_report_from_the_scripts_output(tmp_path):
    out = rehearsal_outdir(tmp_path)
    sm_job_report.main(
        [str(out), "--out", str(tmp_path / "sm.md"), "--command", "NPROC=2 bash x.sh", "--commit", "abc123"]
    )
    report = json.loads((tmp_path / "sm.json").read_text())
    assert report["date"] == "2026-11-22T16:39:40+00:00"
    assert report["command"] == "NPROC=2 bash x.sh" and report["commit"] == "abc123"
    assert report["machine"] == "2x NVIDIA H200 (143771 MiB each, driver 580.159.04), 32 CPUs"
    assert "torch 2.11.0+cu130, CUDA 13.0, libjpeg-turbo 2.1.5" in report["details"]["versions"]
    assert "--workers 8" in report["details"]["each run"] and "533x800" in report["details"]["each run"]
    assert report["details"]["wall"] == "80 s for the 2 runs"
    table = next(b for b in report["body"] if b["type"] == "table")
    assert table["rows"] == [
        [
            "gpu (nvJPEG batch decode in each rank)",
            "ok, exit 0",
            "2 (2 new)",
            "1",
            "2",
            "40, 40",
            "1, 1",
            "0.018 s",
            "738",
        ],
        [
            "roi (libjpeg-turbo in 8 DataLoader workers per rank), same cache",
            "ok, exit 0",
            "2 (0 new)",
            "0",
            "2",
            "40, 40",
            "1, 1",
            "0.005 s",
            "831",
        ],
    ]
    assert table["numbers"][0][-1] == 738
    code = next(b for b in report["body"] if b["type"] == "code")
    assert "name=custom_op_cpu" in code["text"]
    assert "| gpu (nvJPEG batch decode in each rank) | ok, exit 0 |" in (tmp_path / "sm.md").read_text()


def test_the_rehearsal_report_says_what_failed(tmp_path):
    out = rehearsal_outdir(tmp_path, roi_ok=False)
    (out / "rehearsal_gpu.log").write_text("Traceback (most recent call last):\n  ...\n")
    (out / "summary_gpu.json").unlink()
    report = sm_job_report.build_report(out, ["gpu", "roi"], "bash x.sh", "abc", echo=False).to_json()
    gpu, roi = next(b for b in report["body"] if b["type"] == "table")["rows"]
    assert gpu[1] == "no verdict in its log (the rehearsal did not finish)" and gpu[-1] == "-"
    assert roi[1] == "failed, exit 1: rank 1 logged 12 steps in steps.jsonl, expected 40"
    assert roi[5] == "40, 12"


# ------------------------------------------------------------------------------------------------------------
# bench/chunk_time_probe_report.py on what bench/chunk_time_probe.sh prints

PROBE_OUTPUT = """2026-11-29T10:02:58+00:00
name, driver_version, memory.total [MiB]
NVIDIA H200, 580.159.04, 143771 MiB
torch 2.11.0+cu130 cuda 13.0 torchvision 0.26.0+cu130
libjpeg: JpegTurbo(prefix='/x')
nvjpeg:  Nvjpeg(prefix='/usr/local/cuda')
cores: 16; CXX=/usr/bin/g++; commit: 8014eab
64 photos, 14111 chunks of 512 bytes decoded from their guesses, 441 warps: launch 0.694 ms; a warp's cycles: x
64 photos, 14111 chunks of 512 bytes decoded from their true starts, 441 warps: launch 0.817 ms; x
a warp's cycles against the AC codes of its busiest thread: R^2 0.063
against the blocks in lockstep (the sum over block rounds of the most AC codes): R^2 0.971, 238 cycles per code
"""


def test_the_probe_report_takes_the_machine_from_its_lines_and_keeps_the_probe_lines(tmp_path):
    (tmp_path / "probe.txt").write_text(PROBE_OUTPUT)
    assert chunk_time_probe_report.main([str(tmp_path / "probe.txt"), "--out", str(tmp_path / "p.md")]) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    assert (report["date"], report["machine"], report["commit"]) == (
        "2026-11-29T10:02:58+00:00",
        "NVIDIA H200; 16 CPU cores",
        "8014eab",
    )
    assert report["command"] == "bash bench/chunk_time_probe.sh"
    assert report["details"]["versions"] == "torch 2.11.0+cu130 cuda 13.0 torchvision 0.26.0+cu130"
    code = next(b for b in report["body"] if b["type"] == "code")["text"].splitlines()
    assert len(code) == 4 and code[0].startswith("64 photos") and code[3].startswith("against the blocks")
    assert "R^2 0.971" in (tmp_path / "p.md").read_text()


def test_the_probe_report_refuses_output_without_results(tmp_path):
    (tmp_path / "probe.txt").write_text(PROBE_OUTPUT.split("64 photos")[0] + "nvcc: error\n")
    with pytest.raises(ValueError, match="no result line"):
        chunk_time_probe_report.main([str(tmp_path / "probe.txt"), "--out", str(tmp_path / "p.md")])
    assert not (tmp_path / "p.md").exists()
