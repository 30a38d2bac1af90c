#!/usr/bin/env bash
# Host time of each phase of a batched GPU decode, per call and averaged (CUSTOM_OP_NVJPEG_TRACE=2),
# on the GPU machine: where a batch of 64 ImageNet photos spends its time.
#
#   bash bench/gpu_phases_probe.sh [OUTDIR] [extra bench_gpu.py --quick arguments]
#
# Prepared as bench/device_run.sh prepares its runs (carried libjpeg-turbo, the system g++), and using
# its build cache, so run it after device_run.sh in the same command to build nothing twice.
set -o pipefail
OUTDIR=${1:-${OUT:-phases}}
[ $# -gt 0 ] && shift
mkdir -p "$OUTDIR"
CARRY=$(pwd)/.gpu_carry
[ -d "$CARRY/jpeg/usr" ] && export CUSTOM_OP_JPEG_PREFIX=$CARRY/jpeg/usr
export CXX=${CUSTOM_OP_DEVICE_CXX:-$(command -v g++)}
export CUSTOM_OP_CACHE_DIR=${CUSTOM_OP_CACHE_DIR:-/tmp/custom_op_cache}
DATA=${CUSTOM_OP_TEST_DATA:-$CARRY/data}
CUSTOM_OP_NVJPEG_TRACE=2 timeout 150 python3 bench/bench_gpu.py --quick --imagenet "$DATA/imagenet-sample" \
  --images-per-round 1280 --rounds 3 --batches 64 "$@" > "$OUTDIR/phases.txt" 2>&1
grep "^quick" "$OUTDIR/phases.txt"
echo "mean over $(grep -c phases "$OUTDIR/phases.txt") calls (us):"
grep phases "$OUTDIR/phases.txt" | tr -d '[]' | awk '{for (i = 3; i <= NF; i++) {split($i, a, "="); s[a[1]] += a[2]; n[a[1]]++}}
  END {for (k in s) printf "  %s %.0f\n", k, s[k] / n[k]}'
echo "hardware_batch per call:"
grep -o "hardware_batch=[0-9]*" "$OUTDIR/phases.txt" | cut -d= -f2 | tr '\n' ' '; echo
