"""Exceptions of the datasets package.

Every exception here takes a single message argument: DataLoader workers send exceptions to the main
process by re-creating them from their message, and an exception needing more arguments would turn
into a different error there, losing the file path it carries.
"""


class CorruptImageError(RuntimeError):
    """A file could not be read or decoded. The message starts with the file's path."""


class GpuBackendUnavailableError(RuntimeError):
    """The `gpu` pipeline was chosen but custom_op has no GPU backend in this build."""
