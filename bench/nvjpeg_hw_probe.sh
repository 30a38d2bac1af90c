#!/usr/bin/env bash
# Runs bench/nvjpeg_hw_probe.cpp (nvJPEG's batched hardware decode alone, no torch) over a matrix of
# settings on the GPU machine; one RESULT line per setting.
#
#   bash bench/nvjpeg_hw_probe.sh [OUTDIR] [DATA_DIR]
set -o pipefail
OUTDIR=${1:-${OUT:-probe}}
DATA=${2:-${CUSTOM_OP_TEST_DATA:-$(pwd)/.gpu_extras/data}/imagenet-sample}
mkdir -p "$OUTDIR"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BIN=/tmp/nvjpeg_hw_probe
g++ -O2 -std=c++17 bench/nvjpeg_hw_probe.cpp -I"$CUDA/include" -L"$CUDA/lib64" -lnvjpeg -lcudart -lpthread -ldl -o $BIN || exit 1
run() { echo "--- $*"; LD_LIBRARY_PATH=$CUDA/lib64:$LD_LIBRARY_PATH timeout 120 $BIN "$DATA" "$@" 2>&1 | grep -v "^files\|^nvjpegJpeg" ; }
{
  LD_LIBRARY_PATH=$CUDA/lib64 $BIN "$DATA" --images 64 --set all | head -2
  if [ -n "$PROBE_RUNS" ]; then
    eval "$PROBE_RUNS"
  else
  run --set 444
  run --set 444 --roi
  run --set 444 --pinned
  run --set 444 --blocking-sync
  run --set 444 --no-pipeline
  run --set 444 --threads 2 --handles shared
  run --set 444 --threads 2 --handles own
  run --set 444 --threads 4 --handles own
  run --set 444 --batch 256
  run --set 444 --device-input
  run --set 420 --format yuv
  run --set 420 --format rgb
  run --set all --format rgb
  run --set all --format yuv
  echo "--- two processes at once, --set 444"
  run --set 444 --images 12800 & run --set 444 --images 12800; wait
  fi
} 2>&1 | tee "$OUTDIR/nvjpeg_hw_probe.txt"
