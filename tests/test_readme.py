"""The README's first steps run as written."""

from __future__ import annotations

import re

import pytest

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
def test_readme_pretraining_options_command_writes_a_readable_options_json(tmp_path, shape):
    from elmo_core import PUBLISHED_OPTIONS, read_options

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = f"PUBLISHED_OPTIONS['{shape}'].to_json('options.json')"
    assert command in readme
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
            "tests/core/test_bilm.py",
            "tests/core/test_cli.py",
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
