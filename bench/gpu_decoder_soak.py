"""Our CUDA decoder under a long run of damaged and clean files (the soak), the short run that
bench/gpu_decoder_checks.sh repeats under compute-sanitizer, and the report of both. The script runs it;
by hand, on a CUDA machine, from the repository root:

    python bench/gpu_decoder_soak.py soak [--batches 10000] [--json soak.json]   # the soak
    python bench/gpu_decoder_soak.py soak --short [--json short.json]            # 3 batches, each compared
    python bench/gpu_decoder_soak.py soak --dry-run --batches 20                 # no GPU: decoded on the CPU
    python bench/gpu_decoder_soak.py report OUTDIR --out bench/results/gpu_decoder_checks.md

The files are made here: photo-like pixels (tests/jpeg_factory.py's photo_like) encoded by Pillow in
4:4:4, 4:2:2, 4:2:0 and grayscale, and by the tests' JPEG writer (tests/jpeg_factory.py's encode, libjpeg)
in 4:1:1 and 4:1:0, which Pillow cannot write; each with restart markers laid out five ways:
custom_op.prepare_jpeg with its own interval, with restart_mcus=1 and with restart_mcus=3 (random-access
layouts), and the encoder's every 7 MCUs and every MCU row; and without restart markers, which our
decoder decodes in chunks where it is forced, as here; two of them carry an EXIF orientation. Every
one is a file our decoder takes. The writer is compiled on first use; where it cannot be (no C compiler
or no jpeglib.h, as on a machine that runs a prebuilt custom_op), the 4:1:1 and 4:1:0 files are left
out, and the results name the samplings that ran.

A batch: 64 items (--batch-size), one random window each. 40% of them (--damaged) are damaged copies of
those files (tests/damaged_jpegs.py): half damaged at random places (bit flips, restart markers
renumbered or removed, bytes inserted or cut, the end cut off), half one of its fixed cases (cut short
with and without an end marker, a restart marker doubled, stray or fill bytes before a marker, ...); the
others are the files themselves (a file repeated in a batch is decoded once for all its windows). A
quarter of the inputs are in pinned memory, which our decoder copies to the GPU itself. The batch is
decoded under testing.gpu_options(force_path="cuda"), so that every item goes to our decoder or, where
its kernels report anything libjpeg would warn about, to the CPU path; with on_error="return", on_warning
raise, warn and ignore in turn, and the mode, EXIF orientation, stacking and de-duplication at random; in a
fifth of the batches, the windows of files decoded in chunks first take only a random number of their scan's
bytes (testing.gpu_options' window_bytes), so that many are decoded a second time with the whole file.

Checks, each failing the run:
  - no call raises: every bad item comes back as its exception (and the process does not crash);
  - after every batch, a clean batch (each file once) is decoded by our decoder and equals the CPU
    path's pixels: a damaged batch leaves no sticky CUDA error and nothing behind;
  - every --compare-every'th batch (the first included), item by item, the CPU path's outcome with the
    same options: the same pixels, or the same exception type and message; and the same warnings;
  - memory: torch.cuda.memory_allocated(), memory_reserved() and the process's resident set, sampled
    after every batch, grow by no more than their tolerances from the end of the warm-up (the first
    --warmup batches, after batches of the largest decodes, which grow the decoder's buffers to their
    largest size) to the last batch.
Exit status: 0 when every check passed, 1 otherwise. --short: 3 batches of 64, half of them damaged, each
compared (the second with first tries), no warm-up and no memory check (for compute-sanitizer, under which the
run is slow and the memory numbers mean nothing).
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from common import Report, cpu_description, nvjpeg_description, versions  # noqa: E402

import custom_op  # noqa: E402
import jpeg_factory  # noqa: E402
import restart_segments  # noqa: E402
from custom_op import ImageReadMode, testing  # noqa: E402
from damaged_jpegs import KINDS, damaged, damaged_copy, restart_markers  # noqa: E402
from jpeg_factory import photo_like, with_exif_orientation  # noqa: E402

# Our decoder leaves files whose restart segments average more bytes than this to the other decoders
# (kMaxMeanSegmentBytes in custom_op/csrc/cuda/segment_executor.cpp): every file made here stays below.
MAX_MEAN_SEGMENT_BYTES = 4096
SAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2, "gray": None}  # Pillow's subsampling= values
# Samplings Pillow cannot write, as the tests' JPEG writer spells them (per-component factors for 4:1:0).
WRITER_SAMPLINGS = {"4:1:1": "4:1:1", "4:1:0": "4x2,1x1,1x1"}
LAYOUTS = ("prepared", "prepared-1", "prepared-3", "every-7-mcus", "every-row", "plain")
SIZES = ((301, 403), (150, 230), (97, 211), (240, 320), (123, 77))  # height, width
QUALITIES = (75, 90, 97)
ORIENTATIONS = {3: 6, 11: 3}  # base index -> the EXIF orientation it carries
ON_WARNING = ("raise", "warn", "ignore")
MODES = (ImageReadMode.RGB, ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED)
MIB = 2**20
CLEAN = "none (the file itself)"  # the damage of an item that is not a damaged copy
CUDA_COUNT = "decoded by our decoder (path cuda)"


# ---------------------------------------------------------------------------------------------------
# The files


class Base(NamedTuple):
    name: str
    data: bytes
    markers: list  # where its restart markers are (damaged_jpegs.restart_markers)
    cases: list  # (name, bytes): damaged_jpegs.damaged()'s fixed cases, without its bit flips
    height: int  # stored frame
    width: int
    shown_height: int  # with the EXIF orientation applied
    shown_width: int
    channels: int
    restart_interval: int
    segments: int
    random_access: bool


def encode(pixels: np.ndarray, sampling: str, quality: int, layout: str) -> bytes:
    if sampling in WRITER_SAMPLINGS:
        data = jpeg_factory.encode(
            pixels,
            sampling=WRITER_SAMPLINGS[sampling],
            quality=quality,
            restart_interval=7 if layout == "every-7-mcus" else 0,
            restart_rows=1 if layout == "every-row" else 0,
        )
    else:
        options = {} if sampling == "gray" else {"subsampling": SAMPLINGS[sampling]}
        if layout == "every-7-mcus":
            options["restart_marker_blocks"] = 7
        elif layout == "every-row":
            options["restart_marker_rows"] = 1
        buf = io.BytesIO()
        from PIL import Image

        Image.fromarray(pixels).save(buf, "JPEG", quality=quality, **options)
        data = buf.getvalue()
    if layout.startswith("prepared"):
        restart_mcus = {"prepared": None, "prepared-1": 1, "prepared-3": 3}[layout]
        data = custom_op.prepare_jpeg(data, restart_mcus=restart_mcus)
    return data


def samplings() -> list[str]:
    """The samplings of the files: Pillow's, and the writer's where it can be compiled here."""
    return [*SAMPLINGS, *(WRITER_SAMPLINGS if jpeg_factory.unavailable_reason() is None else ())]


def make_bases() -> list[Base]:
    """The files the batches are made of, one per sampling and layout; ValueError when one of them
    is not a file our decoder takes (a Pillow without the restart options writes none) or not of its
    sampling."""
    bases = []
    for i, (sampling, layout) in enumerate((s, lay) for s in samplings() for lay in LAYOUTS):
        height, width = SIZES[(i + i // len(LAYOUTS)) % len(SIZES)]  # each layout in several sizes
        pixels = photo_like(height, width, 1 if sampling == "gray" else 3, seed=100 + i)
        data = encode(pixels, sampling, QUALITIES[i % len(QUALITIES)], layout)
        name = f"{sampling} {layout} {width}x{height}"
        if i in ORIENTATIONS:
            data = with_exif_orientation(data, ORIENTATIONS[i])
            name += f" EXIF {ORIENTATIONS[i]}"
        interval = restart_segments.restart_interval(data)
        scan = restart_segments.scan(data)
        if layout == "plain":
            if interval != 0:
                raise ValueError(f"{name}: written with a restart interval")
        elif interval <= 0:
            raise ValueError(f"{name}: no restart interval (this Pillow ignores restart_marker_blocks/_rows?)")
        elif (len(data) - scan.start) / len(scan.segments) > MAX_MEAN_SEGMENT_BYTES:
            raise ValueError(f"{name}: restart segments too long for our decoder's segment by segment decode")
        shown = custom_op.read_jpeg_header(data, apply_exif_orientation=True)
        info = custom_op.read_jpeg_header(data)
        if info.subsampling != sampling:
            raise ValueError(f"{name}: written as {info.subsampling}")
        start = data.index(b"\xff\xda")
        bases.append(
            Base(
                name,
                data,
                restart_markers(data, start),
                damaged(data, np.random.default_rng(i), flips=0),
                info.height,
                info.width,
                shown.height,
                shown.width,
                info.channels,
                interval,
                len(scan.segments),
                info.random_access,
            )
        )
    return bases


# ---------------------------------------------------------------------------------------------------
# The batches


class Batch(NamedTuple):
    index: int
    datas: list  # bytes
    bases: list  # index into the bases, per item
    damage: list  # what was done to each item: a name of KINDS or of a fixed case; None for the file itself
    pinned: list  # bool per item
    windows: list  # (top, left, height, width) per item
    mode: ImageReadMode
    orient: bool  # apply_exif_orientation
    on_warning: str
    stack: bool
    dedupe: bool
    window_bytes: Optional[int]  # testing.gpu_options' first-try bytes (None: the decoder's own)


def random_window(rng, height: int, width: int) -> tuple:
    if rng.random() < 0.05:
        return 0, 0, height, width
    h, w = int(rng.integers(1, min(height, 160) + 1)), int(rng.integers(1, min(width, 160) + 1))
    return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w


def make_batch(bases: list[Base], index: int, args) -> Batch:
    """Batch ``index`` of the run: the same for a given --seed, whatever else was run before it."""
    rng = np.random.default_rng([args.seed, index])
    n = args.batch_size
    hit = set(rng.permutation(n)[: round(n * args.damaged)].tolist())  # the damaged items
    mode = MODES[int(rng.integers(0, len(MODES)))]
    orient = bool(rng.random() < 0.3)
    stack = bool(rng.random() < 0.2) and mode != ImageReadMode.UNCHANGED
    dedupe = bool(rng.random() < 0.8)
    # The short run's second batch always: the sanitizers then see the second decodes too.
    first_tries = rng.random() < 0.2 or (args.short and index == 1)
    window_bytes = int(rng.integers(1, 60_000)) if first_tries else None
    chosen = rng.integers(0, len(bases), n).tolist()
    datas, damage = [], []
    for i, b in enumerate(chosen):
        base = bases[b]
        if i not in hit:
            datas.append(base.data)
            damage.append(None)
        elif rng.random() < 0.5:
            kind = int(rng.integers(0, len(KINDS)))
            datas.append(damaged_copy(base.data, rng, kind, base.markers))
            damage.append(KINDS[kind])
        else:
            name, case = base.cases[int(rng.integers(0, len(base.cases)))]
            datas.append(case)
            damage.append(name)
    sizes = [
        (bases[b].shown_height, bases[b].shown_width) if orient else (bases[b].height, bases[b].width) for b in chosen
    ]
    if stack:  # one window size for all, which every image holds
        h = int(rng.integers(1, min(min(s[0] for s in sizes), 160) + 1))
        w = int(rng.integers(1, min(min(s[1] for s in sizes), 160) + 1))
        windows = [(int(rng.integers(0, sh - h + 1)), int(rng.integers(0, sw - w + 1)), h, w) for sh, sw in sizes]
    else:
        windows = [random_window(rng, sh, sw) for sh, sw in sizes]
    pinned = (rng.random(n) < args.pinned).tolist()
    return Batch(
        index, datas, chosen, damage, pinned, windows, mode, orient, ON_WARNING[index % 3], stack, dedupe, window_bytes
    )


def largest_batches(bases: list[Base], args) -> list[Batch]:
    """Batches of the largest decodes: every item the whole image of the file with the most pixels,
    of the one with the most restart segments, and of the one with the most bytes, in ordinary memory,
    each decoded on its own. Run twice each in the warm-up, so that both of the decoder's buffer slots
    reach their largest size."""
    n = args.batch_size
    largest = max(range(len(bases)), key=lambda b: bases[b].height * bases[b].width * bases[b].channels)
    most = max(range(len(bases)), key=lambda b: bases[b].segments)
    biggest = max(range(len(bases)), key=lambda b: len(bases[b].data))
    out = []
    for b in dict.fromkeys((largest, most, biggest)):
        base = bases[b]
        batch = Batch(
            -1,
            [base.data] * n,
            [b] * n,
            [None] * n,
            [False] * n,
            [(0, 0, base.height, base.width)] * n,
            ImageReadMode.RGB,
            False,
            "raise",
            False,
            False,
            None,
        )
        out += [batch, batch]
    return out


# ---------------------------------------------------------------------------------------------------
# Decoding and comparing


def decode(batch: Batch, device: str):
    """The batch decoded on ``device`` (our decoder or the CPU path for device="cuda"): the outcome of
    each item (a tensor or an exception), the whole result, the path names (None on the CPU), and the
    warnings' messages."""
    import torch

    options = dict(
        mode=batch.mode,
        apply_exif_orientation=batch.orient,
        on_warning=batch.on_warning,
        on_error="return",
        stack=batch.stack,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device == "cuda":
            inputs = [
                torch.frombuffer(bytearray(d), dtype=torch.uint8).pin_memory() if p else d
                for d, p in zip(batch.datas, batch.pinned)
            ]
            with testing.gpu_options(force_path="cuda", dedupe=batch.dedupe, window_bytes=batch.window_bytes):
                result, paths = testing.decode_with_paths(inputs, *zip(*batch.windows), device="cuda", **options)
            torch.cuda.synchronize()
        else:
            result = custom_op.decode_and_crop_jpegs(batch.datas, *zip(*batch.windows), device="cpu", **options)
            paths = None
    if batch.stack:
        images, errors = result
        items = [images[i] if e is None else e for i, e in enumerate(errors)]
    else:
        items = list(result)
    # custom_op's own warnings (libjpeg's, naming the item), not those of anything else the call touched.
    messages = [str(w.message) for w in caught if str(w.message).startswith("custom_op: ")]
    return items, result, paths, messages


def describe(item) -> str:
    if isinstance(item, BaseException):
        return f"{type(item).__name__}({str(item)[:160]!r})"
    return f"tensor {tuple(item.shape)}"


def same(got, want) -> bool:
    import torch

    if isinstance(want, BaseException) or isinstance(got, BaseException):
        return type(got) is type(want) and str(got) == str(want)
    return got.shape == want.shape and torch.equal(got.cpu(), want)


class Sentinel:
    """The clean batch decoded after every batch: each file once, a 24x40 window, stacked, with
    on_warning="raise"; it must go to our decoder whole and give the CPU path's pixels."""

    def __init__(self, bases: list[Base]):
        self.datas = [b.data for b in bases]
        self.windows = [(b.height // 3, b.width // 4, 24, 40) for b in bases]
        self.names = [b.name for b in bases]
        self.reference = custom_op.decode_and_crop_jpegs(self.datas, *zip(*self.windows), stack=True)

    def to_gpu(self):
        self.reference = self.reference.cuda()

    def check(self) -> Optional[str]:
        """None when the batch is clean, else what was wrong."""
        import torch

        with testing.gpu_options(force_path="cuda"):
            out, paths = testing.decode_with_paths(self.datas, *zip(*self.windows), device="cuda", stack=True)
        others = [f"{name}: {path}" for name, path in zip(self.names, paths) if path != "cuda"]
        if others:
            return "files not decoded by our decoder: " + "; ".join(others)
        if not torch.equal(out, self.reference):
            wrong = [n for n, o, r in zip(self.names, out, self.reference) if not torch.equal(o, r)]
            return "pixels differ from the CPU path's: " + "; ".join(wrong)
        return None


# ---------------------------------------------------------------------------------------------------
# The soak


def resident_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Memory:
    """One quantity sampled after every batch from the end of the warm-up: first, last, largest."""

    def __init__(self, name: str, tolerance: int):
        self.name, self.tolerance = name, tolerance
        self.first = self.last = self.max = None

    def sample(self, value: Optional[int]) -> None:
        if value is None:
            return
        if self.first is None:
            self.first = self.max = value
        self.last = value
        self.max = max(self.max, value)

    def growth(self) -> Optional[int]:
        return None if self.first is None else self.last - self.first

    def ok(self) -> bool:
        return self.first is None or self.growth() <= self.tolerance

    def as_dict(self) -> dict:
        return {
            "first": self.first,
            "last": self.last,
            "max": self.max,
            "growth": self.growth(),
            "tolerance": self.tolerance,
            "ok": self.ok(),
        }


def soak(args) -> dict:
    import torch

    faulthandler.enable()
    started = time.perf_counter()
    bases = make_bases()
    sentinel = Sentinel(bases)
    sentinel.to_gpu()
    before = testing.cuda_decoder_fallbacks()
    retries_before = testing.cuda_decoder_retries()
    counts = Counter()
    by_damage = defaultdict(Counter)
    failures: list[str] = []
    mismatches: list[str] = []
    batch_ms: list[float] = []
    compare_seconds = 0.0
    memory = [
        Memory("torch.cuda.memory_allocated()", int(args.allocated_tolerance_mib * MIB)),
        Memory("torch.cuda.memory_reserved()", int(args.reserved_tolerance_mib * MIB)),
        Memory("resident set of the process", int(args.rss_tolerance_mib * MIB)),
    ]
    check_memory = not args.short
    warmup = 0 if args.short else min(args.warmup, args.batches)
    last_report = time.perf_counter()
    done = 0

    def progress(i: int) -> None:
        print(
            f"batch {i + 1}/{args.batches}: {counts['items']} items, {counts['cuda']} on our decoder, "
            f"{counts['cpu']} CPU path, {counts['failed']} errors; compared {counts['compared_items']}, "
            f"{len(mismatches)} mismatches, {len(failures)} failures; allocated "
            f"{torch.cuda.memory_allocated() / MIB:.1f} MiB, reserved {torch.cuda.memory_reserved() / MIB:.1f} MiB, "
            f"RSS {(resident_bytes() or 0) / MIB:.1f} MiB; {time.perf_counter() - started:.0f} s",
            flush=True,
        )

    try:
        if check_memory:
            for batch in largest_batches(bases, args):
                items, result, paths, _ = decode(batch, "cuda")
                if any(not isinstance(x, torch.Tensor) for x in items):
                    failures.append(f"the warm-up's largest batch: {describe(items[0])}")
                del items, result
        for i in range(args.batches):
            batch = make_batch(bases, i, args)
            t0 = time.perf_counter()
            items, result, paths, messages = decode(batch, "cuda")
            batch_ms.append((time.perf_counter() - t0) * 1e3)
            counts["batches"] += 1
            counts["items"] += len(items)
            counts["damaged"] += sum(d is not None for d in batch.damage)
            counts["pinned"] += sum(batch.pinned)
            counts["warnings"] += len(messages)
            counts["stacked batches"] += batch.stack
            for what, path in zip(batch.damage, paths):
                counts[path if path in ("cuda", "cpu", "failed") else "other"] += 1
                by_damage[what or CLEAN][path] += 1
            if i % args.compare_every == 0:
                t0 = time.perf_counter()
                want, want_result, _, want_messages = decode(batch, "cpu")
                compare_seconds += time.perf_counter() - t0
                counts["compared batches"] += 1
                counts["compared_items"] += len(items)
                for j, (got, expected) in enumerate(zip(items, want)):
                    if not same(got, expected):
                        mismatches.append(
                            f"batch {i} item {j} ({bases[batch.bases[j]].name}, damage: "
                            f"{batch.damage[j] or 'none'}, window {batch.windows[j]}, "
                            f"{batch.mode.name}, on_warning={batch.on_warning}, path {paths[j]}): ours "
                            f"{describe(got)}, the CPU path's {describe(expected)}"
                        )
                if batch.stack and not torch.equal(result[0].cpu(), want_result[0]):
                    mismatches.append(f"batch {i}: the stacked tensors differ")
                if messages != want_messages:
                    only_ours = [m for m in messages if m not in want_messages]
                    only_cpu = [m for m in want_messages if m not in messages]
                    mismatches.append(
                        f"batch {i} (on_warning={batch.on_warning}): warnings only ours {only_ours[:3]}, only "
                        f"the CPU path's {only_cpu[:3]} ({len(messages)} against {len(want_messages)})"
                    )
                del want, want_result
            del items, result
            problem = sentinel.check()
            if problem:
                failures.append(f"the clean batch after batch {i}: {problem}")
            done = i + 1
            if check_memory and done >= warmup:
                memory[0].sample(torch.cuda.memory_allocated())
                memory[1].sample(torch.cuda.memory_reserved())
                memory[2].sample(resident_bytes())
            if time.perf_counter() - last_report > 10 or done == args.batches:
                progress(i)
                last_report = time.perf_counter()
            if len(failures) >= 10:
                failures.append("stopped after 10 failures")
                break
    except Exception as e:  # a call that raised: the run stops here, with what it found so far
        failures.append(f"batch {done}: a call raised {type(e).__name__}: {e}")
        traceback.print_exc()
    fallbacks = testing.cuda_decoder_fallbacks() - before
    retries = testing.cuda_decoder_retries() - retries_before
    if check_memory:
        for m in memory:
            if not m.ok():
                failures.append(
                    f"{m.name} grew by {m.growth() / MIB:.2f} MiB from batch {warmup} to the last, above the "
                    f"{m.tolerance / MIB:.2f} MiB allowed"
                )
    if mismatches:
        failures.append(f"{len(mismatches)} mismatches with the CPU path")
    if counts["other"]:
        failures.append(f"{counts['other']} items went to other decoders than ours and the CPU path")
    return {
        "ok": not failures,
        "failures": failures,
        "settings": {
            "batches": args.batches,
            "batch size": args.batch_size,
            "damaged share": args.damaged,
            "pinned share": args.pinned,
            "compare every": args.compare_every,
            "warm-up batches": warmup,
            "seed": args.seed,
            "short": args.short,
        },
        "files": [file_facts(b) for b in bases],
        "counts": {
            "batches": counts["batches"],
            "items": counts["items"],
            "damaged copies": counts["damaged"],
            "inputs in pinned memory": counts["pinned"],
            "stacked batches": counts["stacked batches"],
            CUDA_COUNT: counts["cuda"],
            "decoded by the CPU path (path cpu)": counts["cpu"],
            "errors returned (path failed)": counts["failed"],
            "other decoders (none expected)": counts["other"],
            "decodes our kernels sent to the CPU path": fallbacks,
            "windows decoded again after their first try": retries,
            "warnings emitted": counts["warnings"],
            "clean batches after a batch": done,
            "batches compared with the CPU path": counts["compared batches"],
            "items compared": counts["compared_items"],
            "mismatches": len(mismatches),
        },
        "by damage": {what: dict(c) for what, c in by_damage.items()},
        "mismatch examples": mismatches[:20],
        "memory": [m.as_dict() | {"name": m.name} for m in memory] if check_memory else None,
        "time": {
            "whole run, seconds": round(time.perf_counter() - started, 1),
            # A batch's call: its pinned inputs made, the decode, torch.cuda.synchronize().
            "ms per batch, median": round(statistics.median(batch_ms), 3) if batch_ms else None,
            "ms per batch, 99th percentile": round(float(np.percentile(batch_ms, 99)), 3) if batch_ms else None,
            "ms per batch, largest": round(max(batch_ms), 3) if batch_ms else None,
            "CPU comparisons, seconds": round(compare_seconds, 1),
        },
        "machine": machine(),
        "versions": versions_line(),
    }


def file_facts(b: Base) -> dict:
    return {
        "name": b.name,
        "bytes": len(b.data),
        "restart interval (MCUs)": b.restart_interval,
        "segments": b.segments,
        "random-access layout": b.random_access,
    }


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        driver = []
    return f"{gpu}{f' (driver {driver[0]})' if driver else ''}; {cpu_description()}"


def versions_line() -> str:
    import torch

    return versions(f"CUDA {torch.version.cuda}", *([nvjpeg_description()] if torch.cuda.is_available() else []))


def dry_run(args) -> dict:
    """The files and the batches, each batch decoded on the CPU path: what a run would decode, on any
    machine."""
    started = time.perf_counter()
    bases = make_bases()
    Sentinel(bases)
    outcomes = Counter()
    for i in range(args.batches):
        batch = make_batch(bases, i, args)
        items, _, _, messages = decode(batch, "cpu")
        for what, item in zip(batch.damage, items):
            key = "clean" if what is None else "damaged"
            outcomes[f"{key} {type(item).__name__ if isinstance(item, BaseException) else 'decoded'}"] += 1
        outcomes["warnings"] += len(messages)
    return {
        "dry run": True,
        "files": [file_facts(b) for b in bases],
        "cpu outcomes": dict(sorted(outcomes.items())),
        "seconds": round(time.perf_counter() - started, 1),
    }


# ---------------------------------------------------------------------------------------------------
# The report of bench/gpu_decoder_checks.sh, from what it leaves in OUTDIR:
#   soak.json, soak.log, soak.exit                 the soak's result (soak --json), its output, and
#                                                  "exit_code=N seconds=S run=R" (124: timed out)
#   sanitizer_<tool>.json, .log, .exit             the same for the short run under each tool; the log has
#                                                  compute-sanitizer's output with the run's
#   sanitizer.txt                                  compute-sanitizer's version, or why it did not run
# R, the run, is the time the script started ($GPU_CHECKS_RUN); the report says which parts come from an
# earlier run than its own (the script can run the soak and the sanitizers in separate calls).

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


def sanitizer_counts(log: str, tool: str) -> tuple[Optional[int], Optional[int]]:
    """The errors and warnings of compute-sanitizer's summary (None where it printed none)."""
    if tool == "racecheck":
        found = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", log)
        if found:
            return sum(int(e) for e, _ in found), sum(int(w) for _, w in found)
    found = re.findall(r"ERROR SUMMARY: (\d+) errors?", log)
    return (sum(int(e) for e in found), None) if found else (None, None)


def read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def key_values(path: Path) -> dict:
    try:
        return dict(re.findall(r"(\w+)=(\S+)", path.read_text(encoding="utf-8")))
    except OSError:
        return {}


def mib(value: Optional[int]) -> str:
    return "-" if value is None else f"{value / MIB:,.2f} MiB"


class Part(NamedTuple):
    """One run of the worker, as the script left it in OUTDIR."""

    result: Optional[dict]  # its --json, None when it wrote none
    exit_code: Optional[int]  # None when it did not run
    seconds: str
    run: str

    @classmethod
    def read(cls, outdir: Path, stem: str) -> Part:
        ran = key_values(outdir / f"{stem}.exit")
        code = ran.get("exit_code")
        return cls(
            read_json(outdir / f"{stem}.json"),
            None if code is None else int(code),
            ran.get("seconds", "-"),
            ran.get("run", ""),
        )

    def problems(self, log: Path) -> list[str]:
        """Why it failed: the exit code, and the failures of its result."""
        out = []
        if self.exit_code == 124:
            out.append(f"timed out after {self.seconds} s")
        elif self.exit_code:
            out.append(f"exit code {self.exit_code}")
        if self.result is None:
            out.append(f"no result (see `{log.name}`)")
        else:
            out += self.result.get("failures", [])
        return out

    def earlier(self) -> str:
        """A sentence when this part comes from an earlier run of the script than this report."""
        now = os.environ.get("GPU_CHECKS_RUN")
        if not now or not self.run or self.run == now:
            return ""
        return f" (From an earlier run of the script, started {self.run}.)"


def soak_section(report: Report, outdir: Path) -> tuple[bool, list[str]]:
    """The soak's part of the report; returns whether it ran, and its failures."""
    report.heading("Soak")
    part = Part.read(outdir, "soak")
    if part.exit_code is None and part.result is None:
        report.text("Not run.")
        return False, []
    problems = part.problems(outdir / "soak.log")
    result = part.result
    if result is None:
        report.text(f"No result: {'; '.join(problems)}.")
        return True, problems
    s = result["settings"]
    report.text(
        f"{s['batches']:,} batches of {s['batch size']} items, {s['damaged share']:.0%} of them damaged copies and "
        f"{s['pinned share']:.0%} of the inputs in pinned memory; on_warning raise, warn and ignore in turn; in a "
        "fifth of the batches, windows' first tries of random sizes (testing.gpu_options' window_bytes). After "
        "every batch, a clean batch of every file, which must go to our decoder and equal the CPU path's pixels; "
        f"every {s['compare every']}th batch compared item by item with the CPU path (the same pixels, or the same "
        f"exception and message, and the same warnings); memory sampled after every batch from batch "
        f"{s['warm-up batches']} on. Seed {s['seed']}." + part.earlier()
    )
    report.table(["count", "value"], [[k, f"{v:,}"] for k, v in result["counts"].items()])
    by_damage = result["by damage"]
    order = [k for k in KINDS if k in by_damage] + sorted(set(by_damage) - {*KINDS, CLEAN})
    report.text(
        "Where each item went, by what was done to it: damage at random places (the kinds of "
        "damaged_jpegs.damaged_copy), a fixed case of damaged_jpegs.damaged(), or none."
    )
    report.table(
        ["damage", "items", "our decoder", "CPU path", "error returned"],
        [
            [what] + [f"{n:,}" for n in (sum(c.values()), c.get("cuda", 0), c.get("cpu", 0), c.get("failed", 0))]
            for what, c in ((k, by_damage[k]) for k in order + [CLEAN] if k in by_damage)
        ],
    )
    if result.get("memory"):
        report.table(
            ["memory", "after the warm-up", "last", "largest", "growth", "allowed growth", "check"],
            [
                [m["name"], *(mib(m[k]) for k in ("first", "last", "max", "growth", "tolerance"))]
                + ["pass" if m["ok"] else "FAIL"]
                for m in result["memory"]
            ],
            "lrrrrrl",
        )
    report.text(
        "Time: the whole run, and each batch's call (its pinned inputs made, the decode, "
        "torch.cuda.synchronize()); the clean batches and the CPU path's comparisons are in the whole only."
    )
    report.table(["time", "value"], [[k, "-" if v is None else f"{v:,}"] for k, v in result["time"].items()])
    if result.get("mismatch examples"):
        report.heading("Mismatches with the CPU path (the first 20)", 3)
        report.items(result["mismatch examples"])
    return True, problems


def sanitizer_section(report: Report, outdir: Path, note: str) -> tuple[bool, list[str]]:
    """compute-sanitizer's part of the report: one row per tool that ran; returns whether any ran, and
    the failures."""
    report.heading("compute-sanitizer")
    rows, failures, earlier = [], [], ""
    for tool in TOOLS:
        part = Part.read(outdir, f"sanitizer_{tool}")
        if part.exit_code is None and part.result is None:
            continue
        log_path = outdir / f"sanitizer_{tool}.log"
        log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
        errors, warns = sanitizer_counts(log, tool)
        problems = part.problems(log_path)
        if errors is None:
            problems.append("no summary from compute-sanitizer")
        elif errors:
            problems.insert(0, f"{errors} error{'' if errors == 1 else 's'}")
        if problems:
            failures.append(f"{tool}: " + "; ".join(problems))
        earlier = earlier or part.earlier()
        counts = (part.result or {}).get("counts", {})
        rows.append(
            [tool, "-" if errors is None else str(errors), "-" if warns is None else str(warns)]
            + [str(part.exit_code), *(str(counts.get(k, "-")) for k in ("items", CUDA_COUNT, "mismatches"))]
            + [part.seconds, f"`{log_path.name}`", "FAIL" if problems else "pass"]
        )
    if not rows:
        report.text(f"Not run: {note}." if note else "Not run.")
        return False, []
    report.text(
        "Each tool runs the soak's short mode (`python bench/gpu_decoder_soak.py soak --short`: 3 batches of 64 "
        "items, half of them damaged, the second with windows' first tries of a random size, each compared with "
        "the CPU path, a clean batch after each) with "
        "`--error-exitcode`; memcheck and initcheck with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so that every "
        "allocation is its own and an access past one is found; initcheck with every input in ordinary memory "
        "(it does not count the copies of cudaMemcpyBatchAsync, which bring pinned inputs in, as writing their "
        "destinations, and reports each read of one as uninitialised). A tool passes with no error in its summary, "
        "exit code 0 and the run's own checks passed; racecheck's warnings are shown, not counted. The logs are "
        "in the script's output folder." + earlier
    )
    report.table(
        ["tool", "errors", "warnings", "exit code", "items", "our decoder", "mismatches", "seconds", "log", "check"],
        rows,
        "lrrrrrrrll",
    )
    return True, failures


def files_detail(results: list) -> str:
    """What the runs' files were: the samplings come from their names (make_bases)."""
    names = [f["name"] for r in results if r is not None for f in r.get("files", [])]
    if not names:
        return "not recorded by the runs"
    used = list(dict.fromkeys(name.split()[0] for name in names))

    def listed(group) -> str:
        return ", ".join("grayscale" if s == "gray" else s for s in used if s in group)

    encoders = f"Pillow ({listed(SAMPLINGS)})"
    if any(s in WRITER_SAMPLINGS for s in used):
        encoders += f" and by the tests' JPEG writer ({listed(WRITER_SAMPLINGS)})"
    else:
        encoders += " (not 4:1:1 or 4:1:0: the tests' JPEG writer could not be compiled there)"
    return (
        f"photo-like images encoded by {encoders} with restart markers laid out by custom_op.prepare_jpeg "
        "(its own interval, restart_mcus=1, restart_mcus=3) and by the encoder (every 7 MCUs, every MCU row), and "
        "without restart markers (decoded in chunks); "
        "damaged copies from tests/damaged_jpegs.py"
    )


def write_report(args) -> int:
    outdir = Path(args.outdir)
    note_file = outdir / "sanitizer.txt"
    note = note_file.read_text(encoding="utf-8").strip() if note_file.is_file() else ""
    results = [read_json(outdir / f"{stem}.json") for stem in ["soak", *(f"sanitizer_{t}" for t in TOOLS)]]
    first = next((r for r in results if r is not None), {})
    versions_text = first.get("versions", "unknown (no run wrote a result)")
    if note.startswith("compute-sanitizer") and "not found" not in note:
        versions_text += f", {note}"
    report = Report(
        "Robustness of the CUDA decoder",
        machine=first.get("machine", "unknown (no run wrote a result)"),
        command=args.command,
        commit=args.commit,
        details={
            "versions": versions_text,
            "files": files_detail(results),
            "decoded": 'custom_op.decode_and_crop_jpegs(..., device="cuda", on_error="return") under '
            'testing.gpu_options(force_path="cuda"): our decoder, or the CPU path for what its kernels report',
        },
        echo=False,
    )
    verdict_at = len(report.body)
    soaked, soak_problems = soak_section(report, outdir)
    sanitized, failures = sanitizer_section(report, outdir, note)
    failures = [f"compute-sanitizer {f}" for f in failures]
    if soak_problems:
        failures.insert(0, "soak: " + "; ".join(soak_problems))
    not_run = ([] if soaked else ["the soak did not run"]) + (
        [] if sanitized else [f"compute-sanitizer did not run{': ' + note if note else ''}"]
    )
    verdict = "FAIL" if failures else "pass" if soaked or sanitized else "no check ran"
    # The verdict goes first; it is known only once both parts have been read.
    report.body[verdict_at:verdict_at] = [
        {"type": "heading", "level": 2, "text": "Verdict"},
        {"type": "text", "text": f"**{verdict}**"},
    ] + ([{"type": "items", "items": failures + not_run}] if failures or not_run else [])
    report.write(args.out)
    print(f"verdict: {verdict}" + "".join(f"\n  {line}" for line in failures + not_run), flush=True)
    return 0 if verdict == "pass" else 1


# ---------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser("soak", help="the soak (or --short, or --dry-run)")
    run.add_argument("--batches", type=int, default=10_000)
    run.add_argument("--batch-size", type=int, default=64)
    run.add_argument("--damaged", type=float, default=0.4, help="share of damaged copies in a batch")
    run.add_argument("--pinned", type=float, default=0.25, help="share of the inputs in pinned memory")
    run.add_argument("--compare-every", type=int, default=100, help="compare every Nth batch with the CPU path")
    run.add_argument("--warmup", type=int, default=200, help="batches before the memory's first sample")
    run.add_argument("--allocated-tolerance-mib", type=float, default=1.0)
    run.add_argument("--reserved-tolerance-mib", type=float, default=48.0)
    run.add_argument("--rss-tolerance-mib", type=float, default=48.0)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--short",
        action="store_true",
        help="3 batches of 64, half damaged (the second with first tries), each compared; no memory check",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="no GPU: make the files and batches, decode them on the CPU"
    )
    run.add_argument("--json", help="write the result to this file")
    rep = commands.add_parser("report", help="the report of bench/gpu_decoder_checks.sh from its OUTDIR")
    rep.add_argument("outdir")
    rep.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_decoder_checks.md"))
    rep.add_argument("--command", help="the command line of the report (default: this one)")
    rep.add_argument("--commit", help="the commit line, for a checkout without .git")
    args = parser.parse_args()

    if args.action == "report":
        return write_report(args)
    if args.short:
        args.batches, args.batch_size, args.damaged, args.compare_every = 3, 64, 0.5, 1
    if min(args.batches, args.batch_size, args.compare_every) < 1 or not 0 <= args.damaged <= 1:
        parser.error("--batches, --batch-size and --compare-every must be at least 1, --damaged within [0, 1]")
    if args.dry_run:
        result = dry_run(args)
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device here (--dry-run runs without one)")
        result = soak(args)
    result["command"] = "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    result["run"] = os.environ.get("GPU_CHECKS_RUN", "")
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(text if args.dry_run else json.dumps({k: result[k] for k in ("ok", "failures", "counts", "time")}, indent=1))
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
