#!/usr/bin/env bash
# Builds bench/chunk_time_probe.cu with nvcc and runs it on the ImageNet sample's photos (without restart
# markers) in chunks of 512 bytes, a batch of 64 (in a random order, seeded), decoded from the guesses and
# from the true starts, on any CUDA machine. Prints, with the machine, to stdout and to
# OUTDIR/chunk_time_probe.txt, and writes the report (bench/chunk_time_probe_report.py) to $REPORT (default
# bench/results/chunk_time_probe.md, its data in the .json beside it).
#   bash bench/chunk_time_probe.sh [OUTDIR]
set -eo pipefail
OUTDIR=${1:-${OUT:-chunk-time-probe}}
mkdir -p "$OUTDIR"
# shellcheck source=bench/device_env.sh
. bench/device_env.sh
FLAGS=$(python3 - <<'PY'
import sys
sys.path.insert(0, "tests")
import jpeg_core_build as b
print(" ".join(f.replace("-Wl,", "-Xlinker=", 1) if f.startswith("-Wl,") else f for f in b._jpeg_flags()))
PY
)
# shellcheck disable=SC2086
nvcc -std=c++17 -O3 -arch=native --expt-relaxed-constexpr -I. bench/chunk_time_probe.cu -o "$OUTDIR/chunk_time_probe" $FLAGS 2>"$OUTDIR/build.log"
mapfile -t photos < <(python3 -c "import random, sys, glob; p = sorted(glob.glob(sys.argv[1] + '/*.JPEG')); random.Random(0).shuffle(p); print('\n'.join(p))" "$DATA/imagenet-sample")
{
  machine_lines
  for start in guess true; do
    "$OUTDIR/chunk_time_probe" 512 64 "$start" "${photos[@]}"
  done
} | tee "$OUTDIR/chunk_time_probe.txt"
python3 bench/chunk_time_probe_report.py "$OUTDIR/chunk_time_probe.txt" --out "${REPORT:-bench/results/chunk_time_probe.md}"
