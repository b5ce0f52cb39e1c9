"""Argument checks with one wording, shared by the core and both faces.

Every integer option of the library (batch sizes, token budgets, cache sizes, window
lengths, widths) is checked by `check_int`, so a bad value always gets the same kind of
message: what the argument must be, what it means, and what arrived. It takes the
integers other tools hand over as well (numpy's `np.int64`, a 0-d integer tensor) and
returns the plain `int` they hold, so a caller keeps only Python ints.
"""

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
    """The `int` that `value` holds; raise `error` unless it is an integer of at least `minimum`.

    An integer is a Python `int`, a numpy integer scalar or a 0-d integer tensor (what
    numpy, ONNX Runtime or torch hand over); never a `bool` (nor a numpy or torch bool).

    Args:
        name: The argument's name as the caller knows it (`"max_tokens"`, `"--piece-tokens"`).
        value: What arrived.
        minimum: The smallest allowed value: 1 reads "a positive integer", 0 "a non-negative
            integer", anything else "an integer >= minimum".
        none_ok: Also accept None (the message then says "or None"; for an option of a
            command, a `name` starting with "--", it says "or leave NAME out" instead).
        meaning: What the number counts or what a special value does, in parentheses after
            the expectation, e.g. "0 = no cache".
        hint: A sentence appended to the message, e.g. how to fix it.
        error: The exception class to raise (`ValueError` unless a caller's own error
            class, such as `OptionsError`, is what its users catch).

    Returns:
        `value` as a Python `int` (None when `value` is None and `none_ok`).

    Raises:
        error: e.g. `ValueError("max_tokens must be a positive integer; got 0.")`.
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
    """The `int` an integer scalar of any kind holds, or None for anything else (bools included)."""
    if isinstance(value, bool) or getattr(value, "ndim", 0) != 0 or getattr(value, "dtype", None) == torch.bool:
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # int, numpy integers, 0-d integer tensors
    except TypeError:
        return None


def check_setting(name: str, value: object, **kwargs: Any) -> int | None:
    """`check_int` for a setting that a face names its own way (`batch_size` is `elmo embed
    --batch-size`): the error is a `SettingError` that carries `name`.

    Returns:
        The plain `int` (or None where `none_ok`), as `check_int` returns it.

    Raises:
        SettingError: as `check_int` words it.
    """
    try:
        return check_int(name, value, **kwargs)
    except ValueError as err:
        raise SettingError(str(err), name) from None
