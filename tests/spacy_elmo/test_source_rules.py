"""Rules the spaCy face's source keeps, checked on its syntax tree (issue 26, item 5).

- It reads no private attribute of another object (thinc's `shim._model`, spaCy's or the
  core's `_name`s): only `self._x` and `cls._x`. `doc._` is spaCy's public extension space.
- Every attribute a class of spacy_elmo gives its instances is created in `__init__`, so no
  method has to ask whether it exists yet (`getattr(self, "_x", None)`), and none does.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "spacy_elmo").rglob("*.py"))


def parsed() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(REPO)), ast.parse(p.read_text(encoding="utf-8"))) for p in SOURCES]


def is_private(name: str) -> bool:
    return name.startswith("_") and name != "_" and not (name.startswith("__") and name.endswith("__"))


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def self_attributes_assigned(function: ast.FunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):  # also `self.a, self.b = ...`
                if isinstance(part, ast.Attribute) and is_self(part.value):
                    names.add(part.attr)
    return names


def test_the_spacy_face_reads_no_private_attribute_of_another_object():
    offenders = [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for path, tree in parsed()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and is_private(node.attr) and not is_self(node.value)
    ]
    assert offenders == []


def test_every_instance_attribute_of_a_spacy_face_class_is_created_in_init():
    offenders = []
    for path, tree in parsed():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
            in_init = {a for f in methods if f.name == "__init__" for a in self_attributes_assigned(f)}
            for method in methods:
                if method.name != "__init__":
                    for name in sorted(self_attributes_assigned(method) - in_init):
                        offenders.append(f"{path}: {cls.name}.{method.name} creates self.{name}")
    assert offenders == []


def test_the_spacy_face_never_asks_whether_its_own_attribute_exists():
    offenders = [
        f"{path}:{node.lineno}: {ast.unparse(node)}"
        for path, tree in parsed()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and is_self(node.args[0])
    ]
    assert offenders == []
