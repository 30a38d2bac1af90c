"""Shared test fixtures: where the real JPEGs are, and the generated-JPEG factory."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# tests/ helpers (jpeg_factory) and the checkout's datasets/ and profiling/ import from here.
for path in (str(ROOT / "tests"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

SHARED_DATA = Path(os.environ.get("CUSTOM_OP_TEST_DATA", ROOT.parent / "shared" / "data"))


def load_package_module(name: str):
    """custom_op/<name>.py loaded by path, as setup.py loads it: the build helpers must work without
    importing the package, whose import would load (and maybe build) the library in the test process."""
    spec = importlib.util.spec_from_file_location(f"_tests_custom_op_{name}", ROOT / "custom_op" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_dir(name: str) -> Path:
    """A folder of ../shared/data, or a skip saying it is missing (our users' checkouts lack it)."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"{path} is absent: these real JPEGs are only in the project's workplace "
                    "(set CUSTOM_OP_TEST_DATA to a folder holding imagenet-sample/ and odd-jpegs/)")
    return path


@pytest.fixture(scope="session")
def jpeg_writer():
    """The test-side encoder (tests/jpeg_writer.c), or a skip saying why it cannot be built here."""
    import jpeg_factory

    reason = jpeg_factory.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot build the test JPEG writer: {reason}")
    return jpeg_factory
