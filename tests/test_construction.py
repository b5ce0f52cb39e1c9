"""A model is built whole (STYLE.md section 1): its parts are passed to its constructor, never set from outside."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY = ("core", "spacy_elmo", "hf_elmo")

PARTS = {"recurrence": "BiLM", "token_cache": "BiLM", "training_path": "CharCNN"}
"""Each part attribute of a model -> the class that owns it (and alone may set it, on `self`)."""


def part_assignments(source: str) -> list[tuple[int, str]]:
    """(line, attribute) of every assignment to a part attribute outside its owner's methods."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, owner: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            owner = node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and sub.attr in PARTS:
                    on_self = isinstance(sub.value, ast.Name) and sub.value.id == "self"
                    if not (on_self and owner == PARTS[sub.attr]):
                        found.append((sub.lineno, sub.attr))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in PARTS:
                found.append((node.lineno, str(name.value)))
        for child in ast.iter_child_nodes(node):
            visit(child, owner)

    visit(ast.parse(source), None)
    return found


def test_no_part_of_a_model_is_assigned_outside_its_own_class():
    offenders = {}
    for package in LIBRARY:
        for path in sorted((REPO / package).rglob("*.py")):
            found = part_assignments(path.read_text(encoding="utf-8"))
            if found:
                offenders[str(path.relative_to(REPO))] = found
    assert offenders == {}


def test_the_scan_finds_a_part_set_from_outside():
    source = (
        "class BiLM:\n"
        "    def __init__(self, recurrence):\n"
        "        self.recurrence = recurrence\n"  # the owner, on itself: allowed
        "def attach(bilm, cache):\n"
        "    bilm.token_cache = cache\n"
        "    bilm.char_cnn.training_path = None\n"
        "    setattr(bilm, 'recurrence', None)\n"
        "class Other:\n"
        "    def __init__(self):\n"
        "        self.recurrence = None\n"  # not the owner
    )
    assert part_assignments(source) == [(5, "token_cache"), (6, "training_path"), (7, "recurrence"), (10, "recurrence")]
