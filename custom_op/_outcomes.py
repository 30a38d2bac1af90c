"""What becomes of each item's status: the exception it raises or returns, the warning it emits.

The batched operators report every item as a status code and a message (csrc/common/item_status.h);
every message starts with ``custom_op: ``. Items of a batch are named after that prefix
(``custom_op: batch item 3: ...``); a single-image call keeps the message as it is.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

OK, WARNED, VALUE_ERROR, TYPE_ERROR, RUNTIME_ERROR = range(5)
_EXCEPTIONS = {VALUE_ERROR: ValueError, TYPE_ERROR: TypeError, RUNTIME_ERROR: RuntimeError}
PREFIX = "custom_op: "


def named(message: str, index: Optional[int]) -> str:
    """The message, naming batch item ``index`` when there is one."""
    if index is None:
        return message
    body = message[len(PREFIX) :] if message.startswith(PREFIX) else message
    return f"{PREFIX}batch item {index}: {body}"


def exception(status: int, message: str, index: Optional[int] = None) -> Optional[Exception]:
    """The exception of a failed item (None for a decoded one)."""
    kind = _EXCEPTIONS.get(status)
    if kind is None:
        if status in (OK, WARNED):
            return None
        return RuntimeError(named(f"{PREFIX}unknown item status {status}: {message}", index))
    return kind(named(message, index))


def warn(message: str, index: Optional[int] = None, stacklevel: int = 3) -> None:
    """libjpeg's warnings of an item decoded with on_warning="warn", as a UserWarning. stacklevel as
    warnings.warn counts it from here: 3 points at the caller of a public function that calls this."""
    warnings.warn(named(message, index), UserWarning, stacklevel=stacklevel)


def warn_text(text: torch.Tensor, stacklevel: int = 3) -> None:
    """The warnings a single-image operator returned (UTF-8 in a uint8 tensor), if any, as a
    UserWarning. Called with on_warning="warn" only: for the other policies the operator returns none,
    and not looking at them keeps torch.compile's graph whole."""
    if text.numel():
        warn(bytes(text.tolist()).decode("utf-8", errors="replace"), stacklevel=stacklevel + 1)


def settle(
    statuses: list[int], messages: list[str], single: bool = False, stacklevel: int = 4
) -> list[Optional[Exception]]:
    """Emits the warnings of decoded items and returns each item's exception (None when decoded).
    stacklevel: the user's frame counted from warnings.warn (4: the caller of the public function
    that calls this)."""
    if not any(statuses):  # every item decoded without a warning (OK is 0)
        return [None] * len(statuses)
    errors: list[Optional[Exception]] = []
    for i, (status, message) in enumerate(zip(statuses, messages)):
        index = None if single else i
        if status == WARNED:
            warn(message, index, stacklevel=stacklevel)
        errors.append(exception(status, message, index))
    return errors
