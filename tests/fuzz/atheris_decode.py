"""libFuzzer-driven fuzzing of custom_op through atheris. Not part of the test run; see README.md here.

Each input is a JPEG-ish byte string; the last 16 bytes (when there are that many) choose the window,
mode, EXIF flag and warning policy, so the mutator explores arguments and data together. The contract
being checked: a uint8 tensor of the right shape, ValueError or RuntimeError; any other exception is a
finding (atheris reports it with the input), and so is a crash or a hang (-timeout).
"""

import os
import random
import sys

import atheris
import torch  # imported before instrumenting, so that only custom_op's own Python is instrumented

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for fuzz_corpus
with atheris.instrument_imports():
    try:
        import custom_op
    except ModuleNotFoundError:  # a checkout that is not installed
        sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
        import custom_op
import fuzz_corpus  # noqa: E402

MODES = (custom_op.ImageReadMode.RGB, custom_op.ImageReadMode.GRAY, custom_op.ImageReadMode.UNCHANGED)
POLICIES = ("raise", "warn", "ignore")
MAX_PIXELS = 1 << 22  # keeps every input cheap; bigger declared sizes must give ValueError


def _expect_shape(out, channels, height, width):
    if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8 or tuple(out.shape[1:]) != (height, width):
        raise AssertionError(
            f"bad result {type(out)} {getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}, wanted {height}x{width}"
        )
    if out.shape[0] not in channels:
        raise AssertionError(f"{out.shape[0]} channels, wanted one of {channels}")


def TestOneInput(raw: bytes) -> None:
    if len(raw) > 16:
        data, knobs = raw[:-16], atheris.FuzzedDataProvider(raw[-16:])
    else:
        data, knobs = raw, atheris.FuzzedDataProvider(b"")
    mode = MODES[knobs.ConsumeIntInRange(0, 2)]
    policy = POLICIES[knobs.ConsumeIntInRange(0, 2)]
    exif = knobs.ConsumeBool()
    fractions = [knobs.ConsumeProbability() for _ in range(4)]

    try:
        info = custom_op.read_jpeg_header(data, apply_exif_orientation=exif)
    except RuntimeError:
        info = None
    channels = {custom_op.ImageReadMode.RGB: {3}, custom_op.ImageReadMode.GRAY: {1}}.get(
        mode, {1: {1}, 4: {4}}.get(info.channels, {3}) if info else {1, 3, 4}
    )

    try:
        out = custom_op.decode_jpeg(
            data, mode=mode, apply_exif_orientation=exif, on_warning=policy, max_pixels=MAX_PIXELS
        )
        if info is not None:
            _expect_shape(out, channels, info.height, info.width)
    except (ValueError, RuntimeError):
        pass

    if info is not None:
        top = int(fractions[0] * (info.height - 1))
        left = int(fractions[1] * (info.width - 1))
        height = 1 + int(fractions[2] * (info.height - top - 1))
        width = 1 + int(fractions[3] * (info.width - left - 1))
    else:
        top, left, height, width = 0, 0, 8, 8
    try:
        out = custom_op.decode_and_crop_jpeg(
            data,
            top,
            left,
            height,
            width,
            mode=mode,
            apply_exif_orientation=exif,
            on_warning=policy,
            max_pixels=MAX_PIXELS,
        )
        _expect_shape(out, channels, height, width)
    except ValueError as error:
        if info is not None and "max_pixels" not in str(error):
            raise AssertionError(f"ValueError for a window inside {info.height}x{info.width}: {error}") from error
    except RuntimeError:
        pass


def CustomMutator(data: bytes, max_size: int, seed: int) -> bytes:
    """libFuzzer's byte mutations, plus JPEG-aware ones, starting from a real file half of the time.

    libjpeg is not instrumented, so libFuzzer sees almost no new coverage and its corpus shrinks to a
    few inputs; restarting from the base files keeps the inputs JPEG-shaped.
    """
    rng = random.Random(seed)
    if len(data) <= 16 or rng.random() < 0.5:
        name = rng.choice(fuzz_corpus.base_names())
        data = fuzz_corpus.base(name) + bytes(rng.randrange(256) for _ in range(16))
    body, knobs = data[:-16], data[-16:]
    if rng.random() < 0.5 and body:
        body = fuzz_corpus.mutate(rng, rng.choice(fuzz_corpus.MUTATIONS), body)
    else:
        body = atheris.Mutate(body, max(1, max_size - 16))
    if rng.random() < 0.2:
        knobs = bytes(rng.randrange(256) for _ in range(16))
    return (body + knobs)[:max_size]


def write_seed_corpus(folder: str) -> None:
    """The fuzz tests' base files (plus default knobs) as libFuzzer's starting corpus."""
    os.makedirs(folder, exist_ok=True)
    for name in fuzz_corpus.base_names():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(fuzz_corpus.base(name) + bytes(16))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-corpus":
        write_seed_corpus(sys.argv[2])
        sys.exit(0)
    import warnings

    warnings.simplefilter("ignore")
    atheris.Setup(sys.argv, TestOneInput, custom_mutator=CustomMutator)
    atheris.Fuzz()
