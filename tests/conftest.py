"""Shared test fixtures: the photos (real ones, or generated; see photo_data.py) and the generated-JPEG factory."""

import contextlib
import importlib.util
import os
import re
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# tests/ helpers (jpeg_factory) and the checkout's datasets/ and profiling/ import from here.
for path in (str(ROOT / "tests"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

import photo_data  # noqa: E402  (tests/, on the path from here)

# Caches that tests fill, and the folder each gets under pytest's temporary folder of the session unless
# the variable is set already. Test modules build the JPEG writer while they are collected (their skip
# conditions ask whether it builds), hence pytest_configure, before collection, rather than a fixture.
# Subprocesses (fuzz workers, the sanitizer script) inherit the variables.
SESSION_CACHES = {
    "CUSTOM_OP_JPEG_WRITER_DIR": "jpeg_writer",  # tests/jpeg_factory.py
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # torch.compile, else /tmp/torchinductor_<user>
}
# The variables set here and their folders, for the tests that check them.
SESSION_CACHE_DIRS = {}
_environ_before = {}


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin has set up the session's base folder
def pytest_configure(config):
    factory = getattr(config, "_tmp_path_factory", None)  # what the tmp_path_factory fixture returns
    if factory is None:  # the tmpdir plugin disabled (-p no:tmpdir): keep the defaults
        return
    for variable, name in SESSION_CACHES.items():
        if os.environ.get(variable):
            continue
        _environ_before[variable] = os.environ.get(variable)
        SESSION_CACHE_DIRS[variable] = factory.mktemp(name, numbered=False)
        os.environ[variable] = str(SESSION_CACHE_DIRS[variable])


def pytest_unconfigure(config):
    for variable, value in _environ_before.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
    _environ_before.clear()
    SESSION_CACHE_DIRS.clear()


def load_package_module(name: str):
    """custom_op/<name>.py loaded by path, as setup.py loads it: the build helpers must work without
    importing the package, whose import would load (and maybe build) the library in the test process."""
    spec = importlib.util.spec_from_file_location(f"_tests_custom_op_{name}", ROOT / "custom_op" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_dir(name: str) -> Path:
    """A folder of CUSTOM_OP_TEST_DATA (imagenet-sample or odd-jpegs), or a skip saying it is missing. Only the
    GPU tests still need it: the others take the `photos` and `odd_jpegs` fixtures, generated without it."""
    root = photo_data.data_root()
    if root is None:
        pytest.skip(
            f"CUSTOM_OP_TEST_DATA={os.environ.get('CUSTOM_OP_TEST_DATA')!r} hides the real JPEGs these tests need"
        )
    path = root / name
    if not path.is_dir():
        pytest.skip(
            f"{path} is absent: these tests need real JPEGs, which the repository does not hold "
            "(set CUSTOM_OP_TEST_DATA to a folder holding imagenet-sample/ and odd-jpegs/)"
        )
    return path


@pytest.fixture(scope="session")
def jpeg_writer():
    """The test-side encoder (tests/jpeg_writer.c), or a skip saying why it cannot be built here."""
    import jpeg_factory

    reason = jpeg_factory.unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot build the test JPEG writer: {reason}")
    return jpeg_factory


def assert_op_raises(kind, says, op, *args, **kwargs):
    """An operator's error of type `kind`: the operator raises RuntimeError whose message starts with the
    type's name (torch's stable ABI carries no other type; csrc/common/item_status.h), and called as the
    package calls it (custom_op._outcomes.call) it raises `kind` with the rest of the message, which
    `says` (a pattern) finds."""
    from custom_op import _outcomes

    tag = f"{kind.__name__}: " if kind is not RuntimeError else ""
    with pytest.raises(RuntimeError) as raw:
        op(*args, **kwargs)
    message = str(raw.value)
    assert type(raw.value) is RuntimeError and message.startswith(tag), repr(raw.value)
    assert re.search(says, message[len(tag) :]), (says, message)
    with pytest.raises(kind) as typed:
        _outcomes.call(op, *args, **kwargs)
    assert type(typed.value) is kind and str(typed.value) == message[len(tag) :], repr(typed.value)


@pytest.fixture(scope="session")
def generated_photos(jpeg_writer, tmp_path_factory) -> tuple[Path, ...]:
    """The generated photo set (photo_data.RECIPES), written once per session."""
    return photo_data.write_photo_set(tmp_path_factory.mktemp("generated-photos"))


@pytest.fixture(scope="session")
def generated_odd_jpegs(jpeg_writer, tmp_path_factory) -> Path:
    """A folder of generated stand-ins for odd-jpegs/ (photo_data.ODD_STAND_INS), written once per session."""
    return photo_data.write_odd_stand_ins(tmp_path_factory.mktemp("generated-odd-jpegs"))


@pytest.fixture(scope="session")
def photos(request) -> tuple[Path, ...]:
    """The photos of the photo tests: the real ones of CUSTOM_OP_TEST_DATA (imagenet-sample/, or a plain
    folder's JPEGs) when there are, else the generated set."""
    return photo_data.real_photos() or request.getfixturevalue("generated_photos")


@pytest.fixture(scope="session")
def odd_jpegs(request) -> Path:
    """The folder of odd files, used by name: CUSTOM_OP_TEST_DATA's odd-jpegs/, else generated stand-ins
    with the same names and the properties the tests rely on."""
    return photo_data.real_odd_dir() or request.getfixturevalue("generated_odd_jpegs")


def jpeg_size(path: Path) -> tuple[int, int]:
    """(height, width) of a JPEG file, from its header (Pillow)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.height, image.width


@pytest.fixture
def two_threads():
    """torch's intra-op pool at 2 threads for the test (the batched calls' parallel path)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@contextlib.contextmanager
def held_on_another_thread(block):
    """Enters ``with block():`` on a thread of its own and holds it there until this context ends or
    release() (which it yields) is called; then waits for the thread and raises what it raised."""
    entered, leave, raised = threading.Event(), threading.Event(), []

    def hold():
        try:
            with block():
                entered.set()
                leave.wait(60)
        except BaseException as e:  # noqa: BLE001 - raised again on the test's thread
            raised.append(e)
            entered.set()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert entered.wait(60), "the thread did not enter its block"

    def release():
        leave.set()
        thread.join(60)
        assert not thread.is_alive(), "the thread did not leave its block"
        if raised:
            raise raised[0]

    try:
        yield release
    finally:
        if not leave.is_set():
            release()
