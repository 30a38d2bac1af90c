"""Sphinx extension: the benchmark page's tables and charts, from bench/results/*.json at build time.

Each benchmark script writes its report with bench/common.py's ``Report`` (rewritten by its next run):
bench/results/<name>.md to read, and <name>.json beside it, the same report as data: its title, where
and when it was measured (``date``, ``command``, ``machine``, ``commit``), further ``details``
(versions, what each figure is, ...) and its ``body``, a list of blocks (headings, paragraphs, lists,
code, and tables as columns and rows, with the number each cell starts with). A page includes the
reports with two blocks, which this extension replaces by generated Markdown before the page is parsed
(Sphinx's ``source-read`` event), so that the pages never hold a copied number:

``{bench-results} NAME.json``
    One report as a section of the page: its title, a table of where and when it was measured
    (machine, date, commit, command, then the details), then its body, headings below the title. A
    report without its date, command, machine or commit, or whose data does not have the shape above,
    is a build warning (an error in the strict build).

``{bench-results-summary}``
    A table of every report: benchmark, machine, date, commit, each linking to its section.

Every JSON file in bench/results/ must appear on a page through ``{bench-results}``, and every
Markdown report there must have its JSON file beside it: either missing is a build warning, so that a
new benchmark cannot be left out and a report assembled by hand cannot stand in for a script's.

Charts: under every table whose columns include a time or a rate (``ms/image``, ``images/s``), a
horizontal bar chart of that column, drawn at build time with matplotlib from the table's numbers into
docs/_generated/ (not kept in git), so that the figures and the bars cannot disagree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
CHARTS = ROOT / "docs" / "_generated"  # relative to the benchmarks page: _generated/<name>.png
# The column a chart shows: the first whose title names a time per image or a rate.
_CHART_COLUMN = re.compile(r"ms/image|images/s")
# Where and when: every report has them, shown first, in this order; its details follow.
REQUIRED = ("machine", "date", "commit", "command")
BLOCKS = {"heading": ("level", "text"), "text": ("text",), "items": ("items",), "code": ("text",), "table": ()}
_DIRECTIVE = re.compile(r"^```\{(bench-results|bench-results-summary)\}[ \t]*(\S*)[ \t]*\n```[ \t]*$", re.MULTILINE)


def load(path: Path) -> dict:
    """A report's data, checked for the shape the page needs; ValueError naming the file otherwise."""
    rel = path.relative_to(ROOT).as_posix()
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{rel} is not JSON: {e}") from e
    if not isinstance(report, dict) or not isinstance(report.get("title"), str):
        raise ValueError(f"{rel} has no title")
    for key in REQUIRED:
        if not isinstance(report.get(key), str) or not report[key].strip():
            raise ValueError(f"{rel} does not say its {key}")
    if not isinstance(report.get("details", {}), dict) or not isinstance(report.get("body"), list):
        raise ValueError(f"{rel}: 'details' must be an object and 'body' a list of blocks")
    for n, block in enumerate(report["body"]):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCKS or any(key not in block for key in BLOCKS[kind]):
            raise ValueError(f"{rel}: body block {n} is not one of {sorted(BLOCKS)} with its fields: {block!r}")
        if kind == "table":
            columns, rows, numbers = block.get("columns"), block.get("rows"), block.get("numbers")
            if not columns or not isinstance(rows, list) or not isinstance(numbers, list) or len(numbers) != len(rows):
                raise ValueError(f"{rel}: table {n} needs columns, and rows with their numbers")
            for row, values in zip(rows, numbers):
                if len(row) != len(columns) or len(values) != len(columns):
                    raise ValueError(f"{rel}: table {n} has a row of {len(row)} cells for {len(columns)} columns")
    return report


def label(path: Path) -> str:
    return "bench-" + path.stem.replace("_", "-").lower()


def md_cell(text: str) -> str:
    return str(text).replace("|", "\\|")


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


def table_text(block: dict, chart_name: str) -> list[str]:
    """A table as MyST Markdown, with the chart of its time or rate column when it has one."""
    align = block.get("align") or ["left"] * len(block["columns"])
    lines = [
        "| " + " | ".join(md_cell(c) for c in block["columns"]) + " |",
        "| " + " | ".join("---:" if a == "right" else "---" for a in align) + " |",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in block["rows"]]
    lines.append("")
    column = next((j for j, title in enumerate(block["columns"]) if _CHART_COLUMN.search(title)), None)
    if column is None:
        return lines
    points = [(row[0].replace("`", ""), values[column]) for row, values in zip(block["rows"], block["numbers"])]
    points = [(name, value) for name, value in points if isinstance(value, (int, float))]
    if len(points) >= 2:
        title = block["columns"][column]
        path = chart(chart_name, title, [p[0] for p in points], [float(p[1]) for p in points])
        if path:
            lines += [f"![{title}, the table above as bars]({path})", ""]
    return lines


def body_text(body: list[dict], level: int, stem: str) -> list[str]:
    """The report's blocks as MyST Markdown, its shallowest heading at ``level``."""
    depths = [block["level"] for block in body if block["type"] == "heading"]
    offset = level - min(depths) if depths else 0
    out: list[str] = []
    tables = 0
    for block in body:
        kind = block["type"]
        if kind == "heading":
            out += ["#" * min(6, block["level"] + offset) + " " + block["text"], ""]
        elif kind == "text":
            out += [block["text"], ""]
        elif kind == "items":
            out += [f"- {item}" for item in block["items"]] + [""]
        elif kind == "code":
            out += [f"```{block.get('language') or 'text'}", block["text"], "```", ""]
        else:
            tables += 1
            out += table_text(block, f"{stem}-{tables}")
    return out


def report_text(path: Path) -> list[str]:
    """One report as MyST text: a labelled ``##`` section, its header table, its body."""
    report = load(path)
    rel = path.relative_to(ROOT).as_posix()
    text = [f"({label(path)})=", "## " + report["title"], "", "| | |", "| --- | --- |"]
    markdown = path.with_suffix(".md")
    if markdown.is_file():
        text.append(f"| report | `{markdown.relative_to(ROOT).as_posix()}` |")
    text.append(f"| data | `{rel}` |")
    header = {key: report[key] for key in REQUIRED}
    header["command"] = f"`{header['command']}`"
    header.update(report.get("details", {}))
    text += [f"| {md_cell(k)} | {md_cell(v)} |" for k, v in header.items()]
    text.append("")
    text += body_text(report["body"], 3, path.stem.replace("_", "-"))
    return text


def summary_text() -> list[str]:
    rows = ["| benchmark | machine | date | commit |", "| --- | --- | --- | --- |"]
    for path in sorted(RESULTS.glob("*.json")):
        report = load(path)
        title = md_cell(report["title"].replace("`", ""))
        commit = report["commit"].split(" (")[0]
        rows.append(
            f"| {{ref}}`{title} <{label(path)}>` | {md_cell(report['machine'])} | "
            f"{report['date'].split('T')[0]} | {md_cell(commit)} |"
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
                for path in RESULTS.glob("*.json"):
                    env.note_dependency(str(path))
                return "\n".join(summary_text())
            path = RESULTS / argument
            if not argument.endswith(".json") or not path.is_file():
                logger.warning(
                    "bench-results: no file bench/results/%s (name a .json file)", argument, location=docname
                )
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
    for path in sorted(RESULTS.glob("*.json")):
        if path.name not in used:
            logger.warning(
                "bench-results: %s is on no page (add a {bench-results} directive for it)", path.relative_to(ROOT)
            )
    for path in sorted(RESULTS.glob("*.md")):
        if not path.with_suffix(".json").is_file():
            logger.warning(
                "bench-results: %s has no %s beside it (write the report with its script: bench/common.py's Report)",
                path.relative_to(ROOT),
                path.with_suffix(".json").name,
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
    return {"version": "2", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 2}
