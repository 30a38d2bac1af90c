#!/usr/bin/env bash
# Nsight Compute on the chunked decode's kernels (files without restart markers) for one call of
# bench/gpu_phases.py --originals: each kernel's duration against the cycles its multiprocessors were busy
# (a launch far longer than its average multiprocessor's busy time waits on its slowest threads), its
# instructions, the threads active per instruction (of 32) and the cycles per instruction, then the full
# report (ncu's details page, and per kernel its instructions with their stall samples as CSV) in OUTDIR, and
# per kernel its stall reasons and its instructions with the most samples (bench/ncu_hot_instructions.py) in
# OUTDIR/hot_instructions.txt.
#
#   bash bench/gpu_kernels_ncu.sh OUTDIR --photos DIR [--batch 64] [--kernels REGEX] [--launches-per-call N]
#
# --kernels: default, the chunked decode's kernels (device_env.sh's chunked_kernels: those the source names);
# --launches-per-call: the chunked launches a call makes that --kernels matches (default: the batch's parts,
# one per 32 images up to 4, times the launches of those kernels a part makes, chunked_launches); the first
# three calls (gpu_phases' warm-up) are skipped and the fourth profiled. Run from the repository root on a CUDA
# machine whose ncu reads the GPU's counters (bench/device_env.sh sets the environment from .gpu_extras/).
set -euo pipefail
OUTDIR=${1:?usage: bash bench/gpu_kernels_ncu.sh OUTDIR --photos DIR [--batch 64] [--kernels REGEX]}
shift
PHOTOS=""
BATCH=64
KERNELS=""
PER_CALL=""
while [ $# -gt 0 ]; do
  case $1 in
    --photos) PHOTOS=$(cd "$2" && pwd); shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --kernels) KERNELS=$2; shift 2 ;;
    --launches-per-call) PER_CALL=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$PHOTOS" ] || { echo "give --photos" >&2; exit 2; }
# shellcheck source=bench/device_env.sh
. bench/device_env.sh
if [ -z "$KERNELS" ]; then
  KERNELS=$(chunked_kernels)
fi
if [ -z "$PER_CALL" ]; then
  parts=$(( BATCH / 32 )); parts=$(( parts < 1 ? 1 : parts > 4 ? 4 : parts ))
  PER_CALL=$(( $(chunked_launches) * parts ))
fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
python -c "from custom_op import gpu; gpu.load_library()" >"$OUTDIR/build.log" 2>&1
ncu --clock-control none --target-processes all -k "regex:$KERNELS" --launch-skip $(( 3 * PER_CALL )) \
  --launch-count "$PER_CALL" --set full --import-source no -f -o "$OUTDIR/kernels" \
  python bench/gpu_phases.py --imagenet "$PHOTOS" --originals --batch "$BATCH" --calls 1 --external-profiler \
  >"$OUTDIR/ncu.log" 2>&1
ncu -i "$OUTDIR/kernels.ncu-rep" --page details >"$OUTDIR/details.txt"
for k in ${KERNELS//|/ }; do
  ncu -i "$OUTDIR/kernels.ncu-rep" --page source --print-source sass --csv -k "regex:$k" --launch-count 1 \
    >"$OUTDIR/source_$k.csv" 2>/dev/null || true
done
awk '
  / Context [0-9]+, Stream/ { if (name != "") emit(); match($0, /[a-z_]+_kernel/); name = substr($0, RSTART, RLENGTH) }
  /^ *Duration / { dur = $NF } /^ *Elapsed Cycles / { el = $NF } /^ *SM Active Cycles / { act = $NF }
  /^ *Executed Instructions / { ins = $NF } /^ *Avg\. Active Threads Per Warp / { thr = $NF }
  /^ *Warp Cycles Per Issued Instruction / { cpi = $NF }
  function emit() { printf "%-22s %9s us  elapsed %11s cycles  SM busy %11s  %12s instructions  %5s threads/instr  %5s cycles/instr\n", name, dur, el, act, ins, thr, cpi }
  END { if (name != "") emit() }' "$OUTDIR/details.txt"
# Per kernel, the stall reasons and the instructions the warps spend the most samples on.
python bench/ncu_hot_instructions.py "$OUTDIR" >"$OUTDIR/hot_instructions.txt" || true
