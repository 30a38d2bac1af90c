"""Find or build a C++ library and load it, so that its torch.ops.custom_op.* kernels exist.

One loader for both libraries (the CPU one at import, the GPU one on first use with a CUDA device),
each described by a _build_config.Library: a prebuilt library that setup.py put in the package when
its buildinfo matches the installed sources, Python and torch (for the CPU library, on torch's stable
ABI, any torch from the version it targets on; for the GPU one, the torch it was built with), else the
just-in-time build cache, building into it when needed: under a file lock (one builder per machine and
key, however many DataLoader workers and torchrun ranks start at once), in a private directory,
published by an atomic rename. The README section on building lists the environment variables.
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
from typing import Callable, Optional

import torch

from . import _build_config as config
from ._cache_dir import choose_cache_root
from ._jpeg_paths import find_libjpeg_turbo

ENV_FORCE_JIT = "CUSTOM_OP_FORCE_JIT"
ENV_VERBOSE = "CUSTOM_OP_VERBOSE_BUILD"
ENV_LOCK_TIMEOUT = "CUSTOM_OP_BUILD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 600.0

BUILDS_LOG = "builds.log"
# Private build dirs of other keys are only removed when this old: with no lock of
# theirs held, age is the only safe sign that their builder is gone.
_STALE_BUILD_DIR_S = 24 * 3600

# The "takes about N s" hint: compiler seconds per source on average and for the slowest source (the
# wall-clock floor however many cores there are), by the headers a library's sources include, and the
# start and the link. A library on torch's stable ABI includes only its C shim and light headers; one on
# the C++ ABI (the GPU library) includes ATen's operator headers, which cost several times as much per
# source. Measured on the 2-core VM with torch 2.13: the stable-ABI CPU library, 16 sources, 18 s of
# compiler time (3 s the slowest), 10-11 s on 2 cores when quiet; the C++-ABI CPU library it replaced took
# 2.5 s a source (9 s the slowest).
_SECONDS_PER_SOURCE = {"stable": 1.2, "aten": 2.5}
_SLOWEST_SOURCE_S = {"stable": 3.0, "aten": 9.0}
_START_AND_LINK_S = 3.0

# _lock: one build at a time in this process (the file lock orders processes); _load_lock: the CPU
# library's first load.
_lock = threading.Lock()
_load_lock = threading.Lock()
_loaded: dict[str, dict[str, str]] = {}


def _reset_after_fork() -> None:
    # A fork while another thread held a lock would leave the child's copy locked forever.
    global _lock, _load_lock
    _lock = threading.Lock()
    _load_lock = threading.Lock()


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


def _build_key(library: config.Library) -> str:
    files = list(library.sources) + list(library.headers)
    base = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    # The package's own dirs differ between installs of the same sources; their
    # contents are already hashed, so keep their location out of the key.
    portable_includes = [
        "<pkg>" + d[len(config.PACKAGE_DIR) :] if (d + os.sep).startswith(config.PACKAGE_DIR + os.sep) else d
        for d in library.include_dirs
    ]
    parts = {
        "name": library.jit_name,
        "sources": config.content_hash(files, base),
        "cflags": list(library.cflags),
        "ldflags": list(library.ldflags),
        "include_dirs": portable_includes,
        "python": config.python_tag(),
        "cxx": os.environ.get("CXX", ""),
        "extra": list(library.key_extra),
    }
    if library.stable_abi:
        # One build serves every torch from the targeted version on: a torch upgrade keeps it.
        parts["stable_abi"] = library.stable_abi
    else:
        parts["torch"] = torch.__version__
        parts["torch_cuda"] = torch.version.cuda
        parts["torch_hip"] = getattr(torch.version, "hip", None)
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


def _build_estimate_s(n_sources: int, jobs: int, stable_abi: bool) -> int:
    """About how many seconds compiling and linking n_sources with `jobs` parallel compilers takes, to 5 s
    (``stable_abi``: the sources include torch's stable-ABI headers, not ATen's)."""
    kind = "stable" if stable_abi else "aten"
    per_source, slowest = _SECONDS_PER_SOURCE[kind], _SLOWEST_SOURCE_S[kind]
    seconds = max(slowest, per_source * n_sources / max(1, jobs)) + _START_AND_LINK_S
    return int(5 * math.ceil(seconds / 5))


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


# ---------------------------------------------------------------- lock, compile, publish


def _locked(lock_path: str):
    """The build lock of one key. An flock (not SoftFileLock) dies with its holder, so a killed
    builder blocks no one."""
    from filelock import FileLock

    return FileLock(lock_path, timeout=_lock_timeout())


def _compile(library: config.Library, build_dir: str) -> str:
    """Compiles `library` in build_dir (which the caller made fresh: torch's own baton lock file in a
    reused build dir would hang the next builder if this one is killed); returns the built file."""
    from torch.utils import cpp_extension

    n = len(library.sources)
    seconds = _build_estimate_s(n, _job_count(n), stable_abi=library.stable_abi is not None)
    _log(f"building the C++ library {library.jit_name} (first use; takes about {seconds} s)")
    try:
        with _BuildEnv(len(library.sources)):
            # load() also loads the library into this process (from build_dir); _publish then moves the
            # same file to its final place, which keeps it valid here.
            return cpp_extension.load(
                name=library.jit_name,
                sources=list(library.sources),
                extra_cflags=list(library.cflags),
                extra_ldflags=list(library.ldflags),
                extra_include_paths=list(library.include_dirs),
                build_directory=build_dir,
                verbose=_verbose(),
                with_cuda=library.with_cuda,
                is_python_module=False,
            )
    except Exception as e:
        raise RuntimeError(
            f"custom_op: building the C++ library {library.jit_name} failed. It needs a C++ compiler "
            "(g++ or clang++; CXX selects one), ninja and the libjpeg-turbo headers"
            + (", and the CUDA toolkit with nvJPEG" if library.with_cuda else "")
            + f"; set {ENV_VERBOSE}=1 to see the commands. Details:\n{e}"
        ) from e


def _publish(built: str, final: str, base: str, key: str, library: config.Library, seconds: float) -> None:
    """Moves a finished build to its final place in one rename, so that a library at `final` is
    always complete, and logs the build."""
    with open(os.path.join(base, BUILDS_LOG), "a") as log:
        log.write(
            f"{time.strftime('%Y-%m-%dT%H:%M:%S')} key={key} name={library.jit_name} pid={os.getpid()} "
            f"host={socket.gethostname()} seconds={seconds:.1f}\n"
        )
    os.makedirs(os.path.dirname(final), exist_ok=True)
    os.replace(built, final)
    if _verbose():
        _log(f"built {final} in {seconds:.0f} s")


def _jit_load(library: config.Library) -> dict[str, str]:
    """Loads `library` from the just-in-time cache, building it first if needed.
    Returns {"path", "cache_dir", "built"}."""
    if not library.sources:
        raise RuntimeError(f"custom_op: no C++ sources for library {library.jit_name}; the package is incomplete")
    key = _build_key(library)
    base = os.path.join(choose_cache_root(), "custom_op")
    final_dir = os.path.join(base, key)
    final = os.path.join(final_dir, library.jit_name + ".so")
    result = {"path": final, "cache_dir": final_dir, "built": "no"}
    if os.path.exists(final):  # published atomically, so it is complete
        torch.ops.load_library(final)
        return result

    from filelock import Timeout

    lock_path = os.path.join(base, key + ".lock")
    try:
        with _locked(lock_path):
            if os.path.exists(final):  # another process built it while we waited
                torch.ops.load_library(final)
                return result
            build_parent = os.path.join(base, "build")
            _cleanup_dead_build_dirs(build_parent, key)
            build_dir = os.path.join(build_parent, f"{key}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            os.makedirs(build_dir)
            started = time.time()
            try:
                built = _compile(library, build_dir)
                _publish(built, final, base, key, library, time.time() - started)
            finally:
                shutil.rmtree(build_dir, ignore_errors=True)
            result["built"] = "yes"
            return result
    except Timeout as e:
        raise TimeoutError(
            f"custom_op: waited {_lock_timeout():.0f} s for the build lock {lock_path}, held by another process "
            "that is building the C++ extension. If that build is still running, wait for it or raise "
            f"{ENV_LOCK_TIMEOUT} (seconds); if it hangs, end that process (the lock is released when it "
            f"exits). To avoid building at import, prebuild once with `python -m custom_op build`."
        ) from e


# ---------------------------------------------------------------- prebuilt, then just in time


def load(library: config.Library, usable: Optional[Callable[[dict], Optional[str]]] = None) -> dict[str, str]:
    """Loads `library`: the prebuilt one when its buildinfo matches (and `usable(buildinfo)`, when
    given, names no reason against it), else the just-in-time cache, building into it if needed.
    Returns kind ("prebuilt" or "jit"), path, cache_dir, built, the library's facts and, for a library
    on torch's stable ABI, stable_abi (the oldest torch it serves). Raises RuntimeError under a torch
    that no build of the library can serve."""
    unserved = library.unserved_reason(torch.__version__)
    if unserved is not None:
        raise RuntimeError(f"custom_op: cannot load the C++ library {library.jit_name}: {unserved}")
    if not _flag(ENV_FORCE_JIT):
        log = _log if _verbose() else None
        found = config.find_prebuilt(
            library.prebuilt_name,
            library.prebuilt_info,
            library.current(torch.__version__, torch.version.cuda),
            log=log,
        )
        if found is not None:
            path, info = found
            reason = usable(info) if usable is not None else None
            if reason is not None:
                if log:
                    log(f"ignoring prebuilt {path}: {reason}")
            else:
                try:
                    torch.ops.load_library(path)
                    return {"kind": "prebuilt", "path": path, "cache_dir": "", "built": "no", **_facts(library)}
                except OSError as e:
                    # e.g. a wheel built against another libjpeg or nvJPEG than this machine has: a local
                    # build can still work.
                    warnings.warn(
                        f"custom_op: cannot load prebuilt {path} ({e}); building it from source", stacklevel=1
                    )
    with _lock:
        return {"kind": "jit", **_jit_load(library), **_facts(library)}


def _facts(library: config.Library) -> dict[str, str]:
    return {**dict(library.facts), **({"stable_abi": library.stable_abi} if library.stable_abi else {})}


def load_library() -> str:
    """Make the CPU operators torch.ops.custom_op.* available; returns the path of the loaded library.

    Idempotent and thread-safe; the first call on a machine may compile (about a minute).
    """
    info = _loaded.get("cpu")
    if info is not None:
        return info["path"]
    with _load_lock:
        info = _loaded.get("cpu")
        if info is None:
            info = _loaded["cpu"] = load(config.cpu_library(find_libjpeg_turbo()))
        return info["path"]


def library_info() -> dict[str, str]:
    """What load_library() loaded: kind (prebuilt / jit), path, cache_dir, built, libjpeg_turbo_version and
    stable_abi (the oldest torch the library serves)."""
    load_library()
    return dict(_loaded["cpu"])
