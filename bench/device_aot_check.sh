#!/usr/bin/env bash
# On a CUDA machine: setup.py prebuilds both libraries (CPU _C and CUDA _C_cuda), and an installed
# wheel decodes on cuda without compiling anything. Builds a wheel from a clean copy of the sources
# (pip wheel --no-build-isolation --no-deps), installs it into a temp dir (pip install --no-deps
# --target), then, in a fresh python with only that dir on PYTHONPATH and an empty CUSTOM_OP_CACHE_DIR,
# decodes a few generated JPEGs on cuda and checks that both prebuilt libraries were loaded and that
# the cache holds no build. Prints PASS or FAIL (exit code 0 or 1) and the time of each step.
#
#   bash bench/device_aot_check.sh [OUTDIR]      # logs go to OUTDIR, else $OUT, else ./aot-check
#
# Prepared as bench/device_run.sh prepares its runs (bench/device_env.sh): libjpeg-turbo and nvJPEG from
# the optional folder .gpu_extras/ when the machine lacks them, CXX=the system g++; the check itself runs
# with an empty cache of its own.
# No network is used (--no-index).
set -uo pipefail
OUTDIR=${1:-${OUT:-aot-check}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

[ -f setup.py ] && [ -d custom_op ] || fail "run from the repository root"
# shellcheck source=bench/device_env.sh
. "$(dirname "$0")/device_env.sh"
# Without ninja on PATH, torch's BuildExtension compiles one file at a time.
if ! command -v ninja >/dev/null; then
  NINJA_DIR=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null) && export PATH=$NINJA_DIR:$PATH
fi
unset CUSTOM_OP_FORCE_JIT CUSTOM_OP_BUILD_EXT CUSTOM_OP_BUILD_CUDA
# Without build isolation pip installs nothing for the build: bdist_wheel must be there already.
python3 -c "import setuptools.command.bdist_wheel" 2>/dev/null || python3 -c "import wheel" 2>/dev/null \
  || fail "this python3 can build no wheel: it needs setuptools >= 70.1 or the wheel package"

{
  date -Is
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, setuptools; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'setuptools', setuptools.__version__)"
  python3 -m pip --version
  echo "libjpeg: $(python3 custom_op/_jpeg_paths.py 2>&1 | tail -1)"
  echo "nvjpeg:  $(python3 custom_op/_nvjpeg_paths.py 2>&1 | tail -1)"
  echo "CXX=$CXX ninja=$(command -v ninja) TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-<unset: the visible GPUs>} nproc=$(nproc)"
} 2>&1 | tee "$OUTDIR/aot_env.txt"

WORK=$(mktemp -d /tmp/custom_op_aot.XXXXXX)
SRC=$WORK/src WHEELS=$WORK/wheels SITE=$WORK/site CACHE=$WORK/cache
mkdir -p "$SRC" "$WHEELS" "$SITE" "$CACHE"
# A clean copy: no build/ or library left in the checkout by an earlier build can end up in the wheel.
cp -r setup.py pyproject.toml custom_op "$SRC"/
find "$SRC" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$SRC"/custom_op/*.so "$SRC"/custom_op/*.buildinfo.json

echo "=== wheel (CUSTOM_OP_BUILD_EXT=1 CUSTOM_OP_BUILD_CUDA=1: either library missing fails the build)"
start=$(now)
CUSTOM_OP_BUILD_EXT=1 CUSTOM_OP_BUILD_CUDA=1 timeout 210 python3 -m pip wheel --no-build-isolation --no-deps \
  --no-index -v -w "$WHEELS" "$SRC" > "$OUTDIR/aot_wheel_build.log" 2>&1
status=$?
echo "wheel build: $(since "$start") s (exit $status; log $OUTDIR/aot_wheel_build.log)"
grep -E "WARNING: custom_op|custom_op: " "$OUTDIR/aot_wheel_build.log" | sort -u
if [ $status -ne 0 ]; then
  tail -40 "$OUTDIR/aot_wheel_build.log"
  fail "the wheel did not build"
fi
WHEEL=$(ls "$WHEELS"/custom_op-*.whl)
python3 -m zipfile -l "$WHEEL" | grep -v "/csrc/" | tee "$OUTDIR/aot_wheel_contents.txt"
for f in "custom_op/_C\.cpython.*\.so" "custom_op/_C\.buildinfo\.json" "custom_op/_C_cuda\.cpython.*\.so" \
         "custom_op/_C_cuda\.buildinfo\.json"; do
  grep -qE "^$f " "$OUTDIR/aot_wheel_contents.txt" || fail "the wheel lacks $f"
done
python3 -c "import json, sys, zipfile; print(json.loads(zipfile.ZipFile(sys.argv[1]).read('custom_op/_C_cuda.buildinfo.json')))" \
  "$WHEEL"

echo "=== install"
start=$(now)
python3 -m pip install --no-deps --no-index --target "$SITE" "$WHEEL" > "$OUTDIR/aot_install.log" 2>&1 \
  || { tail -20 "$OUTDIR/aot_install.log"; fail "pip install --target failed"; }
echo "install: $(since "$start") s"

cat > "$WORK/check.py" <<'PY'
"""Decode generated JPEGs on cuda from the installed wheel; PASS only if nothing was compiled."""
import io
import os
import sys
import time

t0 = time.perf_counter()
site, cache = sys.argv[1], sys.argv[2]
import numpy as np
import torch
from PIL import Image

import custom_op
from custom_op import _build, gpu, testing

failures = []
# Decoders whose pixels equal the CPU path's; nvJPEG's hybrid decoders (GPUs without JPEG engines) are
# held to a bound instead.
EXACT_PATHS = {"hardware-roi", "hardware-full", "cpu"}


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


check(os.path.dirname(os.path.abspath(custom_op.__file__)) == os.path.join(site, "custom_op"),
      f"custom_op imported from the installed wheel ({custom_op.__file__})")
cpu = _build.library_info()
check(cpu["kind"] == "prebuilt" and cpu["path"].startswith(site), f"CPU library: {cpu['kind']} {cpu['path']}")
t_import = time.perf_counter() - t0

rng = np.random.default_rng(0)
datas = []
for i, subsampling in enumerate([0, 1, 2, 2, 0, 2]):  # 4:4:4, 4:2:2, 4:2:0
    h, w = 96 + 16 * i, 128 + 8 * i
    y, x = np.mgrid[0:h, 0:w]
    pixels = np.stack([(x * 2 + i) % 256, (y * 3) % 256, (x + y) % 256], -1).astype(np.uint8)
    pixels = np.clip(pixels.astype(int) + rng.integers(-8, 9, pixels.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90, subsampling=subsampling)
    datas.append(buf.getvalue())
tops, lefts = [3 * i for i in range(len(datas))], [5 * i for i in range(len(datas))]

t1 = time.perf_counter()
t_first = float("nan")
try:
    outs = custom_op.decode_and_crop_jpegs(datas, tops, lefts, 48, 64, device="cuda")
    torch.cuda.synchronize()
    t_first = time.perf_counter() - t1
    info = gpu.load_library()
    check(info.get("kind") == "prebuilt" and info["path"].startswith(site),
          f"CUDA library: {info.get('kind')} {info['path']}")
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    check(has_kernel("custom_op::decode_jpegs_cuda", "CompositeExplicitAutograd")
          and has_kernel("custom_op::decode_jpegs_cuda", "Meta"),
          "custom_op::decode_jpegs_cuda has its kernel and its fake kernel")
    _, paths = testing.decode_with_paths(datas, tops, lefts, 48, 64, device="cuda")
    for data, top, left, out, path in zip(datas, tops, lefts, outs, paths):
        ref = custom_op.decode_and_crop_jpeg(data, top, left, 48, 64)
        same_form = out.device.type == "cuda" and out.shape == ref.shape and out.dtype == torch.uint8
        check(same_form, f"window {tuple(out.shape)} on {out.device}")
        if same_form:
            d = (out.cpu().int() - ref.int()).abs()
            if path in EXACT_PATHS:
                check(int(d.max()) == 0, f"{path}: max |GPU - CPU| {int(d.max())} (must be 0)")
            else:
                check(float(d.float().mean()) < 0.5, f"{path}: mean |GPU - CPU| {float(d.float().mean()):.3f} (< 0.5)")
    stacked = custom_op.decode_and_crop_jpegs(datas, tops, lefts, 48, 64, device="cuda", stack=True)
    check(tuple(stacked.shape) == (len(datas), 3, 48, 64), f"stacked batch {tuple(stacked.shape)}")
    print(f"backend: {gpu.backend_info()}")
except Exception as e:  # reported as a failed check; the cache is still inspected below
    check(False, f"decoding on cuda raised {type(e).__name__}: {e}")

built = [os.path.join(d, f) for d, _, files in os.walk(cache) for f in files if f.endswith(".so") or f == "builds.log"]
check(not built, f"nothing compiled: the cache {cache} holds no build" + (f" (found {built})" if built else ""))
print(f"timings: python start + import {t_import:.2f} s, first batched cuda decode (with CUDA library load) {t_first:.2f} s")
print("PASS" if not failures else f"FAIL: {len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
PY

echo "=== fresh python: PYTHONPATH=$SITE, empty CUSTOM_OP_CACHE_DIR"
start=$(now)
(cd "$WORK" && env PYTHONPATH="$SITE" CUSTOM_OP_CACHE_DIR="$CACHE" TORCH_EXTENSIONS_DIR="$CACHE/torch_extensions" \
  timeout 120 python3 "$WORK/check.py" "$SITE" "$CACHE") 2>&1 | tee "$OUTDIR/aot_check.log"
status=${PIPESTATUS[0]}
echo "check: $(since "$start") s"
[ $status -eq 0 ] || fail "see the lines marked FAIL above"
rm -rf "$WORK"
echo "PASS: the wheel carries both prebuilt libraries, and the installed package decoded on cuda with them, compiling nothing"
