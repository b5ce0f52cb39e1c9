"""The generator of the saved folders' code files, on a small made-up face and reference."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from hf_elmo.remote_code.generate import generated_sources

REFERENCE = '''"""A plain stand-in for the core."""

SCALE = 2.0


def twice(x: float) -> float:
    return 2 * x
'''

RUNTIME = '''"""A plain stand-in for the core's runtime."""

from .elmo_reference import twice


def note_which_code_runs(folder: object) -> bool:
    return twice(0) > 0
'''

FACE = {
    "configuration_elmo.py": '''"""Config."""

from __future__ import annotations

from elmo_core import SCALE
from hf_elmo.remote_code import note_which_code_runs


class ElmoConfig:
    """A config."""

    factor = SCALE  # a comment that stays

    def noted(self) -> bool:
        """Only a docstring stays."""

    def note(self) -> bool:
        """Gone in the copy."""
        return note_which_code_runs(self)
''',
    "modeling_elmo.py": '''"""Model."""

from __future__ import annotations

from elmo_core.face_api import (
    twice,
)

from .configuration_elmo import ElmoConfig


def run(x: float) -> float:
    return twice(x) * ElmoConfig.factor
''',
    "encoding_elmo.py": '''"""Encoding.

More words that stay in hf_elmo.
"""

from elmo_core import SCALE

HALF = SCALE / 4
"""Gone in the copy too."""
''',
    "tokenization_elmo.py": '''"""Tokenizer."""

from elmo_core import SCALE


def tok() -> float:
    return SCALE
''',
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def generate_from(tmp_path: Path, face: dict[str, str]) -> dict[str, str]:
    references = {"elmo_reference.py": REFERENCE, "elmo_reference_runtime.py": RUNTIME}
    return generated_sources(write_tree(tmp_path / "face", face), write_tree(tmp_path / "reference", references))


@pytest.fixture
def generated(tmp_path):
    sources = generate_from(tmp_path, FACE)
    package = write_tree(tmp_path / "out" / "generated_face_pkg", {"__init__.py": "", **sources})
    sys.path.insert(0, str(package.parent))
    yield sources, importlib.import_module("generated_face_pkg.modeling_elmo")
    sys.path.remove(str(package.parent))
    for name in [m for m in sys.modules if m.startswith("generated_face_pkg")]:
        del sys.modules[name]


def test_copies_run_without_the_core_and_compute_what_the_sources_do(generated):
    _, modeling = generated
    assert modeling.run(1.0) == pytest.approx(2.0 * 1.0 * 2.0)


def test_a_copy_is_its_module_with_the_core_imports_read_from_the_reference(generated):
    sources, _ = generated
    configuration = sources["configuration_elmo.py"]
    assert configuration.startswith("# Generated from hf_elmo/configuration_elmo.py by")
    imports = "from .elmo_reference import SCALE\nfrom .elmo_reference_runtime import note_which_code_runs\n"
    assert imports in configuration  # each name from the reference file that defines it
    body = configuration.split("\n", 1)[1]  # below the header, which names the command
    assert "elmo_core" not in body and "hf_elmo.remote_code" not in body
    assert '"""Config."""' in configuration and "# a comment that stays" in configuration
    assert "Gone in the copy." not in configuration and "A config." not in configuration
    assert '"""Only a docstring stays."""' in configuration  # a body is never left empty
    encoding = sources["encoding_elmo.py"]  # a module docstring keeps its summary line, as one line
    assert '"""Encoding."""\n' in encoding and "More words" not in encoding and "Gone in the copy" not in encoding
    assert "HALF = SCALE / 4" in encoding
    assert sources["elmo_reference.py"] == REFERENCE and sources["elmo_reference_runtime.py"] == RUNTIME
    assert "from .configuration_elmo import ElmoConfig" in sources["modeling_elmo.py"]


def test_a_name_the_reference_lacks_is_refused_with_the_fix(tmp_path):
    face = {**FACE, "tokenization_elmo.py": FACE["tokenization_elmo.py"].replace("SCALE", "embed_sentences")}
    with pytest.raises(
        ValueError, match=r"imports \['embed_sentences'\].*no reference file defines.*Add them to hf_elmo/remote_code"
    ):
        generate_from(tmp_path, face)
