"""The environment variables elmo-bilm reads, parsed in one place.

Spaces around a value are ignored and empty means unset, as shells and schedulers leave them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ElmoError

__all__ = ["VARIABLES", "check_environment", "environment_value"]


@dataclass(frozen=True)
class Variable:
    """One variable: what it accepts (for the message), its parser and its default."""

    accepts: str
    parse: Callable[[str], Any]
    default: Any
    unset: str  # what unset (or empty) means, for the message


def _whole_number(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit()) or int(text) < minimum:
            raise ValueError(text)
        return int(text)

    return parse


def _thread_policy(text: str) -> str | int:
    return text.lower() if text.lower() in ("auto", "torch") else _whole_number(1)(text)


def _compile_switch(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


VARIABLES: dict[str, Variable] = {
    "ELMO_THREADS": Variable(
        "'auto' (follow the free CPUs), 'torch' (keep torch's own setting) or a whole number of threads >= 1",
        _thread_policy,
        "auto",
        "auto",
    ),
    "ELMO_COMPILE": Variable(
        "0 (torch's eager operators) or 1 (the fused kernels, the default)", _compile_switch, True, "1"
    ),
    "WORLD_SIZE": Variable("a whole number of processes >= 1 (torchrun sets it)", _whole_number(1), 1, "1"),
    "RANK": Variable("a whole number >= 0 (torchrun sets it)", _whole_number(0), 0, "0"),
    "LOCAL_RANK": Variable("a whole number >= 0 (torchrun sets it)", _whole_number(0), 0, "0"),
    "TORCHINDUCTOR_CACHE_DIR": Variable("a folder", str, None, "torch's default folder"),
    "ELMO_MAX_LINE_BYTES": Variable(
        "a whole number of bytes >= 1 (the longest line a text file may hold)", _whole_number(1), 10_000_000, "10000000"
    ),
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": Variable("a whole number of kernels >= 0", _whole_number(0), None, "unset"),
}
"""Every variable elmo-bilm reads: name -> what it accepts, its parser and its default."""


def environment_value(name: str) -> Any:
    """The parsed value of `name`. Empty or unset gives the default.

    Raises:
        ElmoError: naming the variable, its value and what it accepts.
    """
    variable = VARIABLES[name]
    raw = os.environ.get(name, "")
    text = raw.strip()
    if not text:
        return variable.default
    try:
        return variable.parse(text)
    except ValueError:
        raise ElmoError(
            f"{name} must be {variable.accepts}; got {raw!r}. Set it to one of those, or unset it "
            f"(empty means unset: {variable.unset})."
        ) from None


def check_environment() -> None:
    """Parse every variable of `VARIABLES` (the `elmo` command does, before any work)."""
    for name in VARIABLES:
        environment_value(name)
