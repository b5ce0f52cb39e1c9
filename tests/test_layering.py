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
            continue  # elmo_core/__init__.py (the public API), face_api.py and _version.py sit above the layers
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
    assert loose == [
        "__init__.py",
        "__main__.py",
        "_version.py",
        "face_api.py",
    ]  # face_api: the faces' API, above the layers
    assert sorted(p.name for p in (REPO / "core").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        [*LAYERS, "default_model"]
    )


@pytest.mark.parametrize("face", ["spacy_elmo", "hf_elmo"])
def test_faces_import_no_private_name_of_the_core(face):
    """A face imports the core's public API or a module's public names, never a `_name`."""
    reached = {}
    for path in sorted((REPO / face).rglob("*.py")):
        if path.parent.name == "remote_code" and path.name.endswith("_elmo.py"):
            continue  # generated: imports nothing of elmo-bilm (tests/hf_elmo/test_remote_code.py)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("elmo_core"):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
                if private or any(part.startswith("_") for part in node.module.split(".")[1:]):
                    reached[f"{path.relative_to(REPO)}:{node.lineno}"] = (node.module, private)
    assert reached == {}


LIBRARY = {"elmo_core": REPO / "core", "spacy_elmo": REPO / "spacy_elmo", "hf_elmo": REPO / "hf_elmo"}


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph() -> dict[str, set[str]]:
    """Each library module -> the library modules it imports (at top level or inside a
    function; imports only for type checkers are left out: they never run)."""
    modules = {}
    for package, folder in LIBRARY.items():
        for path in sorted(folder.rglob("*.py")):
            if path.parent.name == "remote_code" and path.name.endswith("_elmo.py"):
                continue
            modules[_module_name(package, folder, path)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        edges = set()
        stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
        while stack:
            node = stack.pop()
            if _is_type_checking(node):
                continue
            stack.extend(ast.iter_child_nodes(node))
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - (node.level - 1)] if node.level else []
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    target = f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    if target in modules:
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
        graph[name] = edges - {name}
    return graph


def test_no_import_circle_anywhere_in_the_library():
    graph = import_graph()
    assert "elmo_core.model.recurrence.lstm" in graph["elmo_core.model.bilm"]  # the graph sees relative imports
    circles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert circles == []


def test_the_recurrence_package_holds_every_path_and_imports_only_the_model():
    """How the LSTM runs is answered in one package: the step loop, the paired and captured
    paths, the written-out backward, chunks of steps, the scan of exported graphs, and the
    chooser; the runtime hands in its thread rule."""
    graph = import_graph()
    recurrence = {m for m in graph if m.startswith("elmo_core.model.recurrence")}
    assert recurrence == {
        "elmo_core.model.recurrence",
        "elmo_core.model.recurrence.dropout",
        "elmo_core.model.recurrence.lstm",
        "elmo_core.model.recurrence.paired",
        "elmo_core.model.recurrence.paired_bptt",
        "elmo_core.model.recurrence.scan",
        "elmo_core.model.recurrence.time_chunks",
    }
    reached = {t for m in recurrence for t in graph[m]}
    assert all(t.startswith("elmo_core.model.") for t in reached), sorted(reached)


def test_no_two_core_modules_share_a_name():
    """One concept, one module (`apps/cli/` is named for the `elmo` commands, one module each)."""
    names: dict[str, list[str]] = {}
    for path in sorted((REPO / "core").rglob("*.py")):
        if path.name != "__init__.py" and path.parent.name != "cli":
            names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


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


TRAINING = ("elmo_core.apps.training", "elmo_core.apps.cli.train", "elmo_core.apps.cli.perplexity")
"""The training package and the commands that only train or evaluate a language model."""


def test_no_core_module_outside_the_training_package_serves_only_training():
    """The training kernels sit beside the trainer: a module whose only users train is inside
    `apps/training`. (The gradient paths of the model serve fine-tuning through every face too.)"""
    graph = import_graph()
    users: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            users.setdefault(target, set()).add(module)
    only_training = {
        module: sorted(users[module])
        for module in graph
        if module.startswith("elmo_core")
        and not module.startswith(TRAINING)
        and users.get(module)
        and all(user.startswith(TRAINING) for user in users[module])
    }
    assert only_training == {}


def test_spacy_layers_import_nothing_of_the_component_not_even_for_types():
    # The listener reads its upstream through a Protocol (`listener.Upstream`): no import circle.
    for path in sorted((REPO / "spacy_elmo" / "layers").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert "pipeline_component" not in (node.module or ""), path.name
