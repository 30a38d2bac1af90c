#!/usr/bin/env bash
# The GPU tests and the GPU benchmark in one command, on any CUDA machine, run from the repository
# root. Results go to OUTDIR (first argument, else $OUT, else ./gpu-run): env.txt,
# tests.log, gpu_test_report.json, gpu_bench.md and gpu_bench.json (bench/bench_gpu.py's report and its
# data), bench.log, and with --compare compare_bench.md (with compare_bench.json where that checkout's
# script writes one) and compare_bench.log.
#
#   bash bench/device_run.sh [OUTDIR] [--tests-only|--bench-only] [--compare CHECKOUT|REVISION] [pytest args...]
#
# --compare runs bench/bench_gpu.py of another checkout too, after ours, on the same machine and data:
# CHECKOUT is a directory holding one; a REVISION is exported from this repository's git (git archive,
# which leaves the repository as it is). On a machine that has the working tree without .git, export
# the revision where git is and copy the folder along:
#     mkdir -p .gpu_extras/before && git archive REVISION | tar -x -C .gpu_extras/before
#     bash bench/device_run.sh OUTDIR --bench-only --compare .gpu_extras/before
#
# Environment: BENCH_ARGS (more bench_gpu.py arguments for ours), COMPARE_ARGS (for the other
# checkout's script, whose options may differ), BENCH_COMMIT (the commit line of our report, since
# the machine has no .git to read it from), TESTS_TIMEOUT / BENCH_TIMEOUT (seconds, default 300 each).
#
# What the machine lacks can be put in the optional folder .gpu_extras/ (ignored by git):
#   .gpu_extras/jpeg/usr   libjpeg-turbo headers and library (dpkg -x of libjpeg62-turbo{,-dev})
#   .gpu_extras/nvjpeg     nvJPEG include/ and lib/ (the nvidia-nvjpeg wheel's nvidia/cu13)
#   .gpu_extras/data       imagenet-sample/ and odd-jpegs/ (else CUSTOM_OP_TEST_DATA or ../shared/data)
# bench/device_env.sh sets the environment from it (also CUSTOM_OP_CACHE_DIR and CXX).
set -o pipefail
OUTDIR=${OUT:-gpu-run}
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUTDIR=$1; shift; fi
WHAT=all
COMPARE=
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) WHAT=tests; shift ;;
    --bench-only) WHAT=bench; shift ;;
    --compare) COMPARE=${2:?--compare needs a checkout directory or a revision}; shift 2 ;;
    *) break ;;
  esac
done
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=bench/device_env.sh
. "$(dirname "$0")/device_env.sh"
export CUSTOM_OP_GPU_REPORT=$OUTDIR/gpu_test_report.json

machine_lines 2>&1 | tee "$OUTDIR/env.txt"

# The other checkout, resolved before anything runs, so that a wrong argument fails at once.
COMPARE_DIR=
if [ -n "$COMPARE" ]; then
  if [ -f "$COMPARE/bench/bench_gpu.py" ]; then
    COMPARE_DIR=$(cd "$COMPARE" && pwd)
  elif git -C "$ROOT" rev-parse -q --verify "$COMPARE^{commit}" >/dev/null 2>&1; then
    COMPARE_DIR=/tmp/custom_op_compare/$COMPARE
    rm -rf "$COMPARE_DIR" && mkdir -p "$COMPARE_DIR" && git -C "$ROOT" archive "$COMPARE" | tar -x -C "$COMPARE_DIR" \
      || { echo "cannot export $COMPARE" | tee -a "$OUTDIR/env.txt"; exit 2; }
  else
    echo "--compare $COMPARE: neither a directory with bench/bench_gpu.py nor a revision of a git repository here" \
      "($([ -d "$ROOT/.git" ] && echo "the repository has no such revision" || echo "no .git: export it before the call, see the top of this script"))" \
      | tee -a "$OUTDIR/env.txt"
    exit 2
  fi
  echo "compare with: $COMPARE ($COMPARE_DIR)" | tee -a "$OUTDIR/env.txt"
fi

# Probe: a few files through the GPU path in a process of its own (it also builds both libraries);
# if it crashes, the same under cuda-gdb, for a backtrace.
PROBE=$(mktemp --suffix=.py)
cat > "$PROBE" <<'PY'
import glob, sys, torch, custom_op
from custom_op import gpu, testing
torch.zeros(1, device="cuda")
files = [open(p, "rb").read() for p in sorted(glob.glob(sys.argv[1] + "/imagenet-sample/*"))[:8]]
outs, paths = testing.decode_with_paths(files, 0, 0, 64, 64, device="cuda")
refs = [custom_op.decode_and_crop_jpeg(f, 0, 0, 64, 64) for f in files]
print("probe paths", paths, "max |diff|", max(int((o.cpu().int() - r.int()).abs().max()) for o, r in zip(outs, refs)), flush=True)
print(gpu.backend_info(), flush=True)
PY
echo "=== probe" | tee -a "$OUTDIR/env.txt"
if ! PYTHONPATH=$ROOT timeout 240 python3 "$PROBE" "$DATA" 2>&1 | tail -5 | tee -a "$OUTDIR/env.txt"; then
  echo "=== probe failed: again under cuda-gdb" | tee -a "$OUTDIR/env.txt"
  PYTHONPATH=$ROOT timeout 240 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt \
    --args python3 "$PROBE" "$DATA" 2>&1 | grep -v "^\[New Thread\|^\[Thread .* exited\|^\[Detaching" | tail -40 \
    | tee -a "$OUTDIR/env.txt"
fi

status=0
if [ "$WHAT" != bench ]; then
  start=$(date +%s)
  timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -rs tests/test_gpu.py tests/test_decode_ahead.py tests/test_packed_files.py "$@" 2>&1 | tee "$OUTDIR/tests.log" || status=1
  echo "tests: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
fi
if [ "$WHAT" != tests ]; then
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-300}" python3 bench/bench_gpu.py --imagenet "$DATA/imagenet-sample" --out "$OUTDIR/gpu_bench.md" \
    ${BENCH_COMMIT:+--commit "$BENCH_COMMIT"} $BENCH_ARGS 2>&1 | tee "$OUTDIR/bench.log" || status=1
  echo "bench: $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
  if [ -n "$COMPARE_DIR" ]; then
    start=$(date +%s)
    # Its own sources build into the same cache under their own key; its script puts its checkout first
    # on sys.path, so it imports its own custom_op.
    # shellcheck disable=SC2086
    (cd "$COMPARE_DIR" && timeout "${BENCH_TIMEOUT:-300}" python3 bench/bench_gpu.py --imagenet "$DATA/imagenet-sample" \
      --out "$OUTDIR/compare_bench.md" $COMPARE_ARGS) 2>&1 | tee "$OUTDIR/compare_bench.log" || status=1
    echo "compare bench ($COMPARE): $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/env.txt"
  fi
fi
exit $status
