"""The generator of the saved folders' code files, on a small made-up core and face."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from hf_elmo.remote_code.generate import GenerationError, generated_sources

CORE = {
    "__init__.py": "",
    "z_base.py": '''"""Imported by b, so it must come first although it sorts last."""

from __future__ import annotations

import math

__all__ = ["SCALE", "scale"]

SCALE = 2.0
"""The factor."""
UNUSED = 1


def scale(x: float) -> float:
    # a comment that travels with the definition
    return x * SCALE * math.pi / math.pi
''',
    "b.py": """from __future__ import annotations

from .z_base import scale


def twice(x: float) -> float:
    from .c import offset  # lazy, as for a circular import

    return scale(x) + offset()


def unused() -> None:
    pass
""",
    "c.py": """def offset() -> float:
    return 1.0
""",
    "d.py": """def scale(x):
    return -x


def negate(x):
    return scale(x)
""",
}

FACE = {
    "configuration_elmo.py": '''"""Config."""

from __future__ import annotations

from elmo_core.z_base import SCALE

# >>> hf_elmo only
from hf_elmo.remote_code import save_generated_code

# <<< hf_elmo only


class ElmoConfig:
    factor = SCALE
''',
    "modeling_elmo.py": '''"""Model."""

from __future__ import annotations

from elmo_core.b import twice
from elmo_core.z_base import SCALE

from .configuration_elmo import ElmoConfig


def run(x: float) -> float:
    return twice(x) * ElmoConfig.factor * SCALE
''',
    "tokenization_elmo.py": '''"""Tokenizer."""

from __future__ import annotations

from elmo_core.c import offset


def tok() -> float:
    return offset()
''',
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def generated(tmp_path):
    sources = generated_sources(write_tree(tmp_path / "face", FACE), write_tree(tmp_path / "core", CORE))
    package = write_tree(tmp_path / "out" / "generated_face_pkg", {"__init__.py": "", **sources})
    sys.path.insert(0, str(package.parent))
    yield sources, importlib.import_module("generated_face_pkg.modeling_elmo")
    sys.path.remove(str(package.parent))
    for name in [m for m in sys.modules if m.startswith("generated_face_pkg")]:
        del sys.modules[name]


def test_generated_files_run_without_the_core_and_compute_what_the_sources_do(generated):
    _, modeling = generated
    assert modeling.run(1.0) == pytest.approx((2.0 * 1.0 + 1.0) * 2.0 * 2.0)


def test_only_needed_definitions_come_as_code_without_docstrings_and_comments(generated):
    sources, _ = generated
    configuration = sources["configuration_elmo.py"]
    assert "SCALE = 2.0\n" in configuration and "The factor." not in configuration
    assert "UNUSED" not in configuration and "__all__" not in configuration
    assert "hf_elmo only" not in configuration and "save_generated_code" not in configuration
    modeling = sources["modeling_elmo.py"]
    assert "def scale(x: float) -> float:\n    return x * SCALE" in modeling
    assert "# a comment that travels with the definition" not in modeling
    assert "def unused" not in modeling and "from .c import" not in modeling
    assert "import math" in modeling and "elmo_core" not in modeling.split("# ---- elmo_core")[0].split('"""')[-1]


def test_an_emptied_body_keeps_a_pass(tmp_path):
    core = {
        **CORE,
        "c.py": 'class OffsetError(ValueError):\n    """Only a docstring."""\n\n\n'
        "def offset() -> float:\n    return 1.0\n",
    }
    face = {
        **FACE,
        "tokenization_elmo.py": FACE["tokenization_elmo.py"].replace("import offset", "import OffsetError, offset"),
    }
    face["tokenization_elmo.py"] = face["tokenization_elmo.py"].replace(
        "return offset()", "return offset() if OffsetError else 0.0"
    )
    sources = generated_sources(write_tree(tmp_path / "face", face), write_tree(tmp_path / "core", core))
    assert "class OffsetError(ValueError):\n    pass\n" in sources["tokenization_elmo.py"]


def test_inner_blank_lines_go_but_a_multi_line_strings_lines_stay(tmp_path):
    template = 'TEMPLATE = """first\n\n# not a comment\n"""'
    body = f"def offset() -> float:\n    x = 1.0\n\n    # gone\n    {template}\n\n    return x + len(TEMPLATE) * 0\n"
    face = generated_sources(write_tree(tmp_path / "face", FACE), write_tree(tmp_path / "core", {**CORE, "c.py": body}))
    base = face["configuration_elmo.py"]
    assert "    x = 1.0\n    TEMPLATE" in base and "# gone" not in base
    assert '"""first\n\n# not a comment\n"""' in base


def test_a_multi_line_bytes_literals_lines_stay_too(tmp_path):
    template = 'TEMPLATE = b"""first\n\n# not a comment\n"""'
    body = f"def offset() -> float:\n    {template}\n    return 1.0 + len(TEMPLATE) * 0\n"
    face = generated_sources(write_tree(tmp_path / "face", FACE), write_tree(tmp_path / "core", {**CORE, "c.py": body}))
    assert 'b"""first\n\n# not a comment\n"""' in face["configuration_elmo.py"]


def test_modules_come_in_import_order_and_shared_definitions_are_written_once_in_the_configuration(generated):
    sources, _ = generated
    configuration, modeling, tokenization = (
        sources[f"{n}_elmo.py"] for n in ("configuration", "modeling", "tokenization")
    )
    assert modeling.index("# ---- elmo_core/z_base.py") < modeling.index("# ---- elmo_core/b.py")
    # SCALE (configuration and model) and offset (model and tokenizer) are the configuration's.
    assert "SCALE = 2.0" in configuration and "def offset" in configuration
    assert "from .configuration_elmo import (\n    ElmoConfig,\n    SCALE,\n    offset,\n)" in modeling
    assert "from .configuration_elmo import (\n    offset,\n)" in tokenization
    for name in ("SCALE = 2.0", "def offset"):
        assert (configuration + modeling + tokenization).count(name) == 1


def test_two_definitions_of_one_name_are_refused(tmp_path):
    face = {
        **FACE,
        "tokenization_elmo.py": FACE["tokenization_elmo.py"]
        .replace(
            "from elmo_core.c import offset",
            "from elmo_core.c import offset\nfrom elmo_core.d import negate\nfrom elmo_core.z_base import scale",
        )
        .replace("return offset()", "return offset() + negate(1.0) + scale(1.0)"),
    }
    with pytest.raises(GenerationError, match="'scale' is defined by both"):
        generated_sources(write_tree(tmp_path / "face", face), write_tree(tmp_path / "core", CORE))


def test_importing_a_core_module_object_is_refused(tmp_path):
    core = {**CORE, "c.py": "from . import z_base\n\n\ndef offset():\n    return z_base.SCALE\n"}
    with pytest.raises(GenerationError, match="from . import"):
        generated_sources(write_tree(tmp_path / "face", FACE), write_tree(tmp_path / "core", core))
