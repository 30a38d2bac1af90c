"""Probe: does the GPU path go faster when several threads call it at once? (the hardware batched
decode is synchronous: while one call waits on the JPEG engines, another thread's call can parse and
queue; each concurrent call takes a decode state of its own). Prints images/s and host CPU time per
image for a few (threads, batch per call) settings, every thread on its own CUDA stream, on the
ImageNet sample's 224x224 windows.

    python bench/gpu_threads_probe.py --imagenet DIR [--images 2560] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import commit_description, cpu_description, random_windows  # noqa: E402

import custom_op  # noqa: E402


def run(files, windows, threads, batch, images):
    per_thread = images // threads
    barrier = threading.Barrier(threads + 1)

    def work(k):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            barrier.wait()
            done, i = 0, k * 17
            while done < per_thread:
                idx = [(i + j) % len(files) for j in range(batch)]
                custom_op.decode_and_crop_jpegs(
                    [files[j] for j in idx],
                    [windows[j][0] for j in idx],
                    [windows[j][1] for j in idx],
                    [windows[j][2] for j in idx],
                    [windows[j][3] for j in idx],
                    device="cuda",
                )
                done += batch
                i += batch
            stream.synchronize()

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for t in pool:
        t.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = per_thread * threads
    return n / wall, cpu / n * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imagenet", required=True)
    parser.add_argument("--images", type=int, default=2560)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {torch.cuda.get_device_name()}; {cpu_description()}; commit: {commit_description(ROOT)}", flush=True
    )
    files = [
        torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in sorted(Path(args.imagenet).iterdir())
    ]
    windows = random_windows([f.numpy().tobytes() for f in files], 224, 0)
    settings = [(1, 64), (2, 32), (2, 64), (4, 16), (4, 64), (1, 256), (2, 128)]
    run(files, windows, 1, 64, 640)  # warm-up: library load, device setup
    best = {s: (0.0, 0.0) for s in settings}
    for _ in range(args.rounds):
        for s in settings:
            rate, cpu = run(files, windows, *s, args.images)
            if rate > best[s][0]:
                best[s] = (rate, cpu)
    for (threads, batch), (rate, cpu) in best.items():
        print(f"threads {threads} x batch {batch}: {rate:,.0f} img/s, host CPU {cpu:.3f} ms/img", flush=True)


if __name__ == "__main__":
    main()
