"""The host's copy of files in ordinary memory into our CUDA decoder's upload buffer
(custom_op/csrc/cuda/upload_copy.cpp), timed on its own: CPU time per file for each way this host can
copy, beside memcpy and beside the 32-byte streaming stores without the source prefetch, with the files
in the cache ("warm": a few files copied over and over) and out of it ("cold": more than the caches hold,
as when the files come from a loader), on one thread and on as many as a batch's copies use (the calling
thread and kCopyHelpers). Needs a C++ compiler (CXX, else g++); no GPU.

    python bench/bench_upload_copy.py [--file-bytes 110000] [--cold-mb 1000] [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import common  # noqa: E402

import jpeg_core_build as core  # noqa: E402

CSRC = ROOT / "custom_op" / "csrc"
SOURCES = [ROOT / "bench" / "upload_copy_bench.cpp", CSRC / "cuda" / "upload_copy.cpp"]
WARM_FILES = 64  # a batch's worth of files, which stay in the cache


def copy_threads() -> int:
    """The threads that copy a batch's files: the calling thread and the copy helpers."""
    return core.gpu_constant(CSRC / "cuda" / "helper_threads.h", "kCopyHelpers") + 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file-bytes", type=int, default=110_000, help="bytes a file (an ImageNet photo's mean)")
    parser.add_argument(
        "--cold-mb", type=int, default=1000, help="megabytes of files in the cold case (more than the caches hold)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    common.add_report_options(parser)
    args = parser.parse_args(argv)

    threads = sorted({1, copy_threads()})
    cold_files = max(args.cold_mb * 1_000_000 // args.file_bytes, WARM_FILES)
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "upload_copy_bench"
        compiler = os.environ.get("CXX", "g++")
        cmd = [compiler, "-O2", "-std=c++17", "-pthread", f"-I{CSRC}", "-o", str(exe), *map(str, SOURCES)]
        subprocess.run(cmd, check=True)
        out = subprocess.run(
            [str(exe), str(args.file_bytes), str(cold_files), str(WARM_FILES), str(args.rounds), *map(str, threads)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    lines = out.strip().splitlines()
    used = lines[0].removeprefix("used: ")
    rows = [line.split("\t") for line in lines[1:]]

    report = common.Report(
        "The host's copy of files into the upload buffer",
        machine=common.cpu_description(),
        commit=args.commit,
        details={
            "files": f"{args.file_bytes:,} bytes each; cold: {cold_files:,} files ({args.cold_mb:,} MB) each copied "
            f"once a round; warm: {WARM_FILES} files copied over and over",
            "each figure": f"the mean over {args.rounds} rounds, the ways in turn within a round; CPU time summed "
            "over the copying threads, per file",
            "the decoder copies with": used,
        },
    )
    for cache in ("cold", "warm"):
        for n in threads:
            case = [r for r in rows if r[0] == cache and int(r[1]) == n]
            base = next(float(r[3]) for r in case if r[2] == "memcpy")
            report.heading(f"{cache}, {n} thread{'s' if n > 1 else ''}")
            report.table(
                ["way", "CPU us per file", "vs memcpy", "wall GB/s"],
                [[r[2], f"{float(r[3]):.2f}", f"{float(r[3]) / base:.2f}x", f"{float(r[4]):.1f}"] for r in case],
            )
    if args.out:
        report.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
