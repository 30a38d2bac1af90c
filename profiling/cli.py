"""Command line of the step-time tool: `python -m profiling --compare pil,roi` from the repository root."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
import time
import warnings
from dataclasses import asdict

import torch

from datasets import PIPELINES, CorruptImageError, GpuBackendUnavailableError, check_pipeline, list_jpegs
from datasets.errors import dataset_message
from datasets.synthetic import make_synthetic_set, prepared_copy

from .arg_types import image_size as _image_size
from .arg_types import non_negative as _non_negative
from .arg_types import positive as _positive
from .model import SMALL_CNN, build_model
from .plot import plot_step_times
from .report import format_table, run_stats, write_summary
from .trace import PROFILER_WARMUP_STEPS
from .train_loop import RunConfig, run_pipeline

# What each pipeline does, for --help; every name in PIPELINES needs a line.
PIPELINE_HELP = {
    "pil": "PIL decodes the whole image, then a random 256x256 window is cropped out (torchvision's ImageFolder way)",
    "roi": "the window is drawn from the JPEG header and only it is decoded, with custom_op",
    "gpu": "the workers send the encoded bytes; the training process decodes the batch on the GPU "
    "(needs custom_op's GPU backend)",
    "pil-rrc": "torchvision's RandomResizedCrop on a PIL image: full decode, a window of 8% to 100% of the "
    "image, resize to 224",
    "rrc": "the same RandomResizedCrop windows drawn from the header alone, decoded and resized in one custom_op call",
    "gpu-rrc": "the workers send the encoded bytes and rrc's windows; the training process decodes and resizes "
    "the batch on the GPU in one call, with rrc's pixels on prepared files (needs custom_op's GPU backend)",
}

DESCRIPTION = (
    """\
Train a model for a few steps over a JPEG folder with one or more input pipelines and show where the
step time goes: data wait (blocked in next() on the DataLoader), host-to-device copy, compute. Prints
p50/p95 per phase and the share of the step spent waiting for data; with --compare, one table side by
side with the speedup over the first pipeline. Writes torch.profiler traces and TensorBoard scalars
per pipeline, a JSON summary and a PNG plot into --logdir.

Pipelines:
"""
    + "\n".join(
        textwrap.fill(PIPELINE_HELP[name], width=100, initial_indent=f"  {name:9}", subsequent_indent=" " * 11)
        for name in PIPELINES
    )
    + """
All apply the same further transforms (random mask, BGR, resize to 224; the rrc pipelines have resized
already)."""
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m profiling", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--data",
        metavar="FOLDER",
        help="JPEG folder (.jpg or .jpeg, any case): root/class/... or flat (default: generate the synthetic set)",
    )
    data.add_argument(
        "--layout",
        choices=("auto", "imagefolder", "flat"),
        default="auto",
        help="folder layout (default: auto = flat when FOLDER holds JPEGs itself, else "
        "imagefolder when it has sub-folders)",
    )
    data.add_argument(
        "--num-images",
        type=_positive,
        default=256,
        metavar="N",
        help="synthetic set: number of images (default: %(default)s)",
    )
    data.add_argument(
        "--image-size",
        type=_image_size,
        default=(533, 800),
        metavar="HxW",
        help="synthetic set: HEIGHTxWIDTH (default: 533x800, landscape)",
    )
    data.add_argument(
        "--prepared",
        action="store_true",
        help="synthetic set: decode a copy prepared for random access (custom_op.prepare_jpeg, lossless), "
        "made once in the cache beside it: windows decode in proportion to their size, and on a GPU the "
        "gpu pipeline's files go to custom_op's own CUDA decoder (for a folder of your own, prepare it "
        "with python -m custom_op prepare SRC DST and give --data DST)",
    )
    data.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="synthetic set: cache folder (default: <root>/custom_op/datasets, root = "
        "$CUSTOM_OP_CACHE_DIR, $XDG_CACHE_HOME or ~/.cache)",
    )
    data.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="a corrupt file stops the run naming it (raise, default) or is reported and "
        "replaced by the next file (skip)",
    )

    run = p.add_argument_group("run")
    which = run.add_mutually_exclusive_group()
    which.add_argument("--pipeline", metavar="NAME", help=f"one of {', '.join(PIPELINES)} (default: roi)")
    which.add_argument(
        "--compare", metavar="A,B,...", help="run these pipelines under identical settings, e.g. pil,roi"
    )
    run.add_argument("--batch-size", type=_positive, default=32, metavar="N", help="default: %(default)s")
    run.add_argument(
        "--workers",
        type=_non_negative,
        metavar="N",
        help="DataLoader worker processes (default: the usable CPUs minus one, at least 1: "
        "one core trains, the others decode)",
    )
    run.add_argument("--steps", type=_positive, default=100, metavar="N", help="measured steps (default: %(default)s)")
    run.add_argument(
        "--warmup",
        type=_non_negative,
        default=10,
        metavar="N",
        help="steps run before the measured ones, not counted (default: %(default)s)",
    )
    run.add_argument(
        "--profile-steps",
        type=_non_negative,
        default=3,
        metavar="N",
        help="steps traced with torch.profiler after the measured ones (0: no trace; default: %(default)s)",
    )
    run.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    run.add_argument(
        "--seed", type=int, default=0, help="seed of windows, transforms, sample order and model (default: %(default)s)"
    )
    run.add_argument(
        "--model", default=SMALL_CNN, help=f"{SMALL_CNN} (default) or a torchvision model name such as resnet18"
    )
    run.add_argument(
        "--decode-ahead",
        type=_non_negative,
        default=2,
        metavar="N",
        help="gpu and gpu-rrc: the next N batches decode on background threads while a step trains "
        "(custom_op.decode_ahead); 0: each batch decodes in its step, timed as its own phases "
        "(default: %(default)s)",
    )
    run.add_argument("--amp", action="store_true", help="mixed precision: the forward pass under bfloat16 autocast")
    run.add_argument(
        "--channels-last",
        action="store_true",
        help="the model and its input batches in channels-last memory format (faster convolutions on GPUs)",
    )
    run.add_argument(
        "--threads",
        type=_positive,
        metavar="N",
        help="torch threads in the training process (default on the CPU with workers: "
        "the CPUs minus the workers, at least 1; else torch's default)",
    )
    p.add_argument(
        "--logdir",
        metavar="DIR",
        help="where traces, TensorBoard events, summary.json and step_times.png go "
        "(default: runs/profiling/<date-time>)",
    )
    return p


def _pipelines(args, parser) -> list[str]:
    names = [n.strip() for n in args.compare.split(",")] if args.compare else [args.pipeline or "roi"]
    if any(not n for n in names):
        parser.error(f"--compare takes names separated by commas, got {args.compare!r}")
    if len(set(names)) != len(names):
        parser.error(f"--compare lists a pipeline twice: {args.compare!r}")
    for n in names:
        if n not in PIPELINES:
            parser.error(f"unknown pipeline {n!r}; choose from {', '.join(PIPELINES)}")
    return names


def _device(text: str, parser) -> str:
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(text)
    except RuntimeError:
        parser.error(f"unknown device {text!r}; use cpu, cuda, cuda:N or auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"device {text!r} asked for, but CUDA is not available in this torch build or machine")
    if dev.type not in ("cpu", "cuda"):
        parser.error(f"device {text!r}: only cpu and cuda are supported")
    return text


def _default_threads(device: str, workers: int) -> int | None:
    """Torch threads for the training process on the CPU: the cores the workers leave, at least one.

    Workers already run one thread each. With torch's default of one thread per core, the training
    process's OpenMP threads would compete with the workers for the same cores, and a parallel region
    waits for its slowest thread: a descheduled one stalls the whole operator.
    """
    if torch.device(device).type != "cpu" or workers == 0:
        return None
    return max(1, usable_cpus() - workers)


def usable_cpus() -> int:
    """CPUs this process may run on (taskset / cgroup affinity), not all CPUs of the host."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _warm_page_cache(paths: list[str]) -> int:
    # Every pipeline should find the files in the page cache, not only the ones that run after the first.
    total = 0
    for path in paths:
        try:
            with open(path, "rb") as f:
                total += len(f.read())
        except OSError:
            pass  # an unreadable file is a corrupt file: the dataset reports it, as --on-error says
    return total


def settings_text(cfg: RunConfig) -> str:
    """The run's settings in words, for the printout and the plot's title."""
    n = cfg.profile_steps
    profiled = (
        f", then {n} profiled step{'s' if n != 1 else ''} (after {PROFILER_WARMUP_STEPS} profiler warm-up step)"
        if n
        else ""
    )
    return (
        f"model {cfg.model}, device {cfg.device}, batch {cfg.batch_size}, workers {cfg.workers}, "
        f"{cfg.warmup} warm-up + {cfg.steps} measured steps{profiled}"
    )


def main(argv: list[str] | None = None) -> int:
    # Leave the caller's torch thread setting as it was (main() also runs inside tests).
    threads_before = torch.get_num_threads()
    try:
        return _main(argv)
    finally:
        torch.set_num_threads(threads_before)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    pipelines = _pipelines(args, parser)
    if args.prepared and args.data is not None:
        parser.error(
            "--prepared applies to the synthetic set; prepare a folder of your own with "
            "python -m custom_op prepare SRC DST and give --data DST"
        )
    if args.workers is None:
        args.workers = max(1, usable_cpus() - 1)
    device = _device(args.device, parser)
    threads = args.threads or _default_threads(device, args.workers)
    if threads:
        torch.set_num_threads(threads)
    try:
        for name in pipelines:
            check_pipeline(name)
        build_model(args.model, num_classes=2)  # an unknown name fails now, not after a first run
    except (ValueError, RuntimeError) as e:
        parser.error(str(e))

    logdir = args.logdir or os.path.join("runs", "profiling", time.strftime("%Y%m%d-%H%M%S"))
    try:
        if args.data is None:
            h, w = args.image_size
            root = str(make_synthetic_set(args.num_images, h, w, seed=0, cache_dir=args.cache_dir))
            if args.prepared:
                root = str(prepared_copy(root))
        else:
            root = args.data
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            files = list_jpegs(root, layout=args.layout)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"python -m profiling: error: {e}", file=sys.stderr)
        return 2
    # What the listing leaves out, as the tool's own message rather than Python's warning format.
    for w in caught:
        print(f"python -m profiling: warning: {w.message}", file=sys.stderr)

    nbytes = _warm_page_cache(files.paths)
    print(
        f"data: {root} ({len(files.paths)} JPEGs, {nbytes / 1e6:.1f} MB, {files.layout} layout, "
        f"{len(files.classes)} class(es))"
    )
    cfg = RunConfig(
        data=root,
        layout=files.layout,
        batch_size=args.batch_size,
        workers=args.workers,
        steps=args.steps,
        warmup=args.warmup,
        profile_steps=args.profile_steps,
        device=device,
        seed=args.seed,
        model=args.model,
        on_error=args.on_error,
        amp=args.amp,
        channels_last=args.channels_last,
        decode_ahead=args.decode_ahead,
    )
    print(
        f"settings: {settings_text(cfg)}, seed {cfg.seed}, torch threads {torch.get_num_threads()}, "
        f"{usable_cpus()} usable CPUs"
    )

    results = {}
    for name in pipelines:
        print(f"running {name} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        try:
            results[name] = run_pipeline(name, cfg, os.path.join(logdir, name), files=files)
        except CorruptImageError as e:
            print("failed", flush=True)
            message = " ".join(dataset_message(e).splitlines())
            if cfg.on_error == "raise":
                message = (
                    f"corrupt file {message}; rerun with --on-error skip to skip such files and list them at the end"
                )
            print(f"python -m profiling: error: pipeline {name}: {message}", file=sys.stderr)
            return 1
        except (GpuBackendUnavailableError, ValueError) as e:
            print("failed", flush=True)
            print(f"python -m profiling: error: pipeline {name}: {e}", file=sys.stderr)
            return 1
        print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)

    stats = {n: run_stats(r, cfg.batch_size) for n, r in results.items()}
    print()
    print(format_table(stats))
    for n, r in results.items():
        if r.skipped_files:
            print(f"\n{n}: skipped {len(r.skipped_files)} corrupt file(s): " + ", ".join(r.skipped_files))

    title = "\n".join(
        [
            f"{' vs '.join(pipelines)}: {cfg.steps} measured steps (after {cfg.warmup} warm-up)",
            f"model {cfg.model}, device {device}, batch {cfg.batch_size}, workers {cfg.workers}, "
            f"torch threads {torch.get_num_threads()}",
            f"data {os.path.basename(os.path.normpath(root))} ({len(files.paths)} JPEGs, {files.layout} layout)",
        ]
    )
    plot_path = plot_step_times(results, os.path.join(logdir, "step_times.png"), title=title)
    summary_path = os.path.join(logdir, "summary.json")
    config = {**asdict(cfg), "pipelines": pipelines, "torch_threads": torch.get_num_threads()}
    dataset = {
        "root": root,
        "files": len(files.paths),
        "bytes": nbytes,
        "layout": files.layout,
        "classes": len(files.classes),
    }
    write_summary(
        summary_path,
        config=config,
        dataset=dataset,
        results=results,
        stats=stats,
        plot_path=plot_path,
        command="python -m profiling " + " ".join(shlex.quote(a) for a in argv),
    )
    print(f"\nlogs in {logdir}/")
    print(f"  summary: {summary_path}")
    print(f"  plot:    {plot_path}")
    for n, r in results.items():
        traces = ", ".join(os.path.basename(t) for t in r.trace_files) or "none (--profile-steps 0)"
        print(f"  {n}: TensorBoard events and traces in {r.log_dir}/ ({traces})")
    print(f"  scalars: tensorboard --logdir {logdir}   (then open http://localhost:6006)")
    print(
        "  traces:  open a *.pt.trace.json in https://ui.perfetto.dev (or chrome://tracing); TensorBoard "
        "shows them with the torch-tb-profiler plugin"
    )
    return 0
