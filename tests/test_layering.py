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


LAYERS = ("model", "runtime", "files", "apps")
"""elmo_core's layers, lowest first: each may import the ones before it, never one after it."""


def core_imports(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, elmo_core-relative module parts) of every import of elmo_core in a core file,
    at top level or inside a function (a lazy import is a dependency too)."""
    relative = path.relative_to(REPO / "core").with_suffix("").parts
    package = list(relative[:-1])  # a package's __init__ belongs to the package itself
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            found.append((node.lineno, (*base, *(node.module.split(".") if node.module else ()))))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "elmo_core":
            found.append((node.lineno, tuple(node.module.split(".")[1:])))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, tuple(a.name.split(".")[1:])) for a in node.names if a.name.startswith("elmo_core")]
    return found


def test_core_layers_import_only_the_layers_below_them():
    upward = []
    for path in sorted((REPO / "core").rglob("*.py")):
        layer = path.relative_to(REPO / "core").parts[0]
        if layer not in LAYERS:
            continue  # elmo_core/__init__.py (the public API) and _version.py sit above the layers
        for line, target in core_imports(path):
            if target == ("_version",):
                continue  # the version string, below every layer
            if not target or target[0] not in LAYERS:
                upward.append(f"{path.relative_to(REPO)}:{line} imports elmo_core.{'.'.join(target)}")
            elif LAYERS.index(target[0]) > LAYERS.index(layer):
                upward.append(f"{path.relative_to(REPO)}:{line} ({layer}) imports elmo_core.{'.'.join(target)}")
    assert upward == []


def test_every_core_module_belongs_to_a_layer():
    loose = sorted(p.name for p in (REPO / "core").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "_version.py"]
    assert sorted(p.name for p in (REPO / "core").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        [*LAYERS, "default_model"]
    )


FACE_PATHS = {"elmo_core", "elmo_core.model", "elmo_core.runtime", "elmo_core.files"}
"""What the faces import the core from: its public API and the three lower layers' packages."""


@pytest.mark.parametrize("face", ["spacy_elmo", "hf_elmo"])
def test_faces_import_the_core_through_its_packages_only(face):
    reached = {}
    for path in sorted((REPO / face).rglob("*.py")):
        if path.parent.name == "remote_code" and path.name.endswith("_elmo.py"):
            continue  # generated: imports nothing of elmo-bilm (tests/hf_elmo/test_remote_code.py)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("elmo_core"):
                if node.module not in FACE_PATHS:
                    reached[f"{path.relative_to(REPO)}:{node.lineno}"] = node.module
    assert reached == {}


def test_importing_elmo_core_loads_no_framework_and_no_h5py():
    code = (
        "import sys, elmo_core, elmo_core.apps.cli; "
        "print(sorted(m for m in ('spacy', 'thinc', 'transformers', 'h5py') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_core_folder_cannot_be_imported_as_core():
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import core"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "must be imported as 'elmo_core'" in out.stderr
