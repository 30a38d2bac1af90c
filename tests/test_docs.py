"""The documentation: the strict Sphinx build, and checks on the README's and the pages' code blocks.

The examples themselves run as tests of their own: conftest.py at the root hands README.md and
docs/**/*.md to Sybil, and pyproject.toml's testpaths name them (docs/about.md, "How the examples run").
"""

from __future__ import annotations

import ast
import builtins
import html
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import unittest
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
    # Every report has its data beside it, and the page shows each report from its data.
    assert sorted(p.stem for p in RESULTS.glob("*.md")) == sorted(p.stem for p in RESULTS.glob("*.json"))
    for data in sorted(RESULTS.glob("*.json")):
        assert f"bench/results/{data.name}" in benchmarks, data.name
        report = json.loads(data.read_text(encoding="utf-8"))
        assert report["commit"] in benchmarks, data.name
        for block in report["body"]:
            for row in block.get("rows", []):
                assert html.escape(row[-1], quote=False) in benchmarks, (data.name, row)
    # Every report with a time or rate column gets its charts, drawn from its numbers at build time.
    charted = {p.stem.rsplit("-", 1)[0] for p in (tmp_path / "html" / "_images").glob("*.png")}
    for name in ("cpu-crop", "cpu-batch", "gpu-h100"):
        assert name in charted and f"_images/{name}-1.png" in benchmarks, (name, sorted(charted))


def _bench_results_extension(monkeypatch, tmp_path):
    """docs/_ext/bench_results.py, reading its reports from tmp_path/bench/results/ instead of the checkout's."""
    pytest.importorskip("sphinx", reason="pip install --no-build-isolation '.[docs]' to build the documentation")
    spec = importlib.util.spec_from_file_location("_custom_op_bench_results", DOCS / "_ext" / "bench_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "bench" / "results")
    monkeypatch.setattr(module, "CHARTS", tmp_path / "charts")
    module.RESULTS.mkdir(parents=True)
    return module


def _a_report() -> dict:
    return {
        "title": "A benchmark",
        "date": "2026-01-02T03:04:05+00:00",
        "command": "python bench/a.py --out bench/results/a.md",
        "machine": "a test machine",
        "commit": "0123abcd",
        "details": {"versions": "Python 3"},
        "body": [
            {"type": "heading", "level": 2, "text": "Case one"},
            {
                "type": "table",
                "columns": ["method", "ms/image", "speed-up"],
                "align": ["left", "right", "right"],
                "rows": [["ours", "0.427 (0.434)", "2.75x"], ["Pillow", "1.175 (1.202)", "1.00x"]],
                "numbers": [[None, 0.427, 2.75], [None, 1.175, 1.0]],
            },
        ],
    }


def test_the_benchmarks_page_is_generated_from_the_json_files(monkeypatch, tmp_path):
    """A report's section, its table and its chart come from its JSON file (bench/common.py's Report
    writes it beside the Markdown report): no Markdown report is read."""
    ext = _bench_results_extension(monkeypatch, tmp_path)
    data = ext.RESULTS / "a.json"
    data.write_text(json.dumps(_a_report()))
    text = "\n".join(ext.report_text(data))
    assert text.startswith("(bench-a)=\n## A benchmark\n")
    for line in (
        "| data | `bench/results/a.json` |",
        "| machine | a test machine |",
        "| commit | 0123abcd |",
        "| command | `python bench/a.py --out bench/results/a.md` |",
        "| versions | Python 3 |",
        "### Case one",  # the report's headings below its title
        "| method | ms/image | speed-up |\n| --- | ---: | ---: |\n| ours | 0.427 (0.434) | 2.75x |",
    ):
        assert line in text, line
    assert "| report |" not in text  # there is no Markdown report to name
    pytest.importorskip("matplotlib", reason="the charts need matplotlib")
    assert "![ms/image, the table above as bars](_generated/a-1.png)" in text
    assert (ext.CHARTS / "a-1.png").stat().st_size > 0
    summary = "\n".join(ext.summary_text())
    assert "| {ref}`A benchmark <bench-a>` | a test machine | 2026-01-02 | 0123abcd |" in summary


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("commit"), "does not say its commit"),
        (lambda r: r.update(machine=""), "does not say its machine"),
        (lambda r: r["body"].append({"type": "chart"}), "body block 2"),
        (lambda r: r["body"][1]["rows"][0].pop(), "a row of 2 cells for 3 columns"),
    ],
)
def test_a_report_without_its_facts_or_shape_is_refused(monkeypatch, tmp_path, change, message):
    """What the strict build turns into an error: a report that does not say where and when it was
    measured, or whose data is not blocks and tables of rows."""
    ext = _bench_results_extension(monkeypatch, tmp_path)
    report = _a_report()
    change(report)
    (ext.RESULTS / "a.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=message):
        ext.load(ext.RESULTS / "a.json")


def test_a_markdown_report_without_its_json_file_is_a_warning(monkeypatch, tmp_path):
    ext = _bench_results_extension(monkeypatch, tmp_path)
    (ext.RESULTS / "a.json").write_text(json.dumps(_a_report()))
    (ext.RESULTS / "a.md").write_text("# A benchmark\n")
    (ext.RESULTS / "by_hand.md").write_text("# A report assembled by hand\n")
    warnings = []
    monkeypatch.setattr(ext.logger, "warning", lambda message, *args, **kw: warnings.append(message % args))
    env = type("Env", (), {"bench_results_used": {"a.json": "benchmarks"}})()
    ext.check_all_used(None, env)
    assert warnings == [
        "bench-results: bench/results/by_hand.md has no by_hand.json beside it (write the report with its "
        "script: bench/common.py's Report)"
    ]
    env.bench_results_used = {}
    warnings.clear()
    ext.check_all_used(None, env)
    assert warnings[0].startswith("bench-results: bench/results/a.json is on no page")


def _cli_tables():
    """docs/cli_tables.py, which writes the command-line reference's option table from the parser."""
    spec = importlib.util.spec_from_file_location("_custom_op_cli_tables", DOCS / "cli_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_option_table_is_the_parsers():
    """docs/reference/cli.md's table of prepare's options is what docs/cli_tables.py writes from the parser,
    so a default cannot differ from --help's and the code's (the page once said 2048 where they said 400)."""
    from custom_op.prepare import DEFAULT_MAX_GROWTH, DEFAULT_MAX_SEGMENT_BYTES

    cli = _cli_tables()
    parser = cli.prepare_parser()
    text = cli.PAGE.read_text(encoding="utf-8")
    assert cli.page_text(text, parser) == text, f"{rel(cli.PAGE)} differs from the parser: python docs/cli_tables.py"
    defaults = {option: default for option, default, _ in cli.option_rows(parser)}
    assert defaults["`--max-segment-bytes N`"] == str(DEFAULT_MAX_SEGMENT_BYTES)
    assert defaults["`--max-growth F`"] == str(DEFAULT_MAX_GROWTH)
    assert defaults["`--keep-exif` / `--no-keep-exif`"] == "yes" and defaults["`--verify`"] == "off"
    assert f"(default: {DEFAULT_MAX_SEGMENT_BYTES})" in " ".join(parser.format_help().split())


def test_a_help_text_whose_default_is_not_the_parsers_is_refused():
    import argparse

    cli = _cli_tables()
    parser = argparse.ArgumentParser()
    parser.add_argument("--bound", type=int, default=400, metavar="N", help="a bound (default: 2048)")
    with pytest.raises(ValueError, match="--bound: the help says the default is '2048', the parser's is '400'"):
        cli.option_rows(parser)
    parser = argparse.ArgumentParser()
    parser.add_argument("--bound", type=int, default=400, metavar="N", help="a bound; 0: none (default: %(default)s)")
    parser.add_argument("--fast", action=argparse.BooleanOptionalAction, default=False, help="go fast")
    assert cli.table(parser).splitlines()[2:] == [
        "| `--bound N` | 400 | a bound; 0: none |",
        "| `--fast` / `--no-fast` | no | go fast |",
    ]


def test_the_pages_state_the_segment_bound_the_code_has():
    """The prose that quotes prepare_jpeg's default bound on a segment's bytes quotes the code's."""
    from custom_op.prepare import DEFAULT_MAX_SEGMENT_BYTES as bound

    assert f"at most {bound} by default" in " ".join(README.read_text(encoding="utf-8").split())
    guide = " ".join((DOCS / "guides" / "random-access.md").read_text(encoding="utf-8").split())
    assert f"never more than {bound} by default" in guide and f"`max_segment_bytes` ({bound})" in guide


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


def _docs_conftest():
    """The root conftest.py, which hands the pages to Sybil and writes the files their examples read."""
    try:
        import sybil  # noqa: F401
    except ImportError:
        pytest.skip(
            "Sybil is not installed: pip install --no-build-isolation '.[docs]' to run the documentation's examples"
        )
    spec = importlib.util.spec_from_file_location("_custom_op_docs_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sybil():
    return _docs_conftest().SYBIL


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_sybil_runs_every_python_block(path):
    """Sybil collects each of the page's Python blocks (none is missed by its parser)."""
    sybil = _sybil()
    assert sybil.should_parse(path), f"{rel(path)} is not among the files conftest.py gives Sybil"
    document = sybil.parse(path)
    python_blocks = [line for line, info in fences(path) if info.split()[:1] == ["python"]]
    collected = [e for e in document.examples() if e.parsed is not None and isinstance(e.parsed, str)]
    assert len(collected) == len(python_blocks), (rel(path), len(collected), python_blocks)


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_the_examples_list_jpegs_by_any_case_of_their_suffix(path):
    """glob("photos/*.jpg") finds nothing in an ImageNet folder, whose files end in .JPEG (and the empty
    batch then failed far from it): the examples match the suffix in any case. The example photos
    include .JPEG names, so that an example that did not would fall short of them."""
    for line, source in python_blocks(path):
        assert not re.search(r"glob\([^)]*\*\.jpe?g", source, re.IGNORECASE), (
            f"{rel(path)}:{line}: a glob of one case of the JPEG suffix; list the files whose suffix is .jpg or "
            ".jpeg in any case (p.suffix.lower() in ('.jpg', '.jpeg'))"
        )


def pages_reading_photo_jpg() -> list[Path]:
    return [p for p in doc_files() if '"photo.jpg"' in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("height, width", [(333, 500), (500, 333), (150, 200)], ids=lambda n: str(n))
@pytest.mark.parametrize("path", pages_reading_photo_jpg(), ids=rel)
def test_the_examples_run_on_a_photo_of_any_size(path, height, width, tmp_path, monkeypatch):
    """The examples that open photo.jpg run on the reader's photo, whatever its size: here a 500x333 and a
    333x500 photo (a window placed for the examples' own 500x375 one did not fit) and one smaller than
    224 pixels on a side. They run as Sybil runs them, but with this photo.jpg."""
    conftest = _docs_conftest()
    conftest.write_example_files(tmp_path, photo_size=(height, width))
    monkeypatch.chdir(tmp_path)
    ran = 0
    for example in conftest.SYBIL.parse(path).examples():
        try:
            example.evaluate()
        except unittest.SkipTest:
            continue
        ran += isinstance(example.parsed, str)
    assert ran, f"no example of {rel(path)} ran"


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


def test_the_readme_says_what_the_main_job_leaves_on_disk(monkeypatch, tmp_path):
    """The Quick start's main job generates its data set under ~/.cache: the README says where, what moves
    it, how large it is (estimated here from 8 of its images, made as the job makes them) and how to
    remove it."""
    from datasets import synthetic
    from profiling.cli import build_parser

    text = " ".join(README.read_text(encoding="utf-8").split())
    defaults = build_parser().parse_args([])
    (height, width), count = defaults.image_size, defaults.num_images
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("CUSTOM_OP_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert synthetic.default_cache_dir() == tmp_path / ".cache" / "custom_op" / "datasets"
    assert "into `~/.cache/custom_op/datasets/`" in text and "rm -rf ~/.cache/custom_op/datasets" in text
    for var in ("CUSTOM_OP_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
        assert synthetic.default_cache_dir() == tmp_path / var / "custom_op" / "datasets" and f"`${var}`" in text
        monkeypatch.delenv(var)
    said = re.search(rf"{count} photo-like JPEGs of {width}x{height} pixels \((\d+\.\d) MB\)", text)
    assert said, f"the README does not say how many JPEGs of {width}x{height} the main job writes, and their size"
    sample = range(0, count, count // 8)
    photos = (synthetic.photo_like(height, width, synthetic._image_seed(0, i)) for i in sample)
    sizes = [len(synthetic.encode_jpeg(pixels)) for pixels in photos]
    estimate = sum(sizes) / len(sizes) * count / 1e6
    assert abs(estimate - float(said[1])) < 0.1 * float(said[1]), (estimate, said[0])
    guide = " ".join((DOCS / "guides" / "profiling.md").read_text(encoding="utf-8").split())
    assert f"reused: {said[1]} MB, which `rm -rf ~/.cache/custom_op/datasets` removes" in guide


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
