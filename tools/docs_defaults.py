"""A Griffe extension for the API reference (configured in mkdocs.yml): real default values.

A default written as a module constant (`batch_tokens: int = DEFAULT_BATCH_TOKENS`,
`dropout: float = ELMO_SETTINGS["dropout"]`) would show the constant's name, which the
reference does not document. The signature and the parameter table show its value
instead, read from the imported object. Defaults that are not plain values (a class, a
factory) keep their source text.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return isinstance(value, PLAIN)


def _runtime(path: str) -> Any:
    """The imported object at a dotted path (module, then attributes); None if there is none."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
        return obj
    return None


def _names_a_constant(expression: object) -> bool:
    """A default given by name: `NAME`, `NAME[...]` or `module.NAME`, NAME in capitals."""
    if not isinstance(expression, griffe.Expr):
        return False
    parts = [expression, *expression.iterate(flat=True)]
    return any(isinstance(part, griffe.ExprName) and part.name.isupper() for part in parts)


class RealDefaults(griffe.Extension):
    """Replace a default given by a constant's name with the constant's value."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg)

    def _visit(self, obj: griffe.Object) -> None:
        for member in obj.members.values():
            if member.is_alias:
                continue
            if isinstance(member, griffe.Function):
                self._function(member)
            elif isinstance(member, griffe.Attribute) and _names_a_constant(member.value):
                value = _runtime(member.path)
                if _plain(value):
                    member.value = repr(value)
            if isinstance(member, (griffe.Class, griffe.Module)):
                self._visit(member)

    def _function(self, func: griffe.Function) -> None:
        named = [p for p in func.parameters if _names_a_constant(p.default)]
        if not named:
            return
        try:
            signature = inspect.signature(_runtime(func.path))
        except (TypeError, ValueError):
            return
        for parameter in named:
            value = signature.parameters[parameter.name].default if parameter.name in signature.parameters else None
            if _plain(value):
                parameter.default = repr(value)
