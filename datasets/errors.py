"""Exceptions of the datasets package.

Every exception here takes a single message argument: DataLoader workers send exceptions to the main
process by re-creating them from their message, and an exception needing more arguments would turn
into a different error there, losing the file path it carries.
"""

import re


class CorruptImageError(RuntimeError):
    """A file could not be read or decoded. The message starts with the file's path."""


class GpuBackendUnavailableError(RuntimeError):
    """The `gpu` pipeline was chosen but custom_op has no GPU backend in this build."""


def dataset_message(error: BaseException) -> str:
    """The message the dataset raised `error` with, also when a DataLoader worker raised it.

    The main process re-raises a worker's exception with a message of its own: "Caught X in DataLoader
    worker process N." and the worker's whole traceback, whose last entry is the original exception
    ("module.X: message"). That message is what a user needs; the rest is the worker's stack.
    """
    text = str(error)
    if "Original Traceback (most recent call last):" not in text:
        return text
    name = re.escape(type(error).__name__)
    matches = list(re.finditer(rf"^(?:[\w.]+\.)?{name}: ", text, flags=re.MULTILINE))
    return text[matches[-1].end() :].strip() if matches else text
