# The environment of a run on a CUDA machine, for the scripts that run there from the repository root
# (bench/device_run.sh, bench/gpu_decoder_checks.sh): `. bench/device_env.sh`. It sets
#   ROOT    the repository root (the working directory)
#   EXTRAS  $ROOT/.gpu_extras, the optional folder (ignored by git) of what the machine lacks:
#             .gpu_extras/jpeg/usr   libjpeg-turbo headers and library (dpkg -x of libjpeg62-turbo{,-dev})
#             .gpu_extras/nvjpeg     nvJPEG include/ and lib/ (the nvidia-nvjpeg wheel's nvidia/cu13)
#             .gpu_extras/data       imagenet-sample/ and odd-jpegs/ (else CUSTOM_OP_TEST_DATA or ../shared/data)
#   DATA    the folder of the real photos (it may not exist)
# and exports CUSTOM_OP_JPEG_PREFIX, CUSTOM_OP_NVJPEG_PREFIX and CUSTOM_OP_TEST_DATA where .gpu_extras
# has them, CUSTOM_OP_CACHE_DIR (default /tmp/custom_op_cache), CXX and PYTHONUNBUFFERED. machine_lines
# prints the machine for a run's env.txt.
# shellcheck shell=bash
ROOT=$(pwd)
EXTRAS=$ROOT/.gpu_extras
export PYTHONUNBUFFERED=1

# libjpeg-turbo: the one in .gpu_extras when present (the development machine's libjpeg62-turbo API; the GPU
# machine's own headers are libjpeg-turbo8's, with the libjpeg 8 API), else the system's.
# (The tests' JPEG writer, a separate program, keeps the system's libjpeg.)
if [ -d "$EXTRAS/jpeg/usr" ]; then
  export CUSTOM_OP_JPEG_PREFIX=$EXTRAS/jpeg/usr
fi
# nvJPEG: the CUDA toolkit's when present, else the one in .gpu_extras.
if ! python3 custom_op/_nvjpeg_paths.py >/dev/null 2>&1 && [ -d "$EXTRAS/nvjpeg" ]; then
  export CUSTOM_OP_NVJPEG_PREFIX=$EXTRAS/nvjpeg
fi
if [ -d "$EXTRAS/data" ]; then
  export CUSTOM_OP_TEST_DATA=$EXTRAS/data
fi
# shellcheck disable=SC2034  # used by the scripts that source this file
DATA=${CUSTOM_OP_TEST_DATA:-$ROOT/../shared/data}
export CUSTOM_OP_CACHE_DIR=${CUSTOM_OP_CACHE_DIR:-/tmp/custom_op_cache}
# The system's g++, whatever CXX says: a CXX that links its own copy of libstdc++'s stream code into
# extensions (as some CUDA images' /opt/gcc does) makes them crash formatting their first error
# message. CUSTOM_OP_DEVICE_CXX picks another compiler.
export CXX=${CUSTOM_OP_DEVICE_CXX:-$(command -v g++)}

# The machine, for a run's env.txt: the date, the GPUs, torch (and torchvision where installed), the
# libjpeg-turbo and nvJPEG found, the cores, the compiler and the commit (BENCH_COMMIT, else git's).
machine_lines() {
  date -Is
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import importlib.util, torch
tv = importlib.util.find_spec('torchvision') and __import__('torchvision').__version__
print('torch', torch.__version__, 'cuda', torch.version.cuda, *(['torchvision', tv] if tv else []))"
  echo "libjpeg: $(python3 custom_op/_jpeg_paths.py 2>&1 | tail -1)"
  echo "nvjpeg:  $(python3 custom_op/_nvjpeg_paths.py 2>&1 | tail -1)"
  echo "cores: $(nproc); CXX=$CXX; commit: ${BENCH_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo 'unknown (no .git here)')}"
}

# The chunked decode's kernels in a checkout's segment_decoder.cu (default: this one), for the scripts that pick
# them out of a profile: chunked_kernels prints them as a regex (every kernel whose name holds "chunk", e.g.
# guess_chunks|sync_chunks|chunk_starts|write_chunks), chunked_launches how many launches of them a batch's part
# makes (each kernel once, the rounds' kSyncRounds times).
chunked_kernels() {
  tr '\n' ' ' <"${1:-$ROOT}/custom_op/csrc/cuda/segment_decoder.cu" |
    grep -oE '__global__ void +(__launch_bounds__\([^)]*\) +)?[a-z_]*chunk[a-z_]*_kernel' |
    sed -E 's/.* ([a-z_]+)_kernel$/\1/' | paste -sd'|' -
}
chunked_launches() {
  local kernels rounds
  kernels=$(chunked_kernels "${1:-$ROOT}" | tr '|' '\n' | grep -c .)
  rounds=$(grep -oE 'constexpr int kSyncRounds = [0-9]+' "${1:-$ROOT}/custom_op/csrc/cuda/segment_decoder.cu" |
    grep -oE '[0-9]+$')
  echo $((kernels + rounds - 1))
}
