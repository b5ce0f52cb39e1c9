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
        "perplexity",  # the biLM's own scores of text: `elmo perplexity` from Python
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
        "ElmoForSequenceClassification",
        "ElmoForTokenClassification",
        "ElmoLMHeadModel",
        "ElmoModel",
        "ElmoModelOutput",
        "ElmoPreTrainedModel",
        "ElmoTokenizer",
    },
    "hf_elmo.remote_code": {
        "ELMO_BILM_VERSION",
        "GENERATED_DIR",
        "GENERATED_FILES",
        "note_which_code_runs",
        "read_as_the_core_reads",
        "save_atomically",
        "save_generated_code",
    },
    # The factory, make_elmo, is reached as nlp.add_pipe("elmo") (entry point), as spacy-transformers does.
    "spacy_elmo": {"ElmoComponent", "ScalarMixWeights", "get_scalar_mix_weights", "restore_docs"},
    "spacy_elmo.layers": {"ElmoFeatureDropout", "ElmoListener", "ScalarMixLayer", "build_elmo_layers"},
}

FACE_API = {
    "MAX_CHARACTERS_PER_TOKEN",
    "atomic_folder",
    "atomic_path",
    "disk_full_error",
    "BEGINNING_OF_SENTENCE_CHARACTER",
    "BEGINNING_OF_WORD_CHARACTER",
    "CHAR_ID_OFFSET",
    "CharCNNOptions",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_TOKENIZER",
    "DEFAULT_WINDOW_TOKENS",
    "ELMO_SETTINGS",
    "END_OF_SENTENCE_CHARACTER",
    "END_OF_WORD_CHARACTER",
    "Highway",
    "NON_FINITE_FIX",
    "PADDING_CHARACTER",
    "bilm_is_trainable",
    "capturing",
    "check_char_ids",
    "check_input_file",
    "iter_conll_rows",
    "check_int",
    "check_model_folder",
    "check_sentences",
    "check_window_settings",
    "count_non_finite",
    "first_use_lock",
    "folder_variant",
    "get_tokenizer",
    "inference_step",
    "missing_extra",
    "mix_representations",
    "non_finite_error",
    "read_in_windows",
    "read_text",
    "release_when_collected",
    "resolve_model_source",
    "run_bilm",
    "run_in_windows",
    "serving_parts",
    "softmax_weights",
    "softmax_weights_backward",
    "spacy_sentence_splitter",
    "spacy_word_splitter",
    "token_offsets",
    "tokenizer_settings",
    "weighted_layer_sum",
    "weighted_layer_sum_backward",
    "window_batches",
    "word_to_char_ids",
    # the biLM as a language model (ElmoLMHeadModel)
    "BiLMLanguageModel",
    "Perplexity",
    "Vocabulary",
    "evaluate",
    "load_language_model",
    "save_language_model",
    "text_sentences",
}
"""What the faces may import of the core beyond `elmo_core`'s public names (`elmo_core.face_api`)."""

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


def test_the_face_api_is_the_pinned_one_and_all_importable():
    module = importlib.import_module("elmo_core.face_api")
    assert set(module.__all__) == FACE_API and len(module.__all__) == len(FACE_API)
    assert not FACE_API & PUBLIC["elmo_core"]  # a public name is imported from elmo_core itself
    for name in module.__all__:
        assert getattr(module, name) is not None


def face_imports() -> dict[str, set[str]]:
    """Every `from elmo_core... import name` of the faces (generated copies aside): module -> names."""
    found: dict[str, set[str]] = {}
    for face in ("spacy_elmo", "hf_elmo"):
        for path in sorted(FOLDERS[face].rglob("*.py")):
            if path.parent.name == "remote_code" and path.name.endswith("_elmo.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    assert not any(a.name.startswith("elmo_core") for a in node.names), path
                elif (
                    isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("elmo_core")
                ):
                    found.setdefault(node.module or "", set()).update(a.name for a in node.names)
    return found


def test_the_faces_import_only_the_public_and_the_face_api_names():
    allowed = {"elmo_core": PUBLIC["elmo_core"] | {"__version__"}, "elmo_core.face_api": FACE_API}
    imports = face_imports()
    assert set(imports) <= set(allowed), sorted(set(imports) - set(allowed))
    for module, names in imports.items():
        assert names <= allowed[module], (module, sorted(names - allowed[module]))
    assert imports["elmo_core.face_api"] == FACE_API  # every declared name is used by a face


def test_the_core_api_is_small():
    assert len(PUBLIC["elmo_core"]) <= 26


def test_no_library_module_re_exports_another_modules_name():
    """Only the top-level APIs (`elmo_core`, `hf_elmo`, `spacy_elmo` and `spacy_elmo.layers`,
    spaCy's layout) list names defined elsewhere; every other `__all__` lists its own."""
    apis = {"elmo_core", "elmo_core.face_api", "hf_elmo", "spacy_elmo", "spacy_elmo.layers", "hf_elmo.remote_code"}
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
