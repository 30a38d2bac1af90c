"""The install's compile progress: how many of a library's files are compiled, while pip hides the build.

pip keeps a build's output to itself unless run with -v: in a terminal it shows a spinner, elsewhere
"still running..." once a minute, for the minute or two the C++ library takes to compile. While
setup.py compiles a library, :func:`reporting` reads the compile's output (ninja's status lines, which
``torch.utils.cpp_extension`` writes to file descriptor 1: ``[3/15] c++ ...`` as each file finishes),
passes every byte on unchanged to where it was going (pip, or the terminal), and writes a short line
for each finished file to the terminal, ``/dev/tty``, when the output is captured and there is a
terminal to write to:

        custom_op: compiling the C++ library: 3 of 16 files (21 s)

Without a terminal (CI, a Docker build) there is nowhere pip lets the line through; ``pip install -v``
shows the compiler's own lines there. setup.py loads this file by path: it imports neither torch
nor the package.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Optional, TextIO

#: ninja's status, its files finished and to build ("[%f/%t] "), set for the build so that a user's
#: NINJA_STATUS cannot change what is read.
NINJA_STATUS = "[%f/%t] "
_STATUS = re.compile(rb"^\[(\d+)/(\d+)\] ")


def open_terminal() -> Optional[TextIO]:
    """The terminal to show progress on: /dev/tty when the build's output is captured (not itself a
    terminal, as under pip) and the process has one; else None (the output already shows, or nothing can)."""
    try:
        if os.isatty(1):
            return None
        return open("/dev/tty", "w", encoding="utf-8")
    except OSError:
        return None


class _Progress:
    """Reads the build's output from ``source``, copies it to ``sink`` and reports each finished file."""

    def __init__(self, what: str, source: int, sink: int, terminal: TextIO):
        self.what, self.source, self.sink, self.terminal = what, source, sink, terminal
        self.start = time.monotonic()
        self.done = self.total = 0
        self.said = False
        self.thread = threading.Thread(target=self._pump, name="custom_op-build-progress", daemon=True)

    def _pump(self) -> None:
        pending, forwarding = b"", True
        while True:
            chunk = os.read(self.source, 65536)
            if not chunk:
                break
            if forwarding:
                try:
                    _write_all(self.sink, chunk)
                except OSError:  # pip went away: read on, so that the compile never blocks on a full pipe
                    forwarding = False
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                self._line(line)
        self._line(pending)

    def _line(self, line: bytes) -> None:
        found = _STATUS.match(line)
        if found and int(found[1]) > self.done:
            self.done, self.total = int(found[1]), int(found[2])
            self.say(f"    custom_op: compiling {self.what}: {self.done} of {self.total} files")

    def say(self, text: str) -> None:
        """One line on the terminal, indented under pip's line. The first starts a line of its own (pip's
        spinner holds the one the cursor is on); each starts with a carriage return, over the character
        pip's spinner writes at the start of the next line."""
        try:
            start = "\r" if self.said else "\n"
            self.terminal.write(f"{start}{text} ({time.monotonic() - self.start:.0f} s)\n")
            self.terminal.flush()
            self.said = True
        except OSError:
            pass  # the terminal went away: the build goes on


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


@contextlib.contextmanager
def reporting(what: str, terminal: Optional[TextIO] = None) -> Iterator[None]:
    """Within the block, the compile of ``what`` (say, "the C++ library") reports each finished file on
    ``terminal`` (default :func:`open_terminal`); without one, the block runs as it would without this."""
    own = terminal is None
    terminal = open_terminal() if own else terminal
    if terminal is None:
        yield
        return
    saved_status = os.environ.get("NINJA_STATUS")
    os.environ["NINJA_STATUS"] = NINJA_STATUS
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    saved_stdout = os.dup(1)
    progress = _Progress(what, read_end, saved_stdout, terminal)
    progress.thread.start()
    os.dup2(write_end, 1)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)  # the pipe's last write end closes: the reader reads to its end
        progress.thread.join(timeout=10)
        if saved_status is None:
            os.environ.pop("NINJA_STATUS", None)
        else:
            os.environ["NINJA_STATUS"] = saved_status
        # A compiler that outlives an interrupted build may hold the pipe open: then the reader, still
        # reading, keeps what it uses (the process ends soon after).
        if not progress.thread.is_alive():
            os.close(read_end)
            os.close(saved_stdout)
            if own:
                terminal.close()
