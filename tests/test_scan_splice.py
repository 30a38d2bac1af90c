"""The spliced-scan path (csrc/cpu/scan_splice.h, csrc/cpu/huffman_skip.h).

A window of an ordinary sequential JPEG is decoded from the MCU row above it: our own Huffman walk
skips the rows above, and libjpeg decodes a datastream made of the file's headers, that row's first
MCU written again, and the rest of the file. By default only skips of a few thousand blocks are
spliced (large photos); most tests here lower that bar to 0 so that every window with an MCU row
above it takes the path, and compare it with Pillow and with libjpeg's own skip, byte for byte.
"""

import threading

import numpy as np
import pytest
import torch

import custom_op
import jpeg_factory
from conftest import shared_dir
from custom_op import ImageReadMode
from jpeg_factory import with_exif_orientation
from test_decode import MODES, assert_crops_exact, pillow_reference

pytestmark = pytest.mark.skipif(
    jpeg_factory.unavailable_reason() is not None, reason=str(jpeg_factory.unavailable_reason())
)

ALWAYS, NEVER = 0, -1


def set_splice(min_blocks: int) -> int:
    return int(torch.ops.custom_op._set_scan_splice_min_blocks(min_blocks))


def spliced() -> int:
    return int(torch.ops.custom_op._scan_splice_decodes())


@pytest.fixture
def splice_always():
    previous = set_splice(ALWAYS)
    yield
    set_splice(previous)


def crop(data: bytes, window, mode=ImageReadMode.RGB, exif=False, scale=8, policy=0, splice=ALWAYS):
    previous = set_splice(splice)
    try:
        return torch.ops.custom_op.decode_and_crop_jpeg(
            torch.frombuffer(bytearray(data), dtype=torch.uint8), *window, int(mode), exif, policy, 0, scale
        )
    finally:
        set_splice(previous)


def bottom_windows(height: int, width: int, rng: np.random.Generator, n: int = 12):
    """Windows whose top is at least one MCU row (and its margin) down, at every offset in a row, and
    random ones below that."""
    out = {(height - 1, 0, 1, width), (height - 1, width - 1, 1, 1)}
    for top in range(18, min(height, 18 + 34)):
        # Short ones: a decode that reaches the last MCU rows is redone libjpeg's way.
        h = int(rng.integers(1, min(height - top, 16) + 1))
        w = int(rng.integers(1, width + 1))
        out.add((top, int(rng.integers(0, width - w + 1)), h, w))
    for _ in range(n):
        top = int(rng.integers(min(18, height - 1), height))
        h, w = int(rng.integers(1, height - top + 1)), int(rng.integers(1, width + 1))
        out.add((top, int(rng.integers(0, width - w + 1)), h, w))
    return sorted(out)


VARIANTS = {
    "4:2:0": {},
    "4:4:4": {"sampling": "4:4:4"},
    "4:2:2": {"sampling": "4:2:2"},
    "4:4:0": {"sampling": "4:4:0"},
    "4:1:1": {"sampling": "4:1:1"},
    "odd factors 1x2,2x1,1x1": {"sampling": "1x2,2x1,1x1"},
    "optimized tables": {"optimize": True},
    "quality 100": {"quality": 100},
    "quality 20": {"quality": 20},
}


@pytest.mark.parametrize("size", [(61, 47), (200, 333), (97, 1000)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("variant", VARIANTS)
def test_spliced_windows_equal_pillow(splice_always, variant, size):
    data = jpeg_factory.encode(jpeg_factory.photo_like(*size, seed=sum(size)), **VARIANTS[variant])
    reference = pillow_reference(data)
    before = spliced()
    assert_crops_exact(data, reference, np.random.default_rng(len(variant)))
    rng = np.random.default_rng(7)
    for top, left, h, w in bottom_windows(*size, rng):
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w)
        assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w]), (variant, top, left, h, w)
    if size[0] >= 96:  # smaller images have no window that both skips a row and stops short of the end
        assert spliced() > before, "no window took the spliced path"


@pytest.mark.parametrize("channels,color_space", [(1, None), (4, "cmyk"), (4, "ycck"), (3, "rgb")])
def test_gray_cmyk_ycck_and_rgb_files_in_every_mode(splice_always, channels, color_space):
    options = {"sampling": "4:4:4"} if color_space in ("cmyk", "rgb") else {}
    if color_space is not None:
        options["color_space"] = color_space
    data = jpeg_factory.encode(jpeg_factory.photo_like(120, 90, channels=channels, seed=3), **options)
    rng = np.random.default_rng(channels)
    before = spliced()
    for mode in (ImageReadMode.RGB, ImageReadMode.GRAY, ImageReadMode.UNCHANGED):
        for window in bottom_windows(120, 90, rng, n=6):
            assert torch.equal(crop(data, window, mode), crop(data, window, mode, splice=NEVER)), (mode, window)
    assert spliced() > before
    reference = pillow_reference(data, "RGB")
    for top, left, h, w in bottom_windows(120, 90, rng, n=6):
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w)
        assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w])


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations(splice_always, orientation):
    data = with_exif_orientation(jpeg_factory.encode(jpeg_factory.photo_like(83, 130, seed=orientation)), orientation)
    reference = pillow_reference(data, "RGB", exif=True)
    _, H, W = reference.shape
    rng = np.random.default_rng(orientation)
    for top, left, h, w in bottom_windows(H, W, rng, n=8) + [(0, 0, H, W), (H - 5, W - 7, 5, 7), (0, W - 9, H, 9)]:
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w, apply_exif_orientation=True)
        assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w]), (orientation, top, left, h, w)


@pytest.mark.parametrize("scale", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("sampling", ["4:2:0", "4:2:2", "4:4:4", "4:4:0"])
def test_reduced_scales_equal_libjpegs_skip(splice_always, scale, sampling):
    # At scale n/8 the reference is libjpeg's own scaled decode, reached through its own skip.
    data = jpeg_factory.encode(jpeg_factory.photo_like(250, 170, seed=scale), sampling=sampling)
    H, W = -(-250 * scale // 8), -(-170 * scale // 8)
    rng = np.random.default_rng(scale)
    before = spliced()
    for top in range(2, H):
        h = int(rng.integers(1, H - top + 1))
        w = int(rng.integers(1, W + 1))
        window = (top, int(rng.integers(0, W - w + 1)), h, w)
        assert torch.equal(crop(data, window, scale=scale), crop(data, window, scale=scale, splice=NEVER)), window
    assert spliced() > before


def test_long_thin_image(splice_always):
    data = jpeg_factory.encode(jpeg_factory.photo_like(8193, 3, seed=1))
    reference = pillow_reference(data)
    for top in (17, 18, 4000, 8176, 8190, 8192):
        out = custom_op.decode_and_crop_jpeg(data, top, 0, 8193 - top, 3)
        assert np.array_equal(out.numpy(), reference[:, top:])


@pytest.mark.parametrize("options", [{"progressive": True}, {"restart_interval": 2}, {"arithmetic": True}],
                         ids=["progressive", "restart interval", "arithmetic"])
def test_other_files_take_libjpegs_skip(splice_always, options):
    data = jpeg_factory.encode(jpeg_factory.photo_like(130, 90, seed=5), **options)
    before = spliced()
    try:
        reference = pillow_reference(data)
    except OSError:  # a Pillow without arithmetic decoding
        reference = None
    for top, left, h, w in bottom_windows(130, 90, np.random.default_rng(0), n=4):
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w)
        if reference is not None:
            assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w])
    assert spliced() == before


def test_tables_that_cannot_write_the_new_dc_fall_back():
    # A vertical ramp written with optimized tables: the DC differences are all small, so the DC table
    # has no code for the large absolute DC values of the lower rows, which a spliced scan's first
    # block must carry. The splice is refused and libjpeg's skip decodes the window.
    ramp = np.repeat(np.linspace(128, 250, 160).astype(np.uint8)[:, None], 64, axis=1)
    image = np.repeat(ramp[:, :, None], 3, axis=2)
    data = jpeg_factory.encode(image, sampling="4:4:4", optimize=True)
    reference = pillow_reference(data)
    previous = set_splice(ALWAYS)
    try:
        before = spliced()
        out = custom_op.decode_and_crop_jpeg(data, 150, 0, 10, 64)
        assert spliced() == before
    finally:
        set_splice(previous)
    assert np.array_equal(out.numpy(), reference[:, 150:160])


def test_flat_image_without_zero_run_codes(splice_always):
    # Every block is flat: the AC tables hold only an end-of-block code, so no zero-run codes can
    # realign the rewritten MCU. Whether the splice happens or is refused, the pixels must be exact.
    image = np.full((96, 80, 3), (200, 40, 90), np.uint8)
    data = jpeg_factory.encode(image, optimize=True)
    reference = pillow_reference(data)
    for top, left, h, w in bottom_windows(96, 80, np.random.default_rng(1), n=6):
        out = custom_op.decode_and_crop_jpeg(data, top, left, h, w)
        assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w])


def test_off_by_default():
    # Our entropy decoder walks jpeg_skip_scanlines' rows as fast as the splice's walker, so the splice
    # no longer pays (scan_splice.cpp); it stays available through the knob, and these tests use it.
    assert set_splice(NEVER) == NEVER, "the default changed: update this test and scan_splice.cpp's comment"
    large = jpeg_factory.encode(jpeg_factory.photo_like(900, 1200, seed=2))
    before = spliced()
    out = custom_op.decode_and_crop_jpeg(large, 600, 300, 200, 300)
    assert spliced() == before
    assert np.array_equal(out.numpy(), pillow_reference(large)[:, 600:800, 300:600])
    previous = set_splice(256)
    try:
        small = jpeg_factory.encode(jpeg_factory.photo_like(120, 160, seed=2))
        custom_op.decode_and_crop_jpeg(small, 40, 0, 20, 20)  # 2 MCU rows of 60 blocks above: 120 < 256
        assert spliced() == before
        assert torch.equal(custom_op.decode_and_crop_jpeg(large, 600, 300, 200, 300), out)
        assert spliced() == before + 1
    finally:
        set_splice(previous)


def test_windows_that_reach_the_end_of_the_data_are_redone_the_ordinary_way(splice_always):
    # How far libjpeg reads ahead decides whether a truncated file warns; near the end of the data
    # the splice is abandoned so that the outcome is libjpeg's own (here: a warning, so an error).
    data = jpeg_factory.encode(jpeg_factory.photo_like(200, 160, seed=4))
    before = spliced()
    out = custom_op.decode_and_crop_jpeg(data, 150, 0, 50, 160)
    assert np.array_equal(out.numpy(), pillow_reference(data)[:, 150:])
    truncated = data[: len(data) - 300]
    with pytest.raises(RuntimeError, match="Premature end"):
        custom_op.decode_and_crop_jpeg(truncated, 150, 0, 50, 160)
    assert spliced() == before


def test_files_whose_tables_are_new_need_a_longer_skip():
    # Optimized tables are the file's own, so this thread has not derived them yet: a skip of 1350
    # blocks (3 MCU rows of 450) is then left to libjpeg, one of 10800 is spliced, and after that the
    # short one is spliced too.
    previous = set_splice(1024)
    try:
        data = jpeg_factory.encode(jpeg_factory.photo_like(900, 1200, seed=12), optimize=True)
        reference = pillow_reference(data)
        before = spliced()
        for top, expected in ((64, 0), (400, 1), (64, 2)):
            out = custom_op.decode_and_crop_jpeg(data, top, 100, 50, 300)
            assert np.array_equal(out.numpy(), reference[:, top:top + 50, 100:400])
            assert spliced() - before == expected, top
    finally:
        set_splice(previous)


@pytest.mark.parametrize("policy", [0, 2], ids=["raise", "ignore"])
def test_damaged_data_gives_what_libjpegs_skip_gives(splice_always, policy):
    data = jpeg_factory.encode(jpeg_factory.photo_like(160, 120, seed=9))
    start = data.index(b"\xff\xda") + 2 + int.from_bytes(data[data.index(b"\xff\xda") + 2:][:2], "big")
    rng = np.random.default_rng(policy)
    cases = [data[:start + n] for n in (10, 200, 900, len(data) - start - 10)]
    for _ in range(40):
        damaged = bytearray(data)
        for position in rng.integers(start, len(data) - 2, size=int(rng.integers(1, 4))):
            damaged[position] ^= 1 << int(rng.integers(0, 8))
        cases.append(bytes(damaged))
    for case in cases:
        for window in ((140, 10, 20, 50), (40, 0, 100, 120), (17, 60, 1, 1)):
            outcomes = []
            for splice in (ALWAYS, NEVER):
                try:
                    outcomes.append(crop(case, window, policy=policy, splice=splice))
                except RuntimeError as error:
                    outcomes.append(type(error))
            spliced_out, plain_out = outcomes
            if isinstance(plain_out, torch.Tensor):
                assert isinstance(spliced_out, torch.Tensor) and torch.equal(spliced_out, plain_out), window
            else:
                assert spliced_out is plain_out, window


def test_threads_with_different_tables(splice_always):
    files = [jpeg_factory.encode(jpeg_factory.photo_like(300, 200, seed=s), **options)
             for s, options in enumerate([{}, {"optimize": True}, {"quality": 40}, {"sampling": "4:4:4"},
                                          {"optimize": True, "quality": 75}, {"sampling": "4:2:2"}])]
    windows = [(int(t), 0, 300 - int(t), 200) for t in np.random.default_rng(0).integers(20, 290, size=24)]
    expected = {(i, w): crop(f, w, splice=NEVER) for i, f in enumerate(files) for w in windows}
    failures = []

    def work(offset):
        for k in range(len(windows) * len(files)):
            i = (k + offset) % len(files)
            w = windows[(k * 7 + offset) % len(windows)]
            out = custom_op.decode_and_crop_jpeg(files[i], *w)
            if not torch.equal(out, expected[(i, w)]):
                failures.append((i, w))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_imagenet_sample(splice_always):
    folder = shared_dir("imagenet-sample")
    rng = np.random.default_rng(11)
    before = spliced()
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        reference = pillow_reference(data)
        _, H, W = reference.shape
        for top, left, h, w in bottom_windows(H, W, rng, n=3)[::6]:
            out = custom_op.decode_and_crop_jpeg(data, top, left, h, w)
            assert np.array_equal(out.numpy(), reference[:, top:top + h, left:left + w]), (path.name, top, left)
    assert spliced() > before


def test_modes_on_odd_jpegs(splice_always):
    folder = shared_dir("odd-jpegs")
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        try:
            info = custom_op.read_jpeg_header(data)
        except RuntimeError:
            continue
        rng = np.random.default_rng(len(path.name))
        for name, mode in MODES.items():
            for window in bottom_windows(info.height, info.width, rng, n=3)[::5]:
                outcomes = []
                for splice in (ALWAYS, NEVER):
                    try:
                        outcomes.append(crop(data, window, mode, policy=2, splice=splice))
                    except RuntimeError as error:
                        outcomes.append(type(error))
                a, b = outcomes
                assert (torch.equal(a, b) if isinstance(b, torch.Tensor) else a is b), (path.name, name, window)


def _oversubscribed(data: bytes, table_class: int, counts) -> bytes:
    """data with the first Huffman table of class table_class (0 DC, 1 AC) given these code counts per
    length (as many symbols as before; counts that assign more codes than a length has)."""
    out = bytearray(data)
    i = 2
    while i + 4 <= len(out):
        marker, length = out[i + 1], int.from_bytes(out[i + 2:i + 4], "big")
        if marker == 0xC4:
            j = i + 4
            while j < i + 2 + length:
                n = sum(out[j + 1:j + 17])
                if out[j] >> 4 == table_class:
                    new = list(counts(n))
                    assert sum(new) == n and len(new) == 16
                    out[j + 1:j + 17] = bytes(new)
                    return bytes(out)
                j += 17 + n
        i += 2 + length
    raise AssertionError("no such table")


@pytest.mark.parametrize("table_class", [0, 1], ids=["DC", "AC"])
@pytest.mark.parametrize("shape", ["all length 1", "three of length 1", "full at 2 bits then more"])
def test_oversubscribed_huffman_tables_are_refused(splice_always, table_class, shape):
    # libjpeg accepts such a table while reading the header and refuses it only when decoding starts;
    # the splice derives its tables first, so it must refuse them itself, writing nothing out of bounds.
    counts = {"all length 1": lambda n: [n] + [0] * 15,
              "three of length 1": lambda n: [3] + [0] * 14 + [n - 3],
              "full at 2 bits then more": lambda n: [0, 4] + [0] * 13 + [n - 4]}[shape]
    data = jpeg_factory.encode(jpeg_factory.photo_like(256, 256, seed=8), quality=90)
    hostile = _oversubscribed(data, table_class, counts)
    before = spliced()
    for _ in range(3):
        with pytest.raises(RuntimeError, match="Huffman table"):
            custom_op.decode_and_crop_jpeg(hostile, 200, 0, 16, 16)
    assert spliced() == before
    assert torch.equal(crop(data, (200, 0, 16, 16)), crop(data, (200, 0, 16, 16), splice=NEVER))
