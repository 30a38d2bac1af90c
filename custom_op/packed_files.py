"""A batch's encoded files in one tensor, for moving them between processes: pack_files, PackedFiles.

Why: a DataLoader worker hands each tensor of a batch to the main process through shared memory of its
own (a segment created, filled and mapped, a file descriptor sent and received, per tensor), so a batch
of 64 separate files costs both processes milliseconds of CPU that one tensor of 64 files does not
(``bench/results/loader_transfer.md``). The batched decode takes a PackedFiles as it is: its files are
views of the one tensor, in ordinary or in pinned memory alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from . import _args

__all__ = ["PackedFiles", "pack_files"]


class PackedFiles(NamedTuple):
    """Encoded files laid end to end in one tensor, as :func:`pack_files` makes them.

    A tuple of two tensors, so that a DataLoader moves it between processes, and pins it with
    ``pin_memory=True``, as one tensor (and a small one of sizes). :func:`custom_op.decode_and_crop_jpegs`
    and :func:`custom_op.decode_jpegs` take it in place of a list of files.
    """

    data: torch.Tensor
    """The files one after another, in a 1-D uint8 tensor on the CPU."""
    sizes: torch.Tensor
    """Each file's length in bytes, in order, in a 1-D int64 tensor whose sum is ``data``'s length."""

    def unpack(self) -> tuple[torch.Tensor, ...]:
        """The files, as 1-D uint8 views of ``data`` (no copy): pinned where ``data`` is.

        Raises:
            TypeError: ``data`` is not a 1-D uint8 CPU tensor, or ``sizes`` is not a 1-D integer tensor.
            ValueError: a size is negative, or the sizes do not add up to ``data``'s length.
        """
        data, sizes = self.data, self.sizes
        if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1:
            raise TypeError(f"custom_op: PackedFiles.data must be a 1-D uint8 tensor, got {_described(data)}")
        if data.device.type != "cpu" or data.layout != torch.strided:
            raise TypeError(f"custom_op: PackedFiles.data must be a dense CPU tensor, got {_described(data)}")
        if not data.is_contiguous():
            raise TypeError("custom_op: PackedFiles.data must be contiguous; call .contiguous() first")
        integer = isinstance(sizes, torch.Tensor) and not sizes.is_floating_point() and not sizes.is_complex()
        if not integer or sizes.dtype == torch.bool or sizes.dim() != 1:
            raise TypeError(f"custom_op: PackedFiles.sizes must be a 1-D integer tensor, got {_described(sizes)}")
        lengths = sizes.tolist()
        if any(n < 0 for n in lengths):
            raise ValueError(f"custom_op: PackedFiles.sizes holds a negative size ({min(lengths)})")
        if sum(lengths) != data.numel():
            raise ValueError(
                f"custom_op: PackedFiles.sizes add up to {sum(lengths)} bytes, but data holds {data.numel()}"
            )
        return torch.split(data, lengths) if lengths else ()


def _described(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-D {value.dtype} tensor on {value.device}"
    return type(value).__name__


def pack_files(files: Sequence) -> PackedFiles:
    """Lays the encoded files of a batch end to end in one tensor: what a DataLoader's ``collate_fn``
    returns for them, so that the batch crosses from a worker to the main process as one tensor.

    Typical use::

        def collate(items):  # items: (encoded file, window) pairs from the dataset
            files, windows = zip(*items)
            return custom_op.pack_files(files), torch.tensor(windows)

        loader = DataLoader(dataset, batch_size=64, num_workers=8, collate_fn=collate, pin_memory=True)
        for packed, windows in loader:
            images = custom_op.decode_and_crop_jpegs(packed, *windows.T.tolist(), device="cuda")

    Args:
        files: a list or tuple of encoded files, each bytes, bytearray, memoryview, a NumPy uint8 array
            or a 1-D uint8 CPU tensor, as the decode functions take them.

    Returns:
        A :class:`PackedFiles`: one copy of the files' bytes, and their sizes.

    Raises:
        TypeError: ``files`` is not a list or tuple of files, or one of them has the wrong type (the
            message names it).
    """
    tensors = _args.tensors(files, caller="pack_files")
    sizes = torch.tensor([t.numel() for t in tensors], dtype=torch.int64)
    data = torch.cat(tensors) if tensors else torch.empty(0, dtype=torch.uint8)
    return PackedFiles(data, sizes)
