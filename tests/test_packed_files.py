"""custom_op.pack_files and PackedFiles: the files of a batch laid end to end in one tensor, unpacked as
views of it, decoded by the batched calls exactly as the list they came from; through a DataLoader's
workers as one tensor; every malformed PackedFiles refused with a clear exception; on a GPU, packed files
in pinned memory decoded as the CPU path decodes them."""

from __future__ import annotations

import io
import pickle
import random

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import custom_op
from custom_op import PackedFiles, gpu, pack_files, testing

REASON = gpu.unavailable_reason()
needs_gpu = pytest.mark.skipif(REASON is not None, reason=f"GPU backend unavailable here: {REASON}")


def jpeg(seed: int, height: int = 48, width: int = 64) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90, subsampling=seed % 3)
    return buf.getvalue()


FILES = [jpeg(seed, 48 + 8 * (seed % 3), 64 + 16 * (seed % 2)) for seed in range(6)]


def test_unpack_gives_the_files_as_views_of_one_tensor():
    kinds = [FILES[0], bytearray(FILES[1]), memoryview(FILES[2]), np.frombuffer(FILES[3], dtype=np.uint8)]
    kinds += [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in FILES[4:]]
    packed = pack_files(kinds)
    assert packed.data.dtype == torch.uint8 and packed.data.dim() == 1
    assert packed.sizes.dtype == torch.int64 and packed.sizes.tolist() == [len(f) for f in FILES]
    views = packed.unpack()
    assert [bytes(v.numpy()) for v in views] == FILES
    storage = packed.data.untyped_storage().data_ptr()
    assert all(v.untyped_storage().data_ptr() == storage for v in views)


@pytest.mark.parametrize("stack", [False, True])
def test_batched_decode_of_packed_files_equals_that_of_the_list(stack):
    tops, lefts = [0, 8, 16, 1, 3, 7], [0, 8, 5, 2, 9, 11]
    packed = pack_files(FILES)
    got = custom_op.decode_and_crop_jpegs(packed, tops, lefts, 24, 32, stack=stack)
    want = custom_op.decode_and_crop_jpegs(FILES, tops, lefts, 24, 32, stack=stack)
    if stack:
        assert torch.equal(got, want)
    else:
        assert len(got) == len(FILES) and all(torch.equal(g, w) for g, w in zip(got, want))
    whole = custom_op.decode_jpegs(packed)
    assert all(torch.equal(g, custom_op.decode_jpeg(f)) for g, f in zip(whole, FILES))


def test_a_bad_file_in_a_pack_is_that_items_error():
    packed = pack_files([FILES[0], FILES[1][:40], FILES[2]])
    out = custom_op.decode_and_crop_jpegs(packed, 0, 0, 16, 16, on_error="return")
    assert isinstance(out[1], RuntimeError) and "batch item 1" in str(out[1])
    assert torch.equal(out[2], custom_op.decode_and_crop_jpeg(FILES[2], 0, 0, 16, 16))


def test_an_empty_pack():
    packed = pack_files([])
    assert packed.data.numel() == 0 and packed.sizes.numel() == 0 and packed.unpack() == ()
    assert custom_op.decode_and_crop_jpegs(packed, 0, 0, 1, 1) == []


def test_a_pack_survives_pickling():
    packed = pack_files(FILES)
    again = pickle.loads(pickle.dumps(packed))
    assert isinstance(again, PackedFiles) and torch.equal(again.data, packed.data)
    assert torch.equal(again.sizes, packed.sizes)


class _Files(Dataset):
    def __len__(self):
        return len(FILES)

    def __getitem__(self, i):
        return FILES[i], (i, i)


def _collate(items):
    files, windows = zip(*items)
    return pack_files(files), torch.tensor(windows)


def test_a_dataloader_worker_sends_the_batch_as_one_pack():
    loader = DataLoader(_Files(), batch_size=3, num_workers=2, collate_fn=_collate)
    seen = 0
    for packed, windows in loader:
        assert isinstance(packed, PackedFiles)
        images = custom_op.decode_and_crop_jpegs(packed, windows[:, 0].tolist(), windows[:, 1].tolist(), 16, 16)
        for image, (top, left), file in zip(images, windows.tolist(), FILES[seen:]):
            assert torch.equal(image, custom_op.decode_and_crop_jpeg(file, top, left, 16, 16))
        seen += len(images)
    assert seen == len(FILES)


def _malformed():
    packed = pack_files(FILES[:2])
    data, sizes = packed
    return [
        ("sizes past the data", PackedFiles(data, sizes + 1), ValueError, "add up to"),
        ("sizes short of the data", PackedFiles(data, sizes - 1), ValueError, "add up to"),
        ("a negative size", PackedFiles(data, torch.tensor([-5, int(sizes.sum()) + 5])), ValueError, "negative"),
        ("a huge size", PackedFiles(data, torch.tensor([2**62, 2**62])), ValueError, "add up to"),
        ("float data", PackedFiles(data.float(), sizes), TypeError, "1-D uint8"),
        ("2-D data", PackedFiles(data[: data.numel() // 2 * 2].view(2, -1), sizes), TypeError, "1-D uint8"),
        ("strided data", PackedFiles(data[::2], sizes // 2), TypeError, "contiguous"),
        ("bytes for data", PackedFiles(bytes(data.numpy()), sizes), TypeError, "got bytes"),
        ("float sizes", PackedFiles(data, sizes.double()), TypeError, "integer"),
        ("bool sizes", PackedFiles(data, sizes.bool()), TypeError, "integer"),
        ("2-D sizes", PackedFiles(data, sizes.view(1, 2)), TypeError, "integer"),
        ("a list of sizes", PackedFiles(data, sizes.tolist()), TypeError, "got list"),
        ("None", PackedFiles(None, None), TypeError, "PackedFiles.data"),
    ]


@pytest.mark.parametrize("case", _malformed(), ids=lambda c: c[0])
def test_a_malformed_pack_is_refused_with_a_clear_exception(case):
    _, packed, error, words = case
    with pytest.raises(error, match=words):
        packed.unpack()
    with pytest.raises(error, match=words):
        custom_op.decode_and_crop_jpegs(packed, 0, 0, 8, 8)
    # The process goes on as before.
    assert custom_op.decode_and_crop_jpegs(pack_files(FILES[:1]), 0, 0, 8, 8)[0].shape == (3, 8, 8)


def test_pack_files_refuses_what_is_not_a_list_of_files():
    with pytest.raises(TypeError, match="pack_files takes a list or tuple"):
        pack_files(FILES[0])
    with pytest.raises(TypeError, match="pack_files takes a list or tuple"):
        pack_files(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="batch item 1"):
        pack_files([FILES[0], 3])


def test_random_sizes_give_exceptions_or_the_files_never_a_crash():
    data = pack_files(FILES).data
    rng = random.Random(7)
    for _ in range(300):
        count = rng.randint(0, 8)
        sizes = [rng.choice([0, 1, rng.randint(-50, 400), rng.randint(0, data.numel()), 2**40]) for _ in range(count)]
        if rng.random() < 0.3 and count:
            sizes[-1] = data.numel() - sum(sizes[:-1])  # sizes that add up: every split is valid
        packed = PackedFiles(data, torch.tensor(sizes, dtype=torch.int64))
        try:
            out = custom_op.decode_and_crop_jpegs(packed, 0, 0, 4, 4, on_error="return")
        except (TypeError, ValueError):
            continue
        assert len(out) == count
    assert custom_op.decode_and_crop_jpegs(pack_files(FILES), 0, 0, 8, 8)[0].shape == (3, 8, 8)


@needs_gpu
def test_packed_files_in_pinned_memory_decode_on_the_gpu_as_on_the_cpu():
    prepared = pack_files([custom_op.prepare_jpeg(jpeg(seed, 192, 256)) for seed in range(6)])
    pinned = PackedFiles(prepared.data.pin_memory(), prepared.sizes)
    tops, lefts = [0, 8, 16, 1, 3, 7], [0, 8, 5, 2, 9, 11]
    want = custom_op.decode_and_crop_jpegs(prepared, tops, lefts, 24, 32)
    for files in (prepared, pinned):
        got, paths = testing.decode_with_paths(files, tops, lefts, 24, 32, device="cuda")
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
        assert set(paths) == {"cuda"}, paths


@needs_gpu
def test_a_pinning_dataloader_delivers_the_pack_in_pinned_memory():
    loader = DataLoader(_Files(), batch_size=3, num_workers=1, collate_fn=_collate, pin_memory=True)
    seen = 0
    for packed, windows in loader:
        assert isinstance(packed, PackedFiles) and packed.data.is_pinned()
        assert all(view.is_pinned() for view in packed.unpack())
        tops, lefts = windows[:, 0].tolist(), windows[:, 1].tolist()
        images = custom_op.decode_and_crop_jpegs(packed, tops, lefts, 16, 16, device="cuda")
        for image, (top, left), file in zip(images, windows.tolist(), FILES[seen:]):
            assert torch.equal(image.cpu(), custom_op.decode_and_crop_jpeg(file, top, left, 16, 16))
        seen += len(images)
    assert seen == len(FILES)
