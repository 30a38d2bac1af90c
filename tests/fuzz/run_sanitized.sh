#!/usr/bin/env bash
# Builds tests/fuzz/sanitized_decode.cpp with ASan and UBSan, writes a seed corpus, and runs it.
#
#   tests/fuzz/run_sanitized.sh [--seconds S] [--seed N] [--mutants N] [--cases N] [--small]
#                               [--no-prepared] [--real N] [--corpus DIR] [-- EXTRA_HARNESS_ARGS...]
#
# --seconds S   fuzz for about S seconds (rounds of new mutations); default: one round
# --seed N      the harness's seed (default 1); different seeds give different mutations and windows
# --small       a few dozen small generated files (plus ../shared/data/odd-jpegs when present)
# --corpus DIR  use (and keep) this corpus folder instead of generating a fresh temporary one
# Exits with the harness's status: 0 all alike, 1 a mismatch, 3 a hang, else a sanitizer report.
# Findings are written to $SANITIZED_ARTIFACTS (default: a folder under the build folder).
#
# Environment:
#   CXX                        compiler (default g++, else clang++)
#   CUSTOM_OP_JPEG_PREFIX      libjpeg-turbo prefix holding include/jpeglib.h and lib/ (default: the
#                              system's, as custom_op/_jpeg_paths.py finds it)
#   CUSTOM_OP_CPU_SOURCES      folder of the csrc/cpu sources to test (default the checkout's; point it
#                              at a patched copy to try a fix without touching the checkout)
#   SANITIZED_BUILD_DIR        where the binary is built (default: a per-user cache,
#                              <root>/custom_op/sanitized with root $CUSTOM_OP_CACHE_DIR, else
#                              $XDG_CACHE_HOME, else ~/.cache); it is rebuilt only when a source or a
#                              flag changed
#   PYTHON                     python with numpy (and torch, for prepare_jpeg outputs); default python3
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SOURCES="${CUSTOM_OP_CPU_SOURCES:-$ROOT/custom_op/csrc/cpu}"
BUILD="${SANITIZED_BUILD_DIR:-${CUSTOM_OP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}}/custom_op/sanitized}"
PYTHON="${PYTHON:-python3}"

seconds=0 seed=1 mutants=40 cases=6 small=0 prepared=1 real=12 corpus=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --mutants) mutants="$2"; shift 2 ;;
    --cases) cases="$2"; shift 2 ;;
    --small) small=1; shift ;;
    --no-prepared) prepared=0; shift ;;
    --real) real="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "run_sanitized.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# ---- Compiler and libjpeg-turbo --------------------------------------------------------------------
CXX="${CXX:-$(command -v g++ || command -v clang++ || true)}"
if [[ -z "$CXX" ]]; then
  echo "run_sanitized.sh: SKIP: no C++ compiler (g++ or clang++, or \$CXX)" >&2
  exit 77
fi
mkdir -p "$BUILD"
# The same search as the extension's build, so both test the same library.
if ! jpeg_flags="$("$PYTHON" - "$ROOT" 2>"$BUILD/jpeg_paths.log" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_jpeg_paths", sys.argv[1] + "/custom_op/_jpeg_paths.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    found = module.find_libjpeg_turbo()
except module.LibjpegTurboNotFound as error:
    sys.exit(str(error))
flags = [f"-I{d}" for d in found.include_dirs] + [f"-L{d}" for d in found.library_dirs]
flags += [f"-Wl,-rpath,{d}" for d in found.rpath_dirs] + [f"-l{name}" for name in found.libraries]
print(" ".join(flags))
EOF
)"; then
  echo "run_sanitized.sh: SKIP: libjpeg-turbo headers or library not found:" \
    "$(grep -v '^ *$' "$BUILD/jpeg_paths.log" | head -n 3 | tr '\n' ' ')" >&2
  exit 77
fi

FLAGS=(-std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
       -D_GLIBCXX_ASSERTIONS -D_GLIBCXX_SANITIZE_VECTOR)
# The library's own sources that link without torch (decode_cpu.cpp, resize_cpu.cpp and prepare_cpu.cpp
# need it; the harness restates decode_cpu.cpp's decode sequence).
UNITS=(libjpeg_session entropy_decoder huffman_tables sub_image restart_index)
# Shared with the GPU library (csrc/common/); the sources include them as "common/...".
COMMON="$SOURCES/../common"
COMMON_UNITS=(exif_orientation restart_plan)

# ASan and UBSan runtimes: a one-line program tells whether this compiler has them.
probe="$BUILD/probe"
if ! echo 'int main() { return 0; }' | "$CXX" -x c++ -fsanitize=address,undefined - -o "$probe" 2>"$BUILD/probe.log" ||
   ! "$probe"; then
  echo "run_sanitized.sh: SKIP: $CXX cannot build with -fsanitize=address,undefined:" \
    "$(head -n 3 "$BUILD/probe.log" | tr '\n' ' ')" >&2
  exit 77
fi

binary="$BUILD/sanitized_decode"
inputs=("$HERE/sanitized_decode.cpp")
for unit in "${UNITS[@]}"; do inputs+=("$SOURCES/$unit.cpp"); done
for unit in "${COMMON_UNITS[@]}"; do inputs+=("$COMMON/$unit.cpp"); done
# Rebuild when a source, a header or the command changed.
stamp="$( (echo "$CXX ${FLAGS[*]} $jpeg_flags"; cat "${inputs[@]}" "$SOURCES"/*.h "$COMMON"/*.h) | sha256sum | cut -c1-16)"
if [[ ! -x "$binary" || "$(cat "$binary.stamp" 2>/dev/null)" != "$stamp" ]]; then
  echo "run_sanitized.sh: building $binary from $SOURCES" >&2
  # shellcheck disable=SC2086  # jpeg_flags is a list of flags
  "$CXX" "${FLAGS[@]}" -I"$SOURCES" -I"$SOURCES/.." "${inputs[@]}" $jpeg_flags -o "$binary.tmp"
  mv "$binary.tmp" "$binary"
  echo "$stamp" >"$binary.stamp"
fi

# ---- Corpus ----------------------------------------------------------------------------------------
if [[ -z "$corpus" ]]; then
  corpus="$(mktemp -d "${TMPDIR:-/tmp}/custom_op_sanitized_corpus.XXXXXX")"
  trap 'rm -rf "$corpus"' EXIT
fi
if [[ -z "$(ls -A "$corpus" 2>/dev/null)" ]]; then
  corpus_args=("$corpus" --real "$real")
  [[ $small -eq 1 ]] && corpus_args+=(--small)
  [[ $prepared -eq 0 ]] && corpus_args+=(--no-prepared)
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" "$HERE/make_sanitized_corpus.py" "${corpus_args[@]}"
fi
shopt -s nullglob
regressions=("$HERE"/regressions/*.jpg)
shopt -u nullglob

# ---- Run -------------------------------------------------------------------------------------------
artifacts="${SANITIZED_ARTIFACTS:-$BUILD/artifacts}"
mkdir -p "$artifacts"
# detect_leaks: a decode that leaks on an error path is a finding too. abort_on_error gives a core-free
# abort with the report on stderr; halt_on_error stops at the first report (UBSan's flag makes it fatal).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
"$binary" --seed "$seed" --mutants "$mutants" --cases "$cases" --seconds "$seconds" --artifacts "$artifacts" \
  "${extra[@]}" "$corpus" "${regressions[@]}" || status=$?
if [[ $status -ne 0 ]]; then
  echo "run_sanitized.sh: FAILED (exit $status); inputs that failed are in $artifacts" >&2
fi
exit $status
