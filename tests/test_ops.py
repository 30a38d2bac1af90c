"""The operators as PyTorch sees them: schemas and fake kernels (opcheck), torch.compile, the
profiler, and decoding from many threads at once with the GIL released."""

import sys
import threading
import time

import pytest
import torch

import custom_op
from custom_op import ImageReadMode


@pytest.fixture(scope="module")
def jpeg(jpeg_writer):
    return jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=11), sampling="4:2:0")


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_opcheck_decode_and_crop(jpeg, mode):
    args = (as_tensor(jpeg), 5, 7, 40, 50, int(mode), False, 0, 0)
    torch.library.opcheck(torch.ops.custom_op.decode_and_crop_jpeg.default, args)


@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_opcheck_decode(jpeg, mode):
    args = (as_tensor(jpeg), int(mode), True, 0, 0)
    torch.library.opcheck(torch.ops.custom_op.decode_jpeg.default, args)


def test_fake_kernel_shapes(jpeg):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        data = mode.from_tensor(as_tensor(jpeg))
        out = torch.ops.custom_op.decode_and_crop_jpeg(data, 1, 2, 30, 20, int(ImageReadMode.RGB), False, 0, 0)
        assert tuple(out.shape) == (3, 30, 20) and out.dtype == torch.uint8
        gray = torch.ops.custom_op.decode_and_crop_jpeg(data, 1, 2, 30, 20, int(ImageReadMode.GRAY), False, 0, 0)
        assert tuple(gray.shape) == (1, 30, 20)


def test_torch_compile_keeps_the_op_in_one_graph(jpeg):
    data = as_tensor(jpeg)

    def crop_and_normalize(data, top, left):
        image = torch.ops.custom_op.decode_and_crop_jpeg(data, top, left, 64, 64, int(ImageReadMode.RGB), False, 0, 0)
        return image.float().div(255).sub(0.5)

    compiled = torch.compile(crop_and_normalize, fullgraph=True, backend="aot_eager")
    expected = crop_and_normalize(data, 3, 9)
    assert torch.equal(compiled(data, 3, 9), expected)
    # The public wrapper is plain Python around the op, so it traces too.
    compiled_api = torch.compile(lambda d: custom_op.decode_and_crop_jpeg(d, 3, 9, 64, 64).float(),
                                 fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled_api(data), expected.add(0.5).mul(255).round())


def test_profiler_shows_the_op_by_name(jpeg):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        custom_op.decode_and_crop_jpeg(jpeg, 0, 0, 32, 32)
        custom_op.decode_jpeg(jpeg)
    names = {event.name for event in prof.events()}
    assert "custom_op::decode_and_crop_jpeg" in names
    assert "custom_op::decode_jpeg" in names


def test_many_threads_decode_correctly_at_once(jpeg_writer):
    files = [jpeg_writer.encode(jpeg_writer.photo_like(120, 160, seed=s), sampling=samp)
             for s, samp in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:1:1"])]
    expected = [custom_op.decode_and_crop_jpeg(f, 10, 20, 90, 100) for f in files]
    errors = []

    def work(k):
        try:
            for i in range(200):
                j = (k + i) % len(files)
                if not torch.equal(custom_op.decode_and_crop_jpeg(files[j], 10, 20, 90, 100), expected[j]):
                    errors.append(f"thread {k} iteration {i}: wrong pixels")
                try:
                    custom_op.decode_jpeg(files[j][: len(files[j]) // 2])
                    errors.append("a truncated file decoded without error")
                except RuntimeError:
                    pass
        except Exception as error:  # noqa: BLE001 - reported below with the thread
            errors.append(f"thread {k}: {error!r}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_decoding_releases_the_gil(jpeg_writer):
    """Another Python thread runs while a decode is in progress.

    The worker signals, then enters the op without giving up the GIL (the switch interval is set to
    a second). If the op kept the GIL, the main thread could not return from its wait until the
    decode had finished; with the GIL released, it wakes while the decode is still running.
    """
    big = jpeg_writer.encode(jpeg_writer.photo_like(3000, 4000, seed=3), sampling="4:4:4", quality=95)
    entering = threading.Event()
    finished_at = []

    def decode():
        entering.set()
        custom_op.decode_jpeg(big)
        finished_at.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        worker = threading.Thread(target=decode)
        worker.start()
        entering.wait()
        woke_at = time.perf_counter()
        worker.join()
    finally:
        sys.setswitchinterval(old)
    assert woke_at < finished_at[0]
