"""Write the code files a saved model folder carries.

    python -m hf_elmo.remote_code.generate        # rewrites hf_elmo/remote_code/*_elmo.py

Each file is one hf_elmo module copied whole, as transformers' modular converter copies
a model file, with two changes: its imports of `elmo_core` and `hf_elmo.remote_code` read
the folder's `elmo_reference.py` instead, and its function and class docstrings stay in
hf_elmo (the folder's line budget). `elmo_reference.py` is hand-written and copied as it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["COMMAND", "REFERENCE", "generate", "generated_sources", "main"]

HF_DIR = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent
COMMAND = "python -m hf_elmo.remote_code.generate"
MODULES = ("configuration_elmo", "modeling_elmo", "tokenization_elmo")
REFERENCE = "elmo_reference"
_REPLACED = ("elmo_core", "hf_elmo.remote_code")  # what the reference stands in for


def _replaced(node: ast.stmt) -> bool:
    module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
    return any(module == name or module.startswith(name + ".") for name in _REPLACED)


def _docstring_lines(tree: ast.Module, lines: list[str]) -> set[int]:
    """0-based lines of every function's and class's docstring, and of a blank line after it."""
    drop: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            first = node.body[0]
            if len(node.body) > 1:  # a body left with its code only
                end = first.end_lineno or first.lineno
                drop.update(range(first.lineno - 1, end + int(not lines[end].strip())))
    return drop


def copied(name: str, source: str, reference_names: set[str]) -> str:
    """The folder's copy of hf_elmo's module `name`, whose text is `source`.

    Raises:
        ValueError: if the module imports a core name that `elmo_reference.py` does not define.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop = _docstring_lines(tree, lines)
    names: list[str] = []
    for node in tree.body:
        if _replaced(node):
            names += [alias.name for alias in node.names]  # type: ignore[attr-defined]
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    missing = sorted(set(names) - reference_names)
    if missing:
        raise ValueError(
            f"hf_elmo/{name}.py imports {missing} from elmo-bilm, which {REFERENCE}.py does not define. "
            f"Add them to hf_elmo/remote_code/{REFERENCE}.py (the folder's plain copy of the core)."
        )
    first = min(node.lineno - 1 for node in tree.body if _replaced(node))
    imports = f"from .{REFERENCE} import (\n" + "".join(f"    {n},\n" for n in sorted(set(names))) + ")\n"
    body = [imports if i == first else line for i, line in enumerate(lines) if i not in drop or i == first]
    header = f"# Generated from hf_elmo/{name}.py by `{COMMAND}`. Do not edit: edit that file.\n"
    text = header + "".join(body)
    compile(text, f"{name}.py", "exec")
    return text


def generated_sources(hf_dir: Path = HF_DIR, reference: Path = OUT_DIR / f"{REFERENCE}.py") -> dict[str, str]:
    """The text of every file a folder carries, by file name (nothing is written)."""
    reference_text = reference.read_text(encoding="utf-8")
    tree = ast.parse(reference_text)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    sources = {
        f"{name}.py": copied(name, (Path(hf_dir) / f"{name}.py").read_text(encoding="utf-8"), defined)
        for name in MODULES
    }
    return {**sources, f"{REFERENCE}.py": reference_text}


def generate(out_dir: str | Path = OUT_DIR) -> list[Path]:
    """Write the generated files into `out_dir` (default: this package, where they are committed)."""
    written = []
    for file_name, text in generated_sources().items():
        path = Path(out_dir) / file_name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    """`python -m hf_elmo.remote_code.generate`: rewrite the committed files (a developer's step)."""
    for path in generate():
        print(path)  # noqa: T201 - a developer tool's output


if __name__ == "__main__":
    main()
