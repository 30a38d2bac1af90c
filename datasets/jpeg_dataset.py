"""JpegCropDataset: JPEGs of a folder, read and decoded with a chosen pipeline, instrumented.

Each sample is (image, label, info):
- image: uint8 tensor (3, output_size, output_size), channels BGR (after the further transforms);
  with transforms=False, the decoded RGB window itself (3, h, w), h, w <= crop_size;
- label: int;
- info: a dict of the worker-side costs of this sample in seconds, "read", "decode", "transform"
  (measured with time.perf_counter where the sample is loaded, so also inside DataLoader workers,
  which torch.profiler does not see), plus "index" (the file index actually loaded) and "skipped"
  (paths of corrupt files replaced by this sample, newline-separated, "" if none). The default
  collate turns the numbers into tensors and the strings into a list, and the training loop sums them.
The `gpu` and `gpu-rrc` pipelines return (encoded bytes as a 1-D uint8 tensor, window, mask, label,
info) instead: the window to decode and the rectangle the further transforms' random mask zeroes, both
drawn here, where `roi` and `rrc` draw them, so that the training process only decodes and applies
them; see gpu_batch.py for their collate function and the main-process decode. Their info's
"transform" is the time to draw the mask.

Each step is wrapped in torch.profiler.record_function, named "read", "decode" and "transform", so
they show up in traces when samples load in the profiled process (num_workers=0).
"""

from __future__ import annotations

import io
import os
import time
import warnings

import torch
from torch.profiler import record_function

from . import decoders
from .errors import CorruptImageError, GpuBackendUnavailableError
from .folder import FileList, list_jpegs
from .transforms import DEFAULT_OUTPUT_SIZE, further_transforms, mask_box
from .windows import TRANSFORM_STREAM, WINDOW_STREAM, random_resized_crop_window, random_window, sample_rng

PIPELINES = ("pil", "roi", "gpu", "pil-rrc", "rrc", "gpu-rrc")
# The pipelines whose samples are decoded in the training process, on the GPU (gpu_batch.py).
GPU_PIPELINES = ("gpu", "gpu-rrc")
ON_ERROR = ("raise", "skip")


def gpu_backend_unavailable_reason() -> str | None:
    """None when custom_op can decode on a CUDA device here, else why not."""
    import custom_op

    probe = getattr(custom_op, "cuda_available", None)
    if not callable(probe):
        return "this custom_op has no GPU backend (no custom_op.cuda_available())"
    if probe():
        return None
    gpu = getattr(custom_op, "gpu", None)
    reason = gpu.unavailable_reason() if gpu is not None and hasattr(gpu, "unavailable_reason") else None
    return reason or "custom_op.cuda_available() is False"


def gpu_backend_available() -> bool:
    """Whether custom_op can decode on a CUDA device here."""
    return gpu_backend_unavailable_reason() is None


def check_pipeline(pipeline: str) -> None:
    """Raise a clear error for an unknown pipeline, or one this build or machine cannot run."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}; choose one of {', '.join(PIPELINES)}")
    if pipeline != "pil":  # pil-rrc draws its windows with custom_op's transform
        try:
            import custom_op  # noqa: F401
        except Exception as e:  # the extension may fail to build or load
            raise RuntimeError(f"pipeline {pipeline!r} needs custom_op, which failed to import: {e}") from e
    if pipeline in GPU_PIPELINES and not gpu_backend_available():
        cpu = "rrc" if pipeline == "gpu-rrc" else "roi"
        raise GpuBackendUnavailableError(
            f"pipeline {pipeline!r} needs the GPU backend of custom_op, which is not available here: "
            f"{gpu_backend_unavailable_reason()}; use {cpu!r} to decode on the CPU"
        )


class JpegCropDataset(torch.utils.data.Dataset):
    """Random crop_size windows of the JPEGs under `root`, decoded with `pipeline`.

    root: an ImageFolder layout (root/class/*.jpg) or a flat folder of JPEGs (see folder.list_jpegs;
        only *.jpg / *.jpeg names, any case, are read).
    layout: "auto", "imagefolder" or "flat" (see folder.list_jpegs).
    files: root's listing from list_jpegs, for a caller that has listed it already: the dataset reads
        exactly those files, and the folder is not listed (nor warned about) a second time.
    pipeline: "pil", "roi", "gpu", "pil-rrc", "rrc" or "gpu-rrc" (see the module docstrings of
        decoders.py and gpu_batch.py). The rrc pipelines take RandomResizedCrop windows (crop_size
        unused) and resize them to output_size while decoding; the further transforms then only mask
        and convert.
    seed, epoch: the window and transforms of sample i depend only on (seed, epoch, i). Set `epoch`
        between epochs (before the DataLoader iterator is created) for new windows.
    on_error: what a corrupt file (unreadable, truncated, not a JPEG) does:
        "raise": CorruptImageError whose message starts with the path (also from DataLoader workers);
        "skip": a warning with the path, and the sample is replaced by the next loadable file
        (index + 1, wrapping around); the skipped paths travel in info["skipped"] and, for samples
        loaded in this process, in self.skipped.
    transforms: False returns the decoded window without the further transforms.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        pipeline: str = "pil",
        *,
        crop_size: int = 256,
        output_size: int = DEFAULT_OUTPUT_SIZE,
        seed: int = 0,
        epoch: int = 0,
        on_error: str = "raise",
        transforms: bool = True,
        layout: str = "auto",
        files: FileList | None = None,
    ):
        check_pipeline(pipeline)
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if crop_size < 1 or output_size < 1:
            raise ValueError(f"crop_size and output_size must be >= 1, got {crop_size}, {output_size}")
        if files is None:
            files = list_jpegs(root, layout=layout)
        self.root = os.fspath(root)
        self.paths = files.paths
        self.labels = files.labels
        self.classes = files.classes
        self.layout = files.layout
        self.pipeline = pipeline
        self.crop_size = crop_size
        self.output_size = output_size
        self.seed = seed
        self.epoch = epoch
        self.on_error = on_error
        self.transforms = transforms
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.paths)

    def _read(self, index: int) -> bytes:
        with open(self.paths[index], "rb") as f:
            return f.read()

    def _decode(self, index: int, data: bytes):
        """(window tensor or encoded tensor, Window) for the sample's pipeline."""
        rng = sample_rng(self.seed, self.epoch, index, WINDOW_STREAM)
        crop = self.crop_size
        if self.pipeline == "pil":
            return decoders.pil_decode_random_crop(data, crop, crop, rng)
        if self.pipeline == "roi":
            return decoders.roi_decode_random_crop(data, crop, crop, rng)
        if self.pipeline == "pil-rrc":
            return decoders.pil_random_resized_crop(data, self.output_size, rng)
        if self.pipeline == "rrc":
            return decoders.fused_random_resized_crop(data, self.output_size, rng)
        if self.pipeline == "gpu-rrc":
            win = decoders.header_random_resized_crop_window(data, rng)
        else:
            win = decoders.header_random_window(data, crop, crop, rng)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), win

    def _load(self, index: int):
        """Read and decode one file; any failure becomes CorruptImageError naming the path."""
        t0 = time.perf_counter()
        try:
            with record_function("read"):
                data = self._read(index)
            t1 = time.perf_counter()
            with record_function("decode"):
                out, win = self._decode(index, data)
            t2 = time.perf_counter()
        except Exception as e:
            raise CorruptImageError(
                f"{self.paths[index]}: cannot {self.pipeline}-decode it: {type(e).__name__}: {e}"
            ) from e
        return out, win, t1 - t0, t2 - t1

    def window(self, index: int):
        """The window that sample `index` uses (reading the file's header; no pixel is decoded)."""
        rng = sample_rng(self.seed, self.epoch, index, WINDOW_STREAM)
        data = self._read(index)
        if self.pipeline in ("pil", "pil-rrc"):
            from PIL import Image

            with Image.open(io.BytesIO(data)) as im:
                height, width = im.height, im.width
        else:
            import custom_op

            info = custom_op.read_jpeg_header(data)
            height, width = info.height, info.width
        if self.pipeline.endswith("rrc"):
            return random_resized_crop_window(height, width, rng)
        return random_window(height, width, self.crop_size, self.crop_size, rng)

    def __getitem__(self, index: int):
        n = len(self.paths)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for a dataset of {n} files")
        index %= n
        skipped: list[str] = []
        with record_function("JpegCropDataset.__getitem__"):
            loaded = index
            while True:
                try:
                    out, win, t_read, t_decode = self._load(loaded)
                    break
                except CorruptImageError as e:
                    if self.on_error == "raise":
                        raise
                    path = self.paths[loaded]
                    skipped.append(path)
                    self.skipped.append(path)
                    warnings.warn(f"skipping corrupt file {e}", stacklevel=2)
                    loaded = (loaded + 1) % n
                    if loaded == index:
                        raise CorruptImageError(
                            f"{self.root}: every one of the {n} files failed to decode (last: {e})"
                        ) from e
            info = {
                "read": t_read,
                "decode": t_decode,
                "transform": 0.0,
                "index": loaded,
                "skipped": "\n".join(skipped),
            }
            label = self.labels[loaded]
            t0 = time.perf_counter()
            if self.pipeline in GPU_PIPELINES:
                rng = sample_rng(self.seed, self.epoch, loaded, TRANSFORM_STREAM)
                # The mask falls on what the further transforms get: the window, or for gpu-rrc the
                # window already resized to the output size.
                h, w = (win.height, win.width) if self.pipeline == "gpu" else (self.output_size, self.output_size)
                mask = torch.tensor(mask_box(h, w, rng), dtype=torch.int64)
                info["transform"] = time.perf_counter() - t0
                return out, torch.tensor(win, dtype=torch.int64), mask, label, info
            if self.transforms:
                with record_function("transform"):
                    out = further_transforms(
                        out, sample_rng(self.seed, self.epoch, loaded, TRANSFORM_STREAM), self.output_size
                    )
            info["transform"] = time.perf_counter() - t0
            return out, label, info
