#!/usr/bin/env bash
# The SageMaker entry point rehearsed on the GPU machine (sm_job/rehearse.py): train.py under torchrun,
# NPROC ranks (default 1), one GPU each (nccl, DDP), an empty build cache, first with the gpu pipeline (nvJPEG decode in
# the rank), then with roi (libjpeg-turbo in the DataLoader workers) on the same cache and data.
#
#   [NPROC=2] [REPORT=bench/results/sm_job_gpu_h100.md] [BENCH_COMMIT=...] bash bench/sm_job_gpu_rehearsal.sh [OUTDIR]
#
# OUTDIR gets env.txt (the machine), rehearsal_<pipeline>.log, summary_<pipeline>.json and builds.log, and
# then the report that bench/sm_job_report.py writes from them: REPORT (default OUTDIR/sm_job_gpu.md) and its
# data in the .json beside it. BENCH_COMMIT is the report's commit line, for a checkout without .git.
#
# Prepared as bench/device_run.sh prepares its runs (bench/device_env.sh): the libjpeg-turbo in
# .gpu_extras/jpeg/usr, nvJPEG from the CUDA toolkit or .gpu_extras/nvjpeg, and the system g++; the
# rehearsals use a build cache of their own.
set -o pipefail
OUTDIR=${1:-${OUT:-sm-gpu-run}}
NPROC=${NPROC:-1}
REPORT=${REPORT:-$OUTDIR/sm_job_gpu.md}
COMMAND="NPROC=$NPROC bash bench/sm_job_gpu_rehearsal.sh${1:+ $1}"
mkdir -p "$OUTDIR"
rm -f "$OUTDIR/builds.log"
# shellcheck source=bench/device_env.sh
. "$(dirname "$0")/device_env.sh"
CACHE=${SM_REHEARSAL_CACHE:-/tmp/sm_job_cache}
rm -rf "$CACHE"
{  # key: value lines, read by bench/sm_job_report.py
  echo "date: $(date -Is)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
  python3 -c "import torch; print('torch:', torch.__version__); print('cuda:', torch.version.cuda)"
  echo "ranks: $NPROC"
  echo "cpus: $(nproc)"
  echo "compiler: $CXX"
  echo "libjpeg-turbo prefix: ${CUSTOM_OP_JPEG_PREFIX:-system}"
  echo "nvjpeg: ${CUSTOM_OP_NVJPEG_PREFIX:-from the CUDA toolkit}"
} 2>&1 | tee "$OUTDIR/env.txt"

HP="--hp num-images=256 --hp image-size=533x800 --hp crop-size=256 --hp output-size=224 --hp batch-size=32
    --hp steps=40 --hp warmup=5 --hp profile-steps=2 --hp log-every=10"
PIPELINES="gpu roi"
status=0
for pipeline in $PIPELINES; do
  dir=/tmp/sm_job_rehearsal_$pipeline
  rm -rf "$dir" "$OUTDIR/summary_$pipeline.json"
  limit=$([ $pipeline = gpu ] && echo 150 || echo 60)
  python3 -m sm_job.rehearse --dir "$dir" --cache-dir "$CACHE" --nproc $NPROC --num-gpus $NPROC --workers 8 $HP \
    --hp pipeline=$pipeline --timeout $limit 2>&1 | grep -v "USDT\|^generating" > "$OUTDIR/rehearsal_$pipeline.log" \
    || status=1
  tail -25 "$OUTDIR/rehearsal_$pipeline.log"
  cp "$dir/opt_ml/output/data/summary.json" "$OUTDIR/summary_$pipeline.json" 2>/dev/null
done
cp "$CACHE/custom_op/builds.log" "$OUTDIR/builds.log" 2>/dev/null
python3 bench/sm_job_report.py "$OUTDIR" --pipelines "${PIPELINES// /,}" --out "$REPORT" --command "$COMMAND" \
  ${BENCH_COMMIT:+--commit "$BENCH_COMMIT"} || status=1
exit $status
