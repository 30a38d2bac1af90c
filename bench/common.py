"""What the benchmark scripts share: the same random windows for every method, the machine and commit
lines of a report, the writer of the reports (:class:`Report`: bench/results/<name>.md and
<name>.json), and the restart segments of a JPEG. Imported as `common` by the scripts in this folder
(their own folder is on sys.path)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def random_windows(files, size, seed):
    """One size x size window per file (clipped to the image), placed uniformly, reproducible."""
    import custom_op

    rng = np.random.default_rng(seed)
    out = []
    for data in files:
        info = custom_op.read_jpeg_header(data)
        h, w = min(size, info.height), min(size, info.width)
        out.append((int(rng.integers(0, info.height - h + 1)), int(rng.integers(0, info.width - w + 1)), h, w))
    return out


def window_batches(files: list[bytes], windows, batch: int, count: int, memory: str = "ordinary"):
    """`count` batches of `batch` files in turn through `files` (wrapping round), each (the files as
    uint8 tensors, [tops, lefts, heights, widths] of their `windows`), as the batched decode takes
    them; memory "pinned" puts the tensors in page-locked memory (Tensor.pin_memory())."""
    import torch

    tensors = [torch.frombuffer(bytearray(data), dtype=torch.uint8) for data in files]
    if memory == "pinned":
        tensors = [t.pin_memory() for t in tensors]
    out = []
    for k in range(count):
        picked = [(k * batch + j) % len(tensors) for j in range(batch)]
        lists = [list(x) for x in zip(*(windows[i] for i in picked))]
        out.append(([tensors[i] for i in picked], lists))
    return out


def spaced_photos(folder, count: int) -> list[tuple[str, bytes]]:
    """(name, file) of `count` photos: every k-th file of `folder` in name order, so that every run (of
    any checkout) measures the same ones; photo-like images generated alike each time where `folder`
    is not a directory."""
    path = Path(folder)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file())
        step = max(1, len(files) // count)
        return [(p.name, p.read_bytes()) for p in files[::step][:count]]
    import io

    from PIL import Image

    if str(ROOT / "tests") not in sys.path:  # (the test suite's JPEG helpers)
        sys.path.append(str(ROOT / "tests"))
    from jpeg_factory import photo_like

    out = []
    for k in range(count):
        height, width = (375, 500) if k % 2 == 0 else (500, 375)
        buf = io.BytesIO()
        Image.fromarray(photo_like(height, width, seed=k)).save(buf, "JPEG", quality=90, subsampling=k % 3)
        out.append((f"generated-{k}", buf.getvalue()))
    return out


def cpu_description():
    """The CPU model, the logical core count and the OS, for the results files."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}"


def short_commit(root, revision: str) -> str:
    """The 12-digit commit of `revision` in the repository at `root`; subprocess.CalledProcessError where
    it names none (OSError without git)."""
    import subprocess

    return subprocess.run(
        ["git", "rev-parse", "--short=12", "--verify", f"{revision}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def commit_description(root) -> str:
    """The checkout's commit, marked "+ local changes" when the working tree differs from it."""
    import subprocess

    try:
        head = short_commit(root, "HEAD")
        # The reports being rewritten in bench/results/ do not make the code differ from the commit.
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" + local changes" if dirty else "")


_SOS, _DRI, _SOFS = 0xDA, 0xDD, (0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA, 0xCB)


def scan_facts(data: bytes) -> tuple[int, int, list[int]]:
    """(restart interval, MCUs per row, the length of every segment of the first scan) of a JPEG. A
    segment's length is the bytes of entropy-coded data between two markers (the SOS segment or a
    restart marker, and the next marker; stuffed zero bytes count)."""
    pos, interval, per_row = 2, 0, 0
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker == _DRI:
            interval = int.from_bytes(data[pos + 4 : pos + 6], "big")
        elif marker in _SOFS:
            width, components = int.from_bytes(data[pos + 7 : pos + 9], "big"), data[pos + 9]
            max_h = max(data[pos + 11 + 3 * i] >> 4 for i in range(components))
            per_row = -(-width // (8 * (1 if components == 1 else max_h)))
        pos += 2 + length
        if marker == _SOS:
            break
    lengths, begin = [], pos
    while True:
        ff = data.find(b"\xff", pos)
        if ff < 0 or ff + 1 >= len(data):
            raise ValueError("the scan has no end marker")
        code = data[ff + 1]
        if code == 0x00:
            pos = ff + 2
            continue
        if code == 0xFF:
            pos = ff + 1
            continue
        lengths.append(ff - begin)
        if not 0xD0 <= code <= 0xD7:
            return interval, per_row, lengths
        begin = pos = ff + 2


# ---------------------------------------------------------------------------------------------------
# The report: one writer for every script, the Markdown file for reading and the JSON file for the docs

_NUMBER = re.compile(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
_ALIGN = {"l": "---", "r": "---:"}


def leading_number(cell: str) -> Optional[float]:
    """The number a table cell starts with ("0.463 (0.471)" -> 0.463, "13,521" -> 13521, "2.75x" -> 2.75),
    or None ("-", "default", "inf (all identical)")."""
    match = _NUMBER.match(cell)
    if not match:
        return None
    value = float(match.group(1).replace(",", ""))
    return int(value) if value.is_integer() else value


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table_cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


class Report:
    """A benchmark's report, written as bench/results/<name>.md (for reading) and <name>.json (for the
    documentation's benchmarks page and any other program) by :meth:`write`.

    The header is the title, where and when it was measured (``date``, ``command``, ``machine``,
    ``commit``: filled in from this run unless given) and further ``details`` (``versions``, ``each
    figure``, ...). The body is a list of blocks, added in order: :meth:`heading`, :meth:`text`,
    :meth:`items` (a bullet list), :meth:`table`, :meth:`code`, or :meth:`markdown` for Markdown lines
    built elsewhere. With ``echo`` each part is printed as it is added, so that a long run shows its
    progress. The JSON file holds the same::

        {"title": ..., "date": ..., "command": ..., "machine": ..., "commit": ...,
         "details": {"versions": ..., ...},
         "body": [{"type": "heading", "level": 2, "text": ...},
                  {"type": "text", "text": ...},
                  {"type": "items", "items": [...]},
                  {"type": "table", "columns": [...], "align": ["left", "right", ...],
                   "rows": [[cell, ...], ...], "numbers": [[number or null, ...], ...]},
                  {"type": "code", "language": "text", "text": ...}]}

    A table's cells are the text shown (``"0.463 (0.471)"``); ``numbers`` gives the number each cell
    starts with (:func:`leading_number`), null where it starts with none.
    """

    def __init__(
        self,
        title: str,
        *,
        machine: str,
        details: Optional[dict] = None,
        command: Optional[str] = None,
        commit: Optional[str] = None,
        date: Optional[str] = None,
        echo: bool = True,
    ):
        self.title = title
        self.date = date or datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        self.command = command or "python " + shlex.join(
            [os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]
        )
        self.machine = machine
        self.commit = commit or commit_description(ROOT)
        self.details = {k: str(v) for k, v in (details or {}).items()}
        self.body: list[dict] = []
        self.echo = echo
        self._say(self._header_lines())

    # -- the body

    def heading(self, text: str, level: int = 2) -> None:
        self._add({"type": "heading", "level": level, "text": text})

    def text(self, text: str) -> None:
        self._add({"type": "text", "text": text})

    def items(self, items) -> None:
        self._add({"type": "items", "items": [str(i) for i in items]})

    def table(self, columns, rows, align: Optional[str] = None) -> None:
        """A table; ``align`` has one letter per column, ``l`` or ``r`` (default: the first column
        left, the others right)."""
        columns = [str(c) for c in columns]
        align = align or "l" + "r" * (len(columns) - 1)
        if len(align) != len(columns) or set(align) - set(_ALIGN):
            raise ValueError(f"align {align!r} does not give 'l' or 'r' for each of the {len(columns)} columns")
        rows = [[str(c) for c in row] for row in rows]
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(f"a row of {len(row)} cells in a table of {len(columns)} columns: {row}")
        self._add(
            {
                "type": "table",
                "columns": columns,
                "align": ["left" if a == "l" else "right" for a in align],
                "rows": rows,
                "numbers": [[leading_number(c) for c in row] for row in rows],
            }
        )

    def code(self, text: str, language: str = "text") -> None:
        self._add({"type": "code", "language": language, "text": text.rstrip("\n")})

    def markdown(self, lines) -> None:
        """Markdown lines (as a script that builds its report as text has them) added as blocks: ``#``
        headings, ``|`` tables, ``- `` lists (continued by indented lines), fenced code, paragraphs."""
        echo, self.echo = self.echo, False
        try:
            self._parse(list(lines))
        finally:
            self.echo = echo
        self._say(list(lines))

    # -- the files

    def to_json(self) -> dict:
        return {
            "title": self.title,
            "date": self.date,
            "command": self.command,
            "machine": self.machine,
            "commit": self.commit,
            "details": dict(self.details),
            "body": list(self.body),
        }

    def to_markdown(self) -> str:
        lines = self._header_lines()
        for block in self.body:
            lines += block_markdown(block)
        return "\n".join(lines).rstrip("\n") + "\n"

    def write(self, out) -> tuple[Path, Path]:
        """Writes ``out`` (the Markdown report, a .md path) and the JSON file beside it; returns both."""
        md = Path(out)
        if md.suffix != ".md":
            raise ValueError(f"{out}: the report's name must end in .md (its JSON file is written beside it)")
        data = md.with_suffix(".json")
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(self.to_markdown(), encoding="utf-8")
        data.write_text(json_text(self.to_json()) + "\n", encoding="utf-8")
        if self.echo:
            print(f"wrote {md} and {data}", flush=True)
        return md, data

    # -- inside

    def _header_lines(self) -> list[str]:
        header = {"date": self.date, "command": f"`{self.command}`", "machine": self.machine, "commit": self.commit}
        return [f"# {self.title}", ""] + [f"- {k}: {v}" for k, v in {**header, **self.details}.items()] + [""]

    def _add(self, block: dict) -> None:
        self.body.append(block)
        self._say(block_markdown(block))

    def _say(self, lines: list[str]) -> None:
        if self.echo:
            print("\n".join(lines), flush=True)

    def _parse(self, lines: list[str]) -> None:
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if not stripped:
                i += 1
            elif stripped.startswith(("```", "~~~")):
                fence, language = stripped[:3], stripped[3:].strip() or "text"
                end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)), len(lines))
                self.code("\n".join(lines[i + 1 : end]), language)
                i = end + 1
            elif re.match(r"#{1,6} ", stripped):
                marks = stripped.split(" ", 1)[0]
                self.heading(stripped[len(marks) :].strip(), len(marks))
                i += 1
            elif stripped.startswith("|"):
                end = i
                while end < len(lines) and lines[end].strip().startswith("|"):
                    end += 1
                rule = _table_cells(lines[i + 1]) if i + 1 < end else []
                if not rule or any(not re.fullmatch(r":?-+:?", c) for c in rule):
                    raise ValueError(f"a table without its |---| line: {line!r}")
                columns = _table_cells(line)
                # A short row (a case that failed, say) has its last cells empty, as Markdown shows it.
                rows = [_table_cells(row) for row in lines[i + 2 : end]]
                rows = [row[: len(columns)] + [""] * (len(columns) - len(row)) for row in rows]
                self.table(columns, rows, "".join("r" if c.endswith(":") else "l" for c in rule))
                i = end
            elif stripped.startswith("- "):
                items = []
                while i < len(lines) and (lines[i].startswith("- ") or (items and lines[i].startswith("  "))):
                    if lines[i].startswith("- "):
                        items.append(lines[i][2:].strip())
                    else:
                        items[-1] += " " + lines[i].strip()
                    i += 1
                self.items(items)
            else:
                paragraph = []
                while i < len(lines) and lines[i].strip() and not _starts_block(lines[i]):
                    paragraph.append(lines[i].strip())
                    i += 1
                self.text(" ".join(paragraph))


def _starts_block(line: str) -> bool:
    s = line.strip()
    return s.startswith(("```", "~~~", "|", "- ")) or bool(re.match(r"#{1,6} ", s))


def json_text(value, indent: str = "") -> str:
    """JSON indented for reading and diffs: a list of plain values (a table row, a header) on one line."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {json_text(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + json_text(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def block_markdown(block: dict) -> list[str]:
    """One body block of a report as Markdown lines, a blank line after it."""
    kind = block["type"]
    if kind == "heading":
        return ["#" * block["level"] + " " + block["text"], ""]
    if kind == "text":
        return [block["text"], ""]
    if kind == "items":
        return [f"- {item}" for item in block["items"]] + [""]
    if kind == "code":
        return [f"```{block['language']}", block["text"], "```", ""]
    if kind == "table":
        lines = [
            "| " + " | ".join(map(_cell, block["columns"])) + " |",
            "| " + " | ".join(_ALIGN[a[0]] for a in block["align"]) + " |",
        ]
        return lines + ["| " + " | ".join(map(_cell, row)) + " |" for row in block["rows"]] + [""]
    raise ValueError(f"unknown block type {kind!r}")
