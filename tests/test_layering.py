"""The dependency direction of STYLE.md section 2, checked rather than remembered."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "core": {"spacy", "thinc", "transformers", "spacy_elmo", "hf_elmo", "core"},
    "spacy_elmo": {"hf_elmo", "transformers", "core"},
    "hf_elmo": {"spacy_elmo", "core"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_import_only_what_they_may(package):
    offenders = {}
    for path in sorted((REPO / package).rglob("*.py")):
        bad = imported_modules(path) & FORBIDDEN[package]
        if bad:
            offenders[str(path.relative_to(REPO))] = sorted(bad)
    assert offenders == {}


def test_importing_elmo_core_loads_no_framework_and_no_h5py():
    code = (
        "import sys, elmo_core, elmo_core.cli; "
        "print(sorted(m for m in ('spacy', 'thinc', 'transformers', 'h5py') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_core_folder_cannot_be_imported_as_core():
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import core"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "must be imported as 'elmo_core'" in out.stderr
