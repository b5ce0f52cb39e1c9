"""The shape of the library's code (issue 26), checked rather than remembered."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MAX_FUNCTION_LINES = 60
"""Code lines: from the `def` line (decorators excluded) to the last line, less the docstring.
The cap is on code; prose is held to its own measure."""


def _prose_metrics():
    """tools/prose_metrics.py, the measure the house style states (not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("prose_metrics", REPO / "tools" / "prose_metrics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("prose_metrics", module)
    spec.loader.exec_module(module)
    return module


METRICS = _prose_metrics()


def library_files() -> Iterator[tuple[str, Path]]:
    """(repo-relative posix path, path) of every hand-written library module (METRICS decides which)."""
    for path in METRICS.library_files(REPO):
        yield path.relative_to(REPO).as_posix(), path


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def test_no_library_function_is_longer_than_60_lines():
    too_long = []
    for relative, path in library_files():
        for name, node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            length = node.end_lineno - node.lineno + 1 - docstring_lines(node)  # node.lineno is the def line
            if length > MAX_FUNCTION_LINES:
                too_long.append(f"{relative}:{node.lineno} {name} {length} lines")
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(too_long)


def test_no_library_code_names_anything_num_layers():
    """n_layers + 1 (layer 0, then each LSTM layer) is `n_outputs` everywhere; `num_layers` would
    read as torch's (and the field's) count of LSTM layers, which is the option `n_layers`.
    ElmoConfig keeps transformers' `num_hidden_layers` (= n_layers) alone."""
    named = []
    for relative, path in library_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name, *(a.arg for a in [*node.args.args, *node.args.kwonlyargs])]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names = [node.attr]
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names = [node.id]
            elif isinstance(node, ast.keyword) and node.arg:
                names = [node.arg]
            if "num_layers" in names:
                named.append(f"{relative}:{node.lineno}")
    assert named == []


def test_library_docstrings_keep_the_anchors_density():
    figures = METRICS.totals([METRICS.measure(path, REPO) for path in METRICS.library_files(REPO)])
    assert figures["words_per_code_line"] <= METRICS.LIMITS["words_per_code_line"], figures
    assert figures["semicolons_per_100_words"] <= METRICS.LIMITS["semicolons_per_100_words"], figures


def test_no_module_docstring_runs_over_150_words_and_no_file_over_500_lines():
    over = []
    for path in METRICS.library_files(REPO):
        prose = METRICS.measure(path, REPO)
        if prose.module_words > METRICS.LIMITS["module_docstring_words"]:
            over.append(f"{prose.path}: module docstring of {prose.module_words} words")
        if prose.lines > METRICS.LIMITS["file_lines"]:
            over.append(f"{prose.path}: {prose.lines} lines (split it by concept)")
    assert not over, "\n".join(over)
