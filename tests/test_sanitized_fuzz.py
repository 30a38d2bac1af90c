"""Our entropy decoder against libjpeg's own, under AddressSanitizer and UndefinedBehaviorSanitizer.

A short run of tests/fuzz/run_sanitized.sh: it builds tests/fuzz/sanitized_decode.cpp with the library's
csrc/cpu sources and -fsanitize=address,undefined, decodes windows of a small generated corpus, their
seeded mutations and tests/fuzz/regressions/ with our decoder on and off, and must find both alike with
no sanitizer report. Longer runs: `tests/fuzz/run_sanitized.sh --help`.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jpeg_factory

SCRIPT = Path(__file__).with_name("fuzz") / "run_sanitized.sh"
SKIP_STATUS = 77  # run_sanitized.sh: no compiler with ASan/UBSan, or no libjpeg-turbo headers
TIMEOUT_S = 600  # a hang guard only; the run takes well under a minute

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="run_sanitized.sh needs bash"),
    pytest.mark.skipif(
        jpeg_factory.unavailable_reason() is not None,
        reason=f"the seed corpus needs the test JPEG writer: {jpeg_factory.unavailable_reason()}",
    ),
]


def test_entropy_decoder_matches_libjpeg_under_sanitizers(tmp_path):
    env = dict(os.environ)
    env["PYTHON"] = sys.executable
    env["SANITIZED_ARTIFACTS"] = str(tmp_path / "findings")
    # The build too stays in pytest's temporary folder: a test run leaves nothing behind elsewhere.
    env["SANITIZED_BUILD_DIR"] = str(tmp_path / "build")
    # --no-prepared: prepare_jpeg would load (maybe build) the extension in the child; the generated
    # restart layouts already take the random-access path.
    command = [
        "bash",
        str(SCRIPT),
        "--small",
        "--no-prepared",
        "--seed",
        "1",
        "--mutants",
        "12",
        "--cases",
        "4",
        "--corpus",
        str(tmp_path / "corpus"),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run_sanitized.sh did not finish in {TIMEOUT_S} s (a hang); inputs: {tmp_path / 'findings'}")
    output = result.stdout + result.stderr
    if result.returncode == SKIP_STATUS:
        pytest.skip(output.strip().splitlines()[-1] if output.strip() else "run_sanitized.sh skipped")
    assert result.returncode == 0, f"exit {result.returncode}; findings in {tmp_path / 'findings'}\n{output[-6000:]}"
    assert "all alike" in result.stdout, output[-3000:]
    assert (tmp_path / "build" / "sanitized_decode").is_file()
