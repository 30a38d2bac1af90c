"""Builds and drives tests/jpeg_core_harness.cpp: the GPU decoding core (custom_op/csrc/jpeg_core) on the CPU.

The harness is compiled once per version of its sources (the .cpp and every jpeg_core header) into a cache
directory, like tests/jpeg_factory.py's writer: CUSTOM_OP_JPEG_CORE_HARNESS_DIR chooses it (default: a
per-user folder under the system temp dir). Two builds exist: the plain one (-O2) and a sanitized one
(AddressSanitizer + UBSan, every report fatal) for the fuzz test. When no C++ compiler, no libjpeg headers or
no sanitizer runtime is available, `HarnessUnavailable` is raised; tests turn it into a skip.

libjpeg-turbo is found the way the extension's build finds it (custom_op/_jpeg_paths.py, loaded by path so
that torch is never imported), so the harness compares with the library the CPU path uses.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "jpeg_core_harness.cpp"
CORE_DIR = ROOT / "custom_op" / "csrc" / "jpeg_core"
# The GPU decoder's sources whose settings the harness's runs take (gpu_constant).
GPU_DECODER = ROOT / "custom_op" / "csrc" / "cuda" / "segment_decoder.cu"
GPU_DECODER_HEADER = ROOT / "custom_op" / "csrc" / "cuda" / "segment_decoder.h"
GPU_EXECUTOR = ROOT / "custom_op" / "csrc" / "cuda" / "segment_executor.cpp"
SYNC_DECODE = CORE_DIR / "sync_decode.h"
_CACHE_ENV = "CUSTOM_OP_JPEG_CORE_HARNESS_DIR"

COMMON_FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Wshadow", f"-I{ROOT}"]
VARIANTS = {
    "plain": ["-O2"],
    "sanitized": ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"],
}
# Segment flags (custom_op/csrc/jpeg_core/huffman.h), chunk flags (sync_decode.h) and the harness's own.
BAD_CODE, EARLY_MARKER, OVERRUN, TRAILING_DATA, BAD_ARGUMENTS = 1, 2, 4, 8, 16
BAD_MARKER, UNSYNCED = 32, 64
SEGMENT_NOT_FOUND = 1 << 31
LANES_DISAGREE = 1 << 29  # stage 3 on lanes gave other than the one thread's walk
MEETINGS_DISAGREE = 1 << 28  # rounds that meet earlier decodes gave other than decodes to the chunk's end


class HarnessUnavailable(RuntimeError):
    """The harness cannot be built here."""


_built: dict[str, Path] = {}
_errors: dict[str, str] = {}


def _cache_dir() -> Path:
    configured = os.environ.get(_CACHE_ENV)
    if configured:
        return Path(configured)
    uid = os.getuid() if hasattr(os, "getuid") else "u"
    return Path(tempfile.gettempdir()) / f"custom_op_jpeg_core_harness_{uid}"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _jpeg_paths():
    """custom_op/_jpeg_paths.py, loaded by path (importing custom_op would import torch)."""
    spec = importlib.util.spec_from_file_location("_tests_jpeg_paths", ROOT / "custom_op" / "_jpeg_paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jpeg_flags() -> list[str]:
    module = _jpeg_paths()
    try:
        found = module.find_libjpeg_turbo()
    except module.LibjpegTurboNotFound as error:
        raise HarnessUnavailable(f"libjpeg-turbo not found: {str(error).splitlines()[0]}") from None
    flags = [f"-I{d}" for d in found.include_dirs] + [f"-L{d}" for d in found.library_dirs]
    flags += [f"-Wl,-rpath,{d}" for d in found.rpath_dirs] + [f"-l{name}" for name in found.libraries]
    return flags


def jpeg_include_flags() -> list[str]:
    """The -I flags for libjpeg-turbo's headers."""
    return [f for f in _jpeg_flags() if f.startswith("-I")]


def static_libjpeg() -> Path | None:
    """libjpeg-turbo's static library (libjpeg.a), which holds its internal functions (the shared library exports
    only the API): beside the shared library the build found, or in the usual folders; None when absent."""
    module = _jpeg_paths()
    try:
        folders = [Path(d) for d in module.find_libjpeg_turbo().library_dirs]
    except module.LibjpegTurboNotFound:
        folders = []
    folders += [Path(d) for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")]
    return next((d / "libjpeg.a" for d in folders if (d / "libjpeg.a").is_file()), None)


def sources() -> list[Path]:
    return [SOURCE] + sorted(CORE_DIR.glob("*.h"))


def harness_path(variant: str = "plain") -> Path:
    """The compiled harness of this variant ("plain" or "sanitized"), building it if needed."""
    if variant in _built:
        return _built[variant]
    if variant in _errors:
        raise HarnessUnavailable(_errors[variant])
    try:
        compiler = _compiler()
        if compiler is None:
            raise HarnessUnavailable("no C++ compiler (c++/g++/clang++, or $CXX)")
        jpeg_flags = _jpeg_flags()
        command_tail = COMMON_FLAGS + VARIANTS[variant]
        digest = hashlib.sha256()
        for path in sources():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        digest.update(" ".join([compiler] + command_tail + jpeg_flags).encode())
        cache = _cache_dir()
        target = cache / f"jpeg_core_harness-{variant}-{digest.hexdigest()[:16]}"
        if not (target.is_file() and os.access(target, os.X_OK)):
            cache.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=cache)
            os.close(fd)
            try:
                result = subprocess.run(
                    [compiler, *command_tail, str(SOURCE), "-o", temp, *jpeg_flags], capture_output=True, text=True
                )
                if result.returncode != 0:
                    raise HarnessUnavailable(f"cannot build {SOURCE.name} ({variant}): {result.stderr.strip()[-2000:]}")
                os.chmod(temp, 0o755)
                probe = subprocess.run([temp, "check"], input=b"", capture_output=True)
                if probe.returncode != 0:  # e.g. a sanitizer runtime that cannot start here
                    raise HarnessUnavailable(f"{variant} harness does not run: {probe.stderr.decode()[-500:]}")
                os.replace(temp, target)
            finally:
                if os.path.exists(temp):
                    os.unlink(temp)
    except HarnessUnavailable as error:
        _errors[variant] = str(error)
        raise
    _built[variant] = target
    return target


def gpu_constant(path: Path, name: str) -> int:
    """An integer constant of the GPU decoder's source (`constexpr ... name = N;`), so that a run of the harness
    takes what the GPU does."""
    found = re.search(rf"constexpr\s+\w+\s+{name}\s*=\s*(\d+)\s*;", path.read_text())
    if found is None:
        raise ValueError(f"{path} defines no {name}")
    return int(found.group(1))


def unavailable_reason(variant: str = "plain") -> str | None:
    try:
        harness_path(variant)
    except HarnessUnavailable as error:
        return str(error)
    return None


def records(files) -> bytes:
    return b"".join(struct.pack("<I", len(f)) + bytes(f) for f in files)


def run(command: list[str], files, *, simd: bool | str = True, variant: str = "plain", timeout: float = 300) -> bytes:
    """Runs the harness on `files` (bytes each) and returns its stdout. `simd` picks libjpeg-turbo's code for the
    reference: True, the best its CPU detection finds (AVX2 on current x86-64); "sse2", SSE2 only
    (JSIMD_FORCESSE2=1); False, its C code (JSIMD_FORCENONE=1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSIMD_")}
    if simd is False:
        env["JSIMD_FORCENONE"] = "1"
    elif simd == "sse2":
        env["JSIMD_FORCESSE2"] = "1"
    elif simd is not True:
        raise ValueError(f"simd must be True, False or 'sse2', got {simd!r}")
    if variant == "sanitized":
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=98"
    result = subprocess.run(
        [str(harness_path(variant)), *command], input=records(files), capture_output=True, env=env, timeout=timeout
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"jpeg_core_harness {' '.join(command)} exited {result.returncode}:\n"
            f"{result.stderr.decode(errors='replace')[-6000:]}"
        )
    return result.stdout


def _decode_options(gray_output: bool, scale: int) -> list[str]:
    return (["--gray-output"] if gray_output else []) + (["--scale", str(scale)] if scale != 8 else [])


def check(
    files, *, simd: bool | str = True, variant: str = "plain", gray_output: bool = False, scale: int = 8
) -> list[dict]:
    """One summary per file: the core's decode compared with libjpeg-turbo's (see the harness's header);
    gray_output: YCbCr files decoded to grayscale on both sides; scale: decoded at scale/8 of the size (1, 2, 4
    or 8; libjpeg's scale_num, with scale_denom 8)."""
    out = run(["check", *_decode_options(gray_output, scale)], files, simd=simd, variant=variant)
    return [json.loads(line) for line in out.decode().splitlines()]


def dump(files, *, simd: bool | str = True, gray_output: bool = False, scale: int = 8) -> list[dict]:
    """Per file: the summary plus the arrays: core_coef / ref_coef (lists of per-component planes, shape
    (block_rows, blocks_per_row, 64), natural order), core_pixels / ref_pixels (output_height, output_width, C)
    and segment_flags. gray_output, scale: as for check."""
    out = run(["dump", *_decode_options(gray_output, scale)], files, simd=simd)
    results, pos = [], 0
    for _ in files:
        end = out.index(b"\n", pos)
        info = json.loads(out[pos:end])
        pos = end + 1
        if info["core_error"]:
            results.append(info)
            continue

        def take(count, dtype):
            nonlocal pos
            nbytes = count * np.dtype(dtype).itemsize
            array = np.frombuffer(out, dtype=dtype, count=count, offset=pos)
            pos += nbytes
            return array

        shape = (info["output_height"], info["output_width"], info["out_components"])
        planes = [tuple(p) + (64,) for p in info["planes"]]
        info["core_coef"] = [take(int(np.prod(p)), "<i2").reshape(p) for p in planes]
        info["core_pixels"] = take(int(np.prod(shape)), np.uint8).reshape(shape)
        info["ref_coef"] = [take(int(np.prod(p)), "<i2").reshape(p) for p in planes]
        info["ref_pixels"] = take(int(np.prod(shape)), np.uint8).reshape(shape)
        info["segment_flags"] = take(info["segments"], "<u4")
        results.append(info)
    assert pos == len(out), "harness output not fully parsed"
    return results


def chunked(
    files,
    chunk_bytes=(256,),
    *,
    rounds: int | None = 2,
    sweep: bool = True,
    band: bool = False,
    parts: int = 1,
    slots: int = 0,
    guesses: int = 0,
    cut: int | None = None,
    variant: str = "plain",
) -> list[dict]:
    """Per file: the summary of the chunked decode (custom_op/csrc/jpeg_core/sync_decode.h), with one entry in
    "runs" per chunk size of `chunk_bytes`: its flags, how many chunks were decoded again in the rounds of
    sync_chunk (at most `rounds`; None: until nothing changes) and in the sweep after them (`sweep`), and,
    where it flagged nothing, its coefficients compared with libjpeg's (see the harness's header). band: only
    the middle third of the MCU rows is decoded, from the chunks through its last block, as a window's decode
    does. parts: stage 4 decodes each chunk in that many parts (split_scan), where the chunk size allows. slots: 0 for
    one record a chunk (decode_chunk, sync_chunk and the sweep), k >= 1 for k records a chunk (guess_slot, sync_slot,
    walk_slots; at most the MCU's blocks, `guesses` of them guessed, all where 0), -1 for the GPU decoder's slots
    (slot_layout). cut (with band): a window's first try, the stages run on the scan's first `cut` bytes (0: the
    GPU decoder's estimate for the band, window_scan_bytes); each run says whether window_cut_short holds."""
    command = ["chunked", "--chunk", ",".join(str(int(c)) for c in chunk_bytes)]
    command += ["--rounds", str(-1 if rounds is None else rounds)]
    if not sweep:
        command.append("--no-sweep")
    if band:
        command.append("--band")
    if cut is not None:
        command += ["--cut", str(int(cut))]
    command += ["--parts", str(int(parts)), "--slots", str(int(slots)), "--guesses", str(int(guesses))]
    command += ["--walk-budget", str(gpu_constant(GPU_DECODER, "kSweepBudget"))]
    out = run(command, files, variant=variant)
    return [json.loads(line) for line in out.decode().splitlines()]


def transcode(
    files,
    *,
    interval: int = 0,
    rows: int = 0,
    optimize: bool = False,
    hostile: int | None = None,
    long_codes: int | None = None,
    one_table: bool = False,
    variant: str = "plain",
) -> list[bytes | None]:
    """The same coefficients re-encoded losslessly by libjpeg as baseline files with a restart interval of
    `interval` MCUs (or one segment per `rows` MCU rows); None where libjpeg refused a file. hostile=SEED also
    randomises coefficients and quantisation tables (no longer lossless: it makes IDCT stress tests).
    long_codes=SEED writes Huffman tables of 16-bit codes that start with eight ones (the seed picks which
    symbols get the few short codes); one_table: every component uses the same tables."""
    command = ["transcode", "--interval", str(interval), "--rows", str(rows)]
    if optimize:
        command.append("--optimize")
    if hostile is not None:
        command += ["--hostile", str(hostile)]
    if long_codes is not None:
        command += ["--long-codes", str(long_codes)] + (["--one-table"] if one_table else [])
    out = run(command, files, variant=variant)
    results, pos = [], 0
    while pos < len(out):
        (length,) = struct.unpack_from("<I", out, pos)
        results.append(out[pos + 4 : pos + 4 + length] if length else None)
        pos += 4 + length
    assert len(results) == len(files)
    return results
