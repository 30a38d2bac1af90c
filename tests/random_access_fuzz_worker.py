"""Fuzz cases on prepared (random-access) JPEGs, run in a child process by tests/test_random_access.py.

The bases are files rewritten by custom_op.prepare_jpeg, so decode_and_crop_jpeg takes the restart-
segment path on them; the mutations aim at what that path reads from untrusted bytes (restart markers
missing, extra, misnumbered or moved, segments truncated, swapped or emptied, DRI and SOF values that
lie) besides fuzz_corpus's generic ones. Each case goes through fuzz_worker.Case, so the contract is the
one test_fuzz.py checks: a uint8 tensor of the right shape or ValueError / RuntimeError, and a window
equal to the full decode's whenever both succeed with on_warning="raise". The GPU path's sub-image op
(_jpeg_sub_image) is called on every case too (check_sub_image), and so is the plan of the segments our
CUDA decoder decodes (check_decoder_segments). Output lines as fuzz_worker's.

    python tests/random_access_fuzz_worker.py --seed 0 --count 200
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import custom_op  # noqa: E402
    import custom_op.testing  # noqa: E402
except ModuleNotFoundError:  # run by hand from a checkout that is not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import custom_op  # noqa: E402
    import custom_op.testing  # noqa: E402
import torch  # noqa: E402

import fuzz_corpus  # noqa: E402
import jpeg_factory  # noqa: E402
import jpeg_markers as jm  # noqa: E402
import restart_segments as rs  # noqa: E402
from fuzz_worker import PER_CASE_TIMEOUT, Case  # noqa: E402

# name -> (photo_like args, encode kwargs, prepare kwargs)
_BASES = {
    "ra_420_k1": ((67, 91, 3), {}, {"restart_mcus": 1}),
    "ra_444_k3": ((45, 70, 3), {"sampling": "4:4:4"}, {"restart_mcus": 3}),
    "ra_422_auto": ((50, 130, 3), {"sampling": "4:2:2"}, {}),
    "ra_440_k2": ((53, 47, 3), {"sampling": "4:4:0"}, {"restart_mcus": 2}),
    "ra_411_k1": ((40, 99, 3), {"sampling": "4:1:1"}, {"restart_mcus": 1}),
    "ra_odd_factors": ((37, 41, 3), {"sampling": "1x2,2x1,1x1"}, {"restart_mcus": 1}),
    "ra_gray_k2": ((50, 77, 1), {}, {"restart_mcus": 2}),
    "ra_from_progressive": ((61, 83, 3), {"progressive": True}, {"restart_mcus": 1}),
    "ra_cmyk": ((33, 45, 4), {"sampling": "4:4:4"}, {"restart_mcus": 1}),
    # Segments running from one MCU row into the next: intervals that do not divide the MCUs per row.
    "ra_420_k4_crossing": ((67, 91, 3), {}, {"restart_mcus": 4}),
    "ra_444_k4_crossing": ((45, 70, 3), {"sampling": "4:4:4"}, {"restart_mcus": 4}),
    "ra_422_k5_crossing": ((50, 130, 3), {"sampling": "4:2:2"}, {"restart_mcus": 5}),
}


def base(name: str) -> bytes:
    (h, w, c), encode_kwargs, prepare_kwargs = _BASES[name]
    data = jpeg_factory.encode(jpeg_factory.photo_like(h, w, channels=c, seed=len(name)), **encode_kwargs)
    return custom_op.prepare_jpeg(data, **prepare_kwargs)


def _remove_marker(rng, data, layout):
    offset, _ = rng.choice(layout.markers)
    return data[:offset] + data[offset + 2 :]


def _renumber_marker(rng, data, layout):
    offset, n = rng.choice(layout.markers)
    out = bytearray(data)
    out[offset + 1] = 0xD0 + (n + rng.randint(1, 7)) % 8
    return bytes(out)


def _extra_marker(rng, data, layout):
    begin, end = rng.choice(layout.segments)
    at = rng.randint(begin, end)
    return data[:at] + bytes((0xFF, 0xD0 + rng.randrange(8))) + data[at:]


def _swap_segments(rng, data, layout):
    a, b = sorted(rng.sample(range(len(layout.segments)), 2))
    (a0, a1), (b0, b1) = layout.segments[a], layout.segments[b]
    return data[:a0] + data[b0:b1] + data[a1:b0] + data[a0:a1] + data[b1:]


def _empty_segment(rng, data, layout):
    begin, end = rng.choice(layout.segments)
    return data[:begin] + data[end:]


def _zero_segment(rng, data, layout):
    begin, end = rng.choice(layout.segments)
    return data[:begin] + bytes(end - begin) + data[end:]


def _truncate_in_scan(rng, data, layout):
    return data[: rng.randint(layout.start, layout.end)]


def _lying_dri(rng, data, layout):
    interval = rs.restart_interval(data)
    return rs.with_restart_interval(
        data, rng.choice((0, 1, 2, 3, interval + 1, 2 * interval, max(1, interval - 1), rng.randrange(65536)))
    )


def _lying_sof(rng, data, layout):
    _, height, width, _ = jm.sof_info(data)

    def pick(v):
        return max(1, min(65535, rng.choice((v - 1, v + 1, v - 8, v + 8, v + 16, 2 * v, v // 2 + 1))))

    return jm.patch_sof(
        data, height=pick(height) if rng.random() < 0.6 else height, width=pick(width) if rng.random() < 0.6 else width
    )


_TARGETED = {
    "remove_rst": _remove_marker,
    "renumber_rst": _renumber_marker,
    "extra_rst": _extra_marker,
    "swap_segments": _swap_segments,
    "empty_segment": _empty_segment,
    "zero_segment": _zero_segment,
    "truncate_in_scan": _truncate_in_scan,
    "lying_dri": _lying_dri,
    "lying_sof": _lying_sof,
}
#: The mutations of the restart layout (markers, segments, DRI, SOF), which leave every decoded
#: coefficient one the encoder wrote; the others change bytes anywhere.
STRUCTURAL = tuple(_TARGETED)
MUTATIONS = STRUCTURAL + fuzz_corpus.MUTATIONS[:-2] + ("stacked",)


def variant(name: str, seed: int, index: int) -> tuple[str, bytes]:
    rng = random.Random(f"ra/{name}/{seed}/{index}")
    data = base_cached(name)
    kind = MUTATIONS[index % len(MUTATIONS)]
    return kind, mutate(rng, kind, data)


def mutate(rng, kind, data):
    if kind == "stacked":
        for _ in range(rng.randint(2, 3)):
            data = mutate(rng, rng.choice(MUTATIONS[:-1]), data)
        return data
    if kind in _TARGETED:
        try:
            layout = rs.scan(data)
        except (ValueError, IndexError):
            return fuzz_corpus.mutate(rng, "bit_flip", data) if data else data
        if not layout.markers or len(layout.segments) < 2:
            return fuzz_corpus.mutate(rng, "random_run", data) if data else data
        try:
            return _TARGETED[kind](rng, data, layout)
        except (ValueError, IndexError):  # an earlier mutation took what this one changes (the SOF, say)
            return fuzz_corpus.mutate(rng, "bit_flip", data)
    return fuzz_corpus.mutate(rng, kind, data) if data else data


def check_sub_image(case, data: bytes) -> None:
    """The GPU path's sub-image op (_jpeg_sub_image) on the same bytes: never an exception; when it
    gives a sub-image, the window decoded from it at its offset is what decode_and_crop_jpeg gives
    for the file (or both raise), with warnings ignored."""
    try:
        info = custom_op.read_jpeg_header(data)
        height, width = info.height, info.width
    except (ValueError, RuntimeError):
        height, width = 64, 64
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    for _ in range(3):
        h, w = case.rng.randint(1, max(1, height)), case.rng.randint(1, max(1, width))
        top, left = case.rng.randint(0, max(0, height - h)), case.rng.randint(0, max(0, width - w))
        if case.rng.random() < 0.1:  # windows that do not fit, too
            top, left = top + case.rng.choice((1, height, 70000)), left - case.rng.choice((0, 1))
        try:
            sub, where = torch.ops.custom_op._jpeg_sub_image(tensor, top, left, h, w)
        except Exception as error:  # noqa: BLE001  (the op never raises)
            case.fail(f"_jpeg_sub_image({top}, {left}, {h}, {w}): {type(error).__name__}: {str(error)[:200]}")
            continue
        case._count(f"_jpeg_sub_image: {'sub-image' if sub.numel() else 'none'}")
        if sub.numel() == 0:
            continue
        window = (top - where[0], left - where[1], h, w)
        got, got_error = case.call(
            "sub_image_window",
            lambda: custom_op.decode_and_crop_jpeg(
                sub.numpy().tobytes(), *window, on_warning="ignore", max_pixels=None
            ),
        )
        want, want_error = case.call(
            "file_window",
            lambda: custom_op.decode_and_crop_jpeg(data, top, left, h, w, on_warning="ignore", max_pixels=None),
        )
        if (got is None) != (want is None) or (got is not None and not torch.equal(got, want)):
            case.fail(
                f"sub-image window {window} of ({top}, {left}, {h}, {w}): "
                f"{'error ' + repr(got_error) if got is None else 'tensor'} against the file's "
                f"{'error ' + repr(want_error) if want is None else 'tensor'}"
                + (" (different pixels)" if got is not None and want is not None else "")
            )


def check_decoder_segments(case, data: bytes) -> None:
    """The segments our CUDA decoder would decode for a window of the same bytes
    (_cuda_decoder_segments, its runs one after another): in order and each once, holding every segment
    of the sub-image the CPU path reads for that window; or the ValueError / RuntimeError of a header
    the testing ops refuse."""
    try:
        info = custom_op.read_jpeg_header(data)
    except (ValueError, RuntimeError):
        return
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    h, w = case.rng.randint(1, info.height), case.rng.randint(1, info.width)
    top, left = case.rng.randint(0, info.height - h), case.rng.randint(0, info.width - w)
    decoded, error = case.call(
        "cuda_decoder_segments", lambda: torch.ops.custom_op._cuda_decoder_segments(tensor, [top], [left], [h], [w])
    )
    if decoded is None:
        return
    listed = decoded.tolist()
    if listed != sorted(set(listed)) or (listed and listed[0] < 0):
        case.fail(f"_cuda_decoder_segments({top}, {left}, {h}, {w}): not in order, each once: {listed[:20]}")
        return
    read, _ = case.call("segments_read", lambda: torch.ops.custom_op._jpeg_segments_read(tensor, top, left, h, w))
    if read is not None and read[0] < 0 and not set(read[1].tolist()) <= set(listed):
        case.fail(f"_cuda_decoder_segments({top}, {left}, {h}, {w}) lacks segments the CPU path's sub-image reads")


_cache: dict = {}


def base_cached(name: str) -> bytes:
    if name not in _cache:
        _cache[name] = base(name)
    return _cache[name]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bases", default=",".join(_BASES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=200, help="variants per base")
    args = parser.parse_args()
    faulthandler.enable()
    summary = {
        "cases": 0,
        "bad": 0,
        "notes": 0,
        "outcomes": {},
        "max_case_s": 0.0,
        "slowest": "",
        "random_access_decodes_before": custom_op.testing.random_access_decodes(),
    }
    for name in [b for b in args.bases.split(",") if b]:
        todo = [(-1, "base", base_cached(name))]
        todo += [(i, *variant(name, args.seed, i)) for i in range(args.count)]
        for index, kind, data in todo:
            case = Case(
                name,
                args.seed,
                index,
                kind,
                data,
                random.Random(f"ra-calls/{name}/{args.seed}/{index}"),
                summary["outcomes"],
            )
            print(f"CASE {case.tag}", flush=True)
            faulthandler.dump_traceback_later(PER_CASE_TIMEOUT, exit=True)
            start = time.perf_counter()
            case.run(is_base=index < 0)
            check_sub_image(case, data)
            check_decoder_segments(case, data)
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
    summary["random_access_decodes"] = custom_op.testing.random_access_decodes() - summary.pop(
        "random_access_decodes_before"
    )
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
