"""Measure the library's prose against its code: the house style's density figures.

    python tools/prose_metrics.py                 # totals, then the files over a limit
    python tools/prose_metrics.py core/model      # only files under these prefixes

Counts hand-written `.py` files under `core/`, `spacy_elmo/` and `hf_elmo/` (the saved
folder's generated copies are left out). A code line is a non-blank line that is neither
a comment nor part of a docstring. Words are whitespace-separated.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "spacy_elmo", "hf_elmo")
LIMITS = {
    "words_per_code_line": 2.5,
    "semicolons_per_100_words": 0.2,
    "module_docstring_words": 150,
    "file_lines": 500,
}


@dataclass
class FileProse:
    path: str
    lines: int
    code_lines: int
    words: int
    semicolons: int
    module_words: int
    private_defs: int
    private_documented: int
    docstrings: list[str] = field(default_factory=list)


def library_files(root: Path = ROOT) -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if not (relative.startswith("hf_elmo/remote_code/") and relative.endswith("_elmo.py")):
                files.append(path)  # the folder's copies are written by hf_elmo.remote_code.generate
    return files


def _docstring_nodes(tree: ast.Module) -> list[tuple[ast.AST, ast.Constant]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                found.append((node, body[0].value))
    return found


def measure(path: Path, root: Path = ROOT) -> FileProse:
    """The prose figures of one file."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    docstrings = _docstring_nodes(tree)
    doc_lines: set[int] = set()
    for _, constant in docstrings:
        doc_lines.update(range(constant.lineno, (constant.end_lineno or constant.lineno) + 1))
    comment_lines = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    code_lines = 0
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or number in doc_lines:
            continue
        if number in comment_lines and stripped.startswith("#"):
            continue
        code_lines += 1
    texts = [constant.value for _, constant in docstrings]
    module_words = next((len(c.value.split()) for n, c in docstrings if isinstance(n, ast.Module)), 0)
    private = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("_")
        and not node.name.startswith("__")
    ]
    documented = {id(n) for n, _ in docstrings}
    return FileProse(
        path=path.relative_to(root).as_posix(),
        lines=len(source.splitlines()),
        code_lines=code_lines,
        words=sum(len(text.split()) for text in texts),
        semicolons=sum(text.count(";") for text in texts),
        module_words=module_words,
        private_defs=len(private),
        private_documented=sum(id(n) in documented for n in private),
        docstrings=texts,
    )


def totals(files: list[FileProse]) -> dict[str, float]:
    words = sum(f.words for f in files)
    code = sum(f.code_lines for f in files)
    semicolons = sum(f.semicolons for f in files)
    private = sum(f.private_defs for f in files)
    return {
        "files": len(files),
        "code_lines": code,
        "docstring_words": words,
        "words_per_code_line": round(words / code, 2),
        "semicolons_per_100_words": round(100 * semicolons / max(words, 1), 3),
        "private_helpers_documented": round(sum(f.private_documented for f in files) / max(private, 1), 2),
        "longest_module_docstring": max(f.module_words for f in files),
        "longest_file": max(f.lines for f in files),
    }


def main(prefixes: list[str]) -> int:
    files = [measure(path) for path in library_files()]
    files = [f for f in files if not prefixes or f.path.startswith(tuple(prefixes))]
    for key, value in totals(files).items():
        print(f"{key:30} {value}")
    print()
    for f in files:
        over = []
        if f.module_words > LIMITS["module_docstring_words"]:
            over.append(f"module docstring {f.module_words} words")
        if f.lines > LIMITS["file_lines"]:
            over.append(f"{f.lines} lines")
        if f.code_lines and f.words / f.code_lines > LIMITS["words_per_code_line"]:
            over.append(f"{f.words / f.code_lines:.2f} words/code line")
        if f.semicolons:
            over.append(f"{f.semicolons} ';'")
        if over:
            print(f"{f.path}: " + ", ".join(over))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
