#!/usr/bin/env bash
# The GPU tests and the GPU benchmark in one command, for the GPU machine (the device tool runs it in
# the repository root; results go to $OUT there, or to the folder given as first argument).
#
#   bash bench/device_run.sh [OUTDIR] [--tests-only|--bench-only|--quick-only|--sweep-only] [pytest arguments...]
#
# SWEEP="parse=0 parse=1,jobs=2 gpu=25,min=8 ..." also compares those tuning settings of ours (and
# torchvision) side by side in one process after the tests (bench_gpu.py --sweep; gpu._set_tuning),
# once per file set in SWEEP_FILES (default "all"; e.g. "all 4:4:4": also the 4:4:4 photos alone).
#
# Files that machine lacks can travel in .gpu_carry/ (ignored by git, named in the tool's carry):
#   .gpu_carry/jpeg/usr   libjpeg-turbo headers and library (dpkg -x of libjpeg62-turbo{,-dev})
#   .gpu_carry/nvjpeg     nvJPEG include/ and lib/ (the nvidia-nvjpeg wheel's nvidia/cu13)
#   .gpu_carry/data       imagenet-sample/ and odd-jpegs/ (../shared/data does not travel)
set -o pipefail
OUTDIR=${1:-${OUT:-gpu-run}}
[ $# -gt 0 ] && shift
WHAT=all
case "$1" in --tests-only) WHAT=tests; shift ;; --bench-only) WHAT=bench; shift ;; --quick-only) WHAT=quick; shift ;;
  --sweep-only) WHAT=sweep; shift ;; esac
mkdir -p "$OUTDIR"
ROOT=$(pwd)
CARRY=$ROOT/.gpu_carry
export PYTHONUNBUFFERED=1

# libjpeg-turbo: the carried one when present (the development machine's libjpeg62-turbo API; the GPU
# machine's own headers are libjpeg-turbo8's, with the libjpeg 8 API), else the system's.
# (The tests' JPEG writer, a separate program, keeps the system's libjpeg.)
if [ -d "$CARRY/jpeg/usr" ]; then
  export CUSTOM_OP_JPEG_PREFIX=$CARRY/jpeg/usr
fi
# nvJPEG: the CUDA toolkit's when present, else the carried one.
if ! python3 custom_op/_nvjpeg_paths.py >/dev/null 2>&1 && [ -d "$CARRY/nvjpeg" ]; then
  export CUSTOM_OP_NVJPEG_PREFIX=$CARRY/nvjpeg
fi
[ -d "$CARRY/data" ] && export CUSTOM_OP_TEST_DATA=$CARRY/data
DATA=${CUSTOM_OP_TEST_DATA:-$ROOT/../shared/data}
export CUSTOM_OP_CACHE_DIR=${CUSTOM_OP_CACHE_DIR:-/tmp/custom_op_cache}
export CUSTOM_OP_GPU_REPORT=$OUTDIR/gpu_test_report.json

{
  date -Is
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'torchvision', torchvision.__version__)"
  echo "libjpeg: $(python3 custom_op/_jpeg_paths.py 2>&1 | tail -1)"
  echo "nvjpeg:  $(python3 custom_op/_nvjpeg_paths.py 2>&1 | tail -1)"
  nproc
} 2>&1 | tee "$OUTDIR/env.txt"

# Probe: a few files through the GPU path in a process of its own; if it crashes, the same under
# cuda-gdb with CUSTOM_OP_NVJPEG_TRACE=1, for a backtrace and the last setup step.
PROBE=$(mktemp --suffix=.py)
cat > "$PROBE" <<'PY'
import glob, sys, torch, custom_op
from custom_op import gpu
torch.zeros(1, device="cuda")
files = [open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/imagenet-sample/*"))[:8]]
outs, paths = gpu.decode_and_crop_jpegs(files, 0, 0, 64, 64, _return_paths=True)
refs = [custom_op.decode_and_crop_jpeg(f, 0, 0, 64, 64) for f in files]
print("probe paths", paths, "max |diff|", max(int((o.cpu().int() - r.int()).abs().max()) for o, r in zip(outs, refs)), flush=True)
print(gpu.backend_info(), flush=True)
PY
# The image sets CXX=/opt/gcc/bin/g++, whose extensions carry their own copy of libstdc++'s stream
# code: on that machine the CPU library built with it crashed (SIGSEGV) formatting its first error
# message, and ours in std::ostream. The system's g++ (same GCC 13.3) links libstdc++ normally.
export CXX=${CUSTOM_OP_DEVICE_CXX:-$(command -v g++)}
echo "building with CXX=$CXX" | tee -a "$OUTDIR/env.txt"

echo "=== probe" | tee -a "$OUTDIR/env.txt"
if ! PYTHONPATH=$ROOT timeout 180 python3 "$PROBE" "$DATA" 2>&1 | tail -5 | tee -a "$OUTDIR/env.txt"; then
  echo "=== probe failed: again under cuda-gdb, with a trace" | tee -a "$OUTDIR/env.txt"
  PYTHONPATH=$ROOT CUSTOM_OP_NVJPEG_TRACE=1 timeout 240 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt \
    --args python3 "$PROBE" "$DATA" 2>&1 | grep -v "^\[New Thread\|^\[Thread .* exited\|^\[Detaching" | tail -40 \
    | tee -a "$OUTDIR/env.txt"
fi

# Our decoder alone under each backend setting (env vars read when the device context is made).
if [ -n "$QUICK_SETTINGS" ] || [ "$WHAT" = quick ]; then
  for setting in ${QUICK_SETTINGS:-"CUSTOM_OP_NVJPEG_X=1"}; do
    env ${setting//,/ } timeout 60 python3 bench/bench_gpu.py --quick --imagenet "$DATA/imagenet-sample" \
      --images-per-round 1280 --rounds 2 2>&1 | grep "^quick\|Error" | tee -a "$OUTDIR/env.txt"
  done
  env CUSTOM_OP_NVJPEG_TRACE=2 timeout 60 python3 bench/bench_gpu.py --quick --imagenet "$DATA/imagenet-sample" \
    --images-per-round 256 --rounds 1 --batches 64 2>&1 | grep "phases" | tail -4 | tee -a "$OUTDIR/env.txt"
  [ "$WHAT" = quick ] && exit 0
fi

status=0
if [ "$WHAT" != bench ] && [ "$WHAT" != quick ] && [ "$WHAT" != sweep ]; then
  start=$(date +%s)
  timeout 230 python3 -m pytest -q -rs tests/test_gpu.py "$@" 2>&1 | tee "$OUTDIR/tests.log" || status=1
  echo "tests: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
  if [ -n "$ALT_TEST_ENV" ]; then  # the tests again under another backend setting, e.g. CUSTOM_OP_NVJPEG_HW_COLOR=rgb
    env $ALT_TEST_ENV CUSTOM_OP_GPU_REPORT=$OUTDIR/gpu_test_report_alt.json timeout 150 python3 -m pytest -q \
      tests/test_gpu.py 2>&1 | grep -E "^_{3,} test|^(FAILED|ERROR)|passed|failed" | sed "s/^/[$ALT_TEST_ENV] /" \
      | tee -a "$OUTDIR/env.txt"
  fi
fi
if [ -n "$SWEEP" ]; then
  : > "$OUTDIR/sweep.txt"
  for files in ${SWEEP_FILES:-all}; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout 200 python3 bench/bench_gpu.py --imagenet "$DATA/imagenet-sample" --files "$files" --sweep $SWEEP \
      $SWEEP_ARGS 2>&1 | grep "^sweep\|Error" | tee -a "$OUTDIR/sweep.txt"
    echo "sweep ($files): $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
  done
fi
if [ "$WHAT" != tests ] && [ "$WHAT" != quick ] && [ "$WHAT" != sweep ]; then
  start=$(date +%s)
  timeout 240 python3 bench/bench_gpu.py --imagenet "$DATA/imagenet-sample" --out "$OUTDIR/gpu_bench.md" $BENCH_ARGS \
    2>&1 | tee "$OUTDIR/bench.log" || status=1
  echo "bench: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
fi
exit $status
