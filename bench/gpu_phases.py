"""Where the time of one GPU call goes: the host's, in torch.profiler's record_function ranges of the
operator's phases (custom_op::resized_crop_plan, gpu_outputs, gpu_claim, gpu_queue, gpu_finish,
cpu_fallback, resized_crop_resample), and the GPU's, per kernel; per call and per image. By default the
resized crop of prepared copies of the ImageNet sample with RandomResizedCrop windows; with
--originals the window decode of the original files (224x224 windows), by our CUDA decoder in chunks
(testing.gpu_options(force_path="cuda")); with --large one decode per window of bench_gpu.py's generated
4000x3000 photo (512x512 windows, its large section's row "our CUDA decoder in chunks, one decode per window").

    python bench/gpu_phases.py --imagenet DIR [--batch 256] [--calls 20] [--originals [--chunk-bytes N]]
                               [--trace FILE]
    python bench/gpu_phases.py --large [--batch 512] [--calls 20]

--pinned puts the files in pinned memory, from which the GPU copies them itself: a call then waits on the GPU's
work rather than on the host's copies of the files into the upload buffer, which bound the large photo's calls
from ordinary memory (each of a call's 512 windows uploads the scan through its rows).

--trace writes the calls' timeline (each kernel's stream, start and duration) as a Chrome trace, for
chrome://tracing or Perfetto, or for a script to read the chain of a call's kernels from.

With --external-profiler it only makes the calls (three to warm up, then --calls), for a profiler that
watches the process from outside (Nsight Compute: bench/gpu_kernels_ncu.sh); torch.profiler would take the
GPU's counters from it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_gpu  # noqa: E402
import common  # noqa: E402

import custom_op  # noqa: E402
from custom_op import testing  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imagenet", help="the photos (all but --large)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--originals", action="store_true", help="window decode of the originals, in chunks")
    parser.add_argument("--large", action="store_true", help="one decode per window of a 4000x3000 photo")
    parser.add_argument("--chunk-bytes", type=int, help="with --originals or --large: testing.gpu_options' chunk size")
    parser.add_argument("--external-profiler", action="store_true", help="make the calls only (see above)")
    parser.add_argument("--trace", help="also write torch.profiler's Chrome trace of the calls to this file")
    parser.add_argument("--pinned", action="store_true", help="the files in pinned memory (see above)")
    args = parser.parse_args()
    if not args.large and not args.imagenet:
        parser.error("--imagenet is required (but with --large)")
    files = [bench_gpu.large_photo()] if args.large else [p.read_bytes() for p in sorted(Path(args.imagenet).iterdir())]
    idx = [k % len(files) for k in range(args.batch)]
    if args.large:
        windows = bench_gpu.large_windows(512, args.batch)
        tensors = [bench_gpu.as_tensor(files[0])] * args.batch
        run = bench_gpu.ours_method(force_path="cuda", dedupe=False, chunk_bytes=args.chunk_bytes).run
        op = "custom_op::decode_jpegs_cuda"
    elif args.originals:
        windows = common.random_windows(files, 224, seed=0)
        tensors = [bench_gpu.as_tensor(files[i]) for i in idx]
        run = bench_gpu.ours_method(force_path="cuda", chunk_bytes=args.chunk_bytes).run
        op = "custom_op::decode_jpegs_cuda"
    else:
        prepared = [custom_op.prepare_jpeg(f) for f in files]
        windows = bench_gpu.rrc_windows(files)
        tensors = [bench_gpu.as_tensor(prepared[i]) for i in idx]
        run = bench_gpu.rrc_ours("cuda")
        op = "custom_op::decode_and_resized_crop_jpegs_cuda"
    batch_windows = windows if args.large else [windows[i] for i in idx]
    if args.pinned:  # each tensor pinned once: the large photo's batch repeats one tensor
        pinned = {}
        for t in tensors:
            if id(t) not in pinned:
                pinned[id(t)] = t.pin_memory()
        tensors = [pinned[id(t)] for t in tensors]
    for _ in range(3):
        run(tensors, batch_windows)
    torch.cuda.synchronize()
    if args.external_profiler:
        for _ in range(args.calls):
            run(tensors, batch_windows)
        torch.cuda.synchronize()
        return
    # The calls' wall time and host CPU without the profiler, whose own work lengthens the host's waits.
    timed = []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.calls):
            run(tensors, batch_windows)
        torch.cuda.synchronize()
        timed.append(((time.perf_counter() - wall) / args.calls, (time.process_time() - cpu) / args.calls))
    wall, cpu = min(timed)
    fallbacks = testing.cuda_decoder_fallbacks()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.calls):
            run(tensors, batch_windows)
        torch.cuda.synchronize()
    if args.trace:
        prof.export_chrome_trace(args.trace)
    events = prof.key_averages()
    rows = [e for e in events if e.key.startswith("custom_op")]
    total = sum(e.cpu_time_total for e in events if e.key == op)
    print(f"batch {args.batch}, {args.calls} calls; operator total {total / args.calls / 1e3:.3f} ms per call")
    print(f"unprofiled: wall {wall * 1e3:.3f} ms per call (best of 3 runs), host CPU {cpu * 1e3:.3f} ms per call")
    fallbacks = (testing.cuda_decoder_fallbacks() - fallbacks) / args.calls
    print(f"items our decoder gave to the CPU path: {fallbacks} per call")
    print("host:")
    for e in sorted(rows, key=lambda e: -e.cpu_time_total):
        print(
            f"{e.key:60s} {e.count // args.calls:4d}/call {e.cpu_time_total / args.calls / 1e3:8.3f} ms/call "
            f"{e.cpu_time_total / args.calls / args.batch:8.2f} us/img"
        )

    print("GPU kernels:")
    # Kernels and copies are the events with time of their own on the device.
    kernels = [e for e in events if e.self_device_time_total > 0]
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:12]:
        ms = e.self_device_time_total / args.calls / 1e3
        print(f"{e.key[:60]:60s} {e.count // args.calls:4d}/call {ms:8.3f} ms/call")


if __name__ == "__main__":
    main()
