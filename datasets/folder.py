"""Listing the JPEG files of a folder: an ImageFolder layout (root/class/*.jpg) or a flat folder.

Which files count: names ending in .jpg or .jpeg, in any case (.JPG, .JPEG as ImageNet names them).
Everything under root that the chosen layout does not read is named in a single warning (how many and a
few of them, and why), so that a folder of PNGs, or photos in a place the layout ignores, is never
silently taken for a smaller data set. A file with a JPEG name whose content is not a JPEG is a corrupt
file: the dataset reports it with its path when it reads it (see JpegCropDataset's on_error).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

JPEG_SUFFIXES = (".jpg", ".jpeg")
LAYOUTS = ("auto", "imagefolder", "flat")
_SHOWN = 3  # names quoted per kind of unread entry; the count covers the rest


@dataclass(frozen=True)
class FileList:
    paths: list[str]
    labels: list[int]
    classes: list[str]  # class names; ["."] for a flat folder
    layout: str  # "imagefolder" or "flat", also when "auto" chose it


def _is_jpeg_name(name: str) -> bool:
    return name.lower().endswith(JPEG_SUFFIXES)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def resolve_layout(root: str | os.PathLike, layout: str = "auto") -> str:
    """The layout `list_jpegs(root, layout)` reads root in: "auto" becomes "flat" or "imagefolder"."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'auto', 'imagefolder' or 'flat', got {layout!r}")
    if layout != "auto":
        return layout
    entries = [e for e in os.scandir(root) if not _is_hidden(e.name)]
    # Photos directly in root mean root is the data set itself: reading it as classes would drop them.
    if any(e.is_file() and _is_jpeg_name(e.name) for e in entries):
        return "flat"
    return "imagefolder" if any(e.is_dir() for e in entries) else "flat"


def list_jpegs(root: str | os.PathLike, layout: str = "auto") -> FileList:
    """List the JPEGs under `root` with their labels.

    layout:
      - "imagefolder": every sub-folder of root is a class (sorted by name, labels 0..K-1); its JPEGs,
        searched recursively, get that label. Files directly in root are not read.
      - "flat": the JPEGs directly in root, all with label 0. Sub-folders are not read.
      - "auto" (default): "flat" when root holds JPEGs itself, else "imagefolder" when it has
        sub-folders, else "flat". When root holds JPEGs and sub-folders, the warning names the
        sub-folders that are not read.
    Hidden files and folders (names starting with ".") are ignored.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"data folder {str(root)!r} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"data folder {str(root)!r} is not a folder")
    chosen = resolve_layout(root, layout)

    entries = sorted((e for e in os.scandir(root) if not _is_hidden(e.name)), key=lambda e: e.name)
    subdirs = [e for e in entries if e.is_dir()]
    paths: list[str] = []
    labels: list[int] = []
    not_jpeg_names: list[str] = []
    outside_classes: list[str] = []  # imagefolder: JPEGs directly in root
    unread_dirs: list[str] = []  # auto -> flat: sub-folders next to the photos
    if chosen == "flat":
        classes = ["."]
        for e in entries:
            if e.is_file() and _is_jpeg_name(e.name):
                paths.append(e.path)
                labels.append(0)
            elif e.is_file():
                not_jpeg_names.append(e.path)
        if layout == "auto":
            unread_dirs = [e.path for e in subdirs]
    else:
        classes = [e.name for e in subdirs]
        for e in entries:
            if e.is_file():
                (outside_classes if _is_jpeg_name(e.name) else not_jpeg_names).append(e.path)
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
                        not_jpeg_names.append(full)

    note = _unread_note(root, chosen, layout, not_jpeg_names, outside_classes, unread_dirs)
    if not paths:
        where = "in its class sub-folders" if chosen == "imagefolder" else "directly in it"
        message = f"no JPEG files (*.jpg, *.jpeg) found in {str(root)!r} ({where}, layout {chosen!r})"
        raise ValueError(f"{message}; {note}" if note else message)
    if note:
        warnings.warn(note, stacklevel=2)
    return FileList(paths=paths, labels=labels, classes=classes, layout=chosen)


def _unread_note(
    root: Path,
    chosen: str,
    requested: str,
    not_jpeg_names: list[str],
    outside_classes: list[str],
    unread_dirs: list[str],
) -> str | None:
    """One sentence naming everything under root that is not read, grouped by why; None if nothing."""

    def shown(paths: list[str], suffix: str = "") -> str:
        names = ", ".join(repr(os.path.relpath(p, root) + suffix) for p in paths[:_SHOWN])
        return names + (", ..." if len(paths) > _SHOWN else "")

    how = f"layout {chosen!r}" + (", chosen by layout 'auto'" if requested == "auto" else "")
    counts, reasons = [], []
    if outside_classes or not_jpeg_names:
        counts.append(f"{len(outside_classes) + len(not_jpeg_names)} file(s)")
    if unread_dirs:
        counts.append(f"{len(unread_dirs)} sub-folder(s)")
    if outside_classes:
        reasons.append(
            f"{len(outside_classes)} JPEG(s) directly in the folder, which the imagefolder layout "
            f"does not read (it reads class sub-folders, layout 'flat' reads these): "
            f"{shown(outside_classes)}"
        )
    if not_jpeg_names:
        reasons.append(
            f"{len(not_jpeg_names)} file(s) whose names do not end in {'/'.join(JPEG_SUFFIXES)} "
            f"(any case): {shown(not_jpeg_names)}"
        )
    if unread_dirs:
        reasons.append(
            f"{len(unread_dirs)} sub-folder(s), as the folder holds JPEGs itself and the flat layout "
            f"reads only those (layout 'imagefolder' reads the sub-folders as classes instead): "
            f"{shown(unread_dirs, os.sep)}"
        )
    if not counts:
        return None
    return f"{' and '.join(counts)} in {str(root)!r} are not read ({how}): " + "; ".join(reasons)
