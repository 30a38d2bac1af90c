"""The README's and the documentation's examples, run as tests (Sybil).

pytest collects README.md and docs/**/*.md (pyproject.toml's testpaths name them): every ```python block
is one test, run in the order of the page, all blocks of a page sharing one namespace, so that a block
may use what an earlier block of the same page defined. ```bash and ```text blocks are shown, not run.
A block that needs CUDA is preceded by an HTML comment that skips it where custom_op cannot decode on a
GPU, with the reason:

    <!-- skip: next if(not __import__("custom_op").cuda_available(), reason="needs a CUDA GPU and nvJPEG") -->

Each page runs in a folder of its own (the current directory while its blocks run), holding the files
the examples read, generated once per session (see docs/about.md, "How the examples run"):

- photo.jpg: a photo-like 500x375 JPEG (4:2:0, quality 90);
- photos/: 12 photo-like JPEGs of several sizes, two of them smaller than 224 pixels on a side, some
  named .jpg and some .JPEG (as ImageNet's files are).

Without Sybil (the docs and test extras install it), each of these files is one test that skips saying so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
DOC_PATTERNS = ("README.md", "docs/*.md", "docs/*/*.md")

# (height, width) of the files in photos/: most larger than a 224x224 crop, two smaller (a photo of
# 212x300 is what makes a naive random-crop Dataset fail in a DataLoader batch).
PHOTO_SIZES = [
    (375, 500),
    (500, 375),
    (333, 500),
    (480, 640),
    (212, 300),
    (500, 500),
    (375, 500),
    (160, 240),
    (427, 640),
    (400, 600),
    (375, 500),
    (600, 400),
]


def _write_jpeg(path: Path, height: int, width: int, seed: int) -> None:
    import numpy as np
    from PIL import Image

    try:
        from datasets.synthetic import photo_like  # the checkout's photo-like generator

        pixels = photo_like(height, width, seed)
    except ImportError:
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:height, 0:width]
        base = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=-1)
        pixels = np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, quality=90, subsampling="4:2:0")


def write_example_files(folder: Path, photo_size: tuple[int, int] = (375, 500)) -> None:
    """photo.jpg, of photo_size (height, width), and photos/ into folder. Every third name in photos/
    ends in .JPEG, as ImageNet's do, so that the examples list JPEGs by any case of their suffix."""
    _write_jpeg(folder / "photo.jpg", *photo_size, seed=0)
    (folder / "photos").mkdir()
    for i, (height, width) in enumerate(PHOTO_SIZES):
        _write_jpeg(folder / "photos" / f"img_{i:03d}.{'JPEG' if i % 3 == 2 else 'jpg'}", height, width, seed=i + 1)


@pytest.fixture(scope="session")
def _docs_example_files(tmp_path_factory) -> Path:
    """The files the examples read, generated once per session."""
    folder = tmp_path_factory.mktemp("docs-example-files")
    write_example_files(folder)
    return folder


@pytest.fixture(scope="module")  # one per page: Sybil's page is pytest's module
def _docs_page_dir(_docs_example_files, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("docs-page")
    shutil.copytree(_docs_example_files, folder, dirs_exist_ok=True)
    return folder


@pytest.fixture
def _docs_cwd(_docs_page_dir, monkeypatch):
    """Each block runs with its page's folder as the current directory."""
    monkeypatch.chdir(_docs_page_dir)
    yield


def _is_doc(path: Path) -> bool:
    """README.md at the root, or a page under docs/ (not a build's output). Checked here rather than by
    Sybil's patterns alone, which match from the right (``README.md`` would match tests/fuzz/README.md)."""
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return False
    if relative.suffix != ".md":
        return False
    return relative.parts == ("README.md",) or (relative.parts[0] == "docs" and "_build" not in relative.parts)


try:
    from sybil import Sybil
    from sybil.parsers.myst import PythonCodeBlockParser, SkipParser
except ImportError as e:  # the docs tools are not installed: say so once per file
    _SYBIL_MISSING = (
        f"Sybil is not installed ({e}): pip install --no-build-isolation '.[docs]' to run the documentation's examples"
    )

    class _Skipped(pytest.Item):
        def runtest(self):
            pytest.skip(_SYBIL_MISSING)

        def reportinfo(self):
            return self.path, 0, f"{self.path.name}: examples"

    class _DocFile(pytest.File):
        def collect(self):
            yield _Skipped.from_parent(self, name="examples")

    def pytest_collect_file(file_path: Path, parent):
        if _is_doc(file_path):
            return _DocFile.from_parent(parent, path=file_path)
        return None

else:
    SYBIL = Sybil(
        parsers=[PythonCodeBlockParser(), SkipParser()],
        patterns=list(DOC_PATTERNS),
        excludes=["docs/_build/*"],
        fixtures=["_docs_cwd"],
        name="docs",
    )
    _sybil_collect = SYBIL.pytest()

    def pytest_collect_file(file_path: Path, parent):
        if _is_doc(file_path):
            return _sybil_collect(file_path, parent)
        return None
