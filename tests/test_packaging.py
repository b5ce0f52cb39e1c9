"""A non-editable install must carry every subpackage, data file and entry point."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALLED_AS = {"core": "elmo_core", "spacy_elmo": "spacy_elmo", "hf_elmo": "hf_elmo"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_wheel_has_every_module_under_its_import_name(wheel):
    names = set(wheel.namelist())
    for folder, package in INSTALLED_AS.items():
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".typed") or (path.is_file() and "default_model" in path.parts):
                if "__pycache__" in path.parts:
                    continue
                rel = path.relative_to(REPO / folder).as_posix()
                assert f"{package}/{rel}" in names, f"{package}/{rel} missing from the wheel"
    assert not any(n.startswith("core/") for n in names), "the folder name 'core' must not be installed"


def test_wheel_declares_the_console_script_and_entry_points(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "elmo = elmo_core.apps.cli:main" in text
    assert "[elmo_core.tokenizers]" in text


# ---------------------------------------------------------------- one command line
LIBRARY = ("core", "hf_elmo", "spacy_elmo")
DEVELOPER_TOOLS = {"hf_elmo/remote_code/generate.py"}  # rewrites committed files; not a user's command


def test_the_installed_console_scripts_are_exactly_elmo():
    from importlib.metadata import distribution

    scripts = [ep for ep in distribution("elmo-bilm").entry_points if ep.group == "console_scripts"]
    assert [(ep.name, ep.value) for ep in scripts] == [("elmo", "elmo_core.apps.cli:main")]


def test_the_library_has_one_command_line_and_no_argparse():
    import ast

    entries, argparse_users = [], []
    for folder in LIBRARY:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" in path.parts or rel.startswith("hf_elmo/remote_code/") and rel.endswith("_elmo.py"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                    argparse_users.append(rel)
                if isinstance(node, ast.ImportFrom) and node.module == "argparse":
                    argparse_users.append(rel)
                if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and rel not in DEVELOPER_TOOLS:
                    entries.append(rel)
            if path.name == "__main__.py":
                entries.append(rel)
    assert argparse_users == []
    assert entries == ["core/__main__.py"]  # `python -m elmo_core` = `elmo`


@pytest.mark.parametrize("module", ["elmo_core.apps.training", "hf_elmo.convert_bilm_tf_to_hf"])
def test_the_old_command_lines_are_gone(module):
    # `python -m elmo_core.apps.training pretokenize` is `elmo data pretokenize` now, and
    # `python -m hf_elmo.convert_bilm_tf_to_hf` is `elmo convert` (through the hf plug-in).
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 or result.stdout == "", result.stdout
    assert "usage" not in (result.stdout + result.stderr).lower()


# ---------------------------------------------------------------- the package configuration
def _configured_packages() -> tuple[list[str], dict[str, str]]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return setuptools["packages"], setuptools["package-dir"]


def test_every_library_folder_is_a_configured_package():
    # setuptools installs only the packages it is told of: a folder missing from the list is left out of the
    # wheel, or (a folder of data such as default_model/) installed with a warning that says future setuptools
    # will drop it.
    packages, package_dir = _configured_packages()
    expected = []
    for folder, package in INSTALLED_AS.items():
        assert package_dir[package] == folder
        for path in sorted([REPO / folder, *(REPO / folder).rglob("*")]):
            if path.is_dir() and "__pycache__" not in path.parts and any(p.is_file() for p in path.iterdir()):
                expected.append(".".join([package, *path.relative_to(REPO / folder).parts]))
    assert sorted(packages) == sorted(expected)


def test_the_default_model_ships_in_the_wheel(wheel):
    names = set(wheel.namelist())
    shipped = sorted(p.name for p in (REPO / "core" / "default_model").iterdir() if p.is_file())
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(shipped)
    assert [n for n in shipped if f"elmo_core/default_model/{n}" not in names] == []
    assert {"elmo_core/py.typed", "spacy_elmo/py.typed", "hf_elmo/py.typed"} <= names


# ---------------------------------------------------------------- missing extras
MISSING_EXTRAS = """
import sys

for package, module in (("transformers", "hf_elmo"), ("spacy", "spacy_elmo")):
    sys.modules[package] = None  # as if not installed: importing it raises ModuleNotFoundError
    try:
        __import__(module)
    except ImportError as err:
        print(module, type(err).__name__, err)
    del sys.modules[package]
sys.modules["h5py"] = None
from elmo_core import BiLMOptions, Elmo, load_bilm_tf
from elmo_core.model.options import CharCNNOptions, LSTMOptions

options = BiLMOptions(char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 4),)), lstm=LSTMOptions(dim=8, n_layers=1))
try:
    load_bilm_tf(Elmo(options), "weights.hdf5")
except ImportError as err:
    print("load_bilm_tf", type(err).__name__, err)
from elmo_core.apps.cli import main

sys.argv = ["elmo", "embed", "in.txt", "out.h5"]
try:
    main()
except SystemExit as stop:
    print("elmo embed exit", stop.code)
"""


def test_a_missing_extra_is_named_with_the_command_that_installs_it(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", MISSING_EXTRAS], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    lines = result.stdout.splitlines()
    install = "which is not installed: pip install 'elmo-bilm"
    assert lines[0] == f"hf_elmo ImportError hf_elmo needs transformers, {install}[hf]'", result.stderr
    assert lines[1] == f"spacy_elmo ImportError spacy_elmo needs spaCy, {install}[spacy]'"
    assert lines[2] == (
        "load_bilm_tf ImportError reading bilm-tf hdf5 weights needs h5py, which is not installed: "
        "pip install 'elmo-bilm[hdf5]'"
    )
    assert lines[3] == "elmo embed exit 2"
    assert result.stderr.strip() == (
        "error: elmo embed (its OUTPUT is hdf5) needs h5py, which is not installed: pip install 'elmo-bilm[hdf5]'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_ci_installs_every_dependency_at_its_lower_bound_and_smoke_tests_it():
    # R69: `spacy>=3.7` could not be installed with the package (spaCy 3.7.0-3.7.4 require typer<0.10):
    # .ci/lowest.sh installs each declared lower bound together (run by .ci/run) and smoke-tests every face.
    import tomllib

    sys.path.insert(0, str(REPO / ".ci"))
    try:
        from lowest_constraints import lowest_pins
    finally:
        sys.path.remove(str(REPO / ".ci"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = ["hdf5", "spacy", "hf", "probe", "vectors"]
    pins = dict(pin.split("==") for pin in lowest_pins(runtime))
    declared = project["dependencies"] + [r for extra in runtime for r in project["optional-dependencies"][extra]]
    names = {r.split(">=")[0].split("[")[0].strip().lower() for r in declared}
    assert set(pins) == names  # every dependency pinned, torch to the wheel of constraints.txt
    assert pins["torch"] == "2.13.0"
    assert (pins["spacy"], pins["typer"], pins["safetensors"]) == ("3.7.5", "0.16", "0.4.3")
    assert '.ci/lowest.sh "$wheel"' in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "check_feature_pipeline(model_output)" in (REPO / ".ci" / "smoke_test.py").read_text(encoding="utf-8")
