"""Caches the tests fill live under pytest's temporary folder of the session (conftest.py), so that a
test run leaves nothing in the system's temp folder outside pytest's own, which pytest rotates."""

import os
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
