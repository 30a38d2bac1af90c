"""Listing the JPEG files of a folder: an ImageFolder layout (root/class/*.jpg) or a flat folder.

Which files count: names ending in .jpg or .jpeg, in any case (.JPG, .JPEG as ImageNet names them).
Other files are not read; when there are some, a single warning names how many and a few of them, so
a folder of PNGs is not silently taken for an empty data set. A file with a JPEG name whose content is
not a JPEG is a corrupt file: the dataset reports it with its path when it reads it (see
JpegCropDataset's on_error).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

JPEG_SUFFIXES = (".jpg", ".jpeg")


@dataclass(frozen=True)
class FileList:
    paths: list[str]
    labels: list[int]
    classes: list[str]  # class names; ["."] for a flat folder
    layout: str  # "imagefolder" or "flat"


def _is_jpeg_name(name: str) -> bool:
    return name.lower().endswith(JPEG_SUFFIXES)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def list_jpegs(root: str | os.PathLike, layout: str = "auto") -> FileList:
    """List the JPEGs under `root` with their labels.

    layout:
      - "imagefolder": every sub-folder of root is a class (sorted by name, labels 0..K-1); its JPEGs,
        searched recursively, get that label. Files directly in root are not read.
      - "flat": the JPEGs directly in root, all with label 0.
      - "auto" (default): "imagefolder" if root has sub-folders, else "flat".
    Hidden files and folders (names starting with ".") are ignored.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"data folder {str(root)!r} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"data folder {str(root)!r} is not a folder")
    if layout not in ("auto", "imagefolder", "flat"):
        raise ValueError(f"layout must be 'auto', 'imagefolder' or 'flat', got {layout!r}")

    entries = sorted((e for e in os.scandir(root) if not _is_hidden(e.name)), key=lambda e: e.name)
    subdirs = [e for e in entries if e.is_dir()]
    if layout == "auto":
        layout = "imagefolder" if subdirs else "flat"

    paths: list[str] = []
    labels: list[int] = []
    others: list[str] = []
    if layout == "flat":
        classes = ["."]
        for e in entries:
            if e.is_file() and _is_jpeg_name(e.name):
                paths.append(e.path)
                labels.append(0)
            elif e.is_file():
                others.append(e.path)
    else:
        classes = [e.name for e in subdirs]
        others.extend(e.path for e in entries if e.is_file())
        for label, d in enumerate(subdirs):
            for dirpath, dirnames, filenames in os.walk(d.path, followlinks=True):
                dirnames[:] = sorted(n for n in dirnames if not _is_hidden(n))
                for name in sorted(filenames):
                    if _is_hidden(name):
                        continue
                    full = os.path.join(dirpath, name)
                    if _is_jpeg_name(name):
                        paths.append(full)
                        labels.append(label)
                    else:
                        others.append(full)

    if others:
        shown = ", ".join(repr(p) for p in others[:3]) + (", ..." if len(others) > 3 else "")
        note = (f"{len(others)} file(s) in {str(root)!r} are not read: only names ending in "
                f"{'/'.join(JPEG_SUFFIXES)} (any case) are JPEGs here ({shown})")
        if not paths:
            raise ValueError(f"no JPEG files found in {str(root)!r} (layout {layout!r}); {note}")
        warnings.warn(note, stacklevel=2)
    if not paths:
        where = "in its class sub-folders" if layout == "imagefolder" else "directly in it"
        raise ValueError(f"no JPEG files (*.jpg, *.jpeg) found in {str(root)!r} ({where}, layout {layout!r})")
    return FileList(paths=paths, labels=labels, classes=classes, layout=layout)
