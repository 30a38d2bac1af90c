"""Choose the root directory of the just-in-time build cache.

Imports nothing from torch or the package, so tests can load it by path without
triggering the package's import-time build.
"""

import os
import tempfile
import warnings
from collections.abc import Mapping
from typing import Optional

ENV_CACHE_DIR = "CUSTOM_OP_CACHE_DIR"
_EXPLICIT_VARS = (ENV_CACHE_DIR, "TORCH_EXTENSIONS_DIR")


def _usable_dir(path: str) -> bool:
    """Really create the directory and a file in it: os.access is wrong on read-only mounts and for root."""
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError:
        return False


def private_temp_root() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"custom_op-cache-{uid}")


def cache_root_candidates(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """Roots in order of preference; the extension lives in <root>/custom_op/<key>/."""
    env = os.environ if environ is None else environ
    candidates = [os.path.abspath(os.path.expanduser(env[v])) for v in _EXPLICIT_VARS if env.get(v)]
    home_cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates.append(os.path.abspath(home_cache))
    candidates.append(private_temp_root())
    return candidates


def _private_and_ours(root: str) -> bool:
    # In a shared /tmp another user could plant a library for us to load.
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        return not hasattr(os, "getuid") or os.stat(root).st_uid == os.getuid()
    except OSError:
        return False


def choose_cache_root(environ: Optional[Mapping[str, str]] = None) -> str:
    """The first candidate root whose custom_op/ subdirectory can really be written."""
    env = os.environ if environ is None else environ
    skipped = []
    for root in cache_root_candidates(env):
        if root == private_temp_root() and not _private_and_ours(root):
            skipped.append(f"{root} (not private to this user)")
            continue
        if _usable_dir(os.path.join(root, "custom_op")):
            if skipped and any(env.get(v) for v in _EXPLICIT_VARS):
                warnings.warn(f"custom_op: using build cache root {root}; skipped " + "; ".join(skipped), stacklevel=1)
            return root
        skipped.append(f"{root} (not writable)")
    raise RuntimeError(
        "custom_op: no writable directory for the build cache; tried "
        + "; ".join(skipped)
        + f". Set {ENV_CACHE_DIR} to a writable directory."
    )
