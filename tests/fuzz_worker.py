"""Runs fuzz cases or leak loops against custom_op in its own process, for tests/test_fuzz.py.

Run by the tests as a subprocess, so that a crash (segfault, abort) or a hang kills this process and
not pytest; the parent reads the last "CASE" line to say which input did it. Output lines:
    CASE <base> <seed> <index> <mutation>      before each case (flushed)
    BAD <base> <seed> <index> <mutation> <what> one per contract violation
    NOTE <text>                                 information, not a failure
    SUMMARY <json>                              at the end

    python tests/fuzz_worker.py fuzz --bases baseline_420,gray --seed 0 --count 300
    python tests/fuzz_worker.py threads --seed 0 --count 100 --threads 4
    python tests/fuzz_worker.py leak --kind failing --calls 20000
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import custom_op  # noqa: E402
except ModuleNotFoundError:  # run by hand from a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import custom_op  # noqa: E402
import fuzz_corpus  # noqa: E402
import jpeg_factory  # noqa: E402
import jpeg_markers as jm  # noqa: E402
from custom_op import ImageReadMode  # noqa: E402

# Declared images above this are refused (ValueError), which keeps every case cheap: a mutated header
# may declare 65535x65535 and on_warning="ignore" would then decode that much gray.
MAX_PIXELS = 1 << 22
# Seconds any single case may take before the process is killed as hung. Generous: a case is
# normally well under 10 ms.
PER_CASE_TIMEOUT = 30
MODES = (ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED)
ALLOWED = (ValueError, RuntimeError)


def _channels(mode: ImageReadMode, file_channels: int | None) -> set[int]:
    if mode == ImageReadMode.RGB:
        return {3}
    if mode == ImageReadMode.GRAY:
        return {1}
    if file_channels is None:
        return {1, 3, 4}
    return {1: {1}, 4: {4}}.get(file_channels, {3})


def _as_input(rng: random.Random, data: bytes):
    pick = rng.random()
    if pick < 0.7:
        return data
    if pick < 0.8:
        return bytearray(data)
    if pick < 0.9:
        return np.frombuffer(data, dtype=np.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


class Case:
    """One mutated input and the checks of every call made on it."""

    def __init__(self, name, seed, index, kind, data, rng, outcomes):
        self.tag = f"{name} {seed} {index} {kind}"
        self.data, self.rng = data, rng
        self.bad: list[str] = []
        self.notes: list[str] = []
        self.outcomes = outcomes  # "op: outcome" -> count, shared across cases

    def fail(self, what: str) -> None:
        self.bad.append(what)

    def call(self, label, fn):
        """(result, exception) of fn(); a disallowed exception is a failure."""
        op = label.split("(")[0]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # on_warning="warn" must not fail the case
                result = fn()
        except ALLOWED as error:
            self._count(f"{op}: {type(error).__name__}")
            return None, error
        except Exception as error:  # noqa: BLE001  (anything else breaks the contract)
            self._count(f"{op}: {type(error).__name__}")
            self.fail(f"{label}: {type(error).__name__}: {str(error)[:300]}")
            return None, error
        self._count(f"{op}: ok")
        return result, None

    def _count(self, key: str) -> None:
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def compare_with_libjpegs_decoder(self, label, data, window, mode, exif, policy, crop, crop_error) -> None:
        """Our entropy decoder (csrc/cpu/entropy_decoder.h) gives damaged scans back to libjpeg's; either
        way the outcome must be the one libjpeg's own decoder gives: same pixels, or the same error."""
        previous = bool(torch.ops.custom_op._set_own_entropy_decoder(False))
        try:
            theirs, their_error = self.call(
                label,
                lambda: custom_op.decode_and_crop_jpeg(
                    data, *window, mode=mode, apply_exif_orientation=exif, on_warning=policy, max_pixels=MAX_PIXELS
                ),
            )
        finally:
            torch.ops.custom_op._set_own_entropy_decoder(previous)
        if (crop is None) != (theirs is None):
            self.fail(
                f"{label}: our entropy decoder gave {type(crop_error).__name__ if crop is None else 'a tensor'}, "
                f"libjpeg's {type(their_error).__name__ if theirs is None else 'a tensor'}"
            )
        elif crop is not None and not torch.equal(crop, theirs):
            self.fail(f"{label}: our entropy decoder and libjpeg's decode different pixels")
        elif crop is None and str(crop_error) != str(their_error):
            self.fail(f"{label}: our entropy decoder raised {crop_error!r}, libjpeg's {their_error!r}")

    def check_tensor(self, label, out, channels: set[int], height: int, width: int) -> None:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or out.dim() != 3:
            self.fail(f"{label}: returned {type(out).__name__} {getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}")
            return
        if out.shape[0] not in channels or tuple(out.shape[1:]) != (height, width):
            self.fail(f"{label}: shape {tuple(out.shape)}, expected C in {sorted(channels)} x {height} x {width}")
        if not out.is_contiguous():
            self.fail(f"{label}: result not contiguous")

    def run(self, is_base: bool) -> None:
        rng, data = self.rng, self.data
        exif = rng.random() < 0.3
        mode = rng.choice(MODES)
        policy = rng.choice(("raise", "raise", "ignore", "ignore", "warn"))

        info, header_error = self.call(
            "read_jpeg_header", lambda: custom_op.read_jpeg_header(_as_input(rng, data), apply_exif_orientation=exif)
        )
        if header_error is not None and isinstance(header_error, ValueError):
            self.fail(f"read_jpeg_header: ValueError (bytes input must give RuntimeError): {header_error}")
        if info is not None and (info.height < 1 or info.width < 1):
            self.fail(f"read_jpeg_header: non-positive size {info}")
        channels = _channels(mode, info.channels if info is not None else None)

        full, full_error = self.call(
            "decode_jpeg",
            lambda: custom_op.decode_jpeg(
                _as_input(rng, data), mode=mode, apply_exif_orientation=exif, on_warning=policy, max_pixels=MAX_PIXELS
            ),
        )
        if full is not None:
            if info is not None:
                self.check_tensor(
                    f"decode_jpeg({mode.name}, exif={exif}, {policy})", full, channels, info.height, info.width
                )
            else:
                self.check_tensor(
                    f"decode_jpeg({mode.name}, exif={exif}, {policy})", full, channels, full.shape[1], full.shape[2]
                )
                if policy == "raise":
                    self.fail("decode_jpeg succeeded with on_warning='raise' where read_jpeg_header failed")
        if is_base and full_error is not None:
            self.fail(f"decode_jpeg of the unmutated base failed: {full_error}")
        if isinstance(full_error, ValueError) and info is not None and "max_pixels" not in str(full_error):
            self.fail(f"decode_jpeg: ValueError not about max_pixels: {full_error}")

        for attempt in range(2):
            inside = attempt == 0 and info is not None
            if inside:
                top = rng.randrange(info.height)
                left = rng.randrange(info.width)
                height = rng.randint(1, info.height - top)
                width = rng.randint(1, info.width - left)
            else:
                limit_h = info.height if info is not None else 100
                limit_w = info.width if info is not None else 100
                top = rng.choice((-1, 0, rng.randrange(limit_h + 2), limit_h, 2**31, -(2**31)))
                left = rng.choice((-1, 0, rng.randrange(limit_w + 2), limit_w, 2**32))
                height = rng.choice((0, 1, rng.randint(1, limit_h + 2), limit_h + 1, -3))
                width = rng.choice((0, 1, rng.randint(1, limit_w + 2), limit_w + 1, -3))
            label = f"decode_and_crop_jpeg({top}, {left}, {height}, {width}, {mode.name}, exif={exif}, {policy})"
            crop, crop_error = self.call(
                label,
                lambda: custom_op.decode_and_crop_jpeg(
                    _as_input(rng, data),
                    top,
                    left,
                    height,
                    width,
                    mode=mode,
                    apply_exif_orientation=exif,
                    on_warning=policy,
                    max_pixels=MAX_PIXELS,
                ),
            )
            fits = (
                info is not None
                and top >= 0
                and left >= 0
                and height > 0
                and width > 0
                and top + height <= info.height
                and left + width <= info.width
            )
            if inside:
                self.compare_with_libjpegs_decoder(
                    label, data, (top, left, height, width), mode, exif, policy, crop, crop_error
                )
            if crop is not None:
                if info is not None and not fits:
                    self.fail(f"{label}: returned a tensor for a window outside {info.height}x{info.width}")
                self.check_tensor(label, crop, channels, height, width)
                if full is not None and fits and crop.shape[0] == full.shape[0]:
                    same = torch.equal(crop, full[:, top : top + height, left : left + width])
                    if not same and (is_base or policy == "raise"):
                        # Both succeeded with on_warning="raise": libjpeg found nothing wrong, so the
                        # crop must equal the full decode's slice as for any valid file.
                        self.fail(f"{label}: crop differs from the full decode, and libjpeg reported nothing")
                    elif not same:
                        self.notes.append(
                            f"{self.tag} {label}: crop differs from full decode (corrupt input, {policy})"
                        )
            elif isinstance(crop_error, ValueError):
                if fits and "max_pixels" not in str(crop_error):
                    self.fail(f"{label}: ValueError for a window inside {info.height}x{info.width}: {crop_error}")
            elif isinstance(crop_error, RuntimeError) and info is not None and not fits:
                # The header parses, so the window check must win over anything found in the data.
                if not (top >= 0 and left >= 0 and height > 0 and width > 0):
                    self.fail(f"{label}: RuntimeError instead of ValueError for a bad window: {crop_error}")
                elif top + height > info.height or left + width > info.width:
                    self.fail(f"{label}: RuntimeError instead of ValueError for a window outside: {crop_error}")
            if is_base and fits and crop_error is not None:
                self.fail(f"{label}: failed on the unmutated base: {crop_error}")


def _fuzz(args) -> int:
    faulthandler.enable()
    bases = [b for b in args.bases.split(",") if b]
    summary = {"cases": 0, "bad": 0, "notes": 0, "outcomes": {}, "max_case_s": 0.0, "slowest": ""}
    for name in bases:
        todo = [(-1, "base", fuzz_corpus.base(name))]  # the unmutated file first
        todo += [(i, *fuzz_corpus.variant(name, args.seed, i)) for i in range(args.count)]
        for index, kind, data in todo:
            case = Case(
                name,
                args.seed,
                index,
                kind,
                data,
                random.Random(f"calls/{name}/{args.seed}/{index}"),
                summary["outcomes"],
            )
            print(f"CASE {case.tag}", flush=True)
            faulthandler.dump_traceback_later(PER_CASE_TIMEOUT, exit=True)
            start = time.perf_counter()
            case.run(is_base=index < 0 and fuzz_corpus.is_valid(name))
            elapsed = time.perf_counter() - start
            faulthandler.cancel_dump_traceback_later()
            if elapsed > summary["max_case_s"]:
                summary["max_case_s"], summary["slowest"] = elapsed, case.tag
            summary["cases"] += 1
            for what in case.bad:
                print(f"BAD {case.tag} {what}", flush=True)
            summary["bad"] += len(case.bad)
            for note in case.notes[:1]:
                print(f"NOTE {note}", flush=True)
            summary["notes"] += len(case.notes)
    summary["entropy_decoder_give_ups"] = int(torch.ops.custom_op._entropy_decoder_give_ups())
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


def _threads(args) -> int:
    """The same kind of inputs decoded from several threads at once (the GIL is released in the op)."""
    from concurrent.futures import ThreadPoolExecutor

    faulthandler.enable()
    faulthandler.dump_traceback_later(PER_CASE_TIMEOUT * 4, exit=True)
    cases = [
        (name, i, fuzz_corpus.variant(name, args.seed, i)[1])
        for name in fuzz_corpus.base_names()
        for i in range(args.count)
    ]

    def work(case):
        name, index, data = case
        bad = []
        calls = (
            lambda: custom_op.decode_jpeg(data, on_warning="ignore", max_pixels=MAX_PIXELS),
            lambda: custom_op.read_jpeg_header(data, apply_exif_orientation=True),
            lambda: custom_op.decode_and_crop_jpeg(data, 1, 2, 5, 6, on_warning="ignore", max_pixels=MAX_PIXELS),
        )
        for call in calls:
            try:
                call()
            except ALLOWED:
                pass
            except Exception as error:  # noqa: BLE001
                bad.append(f"BAD {name} {args.seed} {index} threads {type(error).__name__}: {error}")
        return bad

    with ThreadPoolExecutor(args.threads) as pool:
        bad = [line for lines in pool.map(work, cases) for line in lines]
    faulthandler.cancel_dump_traceback_later()
    for line in bad:
        print(line, flush=True)
    print("SUMMARY " + json.dumps({"cases": len(cases), "bad": len(bad)}), flush=True)
    return 0


# ------------------------------------------------------------------------------------------- leaks


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _leak_calls(kind: str):
    """A cycle of calls that all fail (kind='failing') or all succeed (kind='succeeding')."""
    good = jpeg_factory.encode(jpeg_factory.photo_like(64, 96, seed=5))
    progressive = jpeg_factory.encode(jpeg_factory.photo_like(64, 96, seed=6), progressive=True)
    sos = jm.find(good, jm.SOS)
    truncated = good[: (sos.offset + sos.length + len(good)) // 2]
    sof = jm.find(good, jm.SOF)
    no_quant = good[: sof.offset + 12] + b"\x03" + good[sof.offset + 13 :]
    bomb = jm.patch_sof(good, height=60000, width=60000)
    twelve = jm.patch_sof(good, precision=12)

    def expect(error_type, fn):
        def run():
            try:
                fn()
            except error_type:
                return
            raise AssertionError(f"expected {error_type.__name__}")

        return run

    if kind == "failing":
        return [
            expect(RuntimeError, lambda: custom_op.decode_jpeg(b"not a jpeg")),
            expect(RuntimeError, lambda: custom_op.decode_jpeg(b"")),
            expect(RuntimeError, lambda: custom_op.decode_jpeg(truncated)),
            expect(RuntimeError, lambda: custom_op.decode_jpeg(progressive[: len(progressive) // 2])),
            expect(RuntimeError, lambda: custom_op.decode_and_crop_jpeg(truncated, 50, 50, 10, 10)),
            expect(RuntimeError, lambda: custom_op.decode_jpeg(no_quant)),
            expect(RuntimeError, lambda: custom_op.decode_and_crop_jpeg(no_quant, 0, 0, 8, 8)),
            expect(RuntimeError, lambda: custom_op.read_jpeg_header(twelve)),
            expect(RuntimeError, lambda: custom_op.decode_jpeg(twelve)),
            expect(RuntimeError, lambda: custom_op.read_jpeg_header(good[:100])),
            expect(ValueError, lambda: custom_op.decode_and_crop_jpeg(good, 60, 90, 10, 10)),
            expect(ValueError, lambda: custom_op.decode_and_crop_jpeg(good, -1, 0, 10, 10)),
            expect(ValueError, lambda: custom_op.decode_jpeg(bomb)),
            expect(TypeError, lambda: custom_op.decode_jpeg([1, 2, 3])),
        ]
    return [
        lambda: custom_op.decode_jpeg(good),
        lambda: custom_op.decode_and_crop_jpeg(good, 10, 20, 30, 40),
        lambda: custom_op.decode_and_crop_jpeg(progressive, 30, 10, 20, 50, mode=ImageReadMode.GRAY),
        lambda: custom_op.decode_jpeg(truncated, on_warning="ignore"),
        lambda: custom_op.read_jpeg_header(good),
        lambda: custom_op.decode_jpeg(good, mode=ImageReadMode.UNCHANGED),
    ]


def _leak(args) -> int:
    calls = _leak_calls(args.kind)
    warmup = max(len(calls), args.calls // 10)
    for i in range(warmup):
        calls[i % len(calls)]()
    before = _rss_mb()
    samples = []
    for i in range(args.calls):
        calls[i % len(calls)]()
        if (i + 1) % (args.calls // 4) == 0:
            samples.append(round(_rss_mb() - before, 2))
    print(
        "SUMMARY " + json.dumps({"calls": args.calls, "rss_before_mb": round(before, 1), "growth_mb": samples}),
        flush=True,
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fuzz = sub.add_parser("fuzz")
    fuzz.add_argument("--bases", required=True, help="comma-separated names from fuzz_corpus.base_names()")
    fuzz.add_argument("--seed", type=int, default=0)
    fuzz.add_argument("--count", type=int, default=300, help="variants per base")
    threads = sub.add_parser("threads")
    threads.add_argument("--seed", type=int, default=0)
    threads.add_argument("--count", type=int, default=100, help="variants per base")
    threads.add_argument("--threads", type=int, default=4)
    leak = sub.add_parser("leak")
    leak.add_argument("--kind", choices=("failing", "succeeding"), required=True)
    leak.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    return {"fuzz": _fuzz, "threads": _threads, "leak": _leak}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
