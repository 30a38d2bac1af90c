#!/usr/bin/env bash
# Our CUDA decoder's robustness, on any CUDA machine, run from the repository root: the soak (many batches
# with damaged files: no crash, no sticky CUDA error, the CPU path's outcomes, flat memory), then
# compute-sanitizer's memcheck, racecheck and initcheck on a short run of the same, then the report.
# bench/gpu_decoder_soak.py says what each run decodes and checks.
#
#   bash bench/gpu_decoder_checks.sh [OUTDIR] [--batches N] [--soak-only | --sanitizers-only]
#                                    [--tools memcheck,racecheck,initcheck] [--out REPORT.md]
#
# OUTDIR (default $OUT, else ./gpu-checks) gets env.txt, build.log, soak.log and soak.json (the soak's
# output and result), sanitizer.txt (compute-sanitizer's version, or why it did not run), and for each
# tool sanitizer_<tool>.log (the tool's report with the run's output) and sanitizer_<tool>.json (the
# run's result); each run also leaves a .exit file (its exit code and seconds). The report goes to --out
# (default bench/results/gpu_decoder_checks.md, its data in the .json beside it).
#
# --batches: the soak's batches of 64 items (default 10000; the report gives the time taken). --soak-only and
# --sanitizers-only run one part; the report then takes the other part's results from an earlier run in
# the same OUTDIR, if there are any, and says so: where commands must be short, run the parts one after
# the other. --tools: the compute-sanitizer tools, comma-separated (synccheck is another).
#
# Environment: as bench/device_run.sh's (bench/device_env.sh: .gpu_extras/, CUSTOM_OP_CACHE_DIR, CXX);
# BENCH_COMMIT (the report's commit line, for a checkout without .git); REPORT_COMMAND (the report's
# command line, default the one run: for one without this machine's paths); SOAK_ARGS (more options of
# `gpu_decoder_soak.py soak`); SOAK_TIMEOUT (seconds, default 900), SANITIZER_TIMEOUT (seconds per tool,
# default 600); SANITIZER_ARGS (more compute-sanitizer options); COMPUTE_SANITIZER (its path).
# compute-sanitizer is looked for on PATH, in $CUDA_HOME/bin, in torch's CUDA_HOME and in
# /usr/local/cuda*/bin; without it the sanitizer checks are skipped, and the report says so.
# Exit status: 0 when every check that ran passed, 1 when one failed, 2 for a wrong argument.
set -o pipefail
COMMAND=${REPORT_COMMAND:-"bash bench/gpu_decoder_checks.sh${*:+$(printf ' %q' "$@")}"}
OUTDIR=${OUT:-gpu-checks}
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUTDIR=$1; shift; fi
BATCHES=10000
PARTS=all
TOOLS=memcheck,racecheck,initcheck
REPORT=bench/results/gpu_decoder_checks.md
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) BATCHES=${2:?--batches needs a number}; shift 2 ;;
    --soak-only) PARTS=soak; shift ;;
    --sanitizers-only) PARTS=sanitizers; shift ;;
    --tools) TOOLS=${2:?--tools needs a list}; shift 2 ;;
    --out) REPORT=${2:?--out needs a .md path}; shift 2 ;;
    *) echo "unknown argument: $1 (see the top of $0)"; exit 2 ;;
  esac
done
[ -f bench/gpu_decoder_soak.py ] || { echo "run from the repository root"; exit 2; }
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# shellcheck source=bench/device_env.sh
. "$(dirname "$0")/device_env.sh"
# The run, written beside each part's results, so that the report can tell an earlier run's apart.
GPU_CHECKS_RUN=$(date -Is)
export GPU_CHECKS_RUN

find_sanitizer() {
  local dir torch_home
  if [ -n "${COMPUTE_SANITIZER:-}" ]; then echo "$COMPUTE_SANITIZER"; return; fi
  command -v compute-sanitizer && return
  torch_home=$(python3 -c "from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or '')" 2>/dev/null)
  for dir in "${CUDA_HOME:-}" "$torch_home" /usr/local/cuda /usr/local/cuda-*; do
    if [ -n "$dir" ] && [ -x "$dir/bin/compute-sanitizer" ]; then echo "$dir/bin/compute-sanitizer"; return; fi
  done
  return 1
}
SANITIZER=$(find_sanitizer)

{
  machine_lines
  echo "compute-sanitizer: ${SANITIZER:-not found} $([ -n "$SANITIZER" ] && "$SANITIZER" --version | grep -i version | tail -1)"
} 2>&1 | tee "$OUTDIR/env.txt"

# Both libraries built (or found in the cache) before anything is timed or run under a sanitizer.
echo "=== build"
if ! timeout 900 python3 -c "
import torch, custom_op
from custom_op import gpu
torch.zeros(1, device='cuda')
print(custom_op.library_info())
print(gpu.backend_info())
assert gpu.backend_info().available, gpu.backend_info().reason
" 2>&1 | tee "$OUTDIR/build.log"; then
  echo "the libraries did not build or load: see $OUTDIR/build.log"
  exit 1
fi

# One run of the worker: NAME.log (its output), NAME.exit (exit code, seconds, the run), NAME.json
# (its result). Arguments: NAME, then the command.
run_part() {
  local name=$1 start code
  shift
  rm -f "$OUTDIR/$name".{log,exit,json}
  start=$(date +%s)
  "$@" >"$OUTDIR/$name.log" 2>&1
  code=$?
  echo "exit_code=$code seconds=$(( $(date +%s) - start )) run=$GPU_CHECKS_RUN" >"$OUTDIR/$name.exit"
  return $code
}

status=0
if [ "$PARTS" != sanitizers ]; then
  echo "=== soak: $BATCHES batches (progress every 10 s in $OUTDIR/soak.log)"
  # shellcheck disable=SC2086
  run_part soak timeout -k 30 "${SOAK_TIMEOUT:-900}" python3 bench/gpu_decoder_soak.py soak --batches "$BATCHES" \
    --json "$OUTDIR/soak.json" $SOAK_ARGS || status=1
  tail -40 "$OUTDIR/soak.log"
fi

if [ "$PARTS" != soak ]; then
  # The tools' results are replaced together, so that the report's table is one run's.
  rm -f "$OUTDIR"/sanitizer.txt "$OUTDIR"/sanitizer_*
  if [ -z "$SANITIZER" ]; then
    echo "compute-sanitizer not found (looked on PATH, in \$CUDA_HOME/bin, in torch's CUDA_HOME and in" \
      "/usr/local/cuda*/bin; COMPUTE_SANITIZER names it)" | tee "$OUTDIR/sanitizer.txt"
  else
    echo "compute-sanitizer $("$SANITIZER" --version | grep -i version | tail -1)" >"$OUTDIR/sanitizer.txt"
    for tool in ${TOOLS//,/ }; do
      echo "=== compute-sanitizer --tool $tool"
      # memcheck and initcheck see each allocation only when torch's caching allocator hands out no
      # block carved from a larger one. API errors are left to the code's own checks of every CUDA
      # call: torch and nvJPEG make calls that are meant to fail (probing for features).
      nocache=()
      case "$tool" in memcheck | initcheck) nocache=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;; esac
      # initcheck leaves nvJPEG out: its kernels and copies (the JPEG-engine decoders' warm-up when a
      # decode state is made) read buffers of its own that it never initialised (rgba2rgb, nvJPEG
      # 13.0), which would hide ours. So its kernels are excluded, and so are the checks of copy
      # calls; every kernel of ours, and the sort's, is checked.
      # Its inputs are all in ordinary memory: initcheck (compute-sanitizer 2025.3) does not count the
      # copies of cudaMemcpyBatchAsync, which bring files in pinned memory in, as writing their
      # destinations, and reports every read of them as uninitialised (0 errors with no pinned input).
      # memcheck and racecheck keep the pinned inputs.
      only_ours=()
      soak_args=()
      [ "$tool" = initcheck ] && only_ours=(--kernel-name-exclude regex=nvjpeg --check-api-memory-access no) &&
        soak_args=(--pinned 0)
      # shellcheck disable=SC2086
      run_part "sanitizer_$tool" timeout -k 30 "${SANITIZER_TIMEOUT:-600}" "${nocache[@]}" "$SANITIZER" \
        --tool "$tool" --error-exitcode 86 --report-api-errors no --target-processes application-only \
        "${only_ours[@]}" $SANITIZER_ARGS python3 bench/gpu_decoder_soak.py soak --short "${soak_args[@]}" --json "$OUTDIR/sanitizer_$tool.json" \
        || status=1
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|\"ok\"" "$OUTDIR/sanitizer_$tool.log"
      cat "$OUTDIR/sanitizer_$tool.exit"
    done
  fi
fi

echo "=== report"
python3 bench/gpu_decoder_soak.py report "$OUTDIR" --out "$REPORT" --command "$COMMAND" \
  ${BENCH_COMMIT:+--commit "$BENCH_COMMIT"} || status=1
exit $status
