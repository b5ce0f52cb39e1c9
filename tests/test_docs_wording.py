"""The docs and docstrings speak to users: no issue numbers, no project history, no timings in docstrings.

History (what changed, when, in which round of work) belongs in CHANGELOG.md, and measured times in the
benchmark results files and the docs' results pages, where they are dated and reproducible.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from .conftest import REPO

HISTORY = {
    "an issue number": re.compile(r"\bissues?\s*#?\d+\b", re.IGNORECASE),
    "a bare #number": re.compile(r"(?<![\w&#/])#\d+\b"),
    "a case id": re.compile(r"\bR\d\d\b"),
    "today": re.compile(r"\btoday(?:'s)?\b", re.IGNORECASE),
    "this session": re.compile(r"\b(?:this|that|the last|an earlier) session\b", re.IGNORECASE),
    "the same day": re.compile(r"\b(?:earlier|later)(?: on)? (?:the same|that) day\b|\bthe same day\b", re.IGNORECASE),
    "before this change": re.compile(
        r"\bbefore (?:this|that|the) (?:change|fix|commit|patch|session|round|module|option|rewrite)\b|\bas before\b",
        re.IGNORECASE,
    ),
    "a round of work": re.compile(
        r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|previous|earlier) round\b",
        re.IGNORECASE,
    ),
    "the old or new code": re.compile(r"\b(?:old|new) (?:code|paths?|kernels?|implementation)\b", re.IGNORECASE),
}
"""Words of the project's own history. Each pattern is narrow: a false alarm teaches people to ignore the test."""

EXTERNAL_REFERENCE = re.compile(
    r"(?:[\w.-]+/[\w.-]+|spaCy|thinc|AllenNLP|transformers|PyTorch|torch|bilm-tf|NumPy|h5py)\s*$", re.IGNORECASE
)
"""`allenai/allennlp #1644`, `spaCy #6662`: the text before a bare #number names another project's tracker."""

TIMING = {
    "a time": re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:ns|us|µs|ms|s|sec|seconds?|min|minutes?|hours?)\b"),
    "a rate": re.compile(r"\d[\d,.]*\s*(?:tokens|words|sentences|steps|examples|it)/s\b"),
    "a speed ratio": re.compile(
        r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s*(?:x|×|times)\b[^.;\n]{0,40}?"
        r"\b(?:faster|slower|quicker|time|speed|throughput|words/s|tokens/s)\b",
        re.IGNORECASE,
    ),
    "a speed percentage": re.compile(
        r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s*%\s*(?:faster|slower|quicker)\b", re.IGNORECASE
    ),
}
"""A measured time quoted in a docstring; docstrings point to docs/results/speed.md or a results file instead."""

LIBRARY = {"core": "elmo_core", "spacy_elmo": "spacy_elmo", "hf_elmo": "hf_elmo"}


def user_markdown() -> list[Path]:
    """The Markdown a user reads: README, contributors' guide, docs site, model card, examples, benchmarks."""
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "core/default_model/README.md"]
    files += [REPO / "benchmarks/README.md", *sorted((REPO / "docs").rglob("*.md"))]
    files += sorted((REPO / "examples").rglob("README.md"))
    return [f for f in files if f.is_file()]


def library_modules() -> list[Path]:
    """The library's own modules; the generated copies in hf_elmo/remote_code are checked through their sources."""
    modules = []
    for folder in LIBRARY:
        for path in sorted((REPO / folder).rglob("*.py")):
            generated = path.parent.name == "remote_code" and path.name.endswith("_elmo.py")
            if "__pycache__" not in path.parts and not generated:
                modules.append(path)
    return modules


def docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of each docstring: of the module, classes and functions, and attribute docstrings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    found.append((body[0].lineno, body[0].value.value))
            for before, after in zip(body, body[1:]):  # `NAME = value` then a string: the attribute's docstring
                is_string = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                if isinstance(before, (ast.Assign, ast.AnnAssign)) and is_string and isinstance(after.value.value, str):
                    found.append((after.lineno, after.value.value))
    return found


def comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(token.start[0], token.string) for token in tokens if token.type == tokenize.COMMENT]


def findings(text: str, patterns: dict[str, re.Pattern[str]]) -> list[str]:
    """What each pattern finds in `text`, with a little context."""
    found = []
    for name, pattern in patterns.items():
        for match in pattern.finditer(text):
            if name == "a bare #number" and EXTERNAL_REFERENCE.search(text[max(0, match.start() - 60) : match.start()]):
                continue
            context = text[max(0, match.start() - 30) : match.end() + 20].replace("\n", " ")
            found.append(f"{name}: ...{context}...")
    return found


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("path", user_markdown(), ids=relative)
def test_user_docs_have_no_issue_numbers_or_project_history(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [f"{relative(path)}:{i}: {hit}" for i, line in enumerate(lines, 1) for hit in findings(line, HISTORY)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package", list(LIBRARY.values()))
def test_library_docstrings_and_comments_have_no_issue_numbers_or_project_history(package):
    folder = next(folder for folder, name in LIBRARY.items() if name == package)
    found = []
    for path in library_modules():
        if path.is_relative_to(REPO / folder):
            source = path.read_text(encoding="utf-8")
            for line, text in docstrings(source) + comments(source):
                found += [f"{relative(path)}:{line}: {hit}" for hit in findings(text, HISTORY)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package", list(LIBRARY.values()))
def test_library_docstrings_quote_no_timings(package):
    folder = next(folder for folder, name in LIBRARY.items() if name == package)
    found = []
    for path in library_modules():
        if path.is_relative_to(REPO / folder):
            for line, text in docstrings(path.read_text(encoding="utf-8")):
                found += [f"{relative(path)}:{line}: {hit}" for hit in findings(text, TIMING)]
    assert not found, "\n".join(found)


# ---------------------------------------------------------------- the patterns themselves
@pytest.mark.parametrize(
    "text",
    [
        "measured in issue 15",
        "see issue #21",
        "the case R12 showed",
        "today's code runs",
        "measured in this session",
        "earlier the same day",
        "as before this change",
        "the sixth round",
        "the old code path",
        "fixed in #42",
    ],
)
def test_history_patterns_find_project_history(text):
    assert findings(text, HISTORY) != []


@pytest.mark.parametrize(
    "text",
    [
        "silent freezing (allenai/allennlp #1644)",
        "explosion/spaCy #6402, where the maintainers",
        "the first parallel region (spaCy #6662)",
        "lines no longer than the window",
        "pieces done before this run",
        "a 2-layer biLM with 4096 units",
        "# [batch, tokens, 50]",
        "Returns issues found in the file",
    ],
)
def test_history_patterns_leave_ordinary_prose_alone(text):
    assert findings(text, HISTORY) == []


@pytest.mark.parametrize(
    "text",
    [
        "the product took 3.4 against 4.8 ms",
        "about 20 ms of a step",
        "fell from 17,700 tokens/s to 980",
        "runs in 0.88x the row loop's time",
        "2-3x slower here",
        "1.2-2.8x faster",
        "~9 s per shard",
        "was 14-37% slower",
    ],
)
def test_timing_patterns_find_quoted_timings(text):
    assert findings(text, TIMING) != []


@pytest.mark.parametrize(
    "text",
    [
        "a batch computes at most about 2x its rows",
        "Shape: [batch, tokens, 2 * projection_dim]",
        "waits up to `timeout` seconds",
        "within 2.4e-7 of the original",
        "50 characters per token",
        "3 layers",
    ],
)
def test_timing_patterns_leave_shapes_and_tolerances_alone(text):
    assert findings(text, TIMING) == []


DOCS_PAGE = re.compile(r"\bdocs/[\w./-]+\.md\b")


def test_docs_pages_named_in_docstrings_exist():
    """A docstring that sends the reader to a docs page (instead of quoting a number) names a page that exists."""
    missing = []
    for path in library_modules():
        for line, text in docstrings(path.read_text(encoding="utf-8")):
            missing += [
                f"{relative(path)}:{line}: {page}" for page in DOCS_PAGE.findall(text) if not (REPO / page).is_file()
            ]
    assert not missing, "\n".join(missing)
