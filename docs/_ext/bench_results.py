"""Sphinx extension: the benchmark page's tables, read from bench/results/*.md at build time.

Each benchmark script writes one Markdown report into bench/results/ (rewritten by its next run): a
title, a list of ``- key: value`` lines (date, command, machine, commit, versions, ...) and the
measurements under ``##`` headings. A page includes them with two blocks, which this extension replaces
by generated Markdown before the page is parsed (Sphinx's ``source-read`` event), so that the pages
never hold a copied number:

``{bench-results} FILE``
    One report as a section of the page: its title, a table of where and when it was measured
    (machine, date, commit, command, versions and the other header lines), then its body, headings
    shifted below the title. A report without a ``commit:`` line gets the commit that last changed the
    file in git, named as such. A report without ``date:`` or ``machine:`` is a build warning (an
    error in the strict build).

``{bench-results-summary}``
    A table of every report: benchmark, machine, date, commit, each linking to its section.

Every file in bench/results/ must appear on a page through ``{bench-results}``: one that does not is
a build warning, so a new benchmark cannot be left out.

Charts: under every table of a report whose columns include a time or a rate (``ms/image``,
``images/s``), a horizontal bar chart of that column, drawn at build time with matplotlib from the
table's own numbers into docs/_generated/ (not kept in git), so that the figures and the bars cannot
disagree.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from typing import NamedTuple, Optional

from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
CHARTS = ROOT / "docs" / "_generated"  # relative to the benchmarks page: _generated/<name>.png
# The column a chart shows: the first whose title names a time per image or a rate.
_CHART_COLUMN = re.compile(r"ms/image|images/s")
_NUMBER = re.compile(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
# The header lines shown first in the table, in this order; any others follow as they come.
KEYS_FIRST = ("machine", "date", "commit", "command", "versions")
REQUIRED = ("date", "machine")
_HEADER_LINE = re.compile(r"^- ([A-Za-z][\w ]*?): (.*)$")
_HEADING = re.compile(r"^(#{1,6}) ")


class Report(NamedTuple):
    path: Path
    title: str
    header: dict[str, str]  # key -> value, in the file's order
    body: list[str]  # lines after the header
    body_line: int  # 0-based line of body[0] in the file


def parse(path: Path) -> Report:
    """A report's title, header lines and body."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or not lines[i].startswith("# "):
        raise ValueError(f"{path.name}: the first line must be the report's title ('# ...')")
    title = lines[i][2:].strip()
    i += 1
    header: dict[str, str] = {}
    while i < len(lines) and not lines[i].strip():
        i += 1
    key = None
    while i < len(lines) and lines[i].strip():
        match = _HEADER_LINE.match(lines[i])
        if match:
            key = match.group(1).strip().lower()
            header[key] = match.group(2).strip()
        elif lines[i].startswith("- "):  # a line without a key: a note on the whole report
            key = "notes"
            header[key] = (header[key] + "; " if key in header else "") + lines[i][2:].strip()
        elif key is not None and lines[i].startswith("  "):  # a header line continued
            header[key] += " " + lines[i].strip()
        else:
            break
        i += 1
    return Report(path, title, header, lines[i:], i)


@cache
def git_commit(path: Path) -> Optional[str]:
    """The commit that last changed ``path``, or None (no git, not a checkout, not committed)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def commit_of(report: Report) -> str:
    if report.header.get("commit"):
        return report.header["commit"]
    committed = git_commit(report.path)
    if committed:
        return f"not recorded by the script; the file was last changed in {committed}"
    return "not recorded"


def label(path: Path) -> str:
    return "bench-" + path.stem.replace("_", "-").lower()


def md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def shifted(lines: list[str], level: int) -> list[str]:
    """The body with its headings moved so that the shallowest one is at ``level``; fenced code kept."""
    depths = []
    fence = None
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fence = None if fence and stripped.startswith(fence) else (fence or stripped[:3])
            continue
        if fence is None:
            match = _HEADING.match(line)
            if match:
                depths.append(len(match.group(1)))
    if not depths:
        return list(lines)
    offset = level - min(depths)
    out, fence = [], None
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            fence = None if fence and stripped.startswith(fence) else (fence or stripped[:3])
        elif fence is None:
            match = _HEADING.match(line)
            if match:
                line = "#" * min(6, len(match.group(1)) + offset) + line[len(match.group(1)) :]
        out.append(line)
    return out


_DIRECTIVE = re.compile(r"^```\{(bench-results|bench-results-summary)\}[ \t]*(\S*)[ \t]*\n```[ \t]*$", re.MULTILINE)


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def chart(name: str, title: str, labels: list[str], values: list[float]) -> Optional[str]:
    """A horizontal bar chart as docs/_generated/<name>.png; its path for the page, or None without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    CHARTS.mkdir(exist_ok=True)
    short = [label if len(label) <= 70 else label[:67] + "..." for label in labels]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(values) + 1.0))
    ax.barh(range(len(values)), values, color="tab:blue")
    ax.set_yticks(range(len(values)), short, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(title)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:,.3f}" if v < 100 else f" {v:,.0f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(CHARTS / f"{name}.png", dpi=100)
    plt.close(fig)
    return f"_generated/{name}.png"


def with_charts(lines: list[str], stem: str) -> list[str]:
    """The lines, with a chart after each table that has a time or rate column."""
    out: list[str] = []
    i, k = 0, 0
    while i < len(lines):
        is_table = lines[i].lstrip().startswith("|") and i + 1 < len(lines) and set(lines[i + 1].strip()) <= set("|-: ")
        if not is_table:
            out.append(lines[i])
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].lstrip().startswith("|"):
            i += 1
        table = lines[start:i]
        out += table
        header = cells(table[0])
        column = next((j for j, title in enumerate(header) if _CHART_COLUMN.search(title)), None)
        if column is None:
            continue
        labels, values = [], []
        for row in table[2:]:
            row_cells = cells(row)
            number = _NUMBER.match(row_cells[column]) if column < len(row_cells) else None
            if number:
                labels.append(row_cells[0].replace("`", ""))
                values.append(float(number.group(1).replace(",", "")))
        if len(values) >= 2:
            k += 1
            path = chart(f"{stem}-{k}", header[column], labels, values)
            if path:
                out += ["", f"![{header[column]}, the table above as bars]({path})", ""]
    return out


def report_text(path: Path) -> list[str]:
    """One report as MyST text: a labelled ``##`` section, its header table, its body."""
    report = parse(path)
    rel = path.relative_to(ROOT).as_posix()
    for key in REQUIRED:
        if not report.header.get(key):
            logger.warning("bench-results: %s has no '- %s:' line", rel, key)
    text = [f"({label(path)})=", "## " + report.title, "", "| | |", "| --- | --- |", f"| results file | `{rel}` |"]
    header = dict(report.header, commit=commit_of(report))
    keys = [k for k in KEYS_FIRST if k in header] + [k for k in header if k not in KEYS_FIRST]
    text += [f"| {md_cell(k)} | {md_cell(header[k])} |" for k in keys]
    text.append("")
    text += with_charts(shifted(report.body, 3), path.stem.replace("_", "-"))
    return text


def summary_text() -> list[str]:
    rows = ["| benchmark | machine | date | commit |", "| --- | --- | --- | --- |"]
    for path in sorted(RESULTS.glob("*.md")):
        report = parse(path)
        date = report.header.get("date", "?").split("T")[0]
        commit = (report.header.get("commit") or "not recorded").split(" (")[0]
        title = md_cell(report.title.replace("`", ""))
        rows.append(
            f"| {{ref}}`{title} <{label(path)}>` "
            f"| {md_cell(report.header.get('machine', '?'))} | {date} | {md_cell(commit)} |"
        )
    return rows


def on_source_read(app, docname: str, source: list[str]) -> None:
    """Replaces each ``{bench-results}`` / ``{bench-results-summary}`` block of a page by the text it
    stands for, before the page is parsed (so that the reports' headings are the page's sections)."""
    if "{bench-results" not in source[0]:
        return
    env = app.env
    used = env.bench_results_used = getattr(env, "bench_results_used", {})

    def replace(match: re.Match[str]) -> str:
        directive, argument = match.group(1), match.group(2)
        try:
            if directive == "bench-results-summary":
                for path in RESULTS.glob("*.md"):
                    env.note_dependency(str(path))
                return "\n".join(summary_text())
            path = RESULTS / argument
            if not argument or not path.is_file():
                logger.warning("bench-results: no file bench/results/%s", argument, location=docname)
                return ""
            env.note_dependency(str(path))
            used[path.name] = docname
            return "\n".join(report_text(path))
        except ValueError as e:
            logger.warning("bench-results: %s", e, location=docname)
            return ""

    source[0] = _DIRECTIVE.sub(replace, source[0])


def check_all_used(app, env) -> None:
    used = getattr(env, "bench_results_used", {})
    for path in sorted(RESULTS.glob("*.md")):
        if path.name not in used:
            logger.warning(
                "bench-results: %s is on no page (add a {bench-results} directive for it)", path.relative_to(ROOT)
            )


def purge(app, env, docname) -> None:
    used = getattr(env, "bench_results_used", {})
    for name in [n for n, doc in used.items() if doc == docname]:
        del used[name]


def merge(app, env, docnames, other) -> None:
    env.bench_results_used = getattr(env, "bench_results_used", {})
    env.bench_results_used.update(getattr(other, "bench_results_used", {}))


def setup(app):
    app.connect("source-read", on_source_read)
    app.connect("env-check-consistency", check_all_used)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
