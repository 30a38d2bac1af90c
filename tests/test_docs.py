"""The documentation: the strict Sphinx build, and checks on the README's and the pages' code blocks.

The examples themselves run as tests of their own: conftest.py at the root hands README.md and
docs/**/*.md to Sybil, and pyproject.toml's testpaths name them (docs/about.md, "How the examples run").
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results"

# What a fenced block may be: Python (run by Sybil), shell commands and program output (shown only), or
# a MyST directive of the pages (toctree, the API reference's eval-rst, the benchmark tables).
SHOWN_ONLY = {"bash", "text"}
DIRECTIVES = {"{toctree}", "{eval-rst}", "{bench-results}", "{bench-results-summary}"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*(?:[-*+][ \t]+|\d+[.)][ \t]+)?)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")


def doc_files() -> list[Path]:
    return [README] + sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def fences(path: Path) -> list[tuple[int, str]]:
    """(line, info string) of every fenced block of a Markdown file."""
    found, opened = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _FENCE.match(line)
        if not match:
            continue
        fence, info = match.group("fence"), match.group("info").strip()
        if opened is None:
            opened = fence
            found.append((number, info))
        elif fence[0] == opened[0] and len(fence) >= len(opened) and not info:
            opened = None
    return found


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_docs_build_strict(tmp_path):
    """The site builds with every warning an error (-W --keep-going) and every reference checked (-n):
    a broken link, a heading anchor that does not exist, an object autodoc cannot find, a docstring
    napoleon cannot read or a benchmark report without its machine or date fails it."""
    for module, package in (("sphinx", "sphinx"), ("myst_parser", "myst-parser")):
        try:
            importlib.import_module(module)
        except ImportError:
            pytest.skip(
                f"{package} is not installed: pip install --no-build-isolation '.[docs]' to build the documentation"
            )
    command = [
        sys.executable,
        "-m",
        "sphinx",
        "-W",
        "--keep-going",
        "-n",
        "-E",
        "-q",
        "-b",
        "html",
        "-d",
        str(tmp_path / "doctrees"),
        str(DOCS),
        str(tmp_path / "html"),
    ]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout}\n{run.stderr}"
    assert (tmp_path / "html" / "reference" / "api.html").is_file()
    benchmarks = (tmp_path / "html" / "benchmarks.html").read_text(encoding="utf-8")
    for report in sorted(RESULTS.glob("*.md")):  # every report's table is on the page
        assert f"bench/results/{report.name}" in benchmarks, report.name
    # Every report with a time or rate column gets its charts, drawn from its numbers at build time.
    charted = {p.stem.rsplit("-", 1)[0] for p in (tmp_path / "html" / "_images").glob("*.png")}
    for name in ("cpu-crop", "cpu-batch", "gpu-h100"):
        assert name in charted and f"_images/{name}-1.png" in benchmarks, (name, sorted(charted))


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_every_code_block_is_python_shell_or_output(path):
    """A block is either Python, which runs, or marked as shell commands or output, which do not: an
    unmarked block (or a typo in its language) would silently escape the tests."""
    for line, info in fences(path):
        language = info.split()[0] if info else ""
        assert language == "python" or language in SHOWN_ONLY or language in DIRECTIVES, (
            f"{rel(path)}:{line}: a code block marked {info!r}; mark it python (run by the tests), "
            f"bash (shell commands) or text (output)"
        )


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line, source) of each Python block of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, info in fences(path):
        if info.split()[:1] == ["python"]:
            body = []
            for line in lines[number:]:
                if _FENCE.match(line) and not _FENCE.match(line).group("info").strip():
                    break
                body.append(line)
            blocks.append((number, "\n".join(body)))
    return blocks


def _names(tree: ast.AST) -> tuple[set, set]:
    """(names bound anywhere in the tree, names read anywhere in it)."""
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_every_name_is_defined_on_the_page(path):
    """Each name a block reads is a builtin or bound by this block or an earlier one of the same page
    (the blocks of a page share one namespace). Checked without running them, so that the blocks that
    skip here (CUDA) are held to it too."""
    bound = set(dir(builtins))
    for line, source in python_blocks(path):
        block_bound, read = _names(ast.parse(source))
        bound |= block_bound
        missing = sorted(read - bound)
        assert not missing, f"{rel(path)}:{line}: the block reads {missing}, which no block of the page defines"


def _sybil():
    try:
        import sybil  # noqa: F401
    except ImportError:
        pytest.skip(
            "Sybil is not installed: pip install --no-build-isolation '.[docs]' to run the documentation's examples"
        )
    spec = importlib.util.spec_from_file_location("_custom_op_docs_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SYBIL


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_sybil_runs_every_python_block(path):
    """Sybil collects each of the page's Python blocks (none is missed by its parser)."""
    sybil = _sybil()
    assert sybil.should_parse(path), f"{rel(path)} is not among the files conftest.py gives Sybil"
    document = sybil.parse(path)
    python_blocks = [line for line, info in fences(path) if info.split()[:1] == ["python"]]
    collected = [e for e in document.examples() if e.parsed is not None and isinstance(e.parsed, str)]
    assert len(collected) == len(python_blocks), (rel(path), len(collected), python_blocks)


def test_testpaths_run_the_examples():
    """CI's plain `python -m pytest` collects the README and the pages, and the test extra installs
    the docs tools, so the build and the examples run there rather than skip."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    testpaths = re.search(r"^testpaths = \[(.*)\]$", text, re.MULTILINE).group(1)
    assert '"README.md"' in testpaths and '"docs"' in testpaths
    test_extra = re.search(r"^test = \[(.*)\]$", text, re.MULTILINE).group(1)
    for package in ("sphinx", "myst-parser", "sybil"):
        assert f'"{package}' in test_extra, package


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_links_lead_to_files():
    """The README is not part of the Sphinx build, so its own links are checked here."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    for target in targets:
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        assert (ROOT / target.split("#")[0]).exists(), f"README.md links to {target}, which does not exist"


def test_readme_results_come_from_bench_results():
    """Each number of the README's results table is in the bench/results file its row names."""
    lines = README.read_text(encoding="utf-8").split("## Results", 1)[1].splitlines()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
    header, body = rows[0], rows[2:]
    assert header[-1] == "results file" and body
    for row in body:
        source = RESULTS / row[-1].strip("`")
        assert source.is_file(), row
        text = source.read_text(encoding="utf-8")
        for cell in (row[header.index("baseline")], row[header.index("custom_op")], row[header.index("speed-up")]):
            number = cell.removesuffix(" ms")
            assert number in text, f"README's {cell!r} ({row[0]}) is not in {rel(source)}"
