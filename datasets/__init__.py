"""Data sets for custom_op's experiments: synthetic photo-like JPEGs and an instrumented JPEG dataset.

Used from the repository checkout (the repository root on sys.path), never installed: a top-level
package named `datasets` would shadow Hugging Face's.
"""

from .errors import CorruptImageError, GpuBackendUnavailableError
from .folder import FileList, list_jpegs
from .gpu_batch import collate_encoded, decode_batch, decode_resized_batch, decode_resized_windows, decode_windows
from .jpeg_dataset import (
    GPU_PIPELINES,
    ON_ERROR,
    PIPELINES,
    JpegCropDataset,
    check_pipeline,
    gpu_backend_available,
)
from .synthetic import default_cache_dir, make_synthetic_set, photo_like, synthetic_set_dir
from .transforms import further_transforms, further_transforms_batch
from .windows import Window, random_window, sample_rng

__all__ = [
    "CorruptImageError",
    "FileList",
    "GpuBackendUnavailableError",
    "JpegCropDataset",
    "GPU_PIPELINES",
    "ON_ERROR",
    "PIPELINES",
    "Window",
    "check_pipeline",
    "collate_encoded",
    "decode_batch",
    "decode_resized_batch",
    "decode_resized_windows",
    "decode_windows",
    "default_cache_dir",
    "further_transforms",
    "further_transforms_batch",
    "gpu_backend_available",
    "list_jpegs",
    "make_synthetic_set",
    "photo_like",
    "random_window",
    "sample_rng",
    "synthetic_set_dir",
]
