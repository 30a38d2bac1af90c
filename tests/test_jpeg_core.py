"""The GPU decoding core (custom_op/csrc/jpeg_core), run on the CPU, against libjpeg-turbo.

jpeg_core is the __host__ __device__ code the CUDA kernels will run: Huffman decoding of one restart segment,
dequantisation + islow IDCT (or, in a decode scaled to 1/8, 2/8 or 4/8, the reduced IDCT libjpeg gives each
component), fancy upsampling, YCbCr -> RGB. tests/jpeg_core_harness.cpp compiles the very same headers with the
host compiler (see tests/jpeg_core_build.py), decodes files segment by segment with them, and compares with
libjpeg-turbo: coefficients with jpeg_read_coefficients, pixels with a full decode (JDCT_ISLOW, fancy upsampling,
RGB or grayscale out, scale_num/8). Every comparison is made twice, against libjpeg with its SIMD code (AVX2 or
SSE2: what the CPU path runs) and with JSIMD_FORCENONE=1 (its C code), since they differ on hostile input.

What is required everywhere: on every valid file, the core's coefficients and pixels equal libjpeg's bit for bit
and it flags nothing; on damaged files it either decodes a segment exactly as libjpeg does or reports it, never
reads or writes out of bounds (the fuzz test runs under AddressSanitizer and UBSan), and never accepts a file
libjpeg warns about.

These tests do not import custom_op (no extension build); they need a C++ compiler and libjpeg-turbo's headers,
and skip with the reason otherwise.
"""

from __future__ import annotations

import json
import platform
import random
import shutil
import subprocess

import numpy as np
import pytest

import jpeg_core_build as core
import jpeg_factory
from conftest import ROOT
from jpeg_core_cases import SAMPLINGS, SIZES, UNUSUAL_SAMPLINGS
from jpeg_core_cases import encode as _encode
from jpeg_core_cases import mutate as _mutate
from jpeg_core_cases import scan_segments as _segments

pytestmark = pytest.mark.skipif(
    core.unavailable_reason() is not None, reason=f"cannot build the jpeg_core harness: {core.unavailable_reason()}"
)

QUALITIES = [50, 90, 100]
# Restart layouts made from each generated file: the writer's own (3 MCUs), then libjpeg transcodes.
RESTARTS = [
    dict(interval=1),
    dict(interval=2, optimize=True),
    dict(interval=4),
    dict(interval=7, optimize=True),
    dict(rows=1),
]

UPSAMPLE_FULL, FANCY_H2V1, FANCY_H1V2, FANCY_H2V2, REPLICATE = 0, 1, 2, 3, 4


def _restart_variants(files):
    """Each file as it is, then transcoded (losslessly) into every layout of RESTARTS."""
    out = list(files)
    for layout in RESTARTS:
        variants = core.transcode(files, **layout)
        assert all(v is not None for v in variants), layout
        out += variants
    return out


def assert_exact(files, *, expect_methods=None, gray_output=False, scale=8, summaries=None):
    """Every file decodes with no flag, coefficients and pixels equal to libjpeg's with its default SIMD code
    (compared in numpy from the dump), with SSE2 only and with its C code (both compared in the harness), and
    the same geometry (output size, each component's IDCT size and real sample size) as libjpeg's.
    gray_output: YCbCr files decoded to grayscale on both sides; scale: decoded at scale/8 of the size;
    summaries: a list that receives each file's summary line. Returns (files, pixel values) compared."""
    dumped = core.dump(files, simd=True, gray_output=gray_output, scale=scale)
    if summaries is not None:
        arrays = ("core_coef", "ref_coef", "core_pixels", "ref_pixels", "segment_flags")
        summaries += [{k: v for k, v in d.items() if k not in arrays} for d in dumped]
    methods = set()
    values = 0
    for i, d in enumerate(dumped):
        where = (
            f"file {i} ({d.get('height')}x{d.get('width')} {d.get('sampling')}, restart {d.get('restart_interval')}, "
            f"scale {scale}/8)"
        )
        assert d["core_error"] == "", where + ": " + d["core_error"]
        assert d["ref_coef_error"] == "" and d["ref_pixel_error"] == "" and d["ref_warnings"] == 0, where
        assert d["geometry"] == d["ref_geometry"], f"{where}: core {d['geometry']}, libjpeg {d['ref_geometry']}"
        assert d["scan_error"] == 0 and d["segments_found"] == d["segments"], where
        assert not d["segment_flags"].any(), f"{where}: segment flags {sorted(set(d['segment_flags'].tolist()))}"
        assert d["inexact_blocks"] == 0, f"{where}: a valid file reached the IDCT's SIMD-inexact range"
        for c, (mine, theirs) in enumerate(zip(d["core_coef"], d["ref_coef"])):
            assert np.array_equal(mine, theirs), f"{where}: component {c} coefficients differ"
        if not np.array_equal(d["core_pixels"], d["ref_pixels"]):
            diff = np.abs(d["core_pixels"].astype(int) - d["ref_pixels"].astype(int))
            y, x, ch = np.argwhere(diff)[0]
            pytest.fail(
                f"{where}: {np.count_nonzero(diff)} pixel values differ (max {diff.max()}), "
                f"first at y={y} x={x} channel {ch}: core {d['core_pixels'][y, x, ch]} "
                f"libjpeg {d['ref_pixels'][y, x, ch]}"
            )
        methods.update(d["upsample"])
        values += d["core_pixels"].size
    for simd in ("sse2", False):
        for r in core.check(files, simd=simd, gray_output=gray_output, scale=scale):
            assert r["pixel_mismatches"] == 0 and r["coef_mismatch_blocks"] == 0, (simd, r)
            assert r["pixels_compared"] == r["pixels"], (simd, r)
    if expect_methods is not None:
        assert expect_methods <= methods, f"upsampling methods exercised: {methods}, expected {expect_methods}"
    return len(files), values


# ---- The core's own functions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["plain", "sanitized"])
def test_selftest(variant):
    """Single functions against libjpeg's definitions: its range-limit table, its colour tables (all 2^24
    inputs), the IDCT's 32-bit path against its 64-bit one at the int16 extremes (under UBSan in the sanitized
    build, so an overflow would also fail), the Huffman table rules, the bit reader; and zigzag-order decoding of
    real segments against natural-order decoding."""
    if core.unavailable_reason(variant) is not None:
        pytest.skip(core.unavailable_reason(variant))
    files = [
        _encode(jpeg_factory.photo_like(40, 56, 3, seed=s), s_name, restart_interval=2)
        for s, s_name in enumerate(["4:2:0", "4:1:1", "4:4:0"])
    ]
    out = core.run(["selftest"], files, variant=variant).decode()
    assert '"failures": 0' in out and '"files": 3' in out, out


def test_headers_are_plain_cpp17_without_the_standard_library():
    """jpeg_core compiles on its own, without jpeglib.h or any C++ standard header (-nostdinc++), without
    exceptions or RTTI, and with no warning under -Wconversion -Wsign-conversion -Wold-style-cast."""
    compiler = core._compiler()
    source = (
        '#include "custom_op/csrc/jpeg_core/jpeg_core.h"\n'
        "template void custom_op::jpeg_core::islow::transform<int32_t>(const int32_t*, int32_t*);\n"
        "template void custom_op::jpeg_core::islow::transform<int64_t>(const int64_t*, int64_t*);\n"
        "template void custom_op::jpeg_core::reduced::transform4<uint32_t>(const uint32_t*, uint32_t*);\n"
        "template void custom_op::jpeg_core::reduced::transform2<int64_t>(const int64_t*, int64_t*);\n"
    )
    command = [
        compiler,
        "-fsyntax-only",
        "-x",
        "c++",
        "-std=c++17",
        "-nostdinc++",
        "-fno-exceptions",
        "-fno-rtti",
        "-Wall",
        "-Wextra",
        "-Wshadow",
        "-Wconversion",
        "-Wsign-conversion",
        "-Wold-style-cast",
        "-Werror",
        f"-I{ROOT}",
        "-",
    ]
    result = subprocess.run(command, input=source, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not installed (the device-code check needs it, not a GPU)"
)
def test_core_compiles_as_cuda_device_code(tmp_path):
    """Every stage called from a __global__ kernel (tests/jpeg_core_device_check.cu): nvcc must generate device
    code for all of jpeg_core, with warnings as errors."""
    command = [
        "nvcc",
        "-std=c++17",
        "-c",
        f"-I{ROOT}",
        "-arch=sm_90",
        "-Werror",
        "all-warnings",
        "-Xcompiler",
        "-Wall,-Wextra",
        str(ROOT / "tests" / "jpeg_core_device_check.cu"),
        "-o",
        str(tmp_path / "check.o"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


def _gpu_unavailable() -> str | None:
    if shutil.which("nvcc") is None:
        return "nvcc is not installed"
    smi = shutil.which("nvidia-smi")
    if smi is None or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        return "no NVIDIA GPU here"
    return None


@pytest.mark.skipif(_gpu_unavailable() is not None, reason=f"GPU check: {_gpu_unavailable()}")
def test_core_on_gpu_matches_cpu(tmp_path):
    """The same stages run in CUDA kernels (tests/jpeg_core_gpu_check.cu: one thread per segment, per block, per
    pixel) give bit-identical segment flags, coefficients, SIMD-exactness flags, samples and pixels to the CPU
    build, at 8/8, 4/8, 2/8 and 1/8, on valid, hostile and damaged files, with and without restart markers; and
    the chunked decoder's stages (sync_decode.h, a thread per chunk) the same flags and coefficients as on the CPU;
    so what the CPU tests prove about the core holds on the GPU."""
    binary = tmp_path / "jpeg_core_gpu_check"
    build = subprocess.run(
        [
            "nvcc",
            "-std=c++17",
            "-O2",
            "-arch=native",
            f"-I{ROOT}",
            str(ROOT / "tests" / "jpeg_core_gpu_check.cu"),
            "-o",
            str(binary),
            # nvcc passes linker options on with -Xlinker (it refuses g++'s -Wl, spelling)
            *(f.replace("-Wl,", "-Xlinker=", 1) if f.startswith("-Wl,") else f for f in core._jpeg_flags()),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    files, plain = [], []
    for i, sampling in enumerate(SCALED_SAMPLINGS):
        for h, w in [(1, 1), (3, 17), (17, 33), (97, 83)]:
            pixels = jpeg_factory.photo_like(h, w, 1 if sampling == "gray" else 3, seed=i)
            files.append(_encode(pixels, sampling, quality=90, restart_interval=2))
            plain.append(_encode(pixels, sampling, quality=90))
    files += [f for f in core.transcode(files, interval=3, hostile=1) if f is not None]
    files += plain + [f for f in core.transcode(plain, long_codes=1) if f is not None]
    rng = random.Random(5)
    corpus = _fuzz_corpus()
    files += [_mutate(rng.choice(corpus), rng) for _ in range(300)]
    result = subprocess.run([str(binary)], input=core.records(files), capture_output=True, timeout=600)
    lines = result.stdout.decode().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    assert result.returncode == 0 and summary.get("unequal") == 0, (lines[-5:], result.stderr.decode()[-2000:])
    assert summary["compared"] > 0.9 * len(files) - 40 and summary["flagged_segments"] > 0, summary
    assert summary["chunked_decodes"] == 4 * summary["compared"], summary


# ---- Valid files: exact -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_generated_files_every_size_quality_and_restart_layout(sampling):
    base = []
    for h, w in SIZES:
        pixels = jpeg_factory.photo_like(h, w, 1 if sampling == "gray" else 3, seed=h * 1000 + w)
        for quality in QUALITIES:
            base.append(_encode(pixels, sampling, quality=quality, restart_interval=3))
    files = _restart_variants(base)
    expected = {
        "4:4:4": {UPSAMPLE_FULL},
        "4:2:2": {UPSAMPLE_FULL, FANCY_H2V1, REPLICATE},  # replicate: chroma planes of 1 or 2 samples
        "4:2:0": {UPSAMPLE_FULL, FANCY_H2V2, REPLICATE},
        "4:4:0": {UPSAMPLE_FULL, FANCY_H1V2},
        "4:1:1": {UPSAMPLE_FULL, REPLICATE},
        "gray": {UPSAMPLE_FULL},
    }[sampling]
    count, values = assert_exact(files, expect_methods=expected)
    assert count == len(SIZES) * len(QUALITIES) * (1 + len(RESTARTS))


def test_unusual_sampling_factors():
    files = []
    for i, spec in enumerate(UNUSUAL_SAMPLINGS):
        for h, w in [(1, 1), (2, 2), (5, 3), (1, 17), (9, 2), (33, 47)]:
            files.append(
                _encode(jpeg_factory.photo_like(h, w, 3, seed=i), spec, quality=90, restart_interval=1 + i % 3)
            )
    assert_exact(files, expect_methods={UPSAMPLE_FULL, FANCY_H2V1, FANCY_H1V2, FANCY_H2V2, REPLICATE})


@pytest.mark.parametrize("specs", [SAMPLINGS[:-1], UNUSUAL_SAMPLINGS], ids=["usual", "unusual"])
def test_gray_output_of_color_files(specs):
    """YCbCr files decoded to grayscale (mode=GRAY): the luma alone, upsampled as libjpeg does where the
    luma is subsampled (some unusual samplings), the very pixels libjpeg's JCS_GRAYSCALE output gives."""
    files = []
    for i, spec in enumerate(specs):
        for h, w in [(1, 1), (2, 2), (5, 3), (9, 2), (33, 47)]:
            files.append(
                _encode(jpeg_factory.photo_like(h, w, 3, seed=i), spec, quality=90, restart_interval=1 + i % 3)
            )
    count, values = assert_exact(files, gray_output=True)
    dumped = core.dump(files[-1:], gray_output=True)[0]
    assert dumped["out_components"] == 1 and dumped["color"] == "gray", dumped["color"]
    assert count == len(files) and values > 0


def test_quality_100_extreme_content():
    """Quality 100 (all quantisers 1) on content with the largest coefficients: pixel noise, one- and two-pixel
    checkerboards, hard stripes. Valid files never reach the IDCT's SIMD-inexact range (checked in
    assert_exact), and the range limit clamps exactly like libjpeg's."""
    rng = np.random.default_rng(7)
    size = 48
    yy, xx = np.mgrid[0:size, 0:size]
    patterns = [
        rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8),
        np.repeat((((yy + xx) % 2) * 255).astype(np.uint8)[:, :, None], 3, axis=2),
        np.repeat((((yy // 2 + xx // 2) % 2) * 255).astype(np.uint8)[:, :, None], 3, axis=2),
        np.stack([((xx % 2) * 255), ((yy % 2) * 255), (((xx + 1) % 2) * 255)], axis=2).astype(np.uint8),
    ]
    files = []
    for pixels in patterns:
        for sampling in ["4:4:4", "4:2:0", "4:2:2", "gray"]:
            files.append(_encode(pixels, sampling, quality=100, restart_interval=1))
            files.append(_encode(pixels, sampling, quality=98, restart_interval=5))
    assert_exact(files)


def test_matches_pillow():
    """An independent check of the harness's reference: the core's pixels equal Pillow's decode (libjpeg-turbo
    with its defaults: islow, fancy upsampling), for each subsampling."""
    import io

    from PIL import Image

    files = [
        _encode(jpeg_factory.photo_like(45, 61, 1 if s == "gray" else 3, seed=3), s, quality=85, restart_interval=2)
        for s in SAMPLINGS
    ]
    for sampling, data, d in zip(SAMPLINGS, files, core.dump(files)):
        pil = np.asarray(Image.open(io.BytesIO(data)).convert("L" if sampling == "gray" else "RGB"))
        assert np.array_equal(d["core_pixels"].reshape(pil.shape), pil), sampling


def _transcoded_photos(paths, **layout):
    files = [p.read_bytes() for p in paths]
    return [f for f in core.transcode(files, **layout) if f is not None]


def test_photos(photos):
    """The photos (the 200 ImageNet photos: 4:4:4, 4:2:0, 4:2:2, grayscale, none with restart markers; or the
    generated set), transcoded losslessly by libjpeg into restart layouts: all of them with 4 MCUs per segment, a
    quarter also with one segment per MCU row and with 7 MCUs and optimised tables. CMYK is left out: the core
    refuses it (see test_odd_jpegs)."""
    from PIL import Image

    paths = [p for p in photos if Image.open(p).mode != "CMYK"]
    files = _transcoded_photos(paths, interval=4)
    files += _transcoded_photos(paths[::4], rows=1)
    files += _transcoded_photos(paths[1::4], interval=7, optimize=True)
    checked = 0
    for simd in (True, False):
        for i, r in enumerate(core.check(files, simd=simd)):
            where = f"file {i} {r.get('sampling')} (simd={simd})"
            assert r["core_error"] == "" and r["scan_error"] == 0 and r["bad_segments"] == 0, where
            assert r["inexact_blocks"] == 0 and r["ref_warnings"] == 0, where
            assert r["coef_mismatch_blocks"] == 0, f"{where}: {r['first_coef_mismatch']}"
            assert r["pixel_mismatches"] == 0, f"{where}: {r['first_pixel_mismatch']}"
            assert r["pixels_compared"] == r["pixels"] and r["coef_compared_blocks"] == r["blocks"], where
            checked += 1
    assert checked == 2 * len(files)


def test_odd_jpegs(odd_jpegs):
    """Pillow's and libjpeg-turbo's test images, or their stand-ins (CMYK is refused by the core: not decoded,
    nothing compared)."""
    paths = sorted(p for p in odd_jpegs.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    files = _transcoded_photos(paths, interval=2) + _transcoded_photos(paths, rows=1, optimize=True)
    decoded = 0
    for r in core.check(files):
        if r["core_error"]:
            assert "colour space" in r["core_error"], r["core_error"]
            continue
        assert r["scan_error"] == 0 and r["bad_segments"] == 0 and r["inexact_blocks"] == 0, r
        assert r["coef_mismatch_blocks"] == 0 and r["pixel_mismatches"] == 0, r
        assert r["pixels_compared"] == r["pixels"], r
        decoded += 1
    assert decoded >= len(files) - 4


# ---- Scaled decodes: libjpeg's reduced IDCTs and its scaling of each component ---------------------------------

SCALES = [1, 2, 4, 8]
SCALED_SAMPLINGS = ["4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4:1:0", "gray"]
# (height, width): 1x1, 1xN, Nx1, planes of 1 to 3 samples at every scale, odd sizes that are not multiples of any
# MCU, and a photo's size.
SCALED_SIZES = [
    (1, 1),
    (1, 37),
    (29, 1),
    (2, 2),
    (9, 2),
    (3, 17),
    (17, 3),
    (17, 33),
    (31, 47),
    (64, 48),
    (97, 83),
    (375, 500),
]


def expected_scaling(sampling: str, scale: int) -> tuple[tuple[int, ...], set[int]]:
    """libjpeg-turbo's choice (jdmaster.c's IDCT sizes, jdsample.c's upsampler), as scaling.h's table states it:
    each component's IDCT size, and the upsampling methods of the chroma over SCALED_SIZES (fancy h2v1 and h2v2
    replicate planes of at most 2 samples; at 1/8 everything is replicated)."""
    s, fancy = scale, scale > 1
    if sampling == "gray":
        return (s,), set()
    if sampling == "4:4:4":
        return (s, s, s), {UPSAMPLE_FULL}
    if sampling == "4:2:2":
        return (s, s, s), {FANCY_H2V1, REPLICATE} if fancy else {REPLICATE}
    if sampling == "4:4:0":
        return (s, s, s), {FANCY_H1V2} if fancy else {REPLICATE}
    if sampling == "4:1:1":
        return (s, s, s), {REPLICATE}
    if sampling == "4:2:0":  # chroma scaled by its IDCT, not upsampled, below 8/8
        return ((s, 2 * s, 2 * s), {UPSAMPLE_FULL}) if s < 8 else ((8, 8, 8), {FANCY_H2V2, REPLICATE})
    assert sampling == "4:1:0"  # chroma scaled 2x by its IDCT, then upsampled 2x horizontally
    if s == 8:
        return (8, 8, 8), {REPLICATE}
    return (s, 2 * s, 2 * s), {FANCY_H2V1, REPLICATE} if fancy else {REPLICATE}


_scaled_file_cache: dict[str, list[bytes]] = {}


def _scaled_files(sampling: str) -> list[bytes]:
    """Every size of SCALED_SIZES at qualities 50, 90 and 100 with 3 MCUs per segment, and a third of them
    transcoded to one segment per MCU row with optimised tables; made once per sampling."""
    if sampling not in _scaled_file_cache:
        files = []
        for h, w in SCALED_SIZES:
            pixels = jpeg_factory.photo_like(h, w, 1 if sampling == "gray" else 3, seed=7 * h + w)
            files += [_encode(pixels, sampling, quality=q, restart_interval=3) for q in (50, 90, 100)]
        transcoded = core.transcode(files[::3], rows=1, optimize=True)
        assert all(f is not None for f in transcoded)
        _scaled_file_cache[sampling] = files + transcoded
    return _scaled_file_cache[sampling]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("sampling", SCALED_SAMPLINGS)
def test_scaled_decode_every_sampling_size_and_quality(sampling, scale):
    """Decoded at scale/8 (libjpeg's scale_num / scale_denom = 8), every file equals libjpeg's scaled decode
    (RGB or grey out) with its SIMD code and with its C code, flags nothing, has libjpeg's geometry, and each
    component gets the IDCT size and upsampling of scaling.h's table: a subsampled component is enlarged by its
    IDCT where libjpeg does so (4:2:0 and 4:1:0 chroma below 8/8) instead of upsampled."""
    files = _scaled_files(sampling)
    summaries = []
    count, values = assert_exact(files, scale=scale, summaries=summaries)
    sizes, chroma_methods = expected_scaling(sampling, scale)
    assert {tuple(d["idct_sizes"]) for d in summaries} == {sizes}
    assert {d["upsample"][0] for d in summaries} == {UPSAMPLE_FULL}
    assert {m for d in summaries for m in d["upsample"][1:]} == chroma_methods
    assert all(d["output_width"] == -(-d["width"] * scale // 8) for d in summaries)
    if sampling != "gray":
        assert_exact(files, scale=scale, gray_output=True)
    assert count == len(SCALED_SIZES) * 4 and values > 0


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_scaled_unusual_sampling_factors(scale):
    """The sampling factors of test_unusual_sampling_factors at 1/8, 2/8 and 4/8: libjpeg's rule scales a
    component by its IDCT only while it is subsampled 2x both ways relative to the output (luma too, where the
    chroma has larger factors), and upsamples what is left, fractional ratios of 3 included; RGB and grey out."""
    files = []
    for i, spec in enumerate(UNUSUAL_SAMPLINGS):
        for h, w in [(1, 1), (2, 2), (5, 3), (1, 17), (9, 2), (33, 47), (70, 97)]:
            files.append(
                _encode(jpeg_factory.photo_like(h, w, 3, seed=i), spec, quality=90, restart_interval=1 + i % 3)
            )
    summaries = []
    assert_exact(files, scale=scale, summaries=summaries)
    assert_exact(files, scale=scale, gray_output=True)
    # Some component is enlarged by its IDCT (luma in 1x1,2x2,2x2), and some is still upsampled.
    assert any(max(d["idct_sizes"]) > scale for d in summaries)
    assert any(m != UPSAMPLE_FULL for d in summaries for m in d["upsample"])


@pytest.fixture(scope="module")
def photo_restart_files(photos):
    """The photos (test_photos says which), transcoded losslessly by libjpeg into 4 MCUs per segment."""
    from PIL import Image

    return _transcoded_photos([p for p in photos if Image.open(p).mode != "CMYK"], interval=4)


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_scaled_photos(photo_restart_files, scale):
    """The photos decoded at 1/8, 2/8 and 4/8: all of them against libjpeg's SIMD code, every other one
    against its C code."""
    files = photo_restart_files
    checked = 0
    for simd, subset in ((True, files), (False, files[::2])):
        for i, r in enumerate(core.check(subset, simd=simd, scale=scale)):
            where = f"file {i} {r.get('sampling')} (simd={simd}, scale {scale}/8)"
            assert r["core_error"] == "" and r["scan_error"] == 0 and r["bad_segments"] == 0, where
            assert r["inexact_blocks"] == 0 and r["ref_warnings"] == 0, where
            assert r["geometry"] == r["ref_geometry"], where
            assert r["pixel_mismatches"] == 0, f"{where}: {r['first_pixel_mismatch']}"
            assert r["pixels_compared"] == r["pixels"] > 0, where
            checked += 1
    assert checked == len(files) + len(files[::2])


# ---- Hostile coefficients: the IDCT's exactness guard ---------------------------------------------------------


def test_reduced_idcts_against_libjpeg_functions(tmp_path):
    """Block by block against libjpeg-turbo's own jpeg_idct_4x4 / 2x2 / 1x1 and its SSE2 4x4 and 2x2 (from its static
    library: tests/jpeg_core_reduced_idct_check.cpp), on random blocks up to any int16 coefficient and 16-bit
    quantiser, beyond what the files above can hold: the core equals the C code on every block, and the SSE2 code
    on every block it flags exact. The SSE2 code does differ from the C code on hostile blocks."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("libjpeg-turbo's SSE2 reduced IDCTs exist on x86-64 only")
    library = core.static_libjpeg()
    if library is None:
        pytest.skip("no static libjpeg-turbo (libjpeg.a): its internal IDCT functions cannot be linked")
    source = ROOT / "tests" / "jpeg_core_reduced_idct_check.cpp"
    objects, binary = tmp_path / "check.o", tmp_path / "check"
    flags = [*core.COMMON_FLAGS, "-O2", *core.jpeg_include_flags()]
    build = subprocess.run([core._compiler(), *flags, "-c", str(source), "-o", str(objects)], capture_output=True)
    assert build.returncode == 0, build.stderr.decode()[-4000:]
    link = subprocess.run([core._compiler(), str(objects), str(library), "-o", str(binary)], capture_output=True)
    if link.returncode != 0:  # a libjpeg.a built without SIMD, or another version's internals
        pytest.skip(f"{library} lacks libjpeg-turbo's reduced IDCTs: {link.stderr.decode()[-500:]}")
    result = subprocess.run([str(binary), "200000"], capture_output=True, timeout=300)
    counts = json.loads(result.stdout)
    assert result.returncode == 0 and counts["core_differs_from_c"] == 0, counts
    assert counts["exact_but_differs_from_sse2"] == 0, counts
    assert counts["sse2_differs_from_c"] > 0 and counts["flagged"] >= counts["sse2_differs_from_c"], counts


@pytest.fixture(scope="module")
def hostile_files():
    """Every sampling of SCALED_SAMPLINGS with random coefficients up to libjpeg's encoder limits and quantisers up
    to 65535 (16-bit DQT, read as a signed short as libjpeg does), 9 seeds."""
    base = [
        _encode(jpeg_factory.photo_like(40, 56, 1 if s == "gray" else 3, seed=i), s, quality=95)
        for i, s in enumerate(SCALED_SAMPLINGS)
    ]
    files = []
    for seed in range(9):
        files += [f for f in core.transcode(base, interval=3, hostile=seed) if f is not None]
    assert len(files) == 9 * len(base)
    return files


def test_hostile_coefficients_match_libjpeg_c_code_and_flag_simd_differences(hostile_files):
    """Hostile coefficients and quantisers: the core's pixels equal libjpeg's C code (JSIMD_FORCENONE=1)
    everywhere, and its SIMD code on every block the core marks exact. The other blocks are where the two libjpeg
    builds can differ."""
    files = hostile_files
    inexact = compared_simd = 0
    for simd in (True, "sse2", False):
        for r in core.check(files, simd=simd):
            assert r["core_error"] == "" and r["bad_segments"] == 0 and r["coef_mismatch_blocks"] == 0, r
            assert r["pixel_mismatches"] == 0, r["first_pixel_mismatch"]
            if simd is True:
                inexact += r["inexact_blocks"]
                compared_simd += r["pixels_compared"]
            elif simd is False:
                assert r["pixels_compared"] == r["pixels"]
    assert inexact > 0 and compared_simd > 0


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_scaled_hostile_coefficients_match_libjpeg_c_code_and_flag_simd_differences(hostile_files, scale):
    """The same at 1/8, 2/8 and 4/8, through libjpeg's reduced IDCTs: their SSE2 versions (jidctred-sse2.asm,
    which libjpeg-turbo runs for 4x4 and 2x2 whenever the CPU has SSE2) differ from the C code (jidctred.c) on
    hostile blocks, and the core flags every block where they may; 1x1 has no SIMD version."""
    inexact = compared_simd = 0
    for simd in (True, False):
        for r in core.check(hostile_files, simd=simd, scale=scale):
            assert r["core_error"] == "" and r["bad_segments"] == 0 and r["coef_mismatch_blocks"] == 0, r
            assert r["geometry"] == r["ref_geometry"], r
            assert r["pixel_mismatches"] == 0, r["first_pixel_mismatch"]
            if simd:
                inexact += r["inexact_blocks"]
                compared_simd += r["pixels_compared"]
            else:
                assert r["pixels_compared"] == r["pixels"]
    assert inexact > 0 and compared_simd > 0


# ---- Damaged segments: detected, per segment --------------------------------------------------------------


@pytest.fixture(scope="module")
def damage_base():
    return _encode(jpeg_factory.photo_like(48, 64, 3, seed=11), "4:2:0", quality=90, restart_interval=1)


def _replace_segment(data, k, new_bytes):
    segments, _ = _segments(data)
    b, e = segments[k]
    return data[:b] + new_bytes + data[e:]


@pytest.mark.parametrize(
    "damage, flags",
    [
        ("invalid_code", {core.BAD_CODE}),
        ("short", {core.OVERRUN, core.BAD_CODE}),
        ("trailing", {core.TRAILING_DATA}),
        ("fill_inside", {core.EARLY_MARKER, core.TRAILING_DATA, core.BAD_CODE}),
    ],
)
def test_damaged_segment_is_reported_alone(damage_base, damage, flags):
    """One damaged segment is reported with its reason, the others still decode exactly (compared with libjpeg
    around them), and libjpeg does warn about that file."""
    segments, _ = _segments(damage_base)
    k = 3
    b, e = segments[k]
    body = damage_base[b:e]
    new = {
        "invalid_code": b"\xff\x00" * 8,  # all-ones bits: no valid table has an all-ones code
        "short": body[:1],  # the segment's MCUs need more bits than it has
        "trailing": body + b"\x00\x00",  # two bytes libjpeg would discard with a warning
        "fill_inside": body[:2] + b"\xff\xff\x00" + body[2:],  # FF FF 00: libjpeg reads a data FF, we refuse
    }[damage]
    data = _replace_segment(damage_base, k, new)
    (r,) = core.check([data])
    seg_flags = core.dump([data])[0]["segment_flags"]
    assert r["scan_error"] == 0
    assert int(seg_flags[k]) in flags, (damage, seg_flags)
    assert np.count_nonzero(seg_flags) == 1
    assert r["coef_mismatch_blocks"] == 0 and r["pixel_mismatches"] == 0, r
    assert 0 < r["pixels_compared"] < r["pixels"]
    if damage != "fill_inside":  # FF FF 00 is valid to libjpeg: a refusal it would not make (conservative)
        assert r["ref_warnings"] > 0


@pytest.mark.parametrize(
    "damage, error", [("misnumbered", 2), ("missing", 2), ("extra", 2), ("other_marker", 3), ("no_eoi", 1), ("cut", 1)]
)
def test_damaged_markers_refuse_the_scan(damage_base, damage, error):
    segments, eoi = _segments(damage_base)
    _, e = segments[2]  # the RST2 marker is at e, e + 1
    data = {
        "misnumbered": damage_base[: e + 1] + b"\xd5" + damage_base[e + 2 :],
        "missing": damage_base[:e] + damage_base[e + 2 :],
        "extra": damage_base[: e + 2] + b"\xff\xd3" + damage_base[e + 2 :],
        "other_marker": damage_base[:e] + b"\xff\xfe\x00\x03x" + damage_base[e:],
        "no_eoi": damage_base[:eoi],
        "cut": damage_base[: (segments[5][0] + segments[5][1]) // 2],
    }[damage]
    (r,) = core.check([data])
    assert r["scan_error"] == error, r
    assert r["pixels_compared"] == 0 and r["coef_compared_blocks"] == 0


# ---- Fuzzing -------------------------------------------------------------------------------------------------


def _fuzz_corpus():
    corpus = []
    for i, sampling in enumerate(SAMPLINGS):
        for j, (h, w) in enumerate([(21, 35), (48, 64), (9, 70)]):
            pixels = jpeg_factory.photo_like(h, w, 1 if sampling == "gray" else 3, seed=100 + 10 * i + j)
            corpus.append(
                _encode(pixels, sampling, quality=[60, 90, 100][j], restart_interval=[1, 2, 3][j], optimize=j == 1)
            )
    return corpus


def test_fuzz_segments_under_sanitizers():
    """~1500 mutants (bit flips, cuts, deletions, insertions of bytes, stuffing, fill and markers, renumbered or
    removed restart markers, swapped segments, damaged Huffman tables, scan headers with other table selectors or
    component order) decoded by the core built with
    AddressSanitizer + UBSan (any report fails the run). For each: every segment the core accepts decodes to
    libjpeg's coefficients, every pixel depending only on accepted (and, against libjpeg's SIMD, exact) blocks is
    libjpeg's, with SIMD and without; and a file libjpeg warns about is never accepted whole."""
    variant = "sanitized" if core.unavailable_reason("sanitized") is None else "plain"
    rng = random.Random(20240601)
    corpus = _fuzz_corpus()
    mutants = [_mutate(rng.choice(corpus), rng) for _ in range(1500)]
    stats = _fuzz_stats(len(mutants))
    _check_fuzz_results(core.check(mutants, variant=variant), core.check(mutants, simd=False), stats)
    print("jpeg_core fuzz:", stats)
    # The mix must exercise every outcome.
    assert min(stats["refused_scan"], stats["segments_flagged"], stats["accepted_whole"]) > 50, stats
    assert stats["refused_header"] > 0 and stats["refused_table"] > 0 and stats["pixels_compared"] > 0, stats


def test_fuzz_scaled_decodes_under_sanitizers():
    """Other mutants of the same corpus (300 at each of 1/8, 2/8 and 4/8) decoded at that scale by the core built
    with AddressSanitizer + UBSan: the reduced IDCTs, the scaled planes and the upsampling after them read and
    write only inside the planes, and the same requirements hold as at full size."""
    variant = "sanitized" if core.unavailable_reason("sanitized") is None else "plain"
    rng = random.Random(20250101)
    corpus = _fuzz_corpus()
    stats = _fuzz_stats(0)
    for scale in (1, 2, 4):
        mutants = [_mutate(rng.choice(corpus), rng) for _ in range(300)]
        stats["mutants"] += len(mutants)
        _check_fuzz_results(
            core.check(mutants, variant=variant, scale=scale), core.check(mutants, simd=False, scale=scale), stats
        )
    print("jpeg_core scaled fuzz:", stats)
    assert min(stats["refused_scan"], stats["segments_flagged"], stats["accepted_whole"]) > 30, stats
    assert stats["pixels_compared"] > 0, stats


def _fuzz_stats(mutants: int) -> dict:
    return dict(
        mutants=mutants,
        refused_header=0,
        refused_table=0,
        refused_scan=0,
        segments_flagged=0,
        accepted_whole=0,
        libjpeg_warned=0,
        pixels_compared=0,
        coef_blocks_compared=0,
        core_stricter=0,
    )


def _check_fuzz_results(results, c_only, stats):
    """The requirements on each mutant's summary (`results`: the SIMD reference; `c_only`: the C code's), counted
    into `stats`."""
    for i, (r, r_c) in enumerate(zip(results, c_only, strict=True)):
        if r["core_error"] == "Huffman table refused":
            # build_huffman_table refuses exactly what libjpeg's jpeg_make_d_derived_tbl refuses.
            assert r["ref_pixel_error"] != "", f"mutant {i}: the core refused a Huffman table libjpeg decodes with"
            stats["refused_table"] += 1
            continue
        if r["core_error"]:
            # libjpeg's header reader refused, or a selector libjpeg refuses when decoding starts, or one naming
            # an undefined table (libjpeg-turbo then uses the standard table; the core does not: refused).
            assert (
                r["core_error"].startswith("libjpeg: ")
                or "selector" in r["core_error"]
                or r["core_error"].startswith("no Huffman table")
            ), r["core_error"]
            stats["refused_header"] += 1
            continue
        assert r["coef_mismatch_blocks"] == 0, (i, r["first_coef_mismatch"])
        assert r["pixel_mismatches"] == 0, (i, r["first_pixel_mismatch"])
        assert r_c["pixel_mismatches"] == 0, (i, r_c["first_pixel_mismatch"])
        assert r["ref_geometry"] in ("", r["geometry"]), (i, r["geometry"], r["ref_geometry"])
        warned = r["ref_warnings"] > 0 or r["ref_coef_error"] != "" or r["ref_pixel_error"] != ""
        accepted = r["scan_error"] == 0 and r["bad_segments"] == 0
        assert not (warned and accepted), f"mutant {i}: libjpeg warned ({r['ref_warning']}) but the core accepted it"
        stats["libjpeg_warned"] += warned
        stats["core_stricter"] += (not warned) and not accepted
        stats["refused_scan"] += r["scan_error"] != 0
        stats["segments_flagged"] += r["scan_error"] == 0 and r["bad_segments"] > 0
        stats["accepted_whole"] += accepted
        stats["pixels_compared"] += r["pixels_compared"]
        stats["coef_blocks_compared"] += r["coef_compared_blocks"]
