"""What becomes of the operators' errors and of each item's status: the exception raised or returned,
the warning emitted.

The operators' errors reach Python as RuntimeError: the CPU library is built on torch's stable ABI,
which carries a C++ exception's message across and nothing else. An error that the API raises as
ValueError or TypeError names that type at the start of its message (``ValueError: custom_op: ...``,
csrc/common/item_status.h), and :func:`call`, through which the package calls the operators, raises it
as that type with the rest of the message.

The batched operators report every item as a status code and a message (csrc/common/item_status.h);
every message starts with ``custom_op: ``. Items of a batch are named after that prefix
(``custom_op: batch item 3: ...``); a single-image call keeps the message as it is.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import torch

OK, WARNED, VALUE_ERROR, TYPE_ERROR, RUNTIME_ERROR = range(5)
_EXCEPTIONS = {VALUE_ERROR: ValueError, TYPE_ERROR: TypeError, RUNTIME_ERROR: RuntimeError}
PREFIX = "custom_op: "
# The start of an operator's error message that names the type to raise it as (kValueErrorTag and
# kTypeErrorTag in csrc/common/item_status.h).
_TAGGED = {"ValueError: ": ValueError, "TypeError: ": TypeError}


def typed(error: RuntimeError) -> Exception:
    """An operator's error as the type its message names (the error itself when it names none)."""
    message = str(error)
    for tag, kind in _TAGGED.items():
        if message.startswith(tag):
            return kind(message[len(tag) :])
    return error


def call(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``op(*args, **kwargs)``, its error raised as the type the message names.

    Under torch.compile the call traces into the graph, and an error raised while the compiled graph
    runs is not translated: it stays the operator's RuntimeError, its message starting with the type.
    """
    try:
        return op(*args, **kwargs)
    except RuntimeError as e:
        error = typed(e)
        if error is e:
            raise
        raise error from None


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
