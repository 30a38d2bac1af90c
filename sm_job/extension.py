"""custom_op's C++ library, built once per host into a local cache before the ranks start decoding.

Every rank imports custom_op at start-up, before it creates its DataLoader. custom_op's own build
lock does the rest: the first rank of a host to take the lock (<cache>/custom_op/<key>.lock, an
flock) compiles, the other ranks of that host wait on it and then load the finished library, and
DataLoader workers, forked after the import, inherit it. If the builder dies, the kernel releases
its lock; torchrun ends the remaining ranks anyway, and the next run removes the dead build's files
and builds again. The cache lives on the instance's local disk, outside the folders SageMaker
uploads, so the compiled library never ends up in model.tar.gz or output.tar.gz.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from .env import SAGEMAKER_BUILD_CACHE, JobEnv

CACHE_ENV = "CUSTOM_OP_CACHE_DIR"


def choose_build_cache(requested: Optional[str], job: JobEnv, environ=None) -> Optional[str]:
    """The build cache root: --build-cache-dir, else $CUSTOM_OP_CACHE_DIR, else /tmp/custom_op_cache on
    SageMaker, else None (custom_op's own choice, ~/.cache on a laptop)."""
    env = os.environ if environ is None else environ
    root = requested or env.get(CACHE_ENV) or (SAGEMAKER_BUILD_CACHE if job.in_sagemaker else None)
    if root is None:
        return None
    root = os.path.abspath(os.path.expanduser(root))
    uploaded = [job.model_dir, job.output_data_dir]
    if job.in_sagemaker:
        uploaded += [os.path.join(job.base_dir, "model"), os.path.join(job.base_dir, "output")]
    for folder in uploaded:
        folder = os.path.abspath(folder)
        if root == folder or root.startswith(folder + os.sep):
            raise ValueError(
                f"build cache {root} is inside {folder}, which SageMaker uploads at the end of "
                "the job: choose a folder on local disk (e.g. /tmp/custom_op_cache)"
            )
    return root


def load_extension(cache_root: Optional[str], pipeline: str) -> dict:
    """Import custom_op (building into cache_root if needed); for the GPU pipelines also its GPU library.

    Returns what was loaded: kind (prebuilt / jit), built (yes / no: whether this process compiled),
    path, cache_dir and the seconds the import took (a rank that waited on another's build shows it).
    """
    if cache_root is not None:
        # Set in the environment, not only passed on: DataLoader workers and the synthetic data
        # set's default folder follow the same root.
        os.environ[CACHE_ENV] = cache_root
    started = time.perf_counter()
    import custom_op

    info = dict(custom_op.library_info())
    if pipeline in ("gpu", "gpu-rrc"):
        info["cuda_available"] = str(custom_op.cuda_available())
    info["seconds"] = f"{time.perf_counter() - started:.1f}"
    return info
