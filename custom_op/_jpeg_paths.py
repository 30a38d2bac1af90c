"""Locate libjpeg-turbo's headers and library for building the C++ extension.

setup.py loads this file by path before the package can be imported, so it
must not import torch or anything from the custom_op package.
"""

import glob
import os
import platform
import re
import sys
import sysconfig
from collections.abc import Sequence
from typing import NamedTuple, Optional

# jpeg_crop_scanline() and jpeg_skip_scanlines() appeared in libjpeg-turbo 1.5.
MIN_VERSION = (1, 5)

PREFIX_ENV = "CUSTOM_OP_JPEG_PREFIX"

INSTALL_HELP = (
    "Install the libjpeg-turbo development files, then retry:\n"
    "  Ubuntu:       sudo apt-get install libjpeg-turbo8-dev\n"
    "  Debian:       sudo apt-get install libjpeg62-turbo-dev\n"
    "  Fedora/RHEL:  sudo dnf install libjpeg-turbo-devel\n"
    "  conda:        conda install -c conda-forge libjpeg-turbo\n"
    "  macOS:        brew install jpeg-turbo\n"
    f"For libjpeg-turbo installed under a custom prefix, set {PREFIX_ENV}=<prefix> "
    "(the directory that holds include/jpeglib.h and lib/libjpeg.so)."
)

# Linker and loader search these without help; any other library dir gets an rpath
# so the built extension finds the same libjpeg at run time that it was linked to.
_DEFAULT_LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64")


class LibjpegTurboNotFound(RuntimeError):
    pass


class JpegTurbo(NamedTuple):
    prefix: str
    include_dirs: list[str]
    library_dirs: list[str]
    libraries: list[str]
    version: str
    # library dirs the runtime loader would not search by itself
    rpath_dirs: list[str]


def _multiarch_names() -> list[str]:
    names = []
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        names.append(multiarch)
    machine = platform.machine()
    if machine and sys.platform.startswith("linux"):
        guess = f"{machine}-linux-gnu"
        if guess not in names:
            names.append(guess)
    return names


def _system_prefixes() -> list[str]:
    return [
        "/usr",
        "/usr/local",
        "/opt/homebrew/opt/jpeg-turbo",
        "/usr/local/opt/jpeg-turbo",
        "/opt/libjpeg-turbo",
    ]


def _lib_filenames() -> list[str]:
    if sys.platform == "darwin":
        return ["libjpeg.dylib", "libjpeg.a"]
    return ["libjpeg.so", "libjpeg.a"]


def _parse_version(jconfig_dir: str) -> Optional[str]:
    # Fedora's multilib jconfig.h only #includes jconfig-64.h, so read the siblings too.
    candidates = [os.path.join(jconfig_dir, "jconfig.h")]
    candidates += sorted(glob.glob(os.path.join(jconfig_dir, "jconfig-*.h")))
    for path in candidates:
        try:
            with open(path, encoding="latin-1") as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^\s*#\s*define\s+LIBJPEG_TURBO_VERSION\s+\"?([0-9][0-9.]*)", text, re.M)
        if m:
            return m.group(1)
    return None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _probe_prefix(prefix: str) -> tuple[Optional[JpegTurbo], str]:
    """Return (result, reason-if-rejected) for one install prefix."""
    include = os.path.join(prefix, "include")
    if not os.path.isfile(os.path.join(include, "jpeglib.h")):
        return None, f"{prefix}: no include/jpeglib.h"
    arch_includes = [os.path.join(include, m) for m in _multiarch_names()]
    jconfig_dir = next((d for d in [include] + arch_includes if os.path.isfile(os.path.join(d, "jconfig.h"))), None)
    if jconfig_dir is None:
        return None, f"{prefix}: jpeglib.h found but no jconfig.h"
    version = _parse_version(jconfig_dir)
    if version is None:
        return None, (
            f"{prefix}: the jpeg headers there are not libjpeg-turbo "
            "(jconfig.h does not define LIBJPEG_TURBO_VERSION; plain IJG libjpeg lacks jpeg_crop_scanline)"
        )
    if _version_tuple(version) < MIN_VERSION:
        return None, f"{prefix}: libjpeg-turbo {version} is older than the required 1.5"

    lib_candidates = [os.path.join(prefix, "lib", m) for m in _multiarch_names()]
    lib_candidates += [os.path.join(prefix, d) for d in ("lib64", "lib", "lib32")]
    lib_dir = next(
        (d for d in lib_candidates if any(os.path.exists(os.path.join(d, n)) for n in _lib_filenames())),
        None,
    )
    if lib_dir is None:
        return None, f"{prefix}: headers of libjpeg-turbo {version} found but no libjpeg.so / libjpeg.a under lib/"

    include_dirs = [include] + ([jconfig_dir] if jconfig_dir != include else [])
    default_lib_dirs = set(_DEFAULT_LIB_DIRS)
    for m in _multiarch_names():
        default_lib_dirs.update({f"/lib/{m}", f"/usr/lib/{m}"})
    rpath_dirs = [] if os.path.realpath(lib_dir) in {os.path.realpath(d) for d in default_lib_dirs} else [lib_dir]
    return JpegTurbo(prefix, include_dirs, [lib_dir], ["jpeg"], version, rpath_dirs), ""


def find_libjpeg_turbo(
    prefixes: Optional[Sequence[str]] = None, *, use_env: bool = True, search_system: bool = True
) -> JpegTurbo:
    """Find libjpeg-turbo >= 1.5.

    Search order: ``prefixes`` (if given), $CUSTOM_OP_JPEG_PREFIX, $CONDA_PREFIX, then the
    usual system places. ``use_env=False`` / ``search_system=False`` restrict the search
    (tests use them). Raises LibjpegTurboNotFound saying what to install.
    """
    searched = []
    explicit = os.environ.get(PREFIX_ENV) if use_env else None
    if explicit:
        # An explicit prefix that is wrong should fail loudly, not silently use another copy.
        found, reason = _probe_prefix(os.path.abspath(os.path.expanduser(explicit)))
        if found:
            return found
        raise LibjpegTurboNotFound(
            f"custom_op: {PREFIX_ENV}={explicit} does not hold a usable libjpeg-turbo ({reason}).\n" + INSTALL_HELP
        )

    candidates = list(prefixes or [])
    if use_env and os.environ.get("CONDA_PREFIX"):
        candidates.append(os.environ["CONDA_PREFIX"])
    if search_system:
        candidates += _system_prefixes()
    for prefix in candidates:
        found, reason = _probe_prefix(prefix)
        if found:
            return found
        searched.append(reason)
    detail = "\n".join("  - " + r for r in searched) or "  (no places searched)"
    raise LibjpegTurboNotFound(
        f"custom_op: libjpeg-turbo >= 1.5 (headers and library) was not found. Searched:\n{detail}\n{INSTALL_HELP}"
    )


if __name__ == "__main__":
    print(find_libjpeg_turbo())
