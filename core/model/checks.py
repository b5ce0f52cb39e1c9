"""Argument checks with one wording, shared by the core and both faces."""

from __future__ import annotations

import operator
from typing import Any, Literal, overload

import torch

from .errors import SettingError


@overload
def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: Literal[False] = False,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> int: ...


@overload
def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: bool,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> int | None: ...


def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: bool = False,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> int | None:
    """The `int` that `value` holds, after `error` unless it is an integer >= `minimum`.

    Python ints, numpy integer scalars and 0-d integer tensors are integers. Bools are not.
    `name` is the argument as the caller knows it (`--piece-tokens`). `meaning` follows the
    expectation ("0 = no cache"), and `hint` ends the message.
    """
    if value is None and none_ok:
        return None
    number = _as_int(value)
    if number is None or number < minimum:
        expected = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        if meaning:
            expected += f" ({meaning})"
        if none_ok:
            expected += f", or leave {name} out" if name.startswith("--") else " or None"
        raise error(f"{name} must be {expected}; got {value!r}." + (f" {hint}" if hint else ""))
    return number


def _as_int(value: object) -> int | None:
    if isinstance(value, bool) or getattr(value, "ndim", 0) != 0 or getattr(value, "dtype", None) == torch.bool:
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # int, numpy integers, 0-d integer tensors
    except TypeError:
        return None


def check_setting(name: str, value: object, **kwargs: Any) -> int | None:
    """`check_int`, raising a `SettingError` that carries `name`, for a face to reword (`--batch-size`)."""
    try:
        return check_int(name, value, **kwargs)
    except ValueError as err:
        raise SettingError(str(err), name) from None
