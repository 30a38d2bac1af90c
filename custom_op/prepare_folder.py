"""python -m custom_op prepare: rewrite a folder tree of JPEGs for random-access decoding.

    python -m custom_op prepare SRC DST [--workers N] [--verify] [--restart-mcus K] ...
    python -m custom_op prepare SRC --in-place [--workers N] [--verify] ...

Every file under SRC is read; JPEGs go through custom_op.prepare_jpeg (lossless) and land at the same
relative path under DST (or replace themselves with --in-place). Files it cannot or need not rewrite
(not a JPEG, already random-access, corrupt, unsupported) are left as they were: copied unchanged to
DST, untouched in place, and listed in the summary with the reason. Each output is written to a hidden
temporary file next to it and renamed over the target, so an interrupted run leaves only complete
files; running the command again skips the outputs that exist (and, in place, the files already
random-access). --verify decodes the original and the rewritten file and keeps the rewrite only when
every pixel is the same.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from .prepare import DEFAULT_MAX_GROWTH, DEFAULT_MAX_SEGMENT_BYTES

TEMP_MARK = ".custom_op-tmp-"


@dataclass(frozen=True)
class Options:
    in_place: bool = False
    restart_mcus: Optional[int] = None
    max_growth: float = DEFAULT_MAX_GROWTH
    max_segment_bytes: Optional[int] = DEFAULT_MAX_SEGMENT_BYTES  # None: no bound
    keep_exif: bool = True
    keep_icc: bool = True
    optimize: bool = True
    verify: bool = False
    max_pixels: Optional[int] = None  # None: custom_op.DEFAULT_MAX_PIXELS


@dataclass
class Result:
    path: str  # relative to SRC
    status: str  # "prepared", "left" (as it was) or "skipped" (output already there)
    kind: str = ""  # why it was left: "not a JPEG", "already random-access", "cannot prepare", ...
    reason: str = ""
    in_size: int = 0
    out_size: int = 0


def _write_atomically(target: Path, data: bytes, mode_from: Optional[Path] = None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode_from is not None:
            shutil.copymode(mode_from, temp)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _same_pixels(original: bytes, prepared: bytes, max_pixels) -> Optional[str]:
    """None when both decode to the same pixels (and the output is random-access), else what differs."""
    import torch

    from ._args import DEFAULT_MAX_PIXELS, ImageReadMode
    from .decode import decode_jpeg, read_jpeg_header

    limit = DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels
    try:
        before = decode_jpeg(original, mode=ImageReadMode.UNCHANGED, max_pixels=limit)
        after = decode_jpeg(prepared, mode=ImageReadMode.UNCHANGED, max_pixels=limit)
        info = read_jpeg_header(prepared)
    except (RuntimeError, ValueError) as error:
        return f"decoding for the check failed: {error}"
    if before.shape != after.shape or not torch.equal(before, after):
        return "the rewritten file decodes to other pixels"
    if not info.random_access:
        return "the rewritten file is not random-access"
    return None


def prepare_file(src: Path, dst: Path, rel: str, options: Options) -> Result:
    """Prepares one file (the unit of work of the worker processes)."""
    from ._args import DEFAULT_MAX_PIXELS
    from .decode import read_jpeg_header
    from .prepare import prepare_jpeg

    data = src.read_bytes()
    result = Result(rel, "left", in_size=len(data), out_size=len(data))

    def leave(kind: str, reason: str = "") -> Result:
        result.kind, result.reason = kind, reason or kind
        if not options.in_place:
            _write_atomically(dst, data, mode_from=src)
        return result

    if not data.startswith(b"\xff\xd8"):
        return leave("not a JPEG")
    try:
        info = read_jpeg_header(data)
    except RuntimeError as error:
        return leave("cannot prepare", str(error))
    if info.random_access:
        return leave("already random-access")
    try:
        out = prepare_jpeg(
            data,
            restart_mcus=options.restart_mcus,
            max_growth=options.max_growth,
            max_segment_bytes=options.max_segment_bytes,
            keep_exif=options.keep_exif,
            keep_icc=options.keep_icc,
            optimize=options.optimize,
            max_pixels=DEFAULT_MAX_PIXELS if options.max_pixels is None else options.max_pixels,
        )
    except ValueError as error:
        return leave("too large" if "max_pixels" in str(error) else "cannot prepare", str(error))
    except RuntimeError as error:
        return leave("cannot prepare", str(error))
    if options.verify:
        problem = _same_pixels(data, out, options.max_pixels)
        if problem is not None:
            return leave("verification failed", problem)
    _write_atomically(dst, out, mode_from=src)
    result.status, result.out_size = "prepared", len(out)
    return result


def _work(task) -> Result:
    src, dst, rel, options = task
    try:
        return prepare_file(Path(src), Path(dst), rel, options)
    except OSError as error:
        return Result(rel, "left", "error", f"{type(error).__name__}: {error}")


def _tasks(src_root: Path, dst_root: Path, options: Options, results: list[Result]) -> list[tuple]:
    """Every file to look at, in a stable order; outputs that exist already go straight to results."""
    tasks = []
    skip_dir = None if options.in_place else dst_root.resolve()
    for folder, dirs, files in os.walk(src_root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if skip_dir is None or (here / d).resolve() != skip_dir)
        for name in sorted(files):
            src = here / name
            rel = src.relative_to(src_root).as_posix()
            if TEMP_MARK in name:
                if options.in_place:
                    src.unlink(missing_ok=True)  # left by an interrupted run
                continue
            if options.in_place and src.is_symlink():
                results.append(Result(rel, "left", "symlink", "symbolic links are not rewritten in place"))
                continue
            dst = src if options.in_place else dst_root / rel
            if not options.in_place and dst.exists():
                size = dst.stat().st_size
                results.append(Result(rel, "skipped", in_size=size, out_size=size))
                continue
            tasks.append((str(src), str(dst), rel, options))
    if not options.in_place and dst_root.is_dir():
        for folder, _, files in os.walk(dst_root):
            for name in files:
                if TEMP_MARK in name:
                    (Path(folder) / name).unlink(missing_ok=True)
    return tasks


class _Progress:
    """A one-line counter on stderr: rewritten in place on a terminal, a line every 10% elsewhere."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet = total, quiet
        self.done = 0
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.next_percent = 10

    def step(self) -> None:
        self.done += 1
        if self.quiet or self.total == 0:
            return
        now = time.monotonic()
        percent = 100 * self.done // self.total
        if self.tty and (now - self.last >= 0.2 or self.done == self.total):
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            end = "\n" if self.done == self.total else ""
            print(
                f"\rprepare: {self.done}/{self.total} files ({percent}%), {rate:.0f} files/s",
                end=end,
                file=sys.stderr,
                flush=True,
            )
        elif not self.tty and (percent >= self.next_percent or self.done == self.total):
            self.next_percent = percent // 10 * 10 + 10
            print(f"prepare: {self.done}/{self.total} files ({percent}%)", file=sys.stderr, flush=True)


def _run_tasks(tasks: list, workers: int, progress: _Progress) -> Iterable[Result]:
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            result = _work(task)
            progress.step()
            yield result
        return
    # spawn: each worker imports custom_op afresh instead of inheriting a forked copy of torch's state.
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for result in pool.imap_unordered(_work, tasks, chunksize=4):
            progress.step()
            yield result


@dataclass
class Summary:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def text(self) -> str:
        prepared = [r for r in self.results if r.status == "prepared"]
        left = [r for r in self.results if r.status == "left"]
        before = sum(r.in_size for r in prepared)
        after = sum(r.out_size for r in prepared)
        lines = [
            f"prepared {len(prepared)} of {len(self.results)} files in {self.seconds:.1f} s "
            f"({self.workers} worker{'s' if self.workers != 1 else ''})"
        ]
        if prepared:
            change = 100.0 * (after / before - 1.0) if before else 0.0
            lines.append(
                f"  size of the prepared files: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB ({change:+.2f}%)"
            )
        skipped = self.count("skipped")
        if skipped:
            lines.append(f"  already there from an earlier run: {skipped}")
        if left:
            lines.append(f"  left as they were: {len(left)}")
            kinds = {}
            for r in left:
                kinds.setdefault(r.kind, []).append(r)
            for kind, group in sorted(kinds.items(), key=lambda item: -len(item[1])):
                lines.append(f"    {len(group):6d}  {kind}")
                for r in group[:3]:
                    detail = f": {r.reason}" if r.reason and r.reason != kind else ""
                    lines.append(f"            {r.path}{detail}")
                if len(group) > 3:
                    lines.append(f"            ... and {len(group) - 3} more")
        return "\n".join(lines)


def prepare_folder(
    src: os.PathLike,
    dst: Optional[os.PathLike] = None,
    *,
    options: Options = Options(),
    workers: Optional[int] = None,
    quiet: bool = False,
) -> Summary:
    """Prepares every file under src into dst (or in place when options.in_place); see the module doc."""
    src_root = Path(src)
    if not src_root.is_dir():
        raise ValueError(f"{src_root} is not a folder")
    if options.in_place:
        if dst is not None and Path(dst).resolve() != src_root.resolve():
            raise ValueError("give either DST or --in-place, not both")
        dst_root = src_root
    else:
        if dst is None:
            raise ValueError("DST is required (or --in-place to rewrite SRC itself)")
        dst_root = Path(dst)
        if dst_root.resolve() == src_root.resolve():
            raise ValueError("DST is SRC: use --in-place to rewrite the files where they are")
    workers = workers if workers is not None else (os.cpu_count() or 1)
    summary = Summary(workers=workers)
    started = time.monotonic()
    tasks = _tasks(src_root, dst_root, options, summary.results)
    progress = _Progress(len(tasks), quiet)
    summary.results.extend(_run_tasks(tasks, workers, progress))
    summary.results.sort(key=lambda r: r.path)
    summary.seconds = time.monotonic() - started
    return summary


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "prepare",
        help="rewrite a folder of JPEGs losslessly for random-access decoding",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    # Each option's help ends with its default, "(default: ...)", a value as %(default)s (a plain flag's is
    # off): --help shows it, and docs/cli_tables.py writes the command-line reference's option table from these.
    parser.add_argument("src", metavar="SRC", help="folder to read")
    parser.add_argument("dst", metavar="DST", nargs="?", help="folder to write (the same tree layout)")
    parser.add_argument("--in-place", action="store_true", help="rewrite the files under SRC themselves, with no DST")
    parser.add_argument("--workers", type=int, default=None, metavar="N", help="processes (default: one per CPU)")
    parser.add_argument(
        "--restart-mcus",
        type=int,
        default=None,
        metavar="K",
        help="the restart interval in MCUs, at most one segment per MCU row (prepare_jpeg's restart_mcus) "
        "(default: chosen per file)",
    )
    parser.add_argument(
        "--max-growth",
        type=float,
        default=DEFAULT_MAX_GROWTH,
        metavar="F",
        help="the size budget of the automatic interval, a fraction (default: %(default)s)",
    )
    parser.add_argument(
        "--max-segment-bytes",
        type=int,
        default=DEFAULT_MAX_SEGMENT_BYTES,
        metavar="N",
        help="the bound on every segment's entropy-coded bytes of the automatic interval, before the size "
        "budget; 0: no bound (default: %(default)s)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="decode each rewritten file and keep it only if its pixels equal the original's",
    )
    parser.add_argument(
        "--keep-exif",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="copy the EXIF / XMP (APP1) segments (default: yes)",
    )
    parser.add_argument(
        "--keep-icc", action=argparse.BooleanOptionalAction, default=True, help="copy the ICC profile (default: yes)"
    )
    parser.add_argument(
        "--optimize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="optimized Huffman tables (default: yes)",
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        metavar="N",
        help="leave files declaring more pixels than this as they are (default: custom_op.DEFAULT_MAX_PIXELS)",
    )
    parser.add_argument("--report", metavar="FILE", help="also write one JSON line per file to FILE")
    parser.add_argument("--quiet", action="store_true", help="no progress counter")
    return parser


def run(args) -> int:
    if args.workers is not None and args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.restart_mcus is not None and not 1 <= args.restart_mcus <= 65535:
        print("error: --restart-mcus must be in 1..65535", file=sys.stderr)
        return 2
    if args.max_segment_bytes < 0:
        print("error: --max-segment-bytes must be at least 0 (0: no bound)", file=sys.stderr)
        return 2
    options = Options(
        in_place=args.in_place,
        restart_mcus=args.restart_mcus,
        max_growth=args.max_growth,
        max_segment_bytes=args.max_segment_bytes or None,
        keep_exif=args.keep_exif,
        keep_icc=args.keep_icc,
        optimize=args.optimize,
        verify=args.verify,
        max_pixels=args.max_pixels,
    )
    try:
        summary = prepare_folder(args.src, args.dst, options=options, workers=args.workers, quiet=args.quiet)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(summary.text())
    if args.report:
        with open(args.report, "w") as f:
            for r in summary.results:
                f.write(json.dumps(asdict(r)) + "\n")
    failed = [r for r in summary.results if r.kind in ("verification failed", "error")]
    return 1 if failed else 0
