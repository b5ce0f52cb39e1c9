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
    assert "[elmo_core.files.tokenizers]" in text
