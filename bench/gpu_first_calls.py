"""How fast the first GPU batches of a process are, against the steady state (any CUDA machine).

    python bench/gpu_first_calls.py --data DIR [--out bench/results/gpu_first_calls.md]   # and gpu_first_calls.json

Each setting runs in a fresh process: one warm-up call (which loads the GPU library and sets the
device up), then 16 calls timed one by one, then 64 more as the steady state; batches of 64 random
files of DIR with 224x224 windows, a different draw each call. Settings: default (as a user's process
runs), and CUDA_MODULE_LOADING=EAGER (every kernel of every CUDA library loaded at the first CUDA call:
whether the first batches pay for loading kernels lazily).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 64

CHILD = r"""
import json, random, sys, time
import torch
sys.path.insert(0, sys.argv[2])
import custom_op

files = [p.read_bytes() for p in sorted(__import__("pathlib").Path(sys.argv[1]).iterdir())]
rng = random.Random(0)

def windows(batch):
    out = []
    for d in batch:
        info = custom_op.read_jpeg_header(d)
        h, w = min(224, info.height), min(224, info.width)
        out.append((rng.randrange(info.height - h + 1), rng.randrange(info.width - w + 1), h, w))
    return out

def call(batch):
    wins = windows(batch)
    start = time.perf_counter()
    custom_op.decode_and_crop_jpegs(batch, *zip(*wins), device="cuda")
    torch.cuda.synchronize()
    return time.perf_counter() - start

t0 = time.perf_counter()
torch.zeros(1, device="cuda")
first = call(rng.sample(files, 64))
setup = time.perf_counter() - t0
firsts = [call(rng.sample(files, 64)) for _ in range(16)]
steady = [call(rng.sample(files, 64)) for _ in range(64)]
print(json.dumps({"setup_s": setup, "first_call_s": first, "first16": firsts, "steady": steady}))
"""


def run(data: str, env_extra: dict) -> dict:
    env = dict(os.environ, **env_extra)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, data, str(ROOT)], env=env, capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    sys.path.insert(0, str(ROOT / "bench"))
    from common import Report, cpu_description

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a folder of JPEG photos")
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per setting")
    parser.add_argument("--commit", help="the commit line, where the checkout has no .git")
    parser.add_argument("--out", help="also write the report to this .md file, and its data to the .json beside it")
    args = parser.parse_args()
    import torch

    settings = {"default": {}, "CUDA_MODULE_LOADING=EAGER": {"CUDA_MODULE_LOADING": "EAGER"}}
    report = Report(
        "The first GPU batches of a process against the steady state",
        machine=f"{torch.cuda.get_device_name()}, host {cpu_description()}",
        commit=args.commit,
        details={"batches": f"{BATCH} files of {args.data} each, 224x224 windows; images/s = {BATCH} / call time"},
    )
    rows = []
    for name, env in settings.items():
        for k in range(args.repeats):
            r = run(args.data, env)
            rows.append(
                [
                    name,
                    k + 1,
                    f"{r['first_call_s']:.2f}",
                    f"{BATCH * 16 / sum(r['first16']):,.0f}",
                    f"{BATCH * len(r['steady']) / sum(r['steady']):,.0f}",
                    f"{1e3 * max(r['first16']):.1f}",
                ]
            )
            print(
                " | ".join(map(str, rows[-1])), " per-call ms:", [round(1e3 * t, 1) for t in r["first16"]], flush=True
            )
    report.table(
        ["setting", "run", "first call (s)", "calls 2-17 img/s", "calls 18-81 img/s", "slowest of 2-17 (ms)"], rows
    )
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
