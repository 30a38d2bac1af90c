"""Find or build the C++ library and load it, so that torch.ops.custom_op.* exist.

Order: a prebuilt library that setup.py put in the package (when it matches the
installed sources and torch), else the just-in-time build cache, building into it
under a file lock when needed. The README section on building lists the env vars.
"""

import hashlib
import json
import math
import os
import shutil
import socket
import sys
import threading
import time
import uuid
import warnings
from typing import Dict, Optional, Sequence

import torch

from . import _build_config as config
from ._cache_dir import choose_cache_root
from ._jpeg_paths import find_libjpeg_turbo

ENV_FORCE_JIT = "CUSTOM_OP_FORCE_JIT"
ENV_VERBOSE = "CUSTOM_OP_VERBOSE_BUILD"
ENV_LOCK_TIMEOUT = "CUSTOM_OP_BUILD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 600.0

CPU_LIBRARY = "custom_op_cpu"
BUILDS_LOG = "builds.log"
# Private build dirs of other keys are only removed when this old: with no lock of
# theirs held, age is the only safe sign that their builder is gone.
_STALE_BUILD_DIR_S = 24 * 3600

# Seconds one translation unit takes to compile against torch's headers on a slow
# 2-core machine; only used for the "takes about N s" hint.
_SECONDS_PER_SOURCE = 10

_lock = threading.Lock()
_loaded: Dict[str, Dict[str, str]] = {}


def _reset_after_fork() -> None:
    # A fork while another thread held _lock would leave the child's copy locked forever.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _verbose() -> bool:
    return _flag(ENV_VERBOSE)


def _log(msg: str) -> None:
    print(f"custom_op: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- build + load

def _lock_timeout() -> float:
    raw = os.environ.get(ENV_LOCK_TIMEOUT)
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"custom_op: {ENV_LOCK_TIMEOUT}={raw!r} is not a number of seconds") from None


def _build_key(name, sources, headers, extra_cflags, extra_ldflags, include_dirs, key_extra) -> str:
    files = list(sources) + list(headers)
    base = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    # The package's own dirs differ between installs of the same sources; their
    # contents are already hashed, so keep their location out of the key.
    portable_includes = [
        "<pkg>" + d[len(config.PACKAGE_DIR):] if (d + os.sep).startswith(config.PACKAGE_DIR + os.sep) else d
        for d in include_dirs
    ]
    parts = {
        "name": name,
        "sources": config.content_hash(files, base),
        "cflags": list(extra_cflags),
        "ldflags": list(extra_ldflags),
        "include_dirs": portable_includes,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "python": config.python_tag(),
        "cxx": os.environ.get("CXX", ""),
        "extra": list(key_extra),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _cleanup_dead_build_dirs(build_parent: str, key: str) -> None:
    """Remove private build dirs left by builders that died.

    Called with the key's lock held, so every build dir of this key belongs to a
    dead process; dirs of other keys are removed only once they are very old.
    """
    try:
        entries = os.listdir(build_parent)
    except OSError:
        return
    now = time.time()
    for entry in entries:
        path = os.path.join(build_parent, entry)
        try:
            stale = entry.startswith(key + "-") or now - os.stat(path).st_mtime > _STALE_BUILD_DIR_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)


def _job_count(n_sources: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(n_sources, cpus))


class _BuildEnv:
    """Set MAX_JOBS (unless the user did) and put pip's ninja on PATH for the build only."""

    def __init__(self, n_sources: int):
        self.n_sources = n_sources
        self.saved = {}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in ("MAX_JOBS", "PATH")}
        if not os.environ.get("MAX_JOBS"):
            os.environ["MAX_JOBS"] = str(_job_count(self.n_sources))
        if shutil.which("ninja") is None:
            try:
                import ninja  # the pip package; its binary is not on PATH when the venv is not activated

                os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
            except (ImportError, AttributeError):
                pass
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _compile(name, sources, extra_cflags, extra_ldflags, include_dirs, build_dir, with_cuda) -> str:
    from torch.utils import cpp_extension

    with _BuildEnv(len(sources)):
        # load() also loads the library into this process (from build_dir); the caller
        # then moves the same file to its final place, which keeps it valid here.
        return cpp_extension.load(
            name=name,
            sources=list(sources),
            extra_cflags=list(extra_cflags),
            extra_ldflags=list(extra_ldflags),
            extra_include_paths=list(include_dirs),
            build_directory=build_dir,
            verbose=_verbose(),
            with_cuda=with_cuda,
            is_python_module=False,
        )


def _build_and_load(
    name: str,
    sources: Sequence[str],
    extra_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
    include_dirs: Sequence[str] = (),
    headers: Sequence[str] = (),
    key_extra: Sequence[str] = (),
    with_cuda: Optional[bool] = None,
) -> Dict[str, str]:
    """Load library `name` from the JIT cache, building it first if needed.

    Returns {"path", "cache_dir", "built"}. Reusable for other libraries (e.g. a
    CUDA one) with their own sources and flags; the caller holds _lock.
    """
    if not sources:
        raise RuntimeError(f"custom_op: no C++ sources given for library {name}")
    key = _build_key(name, sources, headers, extra_cflags, extra_ldflags, include_dirs, key_extra)
    base = os.path.join(choose_cache_root(), "custom_op")
    final_dir = os.path.join(base, key)
    final = os.path.join(final_dir, name + ".so")
    result = {"path": final, "cache_dir": final_dir, "built": "no"}

    if os.path.exists(final):  # published atomically, so it is complete
        torch.ops.load_library(final)
        return result

    from filelock import FileLock, Timeout

    lock_path = os.path.join(base, key + ".lock")
    timeout = _lock_timeout()
    try:
        # Not SoftFileLock: an flock dies with its holder, so a killed builder blocks no one.
        with FileLock(lock_path, timeout=timeout):
            if os.path.exists(final):  # another process built it while we waited
                torch.ops.load_library(final)
                return result
            build_parent = os.path.join(base, "build")
            _cleanup_dead_build_dirs(build_parent, key)
            # Fresh per build: torch's own baton lock file in a reused build dir
            # would hang the next builder if this one is killed.
            build_dir = os.path.join(
                build_parent, f"{key}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            )
            os.makedirs(build_dir)
            waves = math.ceil(len(sources) / _job_count(len(sources)))
            _log(
                f"building the C++ extension into {final_dir} "
                f"(first use; takes about {_SECONDS_PER_SOURCE * waves + 5} s)"
            )
            started = time.time()
            try:
                built = _compile(name, sources, extra_cflags, extra_ldflags, include_dirs, build_dir, with_cuda)
            except BaseException as e:
                shutil.rmtree(build_dir, ignore_errors=True)
                if isinstance(e, Exception):
                    raise RuntimeError(
                        f"custom_op: building the C++ library {name} failed. It needs a C++ compiler "
                        "(g++ or clang++; CXX selects one), ninja and the libjpeg-turbo headers; "
                        f"set {ENV_VERBOSE}=1 to see the commands. Details:\n{e}"
                    ) from e
                raise
            seconds = time.time() - started
            with open(os.path.join(base, BUILDS_LOG), "a") as log:
                log.write(
                    f"{time.strftime('%Y-%m-%dT%H:%M:%S')} key={key} name={name} pid={os.getpid()} "
                    f"host={socket.gethostname()} seconds={seconds:.1f}\n"
                )
            os.makedirs(final_dir, exist_ok=True)
            os.replace(built, final)
            shutil.rmtree(build_dir, ignore_errors=True)
            if _verbose():
                _log(f"built {final} in {seconds:.0f} s")
            result["built"] = "yes"
            return result
    except Timeout as e:
        raise TimeoutError(
            f"custom_op: waited {timeout:.0f} s for the build lock {lock_path}, held by another process "
            "that is building the C++ extension. If that build is still running, wait for it or raise "
            f"{ENV_LOCK_TIMEOUT} (seconds); if it hangs, end that process (the lock is released when it "
            f"exits). To avoid building at import, prebuild once with `python -m custom_op build`."
        ) from e


# ---------------------------------------------------------------- prebuilt

def _prebuilt_library() -> Optional[Dict[str, str]]:
    """The CPU library setup.py put in the package, if it matches the installed sources and torch."""
    current = {
        "source_hash": config.cpu_source_hash(),
        "torch_version": torch.__version__,
        "python": config.python_tag(),
    }
    found = config.find_prebuilt(config.PREBUILT_NAME, config.PREBUILT_INFO, current,
                                 log=_log if _verbose() else None)
    if found is None:
        return None
    path, info = found
    return {"path": path, "jpeg_version": str(info.get("libjpeg_turbo_version", "?"))}


# ---------------------------------------------------------------- public

def _load_cpu() -> Dict[str, str]:
    if not _flag(ENV_FORCE_JIT):
        prebuilt = _prebuilt_library()
        if prebuilt is not None:
            try:
                torch.ops.load_library(prebuilt["path"])
                return {"kind": "prebuilt", "cache_dir": "", **prebuilt}
            except OSError as e:
                # e.g. a wheel built against another libjpeg soname: a local build can still work.
                warnings.warn(f"custom_op: cannot load prebuilt {prebuilt['path']} ({e}); building it from source")
    sources = config.cpu_sources()
    if not sources:
        raise RuntimeError(f"custom_op: no C++ sources under {config.CSRC_DIR}; the package is incomplete")
    jpeg = find_libjpeg_turbo()
    result = _build_and_load(
        CPU_LIBRARY,
        sources,
        extra_cflags=config.compile_flags(),
        extra_ldflags=config.link_flags(jpeg),
        include_dirs=config.include_dirs(jpeg),
        headers=config.cpu_headers(),
        key_extra=[f"libjpeg-turbo {jpeg.version} {jpeg.prefix}"],
        with_cuda=False,
    )
    return {"kind": "jit", "jpeg_version": jpeg.version, **result}


def load_library() -> str:
    """Make torch.ops.custom_op.* available; returns the path of the loaded library.

    Idempotent and thread-safe; the first call in a process may compile (about a minute).
    """
    info = _loaded.get("cpu")
    if info is not None:
        return info["path"]
    with _lock:
        info = _loaded.get("cpu")
        if info is None:
            info = _loaded["cpu"] = _load_cpu()
        return info["path"]


def library_info() -> Dict[str, str]:
    """What load_library() loaded: kind (prebuilt / jit), path, cache_dir, jpeg_version, built."""
    load_library()
    return dict(_loaded["cpu"])
