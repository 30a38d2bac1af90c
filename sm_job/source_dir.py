"""The job's source directory: what SageMaker uploads as code, staged from the checkout.

    <dir>/train.py          the entry point (a copy of sm_job/train.py: SageMaker's PyTorch estimator
                            wants the entry point at the root of the source directory)
    <dir>/requirements.txt  sm_job/requirements.txt, installed by the container before training
    <dir>/custom_op/        the package's Python files and C++ sources, compiled in the job (JIT)
    <dir>/datasets/, <dir>/profiling/, <dir>/sm_job/

The repository root itself cannot be the source directory: its setup.py makes SageMaker's training
toolkit treat the code as a Python package, which it pip-installs and which the torch_distributed
launcher refuses ("Python packages are not supported"), and it would upload tests, benchmarks and
local data too. custom_op is not pip-installed in the job: train.py puts this folder on sys.path and
custom_op builds its library on first import, once per host, into a local cache (sm_job/extension.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("custom_op", "datasets", "profiling", "sm_job")
ENTRY_POINT = "train.py"
REQUIREMENTS = "requirements.txt"
# Build outputs and caches of the checkout: a prebuilt library would be for another machine's torch.
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "_C.buildinfo.json", ".pytest_cache")


def stage(dest: str | os.PathLike, repo_root: str | os.PathLike = REPO_ROOT) -> Path:
    """Create the source directory at `dest` (which must not exist yet, or be empty) and return it."""
    dest = Path(dest)
    root = Path(repo_root)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} exists and is not empty; give a new folder for the job's source directory")
    dest.mkdir(parents=True, exist_ok=True)
    for pkg in PACKAGES:
        if not (root / pkg).is_dir():
            raise FileNotFoundError(f"{root / pkg} is missing: stage the source directory from a full checkout")
        shutil.copytree(root / pkg, dest / pkg, ignore=_IGNORE)
    shutil.copy2(root / "sm_job" / "train.py", dest / ENTRY_POINT)
    shutil.copy2(root / "sm_job" / REQUIREMENTS, dest / REQUIREMENTS)
    return dest


def staged_files(dest: str | os.PathLike) -> list[str]:
    """Relative paths of every file under `dest`, sorted (for checks and the launcher's dry run)."""
    dest = Path(dest)
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
