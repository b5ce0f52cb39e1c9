"""Argument checks with one wording, shared by the core and both faces.

Every integer option of the library (batch sizes, token budgets, cache sizes, window
lengths, widths) is checked by `check_int`, so a bad value always gets the same kind of
message: what the argument must be, what it means, and what arrived.
"""

from __future__ import annotations

from typing import Any

from .errors import SettingError

__all__ = ["check_int", "check_setting"]


def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: bool = False,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> None:
    """Raise `error` unless `value` is an `int` (not a `bool`) of at least `minimum`.

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

    Raises:
        error: e.g. `ValueError("max_tokens must be a positive integer; got 0.")`.
    """
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        if meaning:
            expected += f" ({meaning})"
        if none_ok:
            expected += f", or leave {name} out" if name.startswith("--") else " or None"
        raise error(f"{name} must be {expected}; got {value!r}." + (f" {hint}" if hint else ""))


def check_setting(name: str, value: object, **kwargs: Any) -> None:
    """`check_int` for a setting that a face names its own way (`batch_size` is `elmo embed
    --batch-size`): the error is a `SettingError` that carries `name`.

    Raises:
        SettingError: as `check_int` words it.
    """
    try:
        check_int(name, value, **kwargs)
    except ValueError as err:
        raise SettingError(str(err), name) from None
