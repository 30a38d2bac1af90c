"""Our CUDA decoder's kernels, one photo at a time (any CUDA machine).

    python bench/bench_cuda_kernels.py [--imagenet DIR] [--photos 24] [--out bench/results/cuda_kernels_h100.md]

Each photo is prepared for random access (custom_op.prepare_jpeg) and decoded whole, alone in its
call, a few times over; torch.profiler gives each kernel's mean GPU time. Alone,
a photo's decode launch lasts as long as the decode of its longest restart segment by one thread, so
the table says how fast one GPU thread decodes (the longest segment's bytes per microsecond), which
is what sets the decoder's speed on a batch: a launch lasts as long as its slowest thread. The
photos are the same on every run (evenly spaced through DIR in name order; photo-like images this
script generates where DIR does not exist), so that two checkouts' runs on one machine compare photo
by photo: run each checkout's script, or ``bench/device_run.sh --compare`` for the GPU benchmark.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402

import custom_op  # noqa: E402
from custom_op import gpu, testing  # noqa: E402

# The kernels of a call, in the order they run (segment_decoder.h; files in ordinary memory are
# uploaded by a copy, not by a kernel).
KERNELS = ("find_segments", "decode_segments", "idct_blocks", "write_windows")


def kernel_times(data: torch.Tensor, height: int, width: int, calls: int) -> dict[str, float]:
    """Mean GPU microseconds of each of our decoder's kernels in one call decoding the whole image."""

    def call():
        return custom_op.decode_and_crop_jpegs([data], 0, 0, height, width, device="cuda")

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    out = {}
    for event in prof.key_averages():
        match = re.search(r"(\w+)_kernel", event.key)
        total = getattr(event, "device_time_total", 0)
        if match and match.group(1) in KERNELS and total > 0:
            out[match.group(1)] = total / calls
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--photos", type=int, default=24)
    parser.add_argument("--calls", type=int, default=10, help="timed calls per photo")
    common.add_report_options(parser)
    args = parser.parse_args()
    if not gpu.cuda_available():
        sys.exit(f"no GPU backend here: {gpu.unavailable_reason()}")

    report = common.Report(
        "Our CUDA decoder's kernels, one photo per call",
        machine=common.gpu_description(),
        commit=args.commit,
        details={
            "versions": common.versions(),
            "photos": common.photos_detail(args.imagenet, args.photos),
            "each figure": f"mean GPU time of a kernel over {args.calls} calls (after 3 untimed), microseconds; "
            "each call decodes one prepared photo, whole",
        },
    )
    rows, sums, skipped = [], {k: 0.0 for k in KERNELS}, []
    for name, original in common.spaced_photos(args.imagenet, args.photos):
        prepared = custom_op.prepare_jpeg(original)
        info = custom_op.read_jpeg_header(prepared)
        tensor = torch.frombuffer(bytearray(prepared), dtype=torch.uint8)
        _, paths = testing.decode_with_paths([tensor], 0, 0, info.height, info.width, device="cuda")
        if paths[0] != "cuda":
            skipped.append(f"{name}: decoded by {paths[0]}")
            continue
        _, _, lengths = common.scan_facts(prepared)
        times = kernel_times(tensor, info.height, info.width, args.calls)
        for k in KERNELS:
            sums[k] += times.get(k, 0.0)
        decode = times.get("decode_segments", float("nan"))
        rows.append(
            [
                name,
                f"{info.width}x{info.height} {info.subsampling}",
                len(lengths),
                max(lengths),
                *(f"{times.get(k, 0.0):.1f}" for k in KERNELS),
                f"{max(lengths) / decode:.2f}",
            ]
        )
    rows.sort(key=lambda r: r[3])
    rows.append(["all photos", "", "", "", *(f"{sums[k]:.1f}" for k in KERNELS), ""])
    report.table(
        [
            "photo",
            "size, sampling",
            "segments",
            "longest segment (bytes)",
            "find_segments (us)",
            "decode_segments (us)",
            "idct_blocks (us)",
            "write_windows (us)",
            "longest segment / decode (bytes per us)",
        ],
        rows,
        align="llrrrrrrr",
    )
    if skipped:
        report.items(skipped)
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
