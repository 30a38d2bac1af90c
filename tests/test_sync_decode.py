"""The chunked, self-synchronising Huffman decoder (custom_op/csrc/jpeg_core/sync_decode.h), run on the CPU, against
libjpeg-turbo's jpeg_read_coefficients.

The GPU is to decode a whole scan, restart markers or not, in chunks of bytes with a thread per chunk: each chunk
decoded from a guessed start, decoded again from where the previous chunk ended until the chunks agree, then its
blocks written from its exact start (sync_decode.h's header says how and why). The harness's `chunked` command
(tests/jpeg_core_harness.cpp) runs each stage for every chunk on its own, as the threads would: after stage 1 up to
`rounds` rounds in which every chunk reads the last round's records, then (unless told not to) one sweep in chunk
order, as one thread would finish the work. Chunks as small as 1 byte make almost every chunk start wrong, so that
synchronisation is exercised everywhere; realistic sizes show how soon it comes.

Required: on every valid file, at every chunk size, every block's coefficients equal libjpeg's and nothing is
flagged; on damaged files each decode either equals libjpeg's exactly or is flagged, it is flagged wherever libjpeg
warns, and it never reads or writes out of bounds (the fuzz test runs under AddressSanitizer and UBSan). "Flagged"
is asked of stage 4 alone (decode_chunk_blocks), whatever the stages before it said: where it flags nothing, the
coefficients must be exact even if the records it started from were wrong.

No custom_op import (no extension build); the tests need a C++ compiler and libjpeg-turbo's headers, and skip with
the reason otherwise.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import jpeg_core_build as core
import jpeg_factory
from jpeg_core_cases import SAMPLINGS, SIZES, UNUSUAL_SAMPLINGS, encode, mutate

pytestmark = pytest.mark.skipif(
    core.unavailable_reason() is not None, reason=f"cannot build the jpeg_core harness: {core.unavailable_reason()}"
)

SMALL_CHUNKS = [1, 2, 3, 5, 8]
CHUNKS = SMALL_CHUNKS + [64, 256, 1024]
# The sync of the valid-file tests: two rounds, then the sweep (the harness's rounds run until nothing changes at
# most, which with chunks of a byte means about as many rounds as the chunks one decoder's block spans).
ROUNDS = 2


def _photo(h, w, sampling, seed):
    return jpeg_factory.photo_like(h, w, 1 if sampling == "gray" else 3, seed=seed)


def _where(d) -> str:
    return f"{d.get('height')}x{d.get('width')} {d.get('sampling')}, restart interval {d.get('restart_interval')}"


# How the stages run: (stage 4's parts a chunk, records a chunk). Whole chunks with one record (the one-record
# functions), and in parts: with one slot, with a guessed slot for every place of the MCU (guess_slot, sync_slot,
# walk_slots; the harness caps the slots at the MCU's blocks), and the GPU decoder's slots (slot_layout: a slot
# for every place of a subsampled file's MCU, one guessed slot and a free one in other files).
# The GPU decoder's stage 4 parts a chunk and stage 2 rounds (its sources say: the harness runs what it runs).
GPU_PARTS = core.gpu_constant(core.GPU_DECODER_HEADER, "kMaxChunkParts")
GPU_ROUNDS = core.gpu_constant(core.GPU_DECODER, "kSyncRounds")

LAYOUTS = ((1, 0), (4, 1), (4, 10), (GPU_PARTS, -1))


def assert_exact(files, chunk_bytes=CHUNKS, *, rounds=ROUNDS, sweep=True, band=False, layouts=LAYOUTS) -> list[dict]:
    """Every file, at every chunk size, with stage 4 in chunks and in parts of them, with one record a chunk and
    with slots, flags nothing and gives libjpeg's coefficients in every block (with band: every block of the band
    of MCU rows decoded); returns the summaries, with the runs of every layout."""
    results = None
    for p, k in layouts:
        split = core.chunked(files, chunk_bytes, rounds=rounds, sweep=sweep, band=band, parts=p, slots=k)
        assert p == 1 or any(r["parts"] == p for d in split for r in d["runs"]), "no chunk size was split"
        if results is None:
            results = split
        else:
            for d, more in zip(results, split):
                d["runs"] += more["runs"]
    assert len(results) == len(files)
    for i, d in enumerate(results):
        where = f"file {i} ({_where(d)})"
        assert d["core_error"] == "", f"{where}: {d['core_error']}"
        assert d["ref_coef_error"] == "" and d["ref_warnings"] == 0, f"{where}: libjpeg {d['ref_warning']}"
        for r in d["runs"]:
            run = f"{where}, chunks of {r['chunk_bytes']} bytes in {r['parts']} parts, {r['slots']} slots"
            assert r["flags"] == 0, f"{run}: flags {r['flags']} in {r['flagged_chunks']} of {r['chunks']} chunks"
            assert r["coef_mismatch_blocks"] == 0, f"{run}: {r['first_coef_mismatch']}"
            assert r["coef_compared_blocks"] == (r["stored_blocks"] if band else d["blocks"]), run
            assert 0 < r["stored_blocks"] <= d["blocks"], run
            if sweep:  # the first chunk out of step after the rounds is decoded again by the sweep
                assert r["unsynced_before_sweep"] == 0 or r["redone_in_sweep"] > 0, run
    return results


# ---- Valid files: exact at every chunk size -------------------------------------------------------------------


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_every_size_and_restart_interval(sampling):
    """Every size (1x1, thin, not multiples of the MCU) without restart markers, with one every MCU and every 3
    MCUs (qualities 90, 100, 50), and transcoded losslessly to 2 and 7 MCUs (optimised tables) and one segment per
    MCU row."""
    plain, files = [], []
    for h, w in SIZES:
        pixels = _photo(h, w, sampling, seed=h * 1000 + w)
        plain.append(encode(pixels, sampling, quality=90))
        files.append(encode(pixels, sampling, quality=100, restart_interval=1))
        files.append(encode(pixels, sampling, quality=50, restart_interval=3))
    for layout in (dict(interval=2), dict(interval=7, optimize=True), dict(rows=1)):
        files += core.transcode(plain, **layout)
    results = assert_exact(plain + files)
    assert {d["restart_interval"] for d in results} >= {0, 1, 2, 3, 7}


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_band_of_rows_reads_the_chunks_through_it(sampling):
    """A window's decode (chunk_starts_through its last MCU row, decode_chunk_rows of the chunks through it): the
    band's blocks are libjpeg's, with and without restart markers, whatever the chunk size."""
    files = []
    for h, w in SIZES:
        pixels = _photo(h, w, sampling, seed=h * 1000 + w + 7)
        files.append(encode(pixels, sampling, quality=90))
        files.append(encode(pixels, sampling, quality=95, restart_interval=2))
    results = assert_exact(files, band=True)
    assert any(r["stored_blocks"] < d["blocks"] for d in results for r in d["runs"])
    # Stage 4 starts at the band's first chunk in a file without restart markers (the rounds read the valid chunks
    # above it without a lenient read), at chunk 0 in one with them (stage 4 checks their markers).
    for d in results:
        for r in d["runs"]:
            expected = 0 if d["restart_interval"] else r["band_first_chunk"]
            assert r["strict_from"] == expected, f"{_where(d)}, chunks of {r['chunk_bytes']}: {r}"
    assert any(r["strict_from"] > 0 for d in results for r in d["runs"])
    # Before whole_from, stage 4 decodes only the parts that hold blocks of the band's columns (the exactness above
    # holds with the others left out): in a file with restart markers every part (a strict decode checks them).
    for d in results:
        for r in d["runs"]:
            if d["restart_interval"]:
                assert r["whole_from"] == 0 and r["parts_skipped"] == 0, f"{_where(d)}: {r}"
    assert any(r["parts_skipped"] > 0 for d in results for r in d["runs"])


def test_unusual_sampling_factors():
    """3-component files with every odd factor combination the segment tests use (MCUs of up to 10 blocks), with
    and without restart markers."""
    files = []
    for i, spec in enumerate(UNUSUAL_SAMPLINGS):
        for h, w in [(1, 1), (5, 3), (9, 2), (33, 47), (70, 97)]:
            pixels = jpeg_factory.photo_like(h, w, 3, seed=i)
            files.append(encode(pixels, spec, quality=90))
            files.append(encode(pixels, spec, quality=90, restart_interval=1 + i % 3))
    assert_exact(files)


def test_long_codes_and_stuffing():
    """Huffman tables whose codes are mostly 16 bits long and start with eight ones (transcode's long_codes): every
    symbol past the decoder's lookup table, and a stuffed FF 00 in about one byte of twelve (twenty times a
    photo's share); without restart markers, with them every 5 MCUs and every MCU row."""
    base = []
    for i, sampling in enumerate(SAMPLINGS + ["2x2,1x2,1x2"]):
        for h, w in [(1, 1), (17, 33), (97, 83)]:
            base.append(encode(_photo(h, w, sampling, seed=i), sampling, quality=90))
    files = []
    for seed, layout in enumerate([dict(), dict(interval=5), dict(rows=1)]):
        files += core.transcode(base, long_codes=seed, **layout)
    assert all(f is not None for f in files)
    stuffed = sum(f.count(b"\xff\x00") for f in files)
    assert stuffed > 0.05 * sum(len(f) for f in files), "the long codes should stuff many bytes"
    assert_exact(files)


def test_eob_heavy_and_maximum_length_mcus():
    """Flat images (every block a DC difference and an EOB: many blocks start in each byte), and quality 100 noise,
    one- and two-pixel checkerboards (the longest MCUs), with and without restart markers."""
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:64, 0:80]
    patterns = [
        np.full((64, 80, 3), 128, np.uint8),
        np.repeat((((yy // 16 + xx // 16) % 2) * 200 + 20).astype(np.uint8)[:, :, None], 3, axis=2),
        rng.integers(0, 256, size=(64, 80, 3), dtype=np.uint8),
        np.repeat((((yy + xx) % 2) * 255).astype(np.uint8)[:, :, None], 3, axis=2),
        np.repeat((((yy // 2 + xx // 2) % 2) * 255).astype(np.uint8)[:, :, None], 3, axis=2),
    ]
    files = []
    for pixels in patterns:
        for sampling in ["4:4:4", "4:2:0", "gray"]:
            files.append(encode(pixels, sampling, quality=100))
            files.append(encode(pixels, sampling, quality=50, restart_interval=2))
    files.append(encode(np.full((512, 512), 77, np.uint8), "gray", quality=75))  # 4096 blocks in 1 KB
    assert_exact(files)


def test_blocks_longer_than_chunks():
    """Coefficients at libjpeg's encoder limits (transcode's hostile: whole blocks of +-1023), with optimised and
    with long-code tables: blocks of up to 200 bytes, MCUs of a kilobyte, so that many chunks hold no block start
    at all, and codes of 16 bits followed by 10 extra bits, long runs of ones (stuffed FF 00 in pairs)."""
    base = [
        encode(_photo(40, 56, sampling, seed=i), sampling, quality=95)
        for i, sampling in enumerate(["4:4:4", "4:2:0", "gray", "4:1:1", "2x2,1x2,1x2"])
    ]
    files = []
    for seed in range(3):
        files += core.transcode(base, hostile=seed, interval=[0, 0, 3][seed])
        files += core.transcode(base, hostile=seed, long_codes=seed)
    assert all(f is not None for f in files)
    assert max(f.count(b"\xff\x00\xff\x00") for f in files) > 0
    assert_exact(files, SMALL_CHUNKS + [16, 100, 300])


@pytest.fixture(scope="module")
def one_table_files():
    """Files where every component uses the same Huffman tables (long codes) and there are no restart markers: a
    decoder started in the wrong block of an MCU reads the same symbols as the true decode, so nothing but the
    previous chunk's end ever synchronises it: the latest synchronisation there can be."""
    base = [
        encode(_photo(h, w, sampling, seed=h + w), sampling, quality=90)
        for sampling in ["4:4:4", "4:2:0", "4:1:1"]
        for h, w in [(33, 17), (97, 83)]
    ]
    files = core.transcode(base, long_codes=7, one_table=True)
    assert all(f is not None for f in files)
    return files


def test_late_synchronisation_is_flagged_or_exact(one_table_files):
    """Without the sweep, two rounds leave most chunks of these files unsynchronised: stage 4, decoding from the
    wrong starts, flags them (kUnsynced, or the damage a wrong start reads), never decodes them wrong. With the
    sweep they decode exactly, the sweep having decoded chunks again."""
    for d in core.chunked(one_table_files, [16, 64, 256], rounds=2, sweep=False):
        for r in d["runs"]:
            if r["stage4_flags"] == 0:
                assert r["coef_mismatch_blocks"] == 0 and r["coef_compared_blocks"] == d["blocks"], (_where(d), r)
            if r["chunks"] > 3 * 4:  # more chunks than two rounds can reach from chunk 0, with room
                assert r["flags"] & core.UNSYNCED and r["stage4_flags"] != 0, (_where(d), r)
    results = assert_exact(one_table_files, [16, 64, 256])
    assert all(r["redone_in_sweep"] > 0 for d in results for r in d["runs"] if r["chunks"] > 12)
    # unsynced_chunks_through, which the GPU's sweep checks against its budget first, sees them out of step.
    assert all(r["unsynced_before_sweep"] > 0 for d in results for r in d["runs"] if r["chunks"] > 12)


def test_rounds_alone_converge(one_table_files):
    """Rounds until nothing changes, and no sweep: each round makes at least one more chunk's start true, so the
    rounds alone reach the exact decode, in at most as many rounds as chunks."""
    results = assert_exact(one_table_files[:2], [3, 40], rounds=None, sweep=False)
    for d in results:
        for r in d["runs"]:
            assert 0 < r["rounds"] <= r["chunks"] and r["redone_in_sweep"] == 0


def test_photos(photos):
    """The photos as they are (mostly without restart markers) in chunks of 256 B, 1 KB and 4 KB, and a quarter of
    them transcoded losslessly to 7 MCUs per segment; CMYK is not decoded (see test_jpeg_core.test_odd_jpegs). With
    4 KB chunks two rounds synchronise nearly every photo without the sweep: the design's premise, that a decoder
    synchronises well within a chunk of that size."""
    files = [p.read_bytes() for p in photos]
    decodable = [f for f, d in zip(files, core.chunked(files, [4096], rounds=0)) if not d["core_error"]]
    assert len(decodable) >= len(files) - 10
    assert_exact(decodable, [256, 1024, 4096])
    transcoded = [f for f in core.transcode(decodable[::4], interval=7, optimize=True) if f is not None]
    assert_exact(transcoded, [256, 4096])
    no_sweep = core.chunked(decodable, [4096], rounds=2, sweep=False)
    synchronised = sum(d["runs"][0]["flags"] == 0 for d in no_sweep)
    assert synchronised >= 0.8 * len(decodable), f"{synchronised} of {len(decodable)} in sync after two rounds"


def test_slots_bring_photos_in_step_in_fewer_rounds(photos):
    """A guess from every place of the MCU (slots): after one round, in 512-byte chunks as the GPU decodes them,
    the photos' chunks left out of step are no more, and no photo keeps more of them, than with one guess a chunk;
    where one guess a chunk leaves many, less than half as many (on the ImageNet sample, mostly in 4:2:0 photos,
    whose decoders fall in step on the bit at the wrong luma block)."""
    files = [p.read_bytes() for p in photos]
    one = core.chunked(files, [512], rounds=1, sweep=False, band=True)
    slots = core.chunked(files, [512], rounds=1, sweep=False, band=True, slots=10)
    pairs = [(a["runs"][0], b["runs"][0]) for a, b in zip(one, slots) if a.get("runs") and b.get("runs")]
    assert len(pairs) >= len(files) // 2
    left_one = sum(a["unsynced_before_sweep"] for a, _ in pairs)
    left_slots = sum(b["unsynced_before_sweep"] for _, b in pairs)
    assert left_slots <= left_one, (left_slots, left_one)
    if left_one >= 100:
        assert left_slots < left_one / 2, (left_slots, left_one)
    assert max(b["unsynced_before_sweep"] for _, b in pairs) <= max(a["unsynced_before_sweep"] for a, _ in pairs)


def test_a_free_slot_keeps_guesses_in_step_on_offer(photos):
    """The GPU decoder's slots for files with one block a component: one guess a chunk and a free slot, which a
    round fills first, so that the guess and its end stay while the chain has not reached the chunk. After two
    rounds in 512-byte chunks, on the photos with one block a component, no more chunks out of step than with the
    guess alone, and fewer where the guess alone leaves any."""
    files = [p.read_bytes() for p in photos]
    one = core.chunked(files, [512], rounds=2, sweep=False, parts=GPU_PARTS, slots=1)
    gpu = core.chunked(files, [512], rounds=2, sweep=False, parts=GPU_PARTS, slots=-1)
    pairs = [(a["runs"][0], b["runs"][0]) for a, b in zip(one, gpu) if a.get("runs") and b.get("runs")]
    pairs = [(a, b) for a, b in pairs if b["slots"] == 2]  # one block a component: slot_layout gives two slots
    assert pairs, "no photo with one block a component"
    left_one = sum(a["unsynced_before_sweep"] for a, _ in pairs)
    left_gpu = sum(b["unsynced_before_sweep"] for _, b in pairs)
    print(f"chunks out of step after two rounds: {left_gpu} with a free slot, {left_one} without")
    assert left_gpu <= left_one and (left_one == 0 or left_gpu < left_one), (left_gpu, left_one)


def _lanes_after_one_round(files, chunk_bytes: int) -> list[dict]:
    """The GPU decoder's layout after a single round (more chunks left out of step than its rounds leave, so that
    stage 3's lanes repair chains), through the band of rows: each file's run."""
    runs = core.chunked(files, [chunk_bytes], rounds=1, band=True, parts=GPU_PARTS, slots=-1)
    return [d["runs"][0] for d in runs if d.get("runs")]


def _assert_lanes_repair(runs: list[dict], least_repaired: int) -> None:
    """Stage 3 on lanes (32 and 3) agreed with walk_slots at the walk's budget on every run (the harness compares
    the chosen slots and records, starts, flags and the part ends of the chunks decoded again, and whether either
    goes on), went on wherever the rounds left no more chunks out of step than the budget, and repaired a chain
    (chunks out of step, lanes went on) on at least `least_repaired` runs. Where it repaired some, the repairs
    stopped where they met one of their chunk's slots: they decoded fewer blocks than their records hold."""
    budget = core.gpu_constant(core.GPU_DECODER, "kSweepBudget")
    assert not any(r["flags"] & core.LANES_DISAGREE for r in runs)
    assert all(r["lanes_taken"] for r in runs if r["unsynced_before_sweep"] <= budget)
    repaired = [r for r in runs if r["unsynced_before_sweep"] > 0 and r["lanes_taken"]]
    assert len(repaired) >= least_repaired, len(repaired)
    decoded, full = sum(r["repair_blocks"] for r in runs), sum(r["repair_blocks_full"] for r in runs)
    assert decoded <= full, (decoded, full)
    if repaired:
        print(f"stage 3's repairs: {decoded:,} blocks decoded for records of {full:,}")
        assert decoded < full, (decoded, full)


def test_stage3_on_lanes_repairs_chains_on_generated_photos():
    """Where the walk reaches a chunk with no slot on the chain, one lane decodes it again into its slot 0
    (lane_repair) and the lanes walk again, within the walk's budget, as the GPU's stage 3 does: on generated
    photos of every sampling in 128-byte chunks after one round, the lanes give walk_slots' result, and go on."""
    files = []
    for sampling in SAMPLINGS:
        channels = 1 if sampling == "gray" else 3
        files += [encode(jpeg_factory.photo_like(240, 320, channels, seed=s), sampling, quality=90) for s in range(6)]
    _assert_lanes_repair(_lanes_after_one_round(files, 128), least_repaired=10)


def test_stage3_on_lanes_repairs_chains_on_photos(photos):
    """The same on the photos in 512-byte chunks, the GPU's (however many of them the rounds leave out of step);
    after the GPU's rounds, nearly every photo's lanes go on."""
    files = [p.read_bytes() for p in photos]
    _assert_lanes_repair(_lanes_after_one_round(files, 512), least_repaired=0)
    runs = core.chunked(files, [512], rounds=GPU_ROUNDS, band=True, parts=GPU_PARTS, slots=-1)
    runs = [d["runs"][0] for d in runs if d.get("runs")]
    assert len(runs) >= len(files) // 2
    assert sum(r["lanes_taken"] for r in runs) >= 0.95 * len(runs), sum(r["lanes_taken"] for r in runs)


def test_a_large_scan_gets_one_guess_a_chunk():
    """The GPU decoder's layout for a subsampled file whose scan is kLargeScanBytes or more (a photo of several
    megapixels): one guess and a free slot a chunk, in the GPU's chunks for it (its stage 1 decodes a third of
    what three guesses do), the rounds and the lanes' repairs doing the rest, exactly. A smaller photo keeps a
    slot for each place of its MCU and three guesses."""
    large_scan = core.gpu_constant(core.SYNC_DECODE, "kLargeScanBytes")
    large_chunk = core.gpu_constant(core.GPU_EXECUTOR, "kLargeChunkBytes")
    pixels = jpeg_factory.photo_like(1800, 2400, 3, seed=5)
    large, small = encode(pixels, "4:2:0", quality=92), encode(pixels[:600, :800], "4:2:0", quality=92)
    assert len(small) < large_scan < len(large) - 1000
    (big,) = assert_exact([large], [large_chunk], rounds=GPU_ROUNDS, band=True, layouts=((GPU_PARTS, -1),))
    (little,) = assert_exact([small], [large_chunk], rounds=GPU_ROUNDS, band=True, layouts=((GPU_PARTS, -1),))
    assert (big["runs"][0]["slots"], big["runs"][0]["guesses"]) == (2, 1)
    assert (little["runs"][0]["slots"], little["runs"][0]["guesses"]) == (6, 3)


def test_rounds_stop_where_they_meet_an_earlier_decode(photos):
    """A round's decode from a corrected start stops at the first part end where it meets one of the chunk's decodes
    of the last round, and takes the rest from it: the harness checks every slot and part end against decodes to
    the chunk's end after every round (MEETINGS_DISAGREE, which assert_exact and the damaged-file tests fail on).
    Here, on the photos in 512-byte chunks with the GPU's parts, slots and rounds, as it decodes them: the rounds
    read under half the blocks, and under two thirds counted as a warp waits, for its slowest of 32 neighbouring
    chunks."""
    files = [p.read_bytes() for p in photos]
    runs = core.chunked(files, [512], rounds=GPU_ROUNDS, band=True, parts=GPU_PARTS, slots=-1)
    runs = [d["runs"][0] for d in runs if d.get("runs")]
    assert len(runs) >= len(files) // 2
    assert not any(r["flags"] & core.MEETINGS_DISAGREE for r in runs)
    met, full = sum(r["round_blocks"] for r in runs), sum(r["round_blocks_full"] for r in runs)
    warp_met, warp_full = sum(r["round_warp_blocks"] for r in runs), sum(r["round_warp_blocks_full"] for r in runs)
    print(f"rounds' blocks: {met / full:.3f} of a full decode's; as warps wait: {warp_met / warp_full:.3f}")
    assert full > 0 and met < 0.5 * full, (met, full)
    assert warp_met < 2 / 3 * warp_full, (warp_met, warp_full)
    # Of the blocks the rounds read, those that went into the records the walk takes: some, and no more than all.
    chosen = sum(r["round_blocks_chosen"] for r in runs)
    assert 0 < chosen <= met, (chosen, met)


def test_padding_of_zeros_is_flagged_or_exact():
    """Segments padded with zeros instead of ones before their restart markers: libjpeg reads no padding bit, so
    the files are valid to it, but stages 1 and 2 cannot tell such padding from blocks (here a block is 2 bits, 00,
    and a byte holds one block and six bits of padding), count blocks in it, and stage 4 must see that the starts
    they give are wrong (kUnsynced): such a file goes to the CPU path, never decodes wrong."""
    flat = encode(np.full((24, 40), 128, np.uint8), "gray", quality=75, restart_interval=1, optimize=True)
    from jpeg_core_cases import scan_segments

    segments, _ = scan_segments(flat)
    assert all(e - b == 1 and flat[b] == 0x3F for b, e in segments), "expected one 2-bit block and padding a segment"
    zeroed = bytearray(flat)
    for b, _ in segments:
        zeroed[b] = 0x00
    for padded, expect_flag in [(flat, False), (bytes(zeroed), True)]:
        (d,) = core.chunked([padded], [1, 3, 64])
        assert d["ref_warnings"] == 0 and d["ref_coef_error"] == "", d["ref_warning"]
        for r in d["runs"]:
            assert (r["stage4_flags"] != 0) == expect_flag, r
            assert r["stage4_flags"] != 0 or r["coef_mismatch_blocks"] == 0, r
            if expect_flag:
                assert r["stage4_flags"] & core.UNSYNCED, r


# ---- Damaged files: flagged or exact -------------------------------------------------------------------------


def _check_damaged(results, stats):
    """Each decode of a damaged file flags or equals libjpeg's coefficients; a file libjpeg warns about (or fails on)
    is flagged at every chunk size. Counts outcomes into `stats`."""
    for i, d in enumerate(results):
        if d["core_error"]:
            stats["refused_header"] += 1
            continue
        warned = d["ref_warnings"] > 0 or d["ref_coef_error"] != ""
        stats["libjpeg_warned"] += warned
        for r in d["runs"]:
            run = f"mutant {i} ({_where(d)}), chunks of {r['chunk_bytes']}"
            assert not r["flags"] & core.LANES_DISAGREE, f"{run}: stage 3 on lanes differs from the one thread's"
            assert not r["flags"] & core.MEETINGS_DISAGREE, f"{run}: the rounds' meetings changed their records"
            if r["stage4_flags"] == 0:
                assert not warned, f"{run}: accepted, but libjpeg warned: {d['ref_warning'] or d['ref_coef_error']}"
                assert r["coef_mismatch_blocks"] == 0, f"{run}: {r['first_coef_mismatch']}"
                assert r["coef_compared_blocks"] == d["blocks"], run
                stats["accepted"] += 1
            else:
                stats["flagged"] += 1
                stats["flags_seen"] |= r["flags"]


def _check_damaged_band(results, stats):
    """Each band decode of a damaged file flags or equals libjpeg's coefficients in the band's blocks (where libjpeg
    decoded the file at all); a file libjpeg warns about (or fails on) before it has read past the band is flagged."""
    for i, d in enumerate(results):
        if d["core_error"]:
            stats["refused_header"] += 1
            continue
        for r in d["runs"]:
            run = f"mutant {i} ({_where(d)}), band, chunks of {r['chunk_bytes']}"
            if r["cut_short"]:  # a first try the GPU decoder decodes again with the whole file (the plain band's case)
                stats["cut_short"] += 1
                continue
            assert not r["flags"] & core.LANES_DISAGREE, f"{run}: stage 3 on lanes differs from the one thread's"
            assert not r["flags"] & core.MEETINGS_DISAGREE, f"{run}: the rounds' meetings changed their records"
            warned = r["band_ref_warnings"] > 0 or r["band_ref_error"] != ""
            stats["libjpeg_warned"] += warned
            # Damage above the band that stage 3 saw in a lenient read: stage 4 decodes from there, and flags it.
            stats["caught_above_band"] += warned and r["strict_from"] < r["band_first_chunk"] and r["flags"] != 0
            if r["stage4_flags"] == 0:
                assert not warned, f"{run}: accepted, but libjpeg warned within the band: {r['band_ref_error']}"
                assert r["coef_mismatch_blocks"] == 0, f"{run}: {r['first_coef_mismatch']}"
                if d["ref_coef_error"] == "":
                    assert r["coef_compared_blocks"] == r["stored_blocks"], run
                stats["accepted"] += 1
            else:
                stats["flagged"] += 1
                stats["flags_seen"] |= r["flags"]


def _stats() -> dict:
    return dict(
        mutants=0,
        refused_header=0,
        libjpeg_warned=0,
        accepted=0,
        flagged=0,
        flags_seen=0,
        caught_above_band=0,
        cut_short=0,
    )


def _damaged_variants(data: bytes) -> list[bytes]:
    """`data` (one file) cut, with bits flipped, markers and bytes put inside its scan, without its EOI."""
    from jpeg_core_cases import scan_segments

    segments, eoi = scan_segments(data)
    start, mid = segments[0][0], (segments[0][0] + eoi) // 2
    out = [data[:eoi], data[:mid], data[:mid] + b"\xff\xd9", data[: start + 1] + b"\xff\xd9"]
    out += [data[:eoi] + b"\x00\x00" + data[eoi:], data[:eoi] + b"\xff\xd0" + data[eoi:]]
    for marker in [b"\xff\xd0", b"\xff\xd7", b"\xff\xd9", b"\xff\xfe", b"\xff\xff\x00", b"\xff\xff"]:
        out.append(data[:mid] + marker + data[mid:])
    for k in range(12):
        flipped = bytearray(data)
        flipped[start + (k * 7919) % (eoi - start)] ^= 1 << (k % 8)
        out.append(bytes(flipped))
    if len(segments) > 2:  # restart markers: one misnumbered, one missing, an extra one
        e = segments[1][1]
        out += [
            data[: e + 1] + b"\xd5" + data[e + 2 :],
            data[:e] + data[e + 2 :],
            data[: e + 2] + b"\xff\xd3" + data[e + 2 :],
        ]
    return out


def _damaged_files(height: int, seed: int) -> list[bytes]:
    """_damaged_variants of photos height x 64 in four samplings, with and without restart markers."""
    files = []
    for sampling, interval in [("4:2:0", 0), ("4:4:4", 3), ("gray", 0), ("4:2:2", 1)]:
        files += _damaged_variants(
            encode(_photo(height, 64, sampling, seed=seed), sampling, quality=90, restart_interval=interval)
        )
    return files


def test_damaged_files_are_flagged_or_exact():
    """Cuts (with and without EOI), an EOI or restart marker missing, bytes before EOI, markers, fill and FF FF 00
    inside the data, bit flips, misnumbered, missing and extra restart markers: at every chunk size, flagged or
    exact, and flagged wherever libjpeg warns."""
    files = _damaged_files(48, seed=5)
    stats = _stats()
    for parts, slots in LAYOUTS:
        _check_damaged(core.chunked(files, [1, 4, 64, 1024], parts=parts, slots=slots), stats)
    assert stats["flagged"] > 0 and stats["libjpeg_warned"] > len(files) // 2, stats


def test_damaged_files_in_a_band_are_flagged_or_exact():
    """The same damage, decoded as a window's band of MCU rows: flagged or exact in the band, and flagged wherever
    libjpeg warns before it has read past the band (damage below the band is not the window's business). Damage
    above the band is among them: stage 4 starts where the rounds read leniently, above the band's chunks."""
    files = _damaged_files(96, seed=6)
    stats = _stats()
    for parts, slots in LAYOUTS:
        _check_damaged_band(core.chunked(files, [1, 4, 64, 1024], band=True, parts=parts, slots=slots), stats)
    assert min(stats["flagged"], stats["accepted"], stats["libjpeg_warned"], stats["caught_above_band"]) > 0, stats


def test_damaged_files_in_a_first_try_are_flagged_or_exact():
    """The same damage in a window's first try, the scan cut short (cuts the data past the band's rows, inside
    them, and before them): where window_cut_short does not send the window back for the whole file, flagged or
    exact in the band, and flagged wherever libjpeg warns before it has read past the band."""
    files = _damaged_files(96, seed=6)
    stats = _stats()
    for cut in (700, 1400, 2100):
        for parts, slots in ((1, 0), (GPU_PARTS, -1)):
            _check_damaged_band(core.chunked(files, [1, 4, 64], band=True, parts=parts, slots=slots, cut=cut), stats)
    assert min(stats["flagged"], stats["accepted"], stats["libjpeg_warned"], stats["cut_short"]) > 0, stats


# ---- A window's first try: the scan's first bytes -------------------------------------------------------------


def _scan_bytes(data: bytes) -> int:
    from jpeg_core_cases import scan_segments

    segments, _ = scan_segments(data)
    return len(data) - segments[0][0]


def test_a_windows_first_try_reads_as_the_whole_file():
    """A band decoded from the scan's first bytes alone (the GPU decoder's first try for a window in a large scan,
    which a cut short leaves to a decode of the whole file): at every cut, either window_cut_short holds, or the
    decode is the whole file's: nothing flagged, libjpeg's coefficients in every block of the band. The cuts run
    from a few bytes (short) to past the band's rows (exact, though cut)."""
    files = []
    for sampling, interval in [("4:2:0", 0), ("4:4:4", 0), ("gray", 0), ("4:2:2", 5)]:
        files.append(encode(_photo(240, 200, sampling, seed=31), sampling, quality=90, restart_interval=interval))
    cut_exact = cut_short = 0
    for i, data in enumerate(files):
        scan = _scan_bytes(data)
        for share in (0.02, 0.4, 0.6, 0.7, 0.8, 0.9, 0.97):
            for parts, slots in ((1, 0), (GPU_PARTS, -1)):
                (d,) = core.chunked([data], [16, 64, 512], band=True, parts=parts, slots=slots, cut=int(share * scan))
                for r in d["runs"]:
                    run = f"file {i} ({_where(d)}), chunks of {r['chunk_bytes']}, {r['cut_bytes']} of {scan} bytes"
                    assert r["cut_bytes"] == int(share * scan), run
                    if r["cut_short"]:
                        cut_short += 1
                        continue
                    assert r["flags"] == 0, f"{run}: flags {r['flags']}"
                    assert r["coef_mismatch_blocks"] == 0, f"{run}: {r['first_coef_mismatch']}"
                    assert r["coef_compared_blocks"] == r["stored_blocks"] > 0, run
                    cut_exact += 1
    assert cut_exact > 0 and cut_short > 0, (cut_exact, cut_short)


def test_the_first_trys_estimate_cuts_without_falling_short():
    """window_scan_bytes (the GPU decoder's estimate, here for the band: the rows through its last are two thirds of
    the image's) takes less than the scan of these photos, and enough: not one run is cut short, and each is
    exact."""
    files = []
    for sampling in SAMPLINGS:
        for seed in range(3):
            pixels = _photo(480, 400, sampling, seed=40 + seed)
            files.append(encode(pixels, sampling, quality=[75, 90, 95][seed], restart_interval=[0, 0, 4][seed]))
    results = core.chunked(files, [64, 512], band=True, parts=GPU_PARTS, slots=-1, cut=0)
    for i, (data, d) in enumerate(zip(files, results)):
        for r in d["runs"]:
            run = f"file {i} ({_where(d)}), chunks of {r['chunk_bytes']}"
            assert r["cut_bytes"] < _scan_bytes(data) and not r["cut_short"], f"{run}: {r['cut_bytes']} bytes"
            assert r["flags"] == 0 and r["coef_mismatch_blocks"] == 0, run
            assert r["coef_compared_blocks"] == r["stored_blocks"] > 0, run


def _fuzz_corpus() -> list[bytes]:
    corpus = []
    for i, sampling in enumerate(SAMPLINGS + ["2x2,1x2,1x2"]):
        for j, (h, w) in enumerate([(21, 35), (48, 64), (9, 70)]):
            pixels = _photo(h, w, sampling, seed=200 + 10 * i + j)
            corpus.append(encode(pixels, sampling, quality=[60, 90, 100][j], restart_interval=[0, 0, 2][j]))
    corpus += [f for f in core.transcode(corpus[::3], long_codes=3) if f is not None]
    return corpus


def test_fuzz_chunked_under_sanitizers():
    """2100 mutants of files with and without restart markers, standard and long-code tables (bit flips, cuts,
    deletions, inserted bytes, stuffing, fill and markers, renumbered or removed restart markers, swapped segments,
    damaged Huffman tables and scan headers), decoded in chunks of 1, 3, 16 and 300 bytes by the harness built with
    AddressSanitizer + UBSan (any report fails the run), with the usual sync and the GPU decoder's slots, with one
    record a chunk, one round and no sweep (chunks left unsynchronised) and with a slot for every place of the MCU:
    flagged or exact, flagged wherever libjpeg warns; then bands of 500 mutants, and windows' first tries on 300
    (the scans cut at 900 bytes)."""
    variant = "sanitized" if core.unavailable_reason("sanitized") is None else "plain"
    rng = random.Random(20261128)
    corpus = _fuzz_corpus()
    stats = _stats()
    for rounds, sweep, parts, slots in [(ROUNDS, True, GPU_PARTS, -1), (1, False, 1, 0), (ROUNDS, True, 4, 10)]:
        mutants = [mutate(rng.choice(corpus), rng) for _ in range(700)]
        stats["mutants"] += len(mutants)
        _check_damaged(
            core.chunked(
                mutants, [1, 3, 16, 300], rounds=rounds, sweep=sweep, parts=parts, slots=slots, variant=variant
            ),
            stats,
        )
    band = _stats()
    mutants = [mutate(rng.choice(corpus), rng) for _ in range(500)]
    _check_damaged_band(core.chunked(mutants, [1, 16, 300], band=True, parts=3, slots=10, variant=variant), band)
    # A window's first try on the mutants' first bytes (the harness decodes only the bytes the cut leaves).
    first_try = _stats()
    mutants = [mutate(rng.choice(corpus), rng) for _ in range(300)]
    _check_damaged_band(
        core.chunked(mutants, [1, 16, 300], band=True, parts=GPU_PARTS, slots=-1, cut=900, variant=variant), first_try
    )
    print("sync_decode fuzz:", stats, "band:", band, "first try:", first_try)
    assert min(band["accepted"], band["flagged"], band["libjpeg_warned"], band["caught_above_band"]) > 10, band
    assert min(first_try["accepted"], first_try["flagged"], first_try["cut_short"]) > 10, first_try
    assert first_try["libjpeg_warned"] > 0, first_try
    assert min(stats["accepted"], stats["flagged"], stats["libjpeg_warned"]) > 50, stats
    assert stats["flags_seen"] & core.UNSYNCED and stats["flags_seen"] & core.BAD_MARKER, stats
