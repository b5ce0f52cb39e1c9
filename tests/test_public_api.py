"""The public names of every package, pinned: adding one is a decision, made here."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PUBLIC = {
    "elmo_core": {
        # loading and saving
        "load_elmo",
        "default_model_dir",
        "load_model_folder",
        "save_model_folder",
        "read_options",
        "load_bilm_tf",
        "save_bilm_tf",
        # embedding
        "embed_sentences",
        "iter_embeddings",
        "EmbedSettings",
        "words_to_char_ids",
        # the model
        "Elmo",
        "ElmoOutput",
        "BiLM",
        "BiLMOutput",
        "ScalarMix",
        "BiLMOptions",
        "PUBLISHED_OPTIONS",
        # errors
        "ElmoError",
        "OptionsError",
        "WeightFileError",
        # tools
        "FeatureCache",
        "quantize_int8",
        "release_free_memory",
        "set_thread_policy",
    },
    # The layers re-export nothing: a reader finds a name in the module of its concept.
    "elmo_core.model": set(),
    "elmo_core.runtime": set(),
    "elmo_core.files": set(),
    "elmo_core.apps.training": set(),
    "elmo_core.apps.engines": set(),
    "elmo_core.model.recurrence": {"RECURRENCES", "Recurrence", "ThreadRule", "resolve_recurrence"},
    "elmo_core.apps.cli": {"app", "main"},
    "hf_elmo": {
        "ElmoBatchEncoding",
        "ElmoConfig",
        "ElmoFeatureExtractionPipeline",
        "ElmoForTokenClassification",
        "ElmoModel",
        "ElmoModelOutput",
        "ElmoPreTrainedModel",
        "ElmoTokenizer",
        "feature_extraction_pipeline",
    },
    "hf_elmo.remote_code": {
        "ELMO_BILM_VERSION",
        "GENERATED_DIR",
        "GENERATED_FILES",
        "note_which_code_runs",
        "save_generated_code",
    },
    "spacy_elmo": {"ElmoComponent", "ScalarMixWeights", "get_scalar_mix_weights", "make_elmo", "restore_docs"},
    "spacy_elmo.layers": {"ElmoFeatureDropout", "ElmoListener", "ScalarMixLayer", "build_elmo_layers"},
}

FOLDERS = {"elmo_core": REPO / "core", "hf_elmo": REPO / "hf_elmo", "spacy_elmo": REPO / "spacy_elmo"}


def packages() -> list[str]:
    """Every package of the library (a folder with an `__init__.py`), but the default model's data."""
    found = []
    for name, folder in FOLDERS.items():
        for init in sorted(folder.rglob("__init__.py")):
            parts = init.parent.relative_to(folder).parts
            if "default_model" not in parts:
                found.append(".".join([name, *parts]))
    return found


def test_every_package_has_its_public_names_pinned():
    assert sorted(packages()) == sorted([*PUBLIC, "elmo_core.apps"])


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_a_packages_public_names_are_the_pinned_ones_and_all_importable(package):
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC[package]
    assert len(module.__all__) == len(set(module.__all__))  # no name listed twice
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_the_core_api_is_small():
    assert len(PUBLIC["elmo_core"]) <= 25


def test_no_library_module_re_exports_another_modules_name():
    """Only the top-level APIs (`elmo_core`, `hf_elmo`, `spacy_elmo` and `spacy_elmo.layers`,
    spaCy's layout) list names defined elsewhere; every other `__all__` lists its own."""
    apis = {"elmo_core", "hf_elmo", "spacy_elmo", "spacy_elmo.layers", "hf_elmo.remote_code"}
    offenders = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            if path.parent.name == "remote_code" and path.name.endswith("_elmo.py"):
                continue  # generated copies
            parts = list(path.relative_to(folder).with_suffix("").parts)
            module = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
            if module in apis:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            listed = next(
                (
                    {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
                    for node in tree.body
                    if isinstance(node, (ast.Assign, ast.AnnAssign))
                    and "__all__" in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
                    and isinstance(node.value, ast.List)
                ),
                set(),
            )
            imported = {
                alias.asname or alias.name
                for node in tree.body
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
            if listed & imported:
                offenders[module] = sorted(listed & imported)
    assert offenders == {}
