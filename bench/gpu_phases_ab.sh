#!/usr/bin/env bash
# Where the time of a chunked GPU decode goes, for several checkouts side by side on one CUDA machine: each
# checkout's library is built (in parallel, each in its own cache), then bench/gpu_phases.py --originals runs
# for every photo folder and batch size on each checkout in turn, so that every line of a comparison comes
# from the same minutes of the same machine. Prints one line per run: the operator's time per call under
# torch.profiler, the wall time and host CPU per call without it, the items it gave to the CPU path, and
# the GPU time of the chunked decode's kernels (those its segment_decoder.cu names, device_env.sh's
# chunked_kernels; summed over the batch's parts, which overlap); each run's full output goes to OUTDIR.
#
#   bash bench/gpu_phases_ab.sh OUTDIR --trees DIR [DIR...] --photos DIR [DIR...] [--batches "256 64"]
#                               [--calls 20] [-- more gpu_phases.py arguments]
#
# A tree is a directory holding a checkout, e.g. one revision exported where git is:
#     mkdir -p .gpu_extras/a && git archive REVISION | tar -x -C .gpu_extras/a
# Run from the repository root (bench/device_env.sh sets the environment from .gpu_extras/).
set -o pipefail
OUTDIR=${1:?usage: bash bench/gpu_phases_ab.sh OUTDIR --trees DIR... --photos DIR... [--batches "256 64"]}
shift
TREES=()
PHOTOS=()
BATCHES="256 64"
CALLS=20
MORE=()
while [ $# -gt 0 ]; do
  case $1 in
    --trees) shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do TREES+=("$(cd "$1" && pwd)"); shift; done ;;
    --photos) shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do PHOTOS+=("$(cd "$1" && pwd)"); shift; done ;;
    --batches) BATCHES=$2; shift 2 ;;
    --calls) CALLS=$2; shift 2 ;;
    --) shift; MORE=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ ${#TREES[@]} -gt 0 ] && [ ${#PHOTOS[@]} -gt 0 ] || { echo "give --trees and --photos" >&2; exit 2; }
# shellcheck source=bench/device_env.sh
. bench/device_env.sh
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

cache_of() { echo "${CUSTOM_OP_CACHE_DIR}_ab_$(basename "$1")"; }

for tree in "${TREES[@]}"; do
  (cd "$tree" && CUSTOM_OP_CACHE_DIR=$(cache_of "$tree") python -c "from custom_op import gpu; gpu.load_library()" \
    >"$OUTDIR/build_$(basename "$tree").log" 2>&1 || echo "build of $tree failed: $OUTDIR/build_$(basename "$tree").log") &
done
wait

for photos in "${PHOTOS[@]}"; do
  for batch in $BATCHES; do
    for tree in "${TREES[@]}"; do
      name=$(basename "$tree")_$(basename "$photos")_$batch
      log=$OUTDIR/phases_$name.log
      (cd "$tree" && CUSTOM_OP_CACHE_DIR=$(cache_of "$tree") python bench/gpu_phases.py --imagenet "$photos" \
        --originals --batch "$batch" --calls "$CALLS" "${MORE[@]}" >"$log" 2>&1)
      total=$(grep -o 'operator total [0-9.]* ms' "$log" | grep -o '[0-9.]*')
      wall=$(grep -o 'unprofiled: wall [0-9.]* ms' "$log" | grep -o '[0-9.]*')
      host=$(grep -o 'host CPU [0-9.]* ms per call' "$log" | grep -o '[0-9.]*')
      cpu=$(grep 'CPU path' "$log" | grep -o '[0-9.]* per call' | grep -o '[0-9.]*')
      kernels=$(sed -n '/^GPU kernels:/,$p' "$log" | grep -E "$(chunked_kernels "$tree")" |
        sed -E 's/.*anonymous namespace\)::([a-z_]+)_kernel.* ([0-9.]+) ms\/call/\1 \2/' | tr '\n' ' ')
      printf '%-40s %8s ms/call (profiled), %s ms wall, %s ms host CPU  to the CPU path %4s/call  %s\n' \
        "$name" "${total:-?}" "${wall:-?}" "${host:-?}" "${cpu:-?}" "$kernels"
    done
  done
done
