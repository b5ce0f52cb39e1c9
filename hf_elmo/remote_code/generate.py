"""Write the code files a saved model folder carries.

    python -m hf_elmo.remote_code.generate        # rewrites hf_elmo/remote_code/*_elmo.py

Each file is one hf_elmo module copied whole, as transformers' modular converter copies
a model file, with two changes. Its imports of `elmo_core` and `hf_elmo.remote_code` read
the folder's hand-written reference files instead, and its docstrings stay in hf_elmo (the
module's keeps its summary line). The reference files are copied as they are.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

__all__ = ["COMMAND", "MODULES", "REFERENCES", "generate", "generated_sources", "main"]

HF_DIR = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent
COMMAND = "python -m hf_elmo.remote_code.generate"
MODULES = ("configuration_elmo", "modeling_elmo", "tokenization_elmo", "encoding_elmo")
REFERENCES = ("elmo_reference", "elmo_reference_runtime")  # the model; the runtime's and files' parts
_REPLACED = ("elmo_core", "hf_elmo.remote_code")  # what the reference stands in for


def _replaced(node: ast.stmt) -> bool:
    module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
    return any(module == name or module.startswith(name + ".") for name in _REPLACED)


def _docstring_lines(tree: ast.Module, lines: list[str]) -> set[int]:
    """0-based lines of each docstring (the module's, classes', functions', attributes'), and a blank after it."""
    drop: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for k, stmt in enumerate(body):
            is_string = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            if not is_string or not isinstance(stmt.value.value, str):
                continue
            if node is tree and k == 0:  # the module's: `copied` keeps its summary line
                drop.update(range(stmt.lineno - 1, stmt.end_lineno or stmt.lineno))
                continue
            documents = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and k == 0
            if (documents and len(body) > 1) or (k > 0 and isinstance(body[k - 1], (ast.Assign, ast.AnnAssign))):
                end = stmt.end_lineno or stmt.lineno  # a body is never left empty
                drop.update(range(stmt.lineno - 1, end + int(documents and not lines[end].strip())))
    return drop


def _import_lines(module: str, names: list[str]) -> str:
    one_line = f"from .{module} import {', '.join(names)}\n"
    if len(one_line) <= 121:
        return one_line
    wrapped = textwrap.fill(", ".join(names) + ",", width=120, initial_indent="    ", subsequent_indent="    ")
    return f"from .{module} import (\n{wrapped}\n)\n"


def copied(name: str, source: str, defined_in: dict[str, str]) -> str:
    """The folder's copy of hf_elmo's module `name`, whose text is `source`.

    `defined_in` maps each name the reference files define to the file's module name.

    Raises:
        ValueError: if the module imports a core name that no reference file defines.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    drop = _docstring_lines(tree, lines)
    names: list[str] = []
    for node in tree.body:
        if _replaced(node):
            names += [alias.name for alias in node.names]  # type: ignore[attr-defined]
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    missing = sorted(set(names) - set(defined_in))
    if missing:
        raise ValueError(
            f"hf_elmo/{name}.py imports {missing} from elmo-bilm, which no reference file defines. "
            f"Add them to hf_elmo/remote_code/{REFERENCES[0]}.py or its siblings (the folder's plain copy of the core)."
        )
    first = min(node.lineno - 1 for node in tree.body if _replaced(node))
    by_file = {ref: sorted({n for n in names if defined_in[n] == ref}, key=str.lower) for ref in REFERENCES}
    imports = "".join(_import_lines(ref, used) for ref, used in by_file.items() if used)
    body = [imports if i == first else line for i, line in enumerate(lines) if i not in drop or i == first]
    header = f"# Generated from hf_elmo/{name}.py by `{COMMAND}`. Do not edit: edit that file.\n"
    summary = (ast.get_docstring(tree) or "").split("\n", 1)[0]
    header += f'"""{summary}"""\n' if summary else ""
    text = header + "".join(body)
    compile(text, f"{name}.py", "exec")
    return text


def _defined(tree: ast.Module) -> set[str]:
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return defined | {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def generated_sources(hf_dir: Path = HF_DIR, reference_dir: Path = OUT_DIR) -> dict[str, str]:
    """The text of every file a folder carries, by file name (nothing is written)."""
    references = {ref: (Path(reference_dir) / f"{ref}.py").read_text(encoding="utf-8") for ref in REFERENCES}
    defined_in = {name: ref for ref, text in reversed(references.items()) for name in _defined(ast.parse(text))}
    sources = {
        f"{name}.py": copied(name, (Path(hf_dir) / f"{name}.py").read_text(encoding="utf-8"), defined_in)
        for name in MODULES
    }
    return {**sources, **{f"{ref}.py": text for ref, text in references.items()}}


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
