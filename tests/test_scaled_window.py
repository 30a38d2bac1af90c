"""custom_op/csrc/common/scaled_window.h: the MCU rectangle our CUDA decoder decodes for a window of an
image decoded at a DCT scale (1/8, 2/8, 4/8, 8/8), checked on the CPU by tests/scaled_window_check.cpp
against jpeg_core's scaled geometry and upsampler, which tests/test_jpeg_core.py checks against
libjpeg. The GPU tests (test_gpu.py) check the decoded pixels."""

from __future__ import annotations

import re
import subprocess

import host_checks
from conftest import ROOT


def test_every_sample_a_scaled_window_reads_lies_in_its_rectangle(tmp_path):
    exe = host_checks.build(tmp_path, "scaled_window_check", [ROOT / "tests" / "scaled_window_check.cpp"], ["-O2"])
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    found = re.search(r"checks (\d+) failures (\d+)", run.stdout)
    assert found, run.stdout + run.stderr
    assert int(found.group(2)) == 0 and run.returncode == 0, run.stdout
    # Samplings x sizes x scales x windows: the check ran over all of them.
    assert int(found.group(1)) > 10000
