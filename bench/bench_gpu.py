"""GPU benchmark: one window per JPEG decoded into CUDA tensors, batched; every method on the same files
and the same windows, side by side in one process; images per second, host CPU time per image, and
each method's largest difference from the CPU path (which equals Pillow's decode + crop).

    python bench/bench_gpu.py --out bench/results/gpu_h100.md        # on a GPU machine; also writes gpu_h100.json

Sections (all by default; --only picks some):
  sample    the ImageNet sample, 224x224 windows (images smaller than 224 give smaller windows, the
            same for every method), batch 64 and 256; the original files and copies prepared for
            random access (custom_op.prepare_jpeg) in one table:
              - torchvision.io.decode_jpeg(list, device="cuda") + slicing (the anchor), on each;
              - ours, custom_op.decode_and_crop_jpegs(..., device="cuda"), on each: our CUDA decoder,
                in chunks for the originals; from pinned memory, and with three calls in flight
                (custom_op.decode_ahead's default depth) from either memory (also with two, depth=2:
                the originals, and the prepared files in pinned memory);
                with a file repeated in a batch decoded once per window (batch 256 from 200 files
                repeats 56 of them; ours otherwise decodes each once: the like-for-like rows at batch
                256), one call at a time and three in flight;
              - ours with gpu_decoder="nvjpeg" on the originals (the JPEG engines), also with a
                repeated file decoded once per window and with the engines decoding whole images
                (what regions of interest buy); on the prepared copies the JPEG engines given the
                segments around the window, and given the whole file; nvJPEG's hybrid decoders (a
                GPU without JPEG engines);
              - the CPU path in one process per core, then one pinned copy of the batch to the GPU.
  outputs   the sample's photos of at least 224x224, prepared, 224x224 windows, batch 64 and 256: ours
            with a list of window tensors (the default) against one stacked [N, 3, 224, 224] tensor
            (stack=True), one call at a time and through custom_op.decode_ahead, from ordinary and
            from pinned memory (what a tensor per window costs the host).
  rrc       the training input: RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) + horizontal flip +
            normalisation to a float32 [N, 3, 224, 224] batch on the GPU, batch 64 and 256, windows and
            flips drawn beforehand (seed 0): ours, custom_op.decode_and_resized_crop_jpegs(...,
            device="cuda"), on the prepared copies (one call at a time, and through decode_ahead from
            pinned memory) and on the originals (one call at a time, and through decode_ahead); the
            window decode alone of the same windows (what the resized crop's host CPU compares with); the
            same call on the CPU (all cores) + one pinned copy; torchvision's batched GPU decode + a
            crop, F.interpolate (bilinear, antialiased), flip and normalisation per image; where NVIDIA
            DALI is installed, its pipeline (image_random_crop on the "mixed" device, resize,
            crop_mirror_normalize) with 4 and 8 CPU threads on the originals. Max abs diff: uint8
            outputs of the same calls against the CPU call.
  steps     the same photos and windows, stacked, in a loop that also runs a training step's GPU work
            (--step-ms: that many ms per image of matrix products on the loop's stream, after a
            conversion of the batch to float): the step alone, on a batch decoded beforehand, against
            a decode call per step (ordinary and pinned memory) and custom_op.decode_ahead; what the
            decode adds to a step.
  (--reencode-420: the sections that read the sample read its photos re-encoded at 4:2:0 with optimised
  tables, the layout of many photos on the web, which our chunked decoding finds harder than 4:4:4.)
  large     one generated 4000x3000 photo, 512 random windows in one batch: 224x224, and 512x512
            (--large-windows sets the sizes); then, for each size, one decode per window in a loop of
            4 batches of 512 windows a round, one call at a time and through custom_op.decode_ahead,
            the file in ordinary and in pinned memory, and the file prepared for random access: a loop
            over many large photos, where decode_ahead's calls overlap one call's uploads with another's
            kernels.
  segments  prepared photos of several sizes, one 224x224 window per decode: the JPEG engines given
            the window's segments or the whole file, against the original file on the engines (where nvJPEG's
            size threshold for segments comes from).
  warmup    the first calls of a fresh process, per method and batch size: after one warm-up call,
            each of the next --warmup-calls calls on its own, against as many calls in steady state.

Host CPU time is the process's CPU time (all threads, the CUDA driver's included; for the CPU path,
the workers' time too) over the images decoded. Every method first decodes each batch once, untimed;
then methods alternate round by round so that a slow moment of the machine hits all alike; the best
round is reported, the median beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import io
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import common  # noqa: E402

import custom_op  # noqa: E402
from custom_op import gpu, testing  # noqa: E402

SECTIONS = ("sample", "outputs", "rrc", "steps", "large", "segments", "warmup")
# decode_ahead's depth in the rows that use it: its default.
AHEAD = inspect.signature(custom_op.decode_ahead).parameters["depth"].default
WARMUP_METHODS = ("ours", "ours-prepared", "ours-nvjpeg", "torchvision")


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


# ---------------------------------------------------------------------------------------------------
# Methods. A batch is a dict: "original" and "prepared" (the files as tensors), "indices" (into the
# section's files, for the CPU workers, which hold the files already) and "windows". Each method reads
# one of the three inputs and leaves its outputs on the GPU.


class Method(NamedTuple):
    run: Callable
    inputs: str  # "original", "prepared", "pinned" (the prepared files in pinned memory) or "indices"
    ahead: int = 0  # > 0: a round's batches go through custom_op.decode_ahead with this depth


def torchvision_method(inputs="original"):
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg

    def run(tensors, windows):
        images = decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda")
        return [img[:, t : t + h, l : l + w] for img, (t, l, h, w) in zip(images, windows)]

    return f"torchvision {torchvision.__version__} decode_jpeg(list, cuda) + slice", Method(run, inputs)


def ours_method(inputs="original", stack=False, gpu_decoder="auto", **settings):
    """settings: testing.gpu_options for this method's calls (process-wide, restored after each call).
    stack: the windows as one [N, C, H, W] tensor, which iterates as the list would. gpu_decoder: the
    calls' option."""

    def run(tensors, windows):
        with testing.gpu_options(**settings) if settings else contextlib.nullcontext():
            return custom_op.decode_and_crop_jpegs(
                tensors, *zip(*windows), device="cuda", stack=stack, gpu_decoder=gpu_decoder
            )

    return Method(run, inputs)


_worker_state = {}


def _cpu_worker(args):
    start = time.process_time()
    out = [custom_op.decode_and_crop_jpeg(_worker_state["files"][i], *w).numpy() for i, w in args]
    return out, time.process_time() - start


def _cpu_init(files):
    torch.set_num_threads(1)
    _worker_state["files"] = files


class CpuPool:
    """The CPU path in one process per core; results are copied to the GPU as a data loader would."""

    def __init__(self, files, processes):
        self.processes = processes
        self.pool = mp.get_context("fork").Pool(processes, initializer=_cpu_init, initargs=(files,))
        self.worker_cpu = 0.0

    def method(self):
        def run(indices, windows):
            items = list(zip(indices, windows))
            size = -(-len(items) // self.processes)
            results = self.pool.map(_cpu_worker, [items[k : k + size] for k in range(0, len(items), size)])
            outs = []
            for arrays, seconds in results:
                self.worker_cpu += seconds
                outs += [torch.from_numpy(a).pin_memory().to("cuda", non_blocking=True) for a in arrays]
            return outs

        return f"CPU path, {self.processes} processes (custom_op, libjpeg-turbo) + copy to GPU", Method(run, "indices")

    def close(self):
        self.pool.terminate()


# ---------------------------------------------------------------------------------------------------
# Measurement


def make_batches(originals, prepared, windows, batch, count, pinned=None, pinned_originals=None):
    """count batches of `batch` items, cycling through the files. pinned: the prepared copies in pinned
    memory; pinned_originals: the originals."""
    out = []
    for k in range(count):
        idx = [(k * batch + j) % len(originals) for j in range(batch)]
        out.append(
            {
                "original": [originals[i] for i in idx],
                "prepared": [prepared[i] for i in idx] if prepared else None,
                "pinned": [pinned[i] for i in idx] if pinned else None,
                "pinned_original": [pinned_originals[i] for i in idx] if pinned_originals else None,
                "indices": idx,
                "windows": [windows[i] for i in idx],
            }
        )
    return out


def call(method: Method, batch):
    return method.run(batch[method.inputs], batch["windows"])


def decoded(method: Method, batches):
    """Each batch's outputs in turn: one call after the other, or `ahead` of them decoding at once."""
    if not method.ahead:
        return (call(method, batch) for batch in batches)
    return custom_op.decode_ahead(batches, lambda batch: call(method, batch), depth=method.ahead)


def call_all(method: Method, batches):
    """Every batch of a round, as `decoded` makes them."""
    for _ in decoded(method, batches):
        pass


def measure(methods: dict[str, Method], batches, rounds, cpu_pool=None, per_round=None):
    """{name: (best img/s, median img/s, best host CPU ms/img)}; per_round (a dict), when given, gets
    {name: [(img/s, host CPU ms/img) of each round]}."""
    results = {name: [] for name in methods}
    n_images = sum(len(b["windows"]) for b in batches)
    # Warm-up, every batch once through each method: the library's load, torchvision's decoder, and buffers
    # that grow to the largest batch seen (nvJPEG's), whose slow growing calls would otherwise fall in a round.
    for method in methods.values():
        call_all(method, batches)
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, method in methods.items():
            if cpu_pool is not None:
                cpu_pool.worker_cpu = 0.0
            cpu0, wall0 = time.process_time(), time.perf_counter()
            call_all(method, batches)
            torch.cuda.synchronize()
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0
            if cpu_pool is not None and method.inputs == "indices":
                cpu += cpu_pool.worker_cpu
            results[name].append((n_images / wall, cpu / n_images * 1e3))
    if per_round is not None:
        per_round.update(results)
    summary = {}
    for name, rs in results.items():
        best = max(rs, key=lambda r: r[0])
        summary[name] = (best[0], statistics.median(r[0] for r in rs), min(r[1] for r in rs))
    return summary


def max_diff(method: Method, batches, refs) -> int:
    """The largest |output - reference| over every window of `batches`, decoded as the method's rows are
    (through decode_ahead where it uses it); refs[i]: the reference window of batch index i (-1 when a
    shape differs)."""
    worst = 0
    for batch, outs in zip(batches, decoded(method, batches)):
        for i, out in zip(batch["indices"], outs):
            if out.shape != refs[i].shape:
                return -1
            worst = max(worst, int((out.cpu().int() - refs[i].int()).abs().max()))
    return worst


class Stats:
    def __init__(self):
        self.max, self.sum, self.sq, self.n = 0, 0.0, 0.0, 0

    def add(self, out, ref):
        d = (out.cpu().int() - ref.int()).abs()
        self.max = max(self.max, int(d.max()) if d.numel() else 0)
        self.sum += float(d.sum())
        self.sq += float((d.double() ** 2).sum())
        self.n += d.numel()

    def text(self):
        mse = self.sq / max(self.n, 1)
        psnr = "inf" if mse == 0 else f"{10 * np.log10(255.0**2 / mse):.1f}"
        return f"max {self.max}, mean {self.sum / max(self.n, 1):.4f}, PSNR {psnr} dB ({self.n:,} values)"


def paths_and_accuracy(files, tensors, windows, refs, **settings):
    """Which path decoded each item ({path: count}) and |ours - CPU path| per path and subsampling."""
    used, stats = [], {}
    with testing.gpu_options(**settings) if settings else contextlib.nullcontext():
        for k in range(0, len(tensors), 64):
            outs, paths = testing.decode_with_paths(tensors[k : k + 64], *zip(*windows[k : k + 64]), device="cuda")
            for j, (out, path) in enumerate(zip(outs, paths)):
                key = f"{path} {custom_op.read_jpeg_header(files[k + j]).subsampling}"
                stats.setdefault(key, Stats()).add(out, refs[k + j])
            used += paths
    return {p: used.count(p) for p in sorted(set(used))}, dict(sorted(stats.items()))


def table(title, summary, anchor, diffs, extra="", versus="vs torchvision"):
    """A section's table: each method's rates, host CPU, rate against `anchor`'s (column `versus`) and diff."""
    lines = (
        [f"### {title}", ""]
        + ([extra, ""] if extra else [])
        + [
            f"| method | images/s (best) | images/s (median) | host CPU ms/image | {versus} "
            "| max abs diff vs CPU path |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
    )
    base = summary[anchor][0]
    for name, (best, median, cpu_ms) in summary.items():
        diff = diffs.get(name)
        diff_text = "?" if diff is None else ("shape differs" if diff < 0 else str(diff))
        lines.append(f"| {name} | {best:,.0f} | {median:,.0f} | {cpu_ms:.3f} | {best / base:.2f}x | {diff_text} |")
    return lines + [""]


# ---------------------------------------------------------------------------------------------------
# Sections


def reencoded_420(data: bytes) -> bytes:
    """The photo decoded and encoded again by Pillow at 4:2:0, quality 90, with optimised Huffman tables: the
    layout of many photos on the web, where our chunked decoding's decoders fall in step later than in the
    4:4:4 files that most of the ImageNet sample is."""
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").save(out, "JPEG", quality=90, subsampling=2, optimize=True)
    return out.getvalue()


def load_sample(args):
    originals = [p.read_bytes() for p in sorted(Path(args.imagenet).iterdir())]
    if getattr(args, "reencode_420", False):
        originals = [reencoded_420(f) for f in originals]
    return originals, [custom_op.prepare_jpeg(f) for f in originals], common.random_windows(originals, 224, seed=0)


def sample_name(args) -> str:
    """What the sections call the photos load_sample gives."""
    if args.reencode_420:
        return "ImageNet sample re-encoded by Pillow at 4:2:0, quality 90, optimised Huffman tables"
    return "ImageNet sample"


def sample_section(args):
    files, prepared_files, windows = load_sample(args)
    originals = [as_tensor(d) for d in files]
    prepared = [as_tensor(d) for d in prepared_files]
    pinned = [t.pin_memory() for t in prepared]  # as a DataLoader with pin_memory=True delivers them
    pinned_originals = [t.pin_memory() for t in originals]
    refs = [custom_op.decode_and_crop_jpeg(d, *w) for d, w in zip(files, windows)]
    pillow = 0
    for data, (t, l, h, w), ref in zip(files, windows, refs):
        image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))[t : t + h, l : l + w]
        pillow = max(pillow, int((torch.from_numpy(image).permute(2, 0, 1).int() - ref.int()).abs().max()))
    growth = sum(map(len, prepared_files)) / sum(map(len, files)) - 1

    counts, by_path = paths_and_accuracy(files, originals, windows, refs)
    engine_originals, engine_originals_by_path = paths_and_accuracy(
        files, originals, windows, refs, force_path="hardware-roi"
    )
    prepared_counts, prepared_by_path = paths_and_accuracy(files, prepared, windows, refs)
    engine_counts, engine_by_path = paths_and_accuracy(
        files, prepared, windows, refs, force_path="hardware-roi", segments="always"
    )
    lines = common.emit(
        [
            f"## {sample_name(args)}: {len(files)} photos, 224x224 windows; the same photos prepared for random "
            f"access (custom_op.prepare_jpeg, {growth * 100:+.1f}% bytes), same windows",
            "",
            f"- the CPU path against Pillow (Image.convert('RGB') + crop) over these windows: max |diff| {pillow}",
            f"- where our decodes ran, original files: {counts}; given to nvJPEG: {engine_originals}",
            f"- where our decodes ran, prepared files: {prepared_counts}; given to nvJPEG with the segments "
            f"around the window: {engine_counts}",
        ]
        + [f"- ours, original files, items decoded by {p}: {st.text()}" for p, st in by_path.items()]
        + [
            f"- ours, original files given to nvJPEG, items decoded by {p}: {st.text()}"
            for p, st in engine_originals_by_path.items()
        ]
        + [f"- ours, prepared files, items decoded by {p}: {st.text()}" for p, st in prepared_by_path.items()]
        + [
            f"- ours, prepared files given to nvJPEG with their segments, items decoded by {p}: {st.text()}"
            for p, st in engine_by_path.items()
        ]
        + [""]
    )

    cpu_pool = CpuPool(files, args.processes)
    try:
        tv_name, tv = torchvision_method()
        methods = {
            f"{tv_name}, original files": tv,
            f"{tv_name}, prepared files": tv._replace(inputs="prepared"),
            "custom_op.decode_and_crop_jpegs(list, cuda), original files (our CUDA decoder in chunks)": ours_method(),
            f"ours, original files, {AHEAD} batches decoding at once (custom_op.decode_ahead)": ours_method()._replace(
                ahead=AHEAD
            ),
            f"ours, original files in pinned memory, {AHEAD} batches decoding at once": ours_method(
                "pinned_original"
            )._replace(ahead=AHEAD),
            f"ours, original files, {AHEAD - 1} batches decoding at once (decode_ahead's depth={AHEAD - 1})": (
                ours_method()._replace(ahead=AHEAD - 1)
            ),
            "ours, original files, a repeated file decoded once per window (as torchvision does)": ours_method(
                dedupe=False
            ),
            f"ours, original files, a repeated file decoded once per window, {AHEAD} batches decoding at once": (
                ours_method(dedupe=False)._replace(ahead=AHEAD)
            ),
            "custom_op.decode_and_crop_jpegs(list, cuda, gpu_decoder='nvjpeg'), original files (the JPEG engines)": (
                ours_method(gpu_decoder="nvjpeg")
            ),
            "ours, original files, the JPEG engines, a repeated file decoded once per window": ours_method(
                gpu_decoder="nvjpeg", dedupe=False
            ),
            "ours, original files, the JPEG engines decode whole images (the copy crops)": ours_method(
                force_path="hardware-full"
            ),
            "custom_op.decode_and_crop_jpegs(list, cuda), prepared files (our CUDA decoder)": ours_method("prepared"),
            "ours, prepared files in pinned memory (our CUDA decoder)": ours_method("pinned"),
            f"ours, prepared files, {AHEAD} batches decoding at once (custom_op.decode_ahead)": ours_method(
                "prepared"
            )._replace(ahead=AHEAD),
            f"ours, prepared files in pinned memory, {AHEAD} batches decoding at once": ours_method("pinned")._replace(
                ahead=AHEAD
            ),
            f"ours, prepared files in pinned memory, {AHEAD - 1} batches decoding at once (depth={AHEAD - 1})": (
                ours_method("pinned")._replace(ahead=AHEAD - 1)
            ),
            "ours, prepared files, the JPEG engines given the segments around the window": ours_method(
                "prepared", force_path="hardware-roi", segments="always"
            ),
            "ours, prepared files, the JPEG engines given the whole file": ours_method(
                "prepared", force_path="hardware-roi", segments="never"
            ),
            "ours, original files, nvJPEG's hybrid decoders, as without JPEG engines (force_path='gpu-hybrid')": (
                ours_method(force_path="gpu-hybrid")
            ),
        }
        cpu_name, cpu_method = cpu_pool.method()
        methods[cpu_name] = cpu_method
        anchor = next(iter(methods))
        for batch in args.batches:
            batches = make_batches(
                originals,
                prepared,
                windows,
                batch,
                max(1, args.images_per_round // batch),
                pinned=pinned,
                pinned_originals=pinned_originals,
            )
            # Over the first batches, enough to hold every file (and, at batch 256, the repeated ones).
            checked = batches[: -(-len(files) // batch)]
            diffs = {name: max_diff(m, checked, refs) for name, m in methods.items()}
            summary = measure(methods, batches, args.rounds, cpu_pool)
            repeats = max(0, batch - len(files))
            extra = (
                (
                    f"A batch of {batch} from {len(files)} files holds {repeats} of them twice: ours decodes a "
                    "repeated file once for all its windows, so the once-per-window row is the like-for-like "
                    "one."
                )
                if repeats
                else ""
            )
            lines += common.emit(table(f"batch {batch}", summary, anchor, diffs, extra))
    finally:
        cpu_pool.close()
    return lines


def load_full_windows(args):
    """The sample's photos that hold a whole 224x224 window (windows of one size, as stack=True needs):
    their files, the prepared copies as tensors in ordinary and in pinned memory, and the windows."""
    files, prepared_files, windows = load_sample(args)
    keep = [i for i, (_, _, h, w) in enumerate(windows) if (h, w) == (224, 224)]
    prepared = [as_tensor(prepared_files[i]) for i in keep]
    return [files[i] for i in keep], prepared, [t.pin_memory() for t in prepared], [windows[i] for i in keep]


def outputs_section(args):
    """A list of window tensors against one stacked tensor, on the sample's photos that hold a 224x224
    window (stack=True needs windows of one size)."""
    files, prepared, pinned, windows = load_full_windows(args)
    refs = [custom_op.decode_and_crop_jpeg(d, *w) for d, w in zip(files, windows)]
    methods = {}
    for memory, label in (("prepared", "ordinary memory"), ("pinned", "pinned memory")):
        for ahead in (0, AHEAD):
            calls = "one call at a time" if not ahead else f"{ahead} batches decoding at once (decode_ahead)"
            for stack, output in ((False, "list of windows"), (True, "stack=True")):
                methods[f"{label}, {calls}, {output}"] = ours_method(memory, stack=stack)._replace(ahead=ahead)
    lines = []
    for batch in args.batches:
        batches = make_batches(files, prepared, windows, batch, max(1, args.images_per_round // batch), pinned=pinned)
        checked = batches[: -(-len(files) // batch)]
        diffs = {name: max_diff(m, checked, refs) for name, m in methods.items()}
        rounds = {}
        summary = measure(methods, batches, args.rounds, per_round=rounds)
        rows = [
            f"### List or stacked output, batch {batch}: {len(files)} of the sample's photos (those of at least "
            "224x224), prepared, 224x224 windows, our CUDA decoder",
            "",
            "The same calls with the windows returned as a list of [3, 224, 224] tensors (the default) or as "
            "one [N, 3, 224, 224] tensor (stack=True): a tensor per window costs the host its creation, its "
            "conversion to a Python object and its release, and decode_ahead's walk over the result.",
            "",
            "| memory, calls, output | images/s (best) | images/s (median) | host CPU ms/image | "
            "stack=True / list, median of the rounds (images/s, host CPU) | max abs diff vs CPU path |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, (best, median, cpu_ms) in summary.items():
            ratio = ""
            if name.endswith("stack=True"):
                # Round by round: the two ran one after the other, so a slow spell of the machine hits both.
                pairs = list(zip(rounds[name], rounds[name.replace("stack=True", "list of windows")]))
                speed = statistics.median(s[0] / lst[0] for s, lst in pairs)
                cpu = statistics.median(s[1] / lst[1] for s, lst in pairs)
                ratio = f"{speed:.2f}x, {cpu:.2f}x"
            rows.append(f"| {name} | {best:,.0f} | {median:,.0f} | {cpu_ms:.3f} | {ratio} | {diffs[name]} |")
        lines += common.emit(rows + [""])
    return lines


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def rrc_windows(files: list[bytes]) -> list[tuple[int, int, int, int, bool]]:
    """RandomResizedCrop's windows and RandomHorizontalFlip's flips, drawn from one seeded generator."""
    t = custom_op.RandomResizedCropJpeg(224)
    g = torch.Generator().manual_seed(0)
    out = []
    for data in files:
        info = custom_op.read_jpeg_header(data)
        out.append((*t.get_params(info.height, info.width, g), bool(torch.rand(1, generator=g) < 0.5)))
    return out


def rrc_ours(device: str, dtype=torch.float32):
    normalise = dict(mean=MEAN, std=STD) if dtype != torch.uint8 else {}

    def run(tensors, windows):
        tops, lefts, heights, widths, flips = zip(*windows)
        return custom_op.decode_and_resized_crop_jpegs(
            tensors, tops, lefts, heights, widths, 224, flips=flips, dtype=dtype, device=device, **normalise
        )

    return run


def rrc_window_decode():
    """The window decode alone of the same windows (full scale, no resize): the host work the resized
    crop adds to it is the difference of their host CPU rows."""

    def run(tensors, windows):
        tops, lefts, heights, widths, _ = zip(*windows)
        return custom_op.decode_and_crop_jpegs(tensors, tops, lefts, heights, widths, device="cuda")

    return run


def rrc_dali(batches, num_threads: int):
    """NVIDIA DALI's RandomResizedCrop training pipeline on the original files, or None without DALI:
    decoders.image_random_crop on the "mixed" device (the JPEG engines and CUDA, ROI decoding; DALI
    draws its own windows with the same area and ratio ranges), resize to 224x224 (linear, antialiased),
    crop_mirror_normalize to float32 CHW with a random flip, copied into a torch tensor as its PyTorch
    plugin does. The files come from an external source that cycles through `batches`, so DALI reads
    ahead as in training (its default prefetch depth)."""
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import feed_ndarray
    except ImportError:
        return None
    import itertools

    size = len(batches[0]["original"])
    arrays = [[t.numpy() for t in b["original"]] for b in batches]
    source = itertools.cycle(arrays)

    @pipeline_def(batch_size=size, num_threads=num_threads, device_id=torch.cuda.current_device())
    def pipeline():
        jpegs = fn.external_source(source=lambda: next(source), dtype=types.UINT8, batch=True)
        images = fn.decoders.image_random_crop(
            jpegs, device="mixed", output_type=types.RGB, random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3]
        )
        images = fn.resize(images, resize_x=224, resize_y=224, interp_type=types.INTERP_LINEAR, antialias=True)
        return fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=[m * 255 for m in MEAN],
            std=[s * 255 for s in STD],
            mirror=fn.random.coin_flip(probability=0.5),
        )

    pipe = pipeline()
    pipe.build()

    def run(tensors, windows):
        (out,) = pipe.run()
        batch = torch.empty((size, 3, 224, 224), dtype=torch.float32, device="cuda")
        feed_ndarray(out.as_tensor(), batch, cuda_stream=torch.cuda.current_stream())
        return batch

    return run


def rrc_cpu_then_copy():
    run_cpu = rrc_ours("cpu")

    def run(tensors, windows):
        return run_cpu(tensors, windows).pin_memory().to("cuda", non_blocking=True)

    return run


def rrc_torchvision():
    import torch.nn.functional as F
    from torchvision.io import ImageReadMode, decode_jpeg

    mean = torch.tensor(MEAN, device="cuda")[:, None, None]
    std = torch.tensor(STD, device="cuda")[:, None, None]

    def run(tensors, windows):
        images = decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda")
        out = []
        for img, (t, l, h, w, flip) in zip(images, windows):
            x = F.interpolate(
                img[None, :, t : t + h, l : l + w].float(),
                size=(224, 224),
                mode="bilinear",
                antialias=True,
                align_corners=False,
            )[0]
            out.append(x.flip(-1) if flip else x)
        return (torch.stack(out) / 255 - mean) / std

    return run


def rrc_section(args):
    files, prepared_files, _ = load_sample(args)
    windows = rrc_windows(files)
    originals = [as_tensor(d) for d in files]
    prepared = [as_tensor(d) for d in prepared_files]
    pinned = [t.pin_memory() for t in prepared]
    methods = {
        "ours, prepared copies, one call at a time": Method(rrc_ours("cuda"), "prepared"),
        "ours, prepared copies in pinned memory, one call at a time": Method(rrc_ours("cuda"), "pinned"),
        f"ours, prepared copies in pinned memory, decode_ahead (depth {AHEAD})": Method(
            rrc_ours("cuda"), "pinned", AHEAD
        ),
        "ours, prepared copies, the window decode alone (decode_and_crop_jpegs, full scale), one call at a time": (
            Method(rrc_window_decode(), "prepared")
        ),
        f"ours, prepared copies in pinned memory, the window decode alone, decode_ahead (depth {AHEAD})": Method(
            rrc_window_decode(), "pinned", AHEAD
        ),
        "ours, original files, one call at a time": Method(rrc_ours("cuda"), "original"),
        f"ours, original files, decode_ahead (depth {AHEAD})": Method(rrc_ours("cuda"), "original", AHEAD),
        f"ours on the CPU ({torch.get_num_threads()} threads), prepared copies, + pinned copy to the GPU": Method(
            rrc_cpu_then_copy(), "prepared"
        ),
    }
    try:
        import torchvision

        methods[f"torchvision {torchvision.__version__} decode_jpeg(list, cuda) + per-image resize, originals"] = (
            Method(rrc_torchvision(), "original")
        )
    except ImportError:
        pass
    # Exactness: the same calls in uint8 against the CPU call, batch by batch, each item against the CPU
    # call at the scale the GPU took for it: the automatic one where our CUDA decoder or the CPU path
    # decoded it, 8 where nvJPEG did (it does not scale). Which decoder took an item is what the window
    # decode of the same window reports (testing.decode_with_paths): both calls choose alike.
    exact, nvjpeg_items = {}, {}
    for inputs in ("prepared", "original"):
        worst, by_nvjpeg = 0, 0
        for k in range(0, len(files), 64):
            tensors = (prepared if inputs == "prepared" else originals)[k : k + 64]
            tops, lefts, heights, widths, flips = zip(*windows[k : k + 64])
            _, paths = testing.decode_with_paths(list(tensors), tops, lefts, heights, widths, device="cuda")
            cuda = custom_op.decode_and_resized_crop_jpegs(
                tensors, tops, lefts, heights, widths, 224, flips=flips, device="cuda"
            ).cpu()
            cpu = custom_op.decode_and_resized_crop_jpegs(tensors, tops, lefts, heights, widths, 224, flips=flips)
            nvjpeg_decoded = torch.tensor([path.startswith(("hardware", "gpu-hybrid", "hybrid")) for path in paths])
            if nvjpeg_decoded.any():
                at_8 = custom_op.decode_and_resized_crop_jpegs(
                    tensors, tops, lefts, heights, widths, 224, flips=flips, scale=8
                )
                cpu[nvjpeg_decoded] = at_8[nvjpeg_decoded]
                by_nvjpeg += int(nvjpeg_decoded.sum())
            worst = max(worst, int((cuda.int() - cpu.int()).abs().max()))
        exact[inputs], nvjpeg_items[inputs] = worst, by_nvjpeg
    lines = []
    for batch in args.batches:
        batches = make_batches(
            originals, prepared, windows, batch, max(1, args.images_per_round // batch), pinned=pinned
        )
        summary = measure(methods, batches, args.rounds)
        # DALI's threads run ahead of its last call (its prefetch), so each DALI pipeline is measured on
        # its own after ours, and released before the next: its work never falls in another row's time.
        for threads in (4, 8):
            dali = rrc_dali(batches, threads)
            if dali is None:
                break
            from nvidia.dali import __version__ as dali_version

            name = f"DALI {dali_version} pipeline ({threads} CPU threads), originals, its own windows"
            summary.update(measure({name: Method(dali, "original")}, batches, args.rounds))
            del dali
            gc.collect()
            torch.cuda.synchronize()
        rows = [
            f"### RandomResizedCrop 224 + flip + normalise, float32 on the GPU, batch {batch}: the sample's "
            f"{len(files)} photos",
            "",
            f"Max abs diff of our uint8 output (GPU against the CPU call): prepared copies {exact['prepared']}, "
            f"originals {exact['original']} (each item against the CPU call at the GPU's scale for it: 8 for "
            f"the items nvJPEG decoded, {nvjpeg_items['prepared']} prepared and {nvjpeg_items['original']} "
            "original; the automatic scale for the others).",
            "",
            "| method | images/s (best) | images/s (median) | host CPU ms/image | over torchvision (best) |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        anchor = next((best for name, (best, _, _) in summary.items() if name.startswith("torchvision")), None)
        for name, (best, median, cpu_ms) in summary.items():
            ratio = f"{best / anchor:.2f}x" if anchor else ""
            rows.append(f"| {name} | {best:,.0f} | {median:,.0f} | {cpu_ms:.3f} | {ratio} |")
        lines += common.emit(rows + [""])
    return lines


class StepWork:
    """A stand-in for a training step's GPU work, queued on the current stream: the batch converted to
    float (which reads the decoded windows, as a model's input normalisation does), then square matrix
    products, as many as take about `ms` milliseconds on this GPU (timed once)."""

    SIZE = 2048

    def __init__(self):
        self.matrix = torch.randn(self.SIZE, self.SIZE, device="cuda")
        for _ in range(3):
            torch.mm(self.matrix, self.matrix)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            torch.mm(self.matrix, self.matrix)
        end.record()
        end.synchronize()
        self.product_ms = start.elapsed_time(end) / 50

    def products(self, ms: float) -> int:
        return max(1, round(ms / self.product_ms))

    def __call__(self, images: torch.Tensor, products: int) -> None:
        images.float()
        for _ in range(products):
            torch.mm(self.matrix, self.matrix)


def step_loop(method, batches, decoded, work: StepWork, products: int) -> None:
    """A training loop's steps over `batches`: each one's decode (method None: the batch `decoded`
    beforehand), then the step's GPU work on it."""
    if method is None:
        for _ in batches:
            work(decoded, products)
    elif not method.ahead:
        for batch in batches:
            work(call(method, batch), products)
    else:
        for images in custom_op.decode_ahead(batches, lambda batch: call(method, batch), depth=method.ahead):
            work(images, products)


def steps_section(args):
    """The decode in a training loop: each step's GPU work queued on the loop's stream, the decode of
    the step's batch before it (one call per step, or custom_op.decode_ahead), against the same steps
    on a batch decoded beforehand."""
    files, prepared, pinned, windows = load_full_windows(args)
    work = StepWork()
    ahead = f"decode_ahead ({AHEAD} batches decoding at once)"
    loops = {
        "the step alone (on a batch decoded beforehand)": None,
        "a decode call per step, ordinary memory": ours_method("prepared", stack=True),
        "a decode call per step, pinned memory": ours_method("pinned", stack=True),
        f"{ahead}, ordinary memory": ours_method("prepared", stack=True)._replace(ahead=AHEAD),
        f"{ahead}, pinned memory": ours_method("pinned", stack=True)._replace(ahead=AHEAD),
    }
    alone = next(iter(loops))
    lines = []
    for batch in args.batches:
        batches = make_batches(files, prepared, windows, batch, max(1, args.images_per_round // batch), pinned=pinned)
        decoded = call(ours_method("pinned", stack=True), batches[0])
        for step_ms in args.step_ms:
            products = work.products(step_ms * batch)
            for method in loops.values():  # warm-up
                step_loop(method, batches, decoded, work, products)
            torch.cuda.synchronize()
            rounds = {name: [] for name in loops}  # each round's ms per step
            for r in range(args.rounds):
                names = list(loops)
                names = names[r % len(names) :] + names[: r % len(names)]  # each loop first in turn
                for name in names:
                    wall0 = time.perf_counter()
                    step_loop(loops[name], batches, decoded, work, products)
                    torch.cuda.synchronize()
                    rounds[name].append((time.perf_counter() - wall0) / len(batches) * 1e3)
            rows = [
                f"### Decoding in a training loop, batch {batch}: a step's GPU work of "
                f"{products * work.product_ms:.1f} ms ({step_ms} ms per image)",
                "",
                f"{len(files)} of the sample's photos (those of at least 224x224), prepared, 224x224 windows, "
                f"stacked (stack=True), our CUDA decoder. Each step converts its batch to float, then runs "
                f"{products} products of {StepWork.SIZE}x{StepWork.SIZE} matrices on the loop's stream, and "
                "the loop goes on to the next step without waiting for them. What the decode adds is a loop's "
                "step time less the step alone's in the same round, the median over the rounds.",
                "",
                "| loop | ms per step (median) | the decode adds, ms per step | the same, share of the step alone "
                "| images/s (median) |",
                "| --- | ---: | ---: | ---: | ---: |",
            ]
            base = statistics.median(rounds[alone])
            for name, steps in rounds.items():
                step = statistics.median(steps)
                added = statistics.median(t - a for t, a in zip(steps, rounds[alone]))
                cells = ("", "") if name == alone else (f"{added:.2f}", f"{added / base:.1%}")
                rows.append(f"| {name} | {step:.2f} | {cells[0]} | {cells[1]} | {batch / step * 1e3:,.0f} |")
            lines += common.emit(rows + [""])
    return lines


def large_photo():
    from jpeg_factory import photo_like

    buf = io.BytesIO()
    Image.fromarray(photo_like(3000, 4000, seed=1)).save(buf, "JPEG", quality=90, subsampling=2)
    return buf.getvalue()


def large_windows(size: int, count: int = 512) -> list[tuple[int, int, int, int]]:
    """The large section's windows of size x size in large_photo(): the same `count` for every run."""
    rng = np.random.default_rng(2)
    return [(int(rng.integers(0, 3000 - size)), int(rng.integers(0, 4000 - size)), size, size) for _ in range(count)]


def large_section(args):
    big = large_photo()
    full = custom_op.decode_jpeg(big)
    original, prepared = as_tensor(big), as_tensor(custom_op.prepare_jpeg(big))
    lines = []
    for size in args.large_windows:
        lines += large_table(args, big, original, prepared, full, size)
    for size in args.large_windows:
        lines += large_ahead_table(args, original, prepared, full, size)
    return lines


def large_ahead_table(args, original, prepared, full, size, batches=4):
    """One decode per window of the large photo in a loop of `batches` batches of 512 windows: one call at a
    time and through decode_ahead, from ordinary and from pinned memory; the file prepared for random access
    (prepared: as a tensor) the same way, one call at a time and from pinned memory through decode_ahead."""
    windows = large_windows(size, 512 * batches)
    pinned, pinned_prepared = original.pin_memory(), prepared.pin_memory()
    loop = [
        {
            "original": [original] * 512,
            "pinned_original": [pinned] * 512,
            "prepared": [prepared] * 512,
            "pinned_prepared": [pinned_prepared] * 512,
            "indices": list(range(k, k + 512)),
            "windows": windows[k : k + 512],
        }
        for k in range(0, len(windows), 512)
    ]
    per_window, pinned_per_window = ours_method(dedupe=False), ours_method("pinned_original", dedupe=False)
    methods = {
        "ours, one decode per window, one call at a time": per_window,
        "ours, one decode per window, the file in pinned memory, one call at a time": pinned_per_window,
        f"ours, one decode per window, {AHEAD} batches decoding at once (custom_op.decode_ahead)": (
            per_window._replace(ahead=AHEAD)
        ),
        f"ours, one decode per window, the file in pinned memory, {AHEAD} batches decoding at once": (
            pinned_per_window._replace(ahead=AHEAD)
        ),
        "ours, the file prepared for random access, one decode per window, one call at a time": ours_method(
            "prepared", dedupe=False
        ),
        f"ours, the file prepared, in pinned memory, one decode per window, {AHEAD} batches decoding at once": (
            ours_method("pinned_prepared", dedupe=False)._replace(ahead=AHEAD)
        ),
    }
    refs = [full[:, t : t + h, l : l + w] for t, l, h, w in windows]
    diffs = {name: max_diff(m, loop, refs) for name, m in methods.items()}
    summary = measure(methods, loop, args.large_rounds)
    title = f"one 4000x3000 photo (4:2:0, q90), one decode per {size}x{size} window, {batches} batches of 512 a round"
    return common.emit(table(title, summary, next(iter(methods)), diffs, versus="vs one call at a time"))


def large_table(args, big, original, prepared, full, size):
    """The large section's table for 512 windows of size x size (original, prepared: big as tensors)."""
    windows = large_windows(size)
    refs = [full[:, t : t + h, l : l + w] for t, l, h, w in windows]
    batch = {
        "original": [original] * 512,
        "prepared": [prepared] * 512,
        "indices": list(range(512)),
        "windows": windows,
    }
    cpu_pool = CpuPool([big] * len(windows), args.processes)  # one reference per window: no copies
    try:
        tv_name, tv = torchvision_method()

        def tv_chunked(tensors, wins):  # 64 whole 12-megapixel images at a time keeps memory in bounds
            out = []
            for k in range(0, len(tensors), 64):
                out += [o.clone() for o in tv.run(tensors[k : k + 64], wins[k : k + 64])]
            return out

        methods = {
            f"{tv_name} (64 at a time)": Method(tv_chunked, "original"),
            "ours (the file is decoded once, over the windows' bounding box, by our CUDA decoder in chunks)": (
                ours_method()
            ),
            "ours, our CUDA decoder in chunks, one decode per window": ours_method(dedupe=False),
            "ours, the JPEG engines (gpu_decoder='nvjpeg'), the file decoded once over the windows": ours_method(
                gpu_decoder="nvjpeg"
            ),
            "ours, the JPEG engines, one region-of-interest decode per window": ours_method(
                dedupe=False, gpu_decoder="nvjpeg"
            ),
            "ours, the JPEG engines, one whole-image decode per window": ours_method(
                dedupe=False, force_path="hardware-full"
            ),
            "ours, the file prepared for random access, decoded once over the windows (our CUDA decoder)": (
                ours_method("prepared")
            ),
            "ours, the file prepared for random access, one decode per window (our CUDA decoder)": ours_method(
                "prepared", dedupe=False
            ),
            "ours, the file prepared, one decode per window, the JPEG engines given its segments": ours_method(
                "prepared", dedupe=False, force_path="hardware-roi", segments="always"
            ),
        }
        cpu_name, cpu_method = cpu_pool.method()
        methods[cpu_name] = cpu_method
        _, used = testing.decode_with_paths([big], [0], [0], [size], [size], device="cuda")
        diffs = {name: max_diff(m, [batch], refs) for name, m in methods.items()}
        summary = measure(methods, [batch], args.large_rounds, cpu_pool)
    finally:
        cpu_pool.close()
    return common.emit(
        table(
            f"one 4000x3000 photo (4:2:0, q90), 512 windows of {size}x{size} in one batch",
            summary,
            next(iter(methods)),
            diffs,
            f"our path for it: {used[0]}",
        )
    )


def segments_section(args, sizes=((750, 1000), (1200, 1600), (1500, 2000), (2250, 3000), (3000, 4000))):
    """Where the default's size threshold for segments comes from."""
    from jpeg_factory import photo_like

    lines = common.emit(
        [
            "### Files prepared for random access, one 224x224 window per decode, batches of 64: the "
            "sub-image of the window's segments or the whole file",
            "",
            "| photo (4:2:0, q90) | original file | prepared, whole file | prepared, segments | segments vs whole "
            "| max abs diff vs CPU path (segments) |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
    )
    for height, width in sizes:
        buf = io.BytesIO()
        Image.fromarray(photo_like(height, width, seed=3)).save(buf, "JPEG", quality=90, subsampling=2)
        original = as_tensor(buf.getvalue())
        prepared = as_tensor(custom_op.prepare_jpeg(buf.getvalue()))
        rng = np.random.default_rng(4)
        wins = [(int(rng.integers(0, height - 224)), int(rng.integers(0, width - 224)), 224, 224) for _ in range(256)]
        batches = [
            {
                "original": [original] * 64,
                "prepared": [prepared] * 64,
                "indices": list(range(k, k + 64)),
                "windows": wins[k : k + 64],
            }
            for k in range(0, 256, 64)
        ]
        methods = {
            "original": ours_method(dedupe=False, gpu_decoder="nvjpeg"),
            "whole": ours_method("prepared", dedupe=False, force_path="hardware-roi", segments="never"),
            "segments": ours_method("prepared", dedupe=False, force_path="hardware-roi", segments="always"),
        }
        full = custom_op.decode_jpeg(buf.getvalue())
        diff = max_diff(methods["segments"], batches, [full[:, t : t + h, l : l + w] for t, l, h, w in wins])
        r = measure(methods, batches, args.large_rounds + 1)
        cell = {k: f"{v[0]:,.0f} img/s, {v[2]:.3f} ms" for k, v in r.items()}
        lines += common.emit(
            [
                f"| {width}x{height} ({len(buf.getvalue()) / 1e6:.2f} MB) | {cell['original']} | "
                f"{cell['whole']} | {cell['segments']} | {r['segments'][0] / r['whole'][0]:.2f}x | {diff} |"
            ]
        )
    return lines + common.emit(["", "(images/s, host CPU ms per image; best of the rounds)", ""])


# ---------------------------------------------------------------------------------------------------
# The first calls of a fresh process


def warmup_probe(args):
    """Runs in a process of its own: prints one JSON line with the timings of the first calls."""
    t0 = time.perf_counter()
    gpu.load_library()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    files, prepared_files, windows = load_sample(args)
    originals, prepared = [as_tensor(d) for d in files], [as_tensor(d) for d in prepared_files]
    if args.warmup_probe == "torchvision":
        _, method = torchvision_method()
    elif args.warmup_probe == "ours-nvjpeg":
        method = ours_method(gpu_decoder="nvjpeg")
    else:
        method = ours_method("prepared" if args.warmup_probe == "ours-prepared" else "original")
    n = args.warmup_calls
    # Steady state: after 4n further calls, the next n (the batches keep cycling through the files).
    batches = make_batches(originals, prepared, windows, args.batch, 1 + n + 4 * n + n)

    def timed(batch):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        call(method, batch)
        torch.cuda.synchronize()
        return time.perf_counter() - wall0, time.process_time() - cpu0

    first_call = timed(batches[0])
    reserved = [torch.cuda.memory_reserved()]
    first = [timed(b) for b in batches[1 : 1 + n]]
    reserved.append(torch.cuda.memory_reserved())
    for b in batches[1 + n : 1 + 5 * n]:
        call(method, b)
    torch.cuda.synchronize()
    steady = [timed(b) for b in batches[1 + 5 * n :]]
    reserved.append(torch.cuda.memory_reserved())
    print(
        json.dumps(
            {"setup_s": setup_s, "first_call": first_call, "first": first, "steady": steady, "reserved": reserved}
        )
    )


def warmup_section(args):
    n = args.warmup_calls
    lines = common.emit(
        [
            f"### The first {n} calls of a fresh process after one warm-up call, against {n} calls in steady state",
            "",
            f"Each (method, batch size) in a process of its own, on the sample's 224x224 windows: library load "
            f"and CUDA context, one warm-up call, then {n} calls each timed on its own (the GPU synchronized "
            f"after each), then {4 * n} untimed calls, then {n} more timed the same way (steady state).",
            "",
            f"| method | batch | setup s | warm-up call ms | first {n}: images/s | host CPU ms/image | "
            f"steady {n}: images/s | host CPU ms/image | steady / first | each of the first {n} calls, ms "
            f"| each of the steady {n} calls, ms | reserved MiB (after warm-up, first, steady) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
        ]
    )
    for method in WARMUP_METHODS:
        for batch in args.batches:
            command = [
                sys.executable,
                os.path.abspath(__file__),
                "--imagenet",
                args.imagenet,
                "--warmup-probe",
                method,
                "--batch",
                str(batch),
                "--warmup-calls",
                str(n),
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
                lines += common.emit([f"| {method} | {batch} | failed (exit {done.returncode}): {tail[0]} |"])
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])

            def rate(calls, batch):
                wall, cpu = sum(c[0] for c in calls), sum(c[1] for c in calls)
                return len(calls) * batch / wall, cpu / (len(calls) * batch) * 1e3

            first_rate, first_cpu = rate(r["first"], batch)
            steady_rate, steady_cpu = rate(r["steady"], batch)
            each, each_steady = (" ".join(f"{c[0] * 1e3:.1f}" for c in r[k]) for k in ("first", "steady"))
            reserved = ", ".join(f"{m / 2**20:.0f}" for m in r["reserved"])
            lines += common.emit(
                [
                    f"| {method} | {batch} | {r['setup_s']:.2f} | {r['first_call'][0] * 1e3:.1f} | "
                    f"{first_rate:,.0f} | {first_cpu:.3f} | {steady_rate:,.0f} | {steady_cpu:.3f} | "
                    f"{steady_rate / first_rate:.2f}x | {each} | {each_steady} | {reserved} |"
                ]
            )
    return lines + common.emit(
        [
            "",
            "(ours: the original files, our CUDA decoder in chunks; ours-prepared: the prepared copies, default "
            "choice of segments; ours-nvjpeg: the original files on the JPEG engines; setup: library load and "
            "CUDA context, before the warm-up call)",
            "",
        ]
    )


# ---------------------------------------------------------------------------------------------------


def header(args) -> common.Report:
    """The report, its header filled in: the sections' Markdown is added to it as they finish."""
    import torchvision

    return common.Report(
        "GPU decode-and-crop benchmark",
        machine=common.gpu_description(),
        commit=args.commit,
        details={
            "versions": common.versions(f"torchvision {torchvision.__version__}", common.nvjpeg_description()),
            "each figure": f"best of {args.rounds} rounds (median beside it; {args.large_rounds} rounds for the "
            "large photo); host CPU = process CPU time (all threads; the CPU path adds its workers') per image",
        },
        echo=False,  # the sections print their own lines
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--images-per-round", type=int, default=2560)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--large-rounds", type=int, default=2)
    parser.add_argument(
        "--reencode-420",
        action="store_true",
        help="the sections that read the sample (sample, outputs, rrc, steps) read its photos re-encoded by "
        "Pillow at 4:2:0, quality 90, optimised Huffman tables",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        nargs="+",
        default=[0.02, 0.2],
        help="steps section: a training step's GPU work in ms per image, one table each (0.02: a small "
        "model's; 0.2: about a ResNet-50's on an H100)",
    )
    parser.add_argument(
        "--large-windows", type=int, nargs="+", default=[224, 512], help="large section: window sizes, one table each"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        metavar="SECTION",
        help=f"run only these sections ({', '.join(SECTIONS)})",
    )
    parser.add_argument(
        "--warmup-calls",
        type=int,
        default=16,
        help="warmup section: calls timed after the one warm-up call, and as many in steady state",
    )
    common.add_report_options(parser)
    parser.add_argument("--warmup-probe", choices=WARMUP_METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if not gpu.cuda_available():
        sys.exit(f"no GPU backend here: {gpu.unavailable_reason()}")
    if args.warmup_probe:
        return warmup_probe(args)
    sections = {
        "sample": sample_section,
        "outputs": outputs_section,
        "rrc": rrc_section,
        "steps": steps_section,
        "large": large_section,
        "segments": segments_section,
        "warmup": warmup_section if args.warmup_calls > 0 else None,
    }
    common.run_sections(header(args), sections, args)


if __name__ == "__main__":
    main()
