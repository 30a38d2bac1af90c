"""The `gpu` and `gpu-rrc` pipelines' batch path: workers send encoded bytes and windows, the main
process decodes.

Workers only read the file and its header and draw the sample's window and mask (JpegCropDataset with
pipeline="gpu"); collate_encoded lays the batch's variable-length files end to end in one tensor
(custom_op.pack_files), which crosses to the main process as one piece of shared memory instead of one
per file, and decode_batch decodes all windows of the batch in one call to
custom_op.decode_and_crop_jpegs on the device (decode_windows), then applies the same further
transforms as the CPU pipelines (further_transforms_batch), with the masks the workers drew from the
same per-sample random streams. The training process's host time is the scarce one: drawing the masks
there cost about as much as the decode call. The GPU backend's pixels are the CPU path's, so `gpu`
samples equal `roi` samples. `gpu-rrc` (decode_resized_batch) decodes the batch's RandomResizedCrop
windows straight to the output size with custom_op.decode_and_resized_crop_jpegs on the device, the
`rrc` pipeline's pixels on files prepared for random access (others are decoded at full resolution),
then masks and converts them. JpegCropDataset refuses both where
custom_op.cuda_available() is False.
"""

from __future__ import annotations

import torch
from torch.utils.data import default_collate

from .transforms import further_transforms_batch


def collate_encoded(batch):
    """[(bytes tensor, window, mask, label, info)] -> (custom_op.PackedFiles, windows [B, 4], masks [B, 4],
    labels [B], info)."""
    import custom_op

    data = custom_op.pack_files([item[0] for item in batch])
    rest = default_collate([item[1:] for item in batch])
    return (data, *rest)


def decode_windows(data, windows: torch.Tensor, *, device) -> list[torch.Tensor]:
    """Each sample's window, decoded on `device` in one call: uint8 [3, h, w] each.
    data: the batch's files, as collate_encoded packs them (or a list)."""
    import custom_op

    tops, lefts, heights, widths = (windows[:, k].tolist() for k in range(4))
    # A list, not a stacked tensor: windows of images smaller than the crop differ in size until the
    # scale transform.
    return custom_op.decode_and_crop_jpegs(data, tops, lefts, heights, widths, device=device)


def decode_resized_windows(data, windows: torch.Tensor, *, device, output_size: int) -> torch.Tensor:
    """Each sample's window decoded and resized to output_size in one call on `device`
    (custom_op.decode_and_resized_crop_jpegs): uint8 [B, 3, S, S]."""
    import custom_op

    tops, lefts, heights, widths = (windows[:, k].tolist() for k in range(4))
    return custom_op.decode_and_resized_crop_jpegs(data, tops, lefts, heights, widths, output_size, device=device)


def decode_resized_batch(data, windows: torch.Tensor, masks: torch.Tensor, *, device, output_size: int) -> torch.Tensor:
    """The gpu-rrc pipeline's step: decode_resized_windows, then the further transforms with each
    sample's mask: uint8 [B, 3, S, S]."""
    images = decode_resized_windows(data, windows, device=device, output_size=output_size)
    return further_transforms_batch(list(images), masks, output_size)


def decode_batch(data, windows: torch.Tensor, masks: torch.Tensor, *, device, output_size: int) -> torch.Tensor:
    """decode_windows, then the further transforms with each sample's mask (drawn by the worker,
    JpegCropDataset): uint8 [B, 3, S, S]."""
    return further_transforms_batch(decode_windows(data, windows, device=device), masks, output_size)
