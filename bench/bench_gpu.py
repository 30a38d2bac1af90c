"""GPU benchmark: decode one window per JPEG into CUDA tensors, batched, every method on the same files
and the same windows, images per second and host CPU time per image.

    python bench/bench_gpu.py --out bench/results/gpu_h100.md        # on the GPU machine

Methods:
  - torchvision.io.decode_jpeg(list, device="cuda") + slicing: torchvision's batched nvJPEG decode of
    whole images (the anchor);
  - the CPU path, one process per core: custom_op.decode_and_crop_jpeg on the CPU in a process pool,
    then one pinned copy of the batch to the GPU;
  - custom_op.decode_and_crop_jpeg(list, ..., device="cuda"): ours (hardware decoder with regions of
    interest), with variants: encoded bytes staged in pinned memory, regions of interest off
    (whole images decoded by the hardware decoder, the copy crops) to show what ROI buys, and no
    dedupe (a batch of 256 from 200 files holds 56 files twice; ours otherwise decodes each once).
Cases: the ImageNet sample (224x224 windows; images smaller than 224 give smaller windows, the same
for all methods), batch 64 and 256; one generated 4000x3000 photo with 512 random 224x224 windows.

Host CPU time is the process's CPU time (all threads, the CUDA driver's included; for the CPU path, the
workers' time) over the images decoded. Methods alternate round by round so that a slow moment of the
machine hits all alike; the best round is reported, the median beside it.
"""

from __future__ import annotations

import argparse
import datetime
import io
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import custom_op  # noqa: E402
from custom_op import gpu  # noqa: E402
from custom_op.prepare import prepare_jpeg  # noqa: E402
from common import cpu_description, random_windows  # noqa: E402


# ---------------------------------------------------------------------------------------------------
# Methods: each takes (tensors, windows) of one batch and leaves its outputs on the GPU.


def torchvision_method():
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg

    def run(tensors, windows):
        images = decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda")
        return [img[:, t:t + h, l:l + w] for img, (t, l, h, w) in zip(images, windows)]

    return f"torchvision {torchvision.__version__} decode_jpeg(list, cuda) + slice", run


def ours_method(debug=0, label="custom_op.decode_and_crop_jpeg(list, cuda)", tuning=None):
    """tuning: gpu._set_tuning keys for this method's calls (restored after each call)."""
    def run(tensors, windows):
        tops, lefts, heights, widths = zip(*windows)
        before = gpu._set_tuning(**tuning) if tuning else None
        try:
            return gpu.decode_and_crop_jpegs(tensors, tops, lefts, heights, widths, device="cuda", _debug=debug)
        finally:
            if before:
                gpu._set_tuning(**before)

    return label, run


SWEEP_KEYS = {"parse": "parse_mode", "jobs": "hardware_jobs", "gpu": "gpu_percent", "min": "gpu_min_items",
              "one": "one_format"}


def parse_setting(text):
    """'parse=1,jobs=2,gpu=25,min=0' -> gpu._set_tuning keys."""
    out = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        out[SWEEP_KEYS[key.strip()]] = int(value)
    return out


_worker_state = {}


def _cpu_worker(args):
    start = time.process_time()
    out = [custom_op.decode_and_crop_jpeg(_worker_state["files"][i], *w).numpy() for i, w in args]
    return out, time.process_time() - start


def _cpu_init(files):
    torch.set_num_threads(1)
    _worker_state["files"] = files


class CpuPool:
    """The CPU path in one process per core; results are copied to the GPU like a data loader would."""

    def __init__(self, files, processes):
        self.processes = processes
        self.pool = mp.get_context("fork").Pool(processes, initializer=_cpu_init, initargs=(files,))
        self.worker_cpu = 0.0

    def method(self):
        def run(indices, windows):
            chunks = [[] for _ in range(self.processes)]
            for k, item in enumerate(zip(indices, windows)):
                chunks[k % self.processes].append(item)
            results = self.pool.map(_cpu_worker, [c for c in chunks if c])
            outs = []
            for arrays, seconds in results:
                self.worker_cpu += seconds
                outs += [torch.from_numpy(a).pin_memory().to("cuda", non_blocking=True) for a in arrays]
            return outs

        return f"CPU path, {self.processes} processes (custom_op, libjpeg-turbo) + copy to GPU", run

    def close(self):
        self.pool.terminate()


# ---------------------------------------------------------------------------------------------------


def measure(methods, batches, rounds, cpu_pool):
    """methods: {name: (fn, uses_indices)}. Returns {name: (best img/s, median img/s, best host ms/img)}."""
    results = {name: [] for name in methods}
    n_images = sum(len(b[0]) for b in batches)
    for name, (fn, _) in methods.items():  # warm-up: builds, nvJPEG buffers, torchvision's decoder
        for tensors, indices, windows in batches[:2]:
            fn(indices if methods[name][1] else tensors, windows)
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, (fn, uses_indices) in methods.items():
            if cpu_pool is not None:
                cpu_pool.worker_cpu = 0.0
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for tensors, indices, windows in batches:
                fn(indices if uses_indices else tensors, windows)
            torch.cuda.synchronize()
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0 + (cpu_pool.worker_cpu if uses_indices and cpu_pool else 0.0)
            results[name].append((n_images / wall, cpu / n_images * 1e3))
    summary = {}
    for name, rs in results.items():
        best = max(rs, key=lambda r: r[0])
        summary[name] = (best[0], statistics.median(r[0] for r in rs), min(r[1] for r in rs))
    return summary


def make_batches(files, windows, batch, count):
    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in files]
    out = []
    for k in range(count):
        idx = [(k * batch + j) % len(files) for j in range(batch)]
        out.append(([tensors[i] for i in idx], idx, [windows[i] for i in idx]))
    return out


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
        psnr = "inf" if mse == 0 else f"{10 * np.log10(255.0 ** 2 / mse):.1f}"
        return f"max {self.max}, mean {self.sum / max(self.n, 1):.4f}, PSNR {psnr} dB ({self.n:,} values)"


def accuracy_by_path(files, windows, debug=0, tuning=None):
    """|ours - CPU path| per decoder our items went through: {path: Stats}."""
    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in files]
    before = gpu._set_tuning(**tuning) if tuning else None
    try:
        outs, used = [], []
        for k in range(0, len(tensors), 64):
            o, u = gpu.decode_and_crop_jpegs(tensors[k:k + 64], *zip(*windows[k:k + 64]), _debug=debug,
                                             _return_paths=True)
            outs += o
            used += u
    finally:
        if before:
            gpu._set_tuning(**before)
    stats = {}
    for data, win, out, path in zip(files, windows, outs, used):
        key = f"{path} {custom_op.read_jpeg_header(data).subsampling}"
        stats.setdefault(key, Stats()).add(out, custom_op.decode_and_crop_jpeg(data, *win))
    return dict(sorted(stats.items()))


def accuracy(files, windows):
    """|ours - CPU path| and |torchvision - CPU path| over the windows (uint8 levels)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in files]
    tops, lefts, heights, widths = zip(*windows)
    ours = gpu.decode_and_crop_jpegs(tensors, tops, lefts, heights, widths, device="cuda")
    tv = decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda")
    stats = {}
    for name, outs in (("ours", ours), ("torchvision", [im[:, t:t + h, l:l + w] for im, (t, l, h, w) in zip(tv, windows)])):
        mx, total, n = 0, 0.0, 0
        for data, win, out in zip(files, windows, outs):
            d = (out.cpu().int() - custom_op.decode_and_crop_jpeg(data, *win).int()).abs()
            mx, total, n = max(mx, int(d.max())), total + float(d.sum()), n + d.numel()
        stats[name] = (mx, total / n)
    return stats


def large_photo():
    from jpeg_factory import photo_like

    buf = io.BytesIO()
    Image.fromarray(photo_like(3000, 4000, seed=1)).save(buf, "JPEG", quality=90, subsampling=2)
    return buf.getvalue()


def machine():
    return f"{torch.cuda.get_device_name()}; {cpu_description()}"


def table(title, summary, anchor, extra=""):
    lines = [f"### {title}", ""] + ([extra, ""] if extra else []) + [
        "| method | images/s (best) | images/s (median) | host CPU ms/image | vs torchvision |",
        "| --- | ---: | ---: | ---: | ---: |"]
    base = summary[anchor][0]
    for name, (best, median, cpu_ms) in summary.items():
        lines.append(f"| {name} | {best:,.0f} | {median:,.0f} | {cpu_ms:.3f} | {best / base:.2f}x |")
    return lines + [""]


def load_files(args):
    """The sample's files, or (--files) only those of the chroma subsamplings named; with --prepared,
    rewritten for random access (custom_op.prepare_jpeg)."""
    files = [p.read_bytes() for p in sorted(Path(args.imagenet).iterdir())]
    if args.files != "all":
        kinds = set(args.files.split(","))
        files = [f for f in files if custom_op.read_jpeg_header(f).subsampling in kinds]
    return [prepare_jpeg(f) for f in files] if args.prepared else files


def prepared_section(files, windows, args):
    """The same photos rewritten for random access (custom_op.prepare_jpeg): nvJPEG then decodes only
    the restart segments around each window. Same windows; torchvision decodes the prepared files too."""
    prepared = [prepare_jpeg(f) for f in files]
    growth = sum(map(len, prepared)) / sum(map(len, files)) - 1
    raw_tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in files]
    tv_name, tv_fn = torchvision_method()
    _, ours_fn = ours_method()
    _, no_seg_fn = ours_method(gpu.DEBUG_NO_SEGMENTS)
    _, raw_fn = ours_method()
    methods = {tv_name + " (prepared files)": (tv_fn, False),
               "custom_op.decode_and_crop_jpeg(list, cuda) (prepared files: the segments around each window)":
                   (ours_fn, False),
               "ours, prepared files, whole files to nvJPEG (DEBUG_NO_SEGMENTS)": (no_seg_fn, False),
               "ours, the original files (as in the tables above)":
                   (lambda idx, wins: raw_fn([raw_tensors[i] for i in idx], wins), True)}
    _, used = gpu.decode_and_crop_jpegs(prepared, *zip(*windows), _return_paths=True)
    counts = {p: used.count(p) for p in sorted(set(used))}
    lines = [f"## The same {len(files)} photos prepared for random access (custom_op.prepare_jpeg, "
             f"{growth * 100:+.1f}% bytes), same 224x224 windows", "",
             f"- where our decodes ran: {counts}"]
    for path, st in accuracy_by_path(prepared, windows).items():
        lines.append(f"- ours, items decoded by {path}: {st.text()}")
    lines.append("")
    for batch in args.batches:
        batches = make_batches(prepared, windows, batch, max(1, args.images_per_round // batch))
        summary = measure(methods, batches, args.rounds, None)
        lines += table(f"prepared files, batch {batch}", summary, next(iter(methods)))
        print("\n".join(lines[-len(summary) - 4:]), flush=True)
    return lines


def segments_by_size(args, sizes=((750, 1000), (1200, 1600), (1500, 2000), (2250, 3000), (3000, 4000))):
    """Per-window decodes of prepared photos of several sizes: nvJPEG given the window's segments
    (DEBUG_ALWAYS_SEGMENTS) or the whole file, against the original file; where the default's size
    threshold (kSegmentsMinPixels in decode_cuda.cpp) comes from."""
    from jpeg_factory import photo_like

    lines = ["### Files prepared for random access, one 224x224 window per decode, batches of 64: sub-image of "
             "the window's segments or whole file", "",
             "| photo (4:2:0, q90) | original file | prepared, whole file | prepared, segments | segments vs whole |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for height, width in sizes:
        buf = io.BytesIO()
        Image.fromarray(photo_like(height, width, seed=3)).save(buf, "JPEG", quality=90, subsampling=2)
        original = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        prepared = torch.frombuffer(bytearray(prepare_jpeg(buf.getvalue())), dtype=torch.uint8)
        rng = np.random.default_rng(4)
        wins = [(int(rng.integers(0, height - 224)), int(rng.integers(0, width - 224)), 224, 224) for _ in range(256)]
        methods = {}
        for label, data, debug in (("original", original, gpu.DEBUG_NO_DEDUPE),
                                   ("whole", prepared, gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_NO_SEGMENTS),
                                   ("segments", prepared, gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_ALWAYS_SEGMENTS)):
            _, fn = ours_method(debug)
            methods[label] = ((lambda fn, data: lambda tensors, w: fn([data] * len(tensors), w))(fn, data), False)
        batches = [([original] * 64, [0] * 64, wins[k:k + 64]) for k in range(0, 256, 64)]
        r = measure(methods, batches, args.large_rounds + 1, None)
        cell = {k: f"{v[0]:,.0f} img/s, {v[2]:.3f} ms" for k, v in r.items()}
        lines.append(f"| {width}x{height} ({len(buf.getvalue()) / 1e6:.2f} MB) | {cell['original']} | {cell['whole']} | "
                     f"{cell['segments']} | {r['segments'][0] / r['whole'][0]:.2f}x |")
        print(lines[-1], flush=True)
    return lines + ["", "(images/s, host CPU ms per image; best of the rounds)", ""]


def quick(args):
    """--quick: ours alone, one line per batch size (for comparing backend settings given by env vars)."""
    files = load_files(args)
    windows = random_windows(files, 224, seed=0)
    name, fn = ours_method(args.debug)
    info = gpu.backend_info()
    setting = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("CUSTOM_OP_NVJPEG"))
    for batch in args.batches:
        batches = make_batches(files, windows, batch, max(1, args.images_per_round // batch))
        best = measure({name: (fn, False)}, batches, args.rounds, None)[name]
        print(f"quick [{setting or 'defaults'}]{' prepared' if args.prepared else ''} debug={args.debug} hw_interp={info.get('hardware_interpolation')} "
              f"batch {batch}: {best[0]:,.0f} img/s (median {best[1]:,.0f}), host CPU {best[2]:.3f} ms/img",
              flush=True)


def sweep(args):
    """--sweep: ours under each tuning setting (and torchvision), alternating round by round in one
    process, one line per setting and batch size; then each setting's pixels against the CPU path."""
    files = load_files(args)
    windows = random_windows(files, 224, seed=0)
    methods = {}
    name, fn = torchvision_method()
    methods[name] = (fn, False)
    for text in args.sweep:
        label, fn = ours_method(args.debug, f"ours [{text}]", parse_setting(text))
        methods[label] = (fn, False)
    print(f"sweep files: {args.files}{' prepared' if args.prepared else ''} ({len(files)}); defaults:",
          {k: v for k, v in gpu.backend_info().items() if k in gpu._TUNING_KEYS}, flush=True)
    for batch in args.batches:
        batches = make_batches(files, windows, batch, max(1, args.images_per_round // batch))
        for label, (best, median, cpu_ms) in measure(methods, batches, args.rounds, None).items():
            print(f"sweep [{args.files}] batch {batch}: {label}: {best:,.0f} img/s (median {median:,.0f}), host CPU {cpu_ms:.3f} ms/img",
                  flush=True)
    for text in args.sweep:
        for path, st in accuracy_by_path(files, windows, args.debug, parse_setting(text)).items():
            print(f"sweep [{args.files}] accuracy [{text}] {path}: {st.text()}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imagenet", default=str(ROOT.parent / "shared" / "data" / "imagenet-sample"))
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--images-per-round", type=int, default=2560)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--large-rounds", type=int, default=2)
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    parser.add_argument("--quick", action="store_true", help="only ours, one line per batch size")
    parser.add_argument("--debug", type=int, default=0, help="with --quick / --sweep: operator debug flags")
    parser.add_argument("--files", default="all",
                        help="with --quick / --sweep: only the sample's files of these chroma subsamplings "
                             "(comma-separated: 4:4:4,4:2:0,4:2:2,gray)")
    parser.add_argument("--prepared", action="store_true",
                        help="with --quick / --sweep: the files rewritten for random access (custom_op.prepare_jpeg)")
    parser.add_argument("--sweep", nargs="+", metavar="SETTING",
                        help="compare tuning settings, e.g. 'parse=0' 'parse=1,jobs=2' 'gpu=25,min=16'")
    args = parser.parse_args()

    if not gpu.cuda_available():
        sys.exit(f"no GPU backend here: {gpu.unavailable_reason()}")
    if args.quick:
        return quick(args)
    if args.sweep:
        return sweep(args)
    info = gpu.backend_info()
    import torchvision

    lines = [
        "# GPU decode-and-crop benchmark",
        "",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
        f"- machine: {machine()}",
        f"- versions: Python {platform.python_version()}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}, nvJPEG {info['nvjpeg_version']} (hardware decoder: "
        f"{info['hardware_engines']} engine(s) x {info['hardware_cores']} cores), custom_op CPU path on "
        f"libjpeg-turbo {custom_op._build.library_info().get('jpeg_version', '?')}",
        f"- each figure: best of {args.rounds} rounds (median beside it); host CPU = process CPU time "
        "(all threads; the CPU path adds its workers') per image",
        "",
    ]

    files = [p.read_bytes() for p in sorted(Path(args.imagenet).iterdir())]
    windows = random_windows(files, 224, seed=0)
    cpu_pool = CpuPool(files, args.processes)
    try:
        methods = {}
        defaults = {k: int(v) for k, v in info.items() if k in gpu._TUNING_KEYS}
        variants = [torchvision_method(), ours_method()]
        if defaults.get("gpu_percent", 0) > 0:
            variants.append(ours_method(label="ours, JPEG engines only (gpu_percent=0: bit-exact)",
                                        tuning={"gpu_percent": 0}))
        variants += [ours_method(label="ours, session 2's setting (whole-file parse, RGB for 4:4:4 and gray: "
                                       "parse_mode=0, one_format=0)",
                                 tuning={"parse_mode": 0, "hardware_jobs": 1, "gpu_percent": 0, "one_format": 0}),
                     ours_method(gpu.DEBUG_NO_DEDUPE, "ours, a file repeated in a batch decoded once per window "
                                                      "(as torchvision does; batch 256 repeats 56 of the 200 files)"),
                     ours_method(gpu.DEBUG_PINNED_INPUTS, "ours, encoded bytes staged in pinned memory"),
                     ours_method(gpu.DEBUG_NO_ROI, "ours, ROI off (whole image decoded, copy crops)")]
        for name, fn in variants:
            methods[name] = (fn, False)
        cpu_name, cpu_fn = cpu_pool.method()
        methods[cpu_name] = (cpu_fn, True)
        anchor = next(iter(methods))
        _, used = gpu.decode_and_crop_jpegs(files, *zip(*windows), _return_paths=True)
        counts = {p: used.count(p) for p in sorted(set(used))}
        acc = accuracy(files, windows)
        lines.append(f"## ImageNet sample: {len(files)} photos, 224x224 windows")
        lines.append("")
        lines.append(f"- where our decodes ran: {counts}")
        lines.append(f"- |GPU - CPU path| over these windows: ours max {acc['ours'][0]}, mean {acc['ours'][1]:.3f}; "
                     f"torchvision max {acc['torchvision'][0]}, mean {acc['torchvision'][1]:.3f}")
        lines.append(f"- our tuning: {defaults}")
        for path, st in accuracy_by_path(files, windows).items():
            lines.append(f"- ours, items decoded by {path}: {st.text()}")
        for path, st in accuracy_by_path(files, windows, gpu.DEBUG_GPU_BATCHED_ALL).items():
            lines.append(f"- every item sent to the GPU-hybrid batched decoder, {path}: {st.text()}")
        lines.append("")
        for batch in args.batches:
            batches = make_batches(files, windows, batch, max(1, args.images_per_round // batch))
            summary = measure(methods, batches, args.rounds, cpu_pool)
            lines += table(f"batch {batch}", summary, anchor)
            print("\n".join(lines[-len(summary) - 4:]), flush=True)
    finally:
        cpu_pool.close()
    lines += prepared_section(files, windows, args)

    big = large_photo()
    rng = np.random.default_rng(2)
    big_windows = [(int(rng.integers(0, 3000 - 224)), int(rng.integers(0, 4000 - 224)), 224, 224) for _ in range(512)]
    cpu_pool = CpuPool([big], args.processes)
    try:
        tv_name, tv_fn = torchvision_method()

        def tv_chunked(tensors, wins):  # 64 whole 12-megapixel images at a time keeps memory in bounds
            out = []
            for k in range(0, len(tensors), 64):
                out += [o.clone() for o in tv_fn(tensors[k:k + 64], wins[k:k + 64])]
            return out

        cpu_name, cpu_fn = cpu_pool.method()
        methods = {tv_name + " (64 at a time)": (tv_chunked, False)}
        for name, fn in (ours_method(label="ours (the file is decoded once, over the windows' bounding box)"),
                         ours_method(gpu.DEBUG_NO_DEDUPE, "ours, one ROI decode per window"),
                         ours_method(gpu.DEBUG_NO_DEDUPE | gpu.DEBUG_NO_ROI, "ours, one whole decode per window")):
            methods[name] = (fn, False)
        # The same photo prepared for random access: each window's decode reads only its segments.
        prepared_big = torch.frombuffer(bytearray(prepare_jpeg(big)), dtype=torch.uint8)
        _, prep_fn = ours_method(gpu.DEBUG_NO_DEDUPE)
        methods["ours, the file prepared for random access (prepare_jpeg), one decode per window (its segments)"] = (
            lambda tensors, wins: prep_fn([prepared_big] * len(tensors), wins), False)
        methods[cpu_name] = (cpu_fn, True)
        batches = make_batches([big], [big_windows[0]], 512, 1)
        batches = [(batches[0][0], [0] * 512, big_windows)]
        _, used = gpu.decode_and_crop_jpegs([big], [0], [0], [224], [224], _return_paths=True)
        summary = measure(methods, batches, args.large_rounds, cpu_pool)
        lines += table("one 4000x3000 photo (4:2:0, q90), 512 windows of 224x224 in one batch", summary,
                       next(iter(methods)), f"our path for it: {used[0]}")
    finally:
        cpu_pool.close()

    lines += segments_by_size(args)

    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
