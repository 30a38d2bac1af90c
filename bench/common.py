"""What the benchmark scripts share: their common options, the photos and the same random windows for
every method, the timing of methods in rounds, the machine, versions and commit lines of a report, the
writer of the reports (:class:`Report`: bench/results/<name>.md and <name>.json), and the restart
segments of a JPEG. Imported as `common` by the scripts in this folder (their own folder is on
sys.path)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# The photos the scripts measure by default: the ImageNet sample beside the checkout.
IMAGENET = ROOT.parent / "shared" / "data" / "imagenet-sample"


# ---------------------------------------------------------------------------------------------------
# Options


def add_imagenet_option(parser: argparse.ArgumentParser) -> None:
    """--imagenet DIR, the folder of photos (default: the ImageNet sample beside the checkout)."""
    parser.add_argument("--imagenet", default=str(IMAGENET), help="a folder of JPEG photos (default: %(default)s)")


def add_report_options(parser: argparse.ArgumentParser, commit: bool = True) -> None:
    """--commit (the report's commit line, for a checkout without .git) and --out (the report's file)."""
    if commit:
        parser.add_argument("--commit", help="the commit line of the report, for a checkout without .git")
    parser.add_argument("--out", help="also write the report to this .md file, and its data to the .json beside it")


def add_photo_options(parser: argparse.ArgumentParser, medium: tuple, large: tuple) -> None:
    """The options of the cases photo_cases gives: --imagenet, --n-medium and --n-large (how many generated
    photo-like files of each size; `medium` and `large` are (count, height, width))."""
    add_imagenet_option(parser)
    for option, (count, height, width) in (("--n-medium", medium), ("--n-large", large)):
        parser.add_argument(
            option, type=int, default=count, help=f"number of generated {width}x{height} files (0: skip the case)"
        )
    parser.set_defaults(case_sizes=(medium[1:], large[1:]))


def add_case_options(parser: argparse.ArgumentParser, medium: tuple, large: tuple, rounds: int) -> None:
    """The options of the single-thread CPU benchmarks, whose cases photo_cases gives: add_photo_options',
    --rounds and --seed (of the random windows)."""
    add_photo_options(parser, medium, large)
    parser.add_argument("--rounds", type=int, default=rounds, help="rounds of the methods in turn")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the random windows")


# ---------------------------------------------------------------------------------------------------
# The photos and windows


def photo_cases(
    args,
    imagenet: str = "ImageNet sample ({count} photos)",
    generated: str = "generated {width}x{height} ({count} files)",
):
    """The cases of a benchmark that add_photo_options set up, each as (title, files, size): every file of
    --imagenet where it is a folder (a line on stderr where not; size None), then the generated files of
    --n-medium and of --n-large, each where it is above 0 (size (height, width)). The titles are
    `imagenet` and `generated` with their count, height and width filled in."""
    files = imagenet_files(args.imagenet)
    if files is not None:
        yield imagenet.format(count=len(files)), files, None
    for count, (height, width) in zip((args.n_medium, args.n_large), args.case_sizes):
        if count > 0:
            files = generated_files(count, height, width)
            yield generated.format(count=len(files), height=height, width=width), files, (height, width)


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


def photos_detail(folder, count: int) -> str:
    """What spaced_photos(folder, count) gave, for a report's header."""
    if Path(folder).is_dir():
        return f"{count} photos of {folder} (every k-th file in name order)"
    return f"{count} photo-like images generated by the script (quality 90; 4:4:4, 4:2:2 and 4:2:0 in turn)"


def imagenet_files(folder) -> Optional[list[bytes]]:
    """Every file of the photos' folder (--imagenet), in name order; None (with a line on stderr) where it
    is not a folder."""
    path = Path(folder)
    if not path.is_dir():
        print(f"{path} is absent: skipping the ImageNet case", file=sys.stderr)
        return None
    return [p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()]


def generated_files(count: int, height: int, width: int, seed: int = 1) -> list[bytes]:
    """`count` photo-like height x width JPEGs (datasets.synthetic, made once per machine), in name order."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from datasets.synthetic import make_synthetic_set

    root = make_synthetic_set(count, height, width, seed=seed, show_progress=False)
    return [p.read_bytes() for p in sorted(root.rglob("*.jpg"))]


# ---------------------------------------------------------------------------------------------------
# Timing


def time_in_rounds(
    passes: dict[str, Callable[[], object]], rounds: int, items: int, per_round: Optional[dict] = None
) -> dict[str, tuple[float, float]]:
    """{name: (best, median) ms per item} of each pass (a call that handles `items` items), the passes
    taking turns in every round, so that a slow moment of the machine hits all of them alike.
    per_round, when given, gets {name: [ms per item of each round]}."""
    if per_round is None:
        per_round = {}
    per_round.update({name: [] for name in passes})
    for _ in range(rounds):
        for name, run in passes.items():
            start = time.perf_counter()
            run()
            per_round[name].append((time.perf_counter() - start) / items * 1e3)
    return {name: (min(v), statistics.median(v)) for name, v in per_round.items()}


def round_ratios(numerators: list[float], denominators: list[float]) -> str:
    """The ratio of two methods' times round by round (they ran one after the other in each round, so a
    slow spell of the machine hits both): the median over the rounds, the lowest and highest beside it,
    "1.92x (1.57x - 2.46x)"."""
    ratios = [a / b for a, b in zip(numerators, denominators)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}x - {max(ratios):.2f}x)"


def best_and_median(best: float, median: float, digits: int = 3) -> str:
    """A table cell of a best round and the median beside it: "0.463 (0.471)"."""
    return f"{best:.{digits}f} ({median:.{digits}f})"


def method_rows(result: dict[str, tuple[float, float]], base: float, speed_up: bool = True) -> list[list[str]]:
    """The rows of a methods table from time_in_rounds' result: the method, its best ms (median beside
    it), and its speed-up over the best ms `base` ("2.75x"; with speed_up False, its time over `base`)."""
    return [
        [name, best_and_median(best, median), f"{base / best if speed_up else best / base:.2f}x"]
        for name, (best, median) in result.items()
    ]


# ---------------------------------------------------------------------------------------------------
# The machine, the versions and the commit


def cpu_description(note: str = ""):
    """The CPU model, the logical core count and the OS, for the results files; `note` (a remark on the
    machine's state) after them."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}" + (
        f"; {note}" if note else ""
    )


def gpu_description() -> str:
    """The GPU and the host's CPU, for the results files of GPU benchmarks."""
    import torch

    return f"{torch.cuda.get_device_name()}; {cpu_description()}"


def nvjpeg_description() -> str:
    """nvJPEG's version and the GPU's JPEG engines, as the GPU backend found them."""
    from custom_op import gpu

    info = gpu.backend_info()
    engines = (
        f"{info.hardware_engines} engine(s) x {info.hardware_cores} cores"
        if info.hardware
        else f"not used: {info.hardware_note}"
    )
    return f"nvJPEG {info.nvjpeg_version} (JPEG engines: {engines})"


def versions(*others: str) -> str:
    """A report's versions line: Python, torch, `others` (such as "Pillow 11.0.0") and the libjpeg-turbo
    custom_op is linked against."""
    import torch

    import custom_op

    libjpeg = custom_op.library_info().get("libjpeg_turbo_version", "?")
    return ", ".join(
        [f"Python {platform.python_version()}", f"torch {torch.__version__}", *others]
        + [f"custom_op linked against libjpeg-turbo {libjpeg}"]
    )


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


# ---------------------------------------------------------------------------------------------------
# The restart segments of a JPEG

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


def emit(lines: list[str]) -> list[str]:
    """Prints Markdown lines as a section of a report builds them (a long run shows its progress); returns them."""
    print("\n".join(lines), flush=True)
    return lines


def run_sections(report: Report, sections: dict[str, Optional[Callable]], args) -> None:
    """The header of `report` printed, then each section that ``args.only`` names run in turn (a function
    of ``args`` returning its Markdown lines, None: skipped) and added to the report, which is rewritten
    to ``args.out`` after each, so that a run cut short keeps what it measured."""
    emit(report.to_markdown().splitlines())
    for name, section in sections.items():
        if name in args.only and section is not None:
            report.markdown(section(args))
            if args.out:
                report.write(args.out)
