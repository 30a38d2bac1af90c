"""A progress bar that uses tqdm when it is installed and a plain stderr counter otherwise.

tqdm is optional on purpose: generating a data set must not need anything beyond the project's
requirements.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int, desc: str, enabled: bool = True) -> Iterator[T]:
    if not enabled or total == 0:
        yield from items
        return
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(items, total=total, desc=desc, unit="img", file=sys.stderr)
        return
    yield from _counter(items, total, desc)


def _counter(items: Iterable[T], total: int, desc: str) -> Iterator[T]:
    stream = sys.stderr
    interactive = stream.isatty()
    start = time.perf_counter()
    last_print = 0.0
    print(f"{desc}: 0/{total}", file=stream, end="\r" if interactive else "\n", flush=True)
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.perf_counter()
        # Rewrite the line at most a few times a second on a terminal; in a log file, print ~10 lines.
        if interactive and (now - last_print > 0.2 or done == total):
            print(f"{desc}: {done}/{total} ({now - start:.1f} s)", file=stream, end="\r", flush=True)
            last_print = now
        elif not interactive and (done == total or done % max(1, total // 10) == 0):
            print(f"{desc}: {done}/{total} ({now - start:.1f} s)", file=stream, flush=True)
    if interactive:
        print(file=stream, flush=True)
