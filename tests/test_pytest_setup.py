"""How the test session is set up: the caches the tests fill live under pytest's temporary folder of the
session (conftest.py), so that a test run leaves nothing in the system's temp folder outside pytest's
own, which pytest rotates; and the summary gives the reason of every skipped test."""

import os
import sys
from pathlib import Path

import pytest

import conftest
import jpeg_factory


@pytest.mark.parametrize("variable", sorted(conftest.SESSION_CACHES))
def test_cache_folder_is_in_the_sessions_temporary_folder(variable, tmp_path_factory):
    if variable not in conftest.SESSION_CACHE_DIRS:
        pytest.skip(f"{variable} was set before the session: that folder is used")
    folder = tmp_path_factory.getbasetemp() / conftest.SESSION_CACHES[variable]
    assert Path(os.environ[variable]) == folder and folder.is_dir()


def test_jpeg_writer_is_built_in_the_sessions_temporary_folder(tmp_path_factory):
    if "CUSTOM_OP_JPEG_WRITER_DIR" not in conftest.SESSION_CACHE_DIRS:
        pytest.skip("CUSTOM_OP_JPEG_WRITER_DIR was set before the session: that folder is used")
    reason = jpeg_factory.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    assert jpeg_factory.writer_path().parent == tmp_path_factory.getbasetemp() / "jpeg_writer"


def test_skip_reasons_are_reported(request):
    root = Path(__file__).resolve().parents[1]
    if sys.version_info >= (3, 11):
        import tomllib

        options = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
        assert "-rs" in options["addopts"].split()
    chars = request.config.option.reportchars
    assert "s" in chars or "a" in chars.lower(), chars
