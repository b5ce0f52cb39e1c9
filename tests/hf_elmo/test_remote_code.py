"""Saved folders carry their own, generated code (hf_elmo.remote_code) and load without elmo-bilm."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from elmo_core.apps.cli import app
from hf_elmo import remote_code
from hf_elmo.remote_code import generate

from .conftest import TOKENS, batch, run_script

SAVED_FILES = {"config.json", "model.safetensors", "tokenizer_config.json", *remote_code.GENERATED_FILES}

# Run where elmo-bilm is not installed (conftest.WITHOUT_ELMO_BILM).
ISOLATED = r"""
import json, sys
import torch
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer

folder, tokenizer_folder, resaved, out = sys.argv[1:5]
words = json.loads(sys.argv[5])
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
tokenizer_only = AutoTokenizer.from_pretrained(tokenizer_folder, trust_remote_code=True)
inputs = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    first = model(**inputs, output_hidden_states=True)
model.save_pretrained(resaved)  # save -> load -> save elsewhere -> load, all from the folder's code
tokenizer.save_pretrained(resaved)
again = AutoModel.from_pretrained(resaved, trust_remote_code=True)
again_inputs = AutoTokenizer.from_pretrained(resaved, trust_remote_code=True)(
    words, is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    second = again(**again_inputs)
    # A base model's folder also starts a tagger (new head, the biLM and mix as saved).
    tagger = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True, num_labels=3)
    logits = tagger(**inputs).logits
torch.save({
    "classes": [type(o).__name__ for o in (config, model, tokenizer, tokenizer_only, again)],
    "modules": [type(o).__module__ for o in (config, model, tokenizer, tokenizer_only, again)],
    "input_ids": inputs["input_ids"],
    "tokenizer_only_ids": tokenizer_only(
        words, is_split_into_words=True, padding=True, return_tensors="pt"
    )["input_ids"],
    "last_hidden_state": first.last_hidden_state,
    "hidden_states": torch.stack(first.hidden_states),
    "resaved_last_hidden_state": second.last_hidden_state,
    "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
    "imported": sorted(m for m in ("elmo_core", "hf_elmo") if m in sys.modules),
    "tagger": [
        type(tagger).__name__,
        list(logits.shape),
        sorted(n for n, p in tagger.named_parameters() if p.requires_grad),
    ],
}, out)
"""

# A plain interpreter of this environment, which has elmo-bilm installed but never
# imports hf_elmo: the folder's own code runs all the same, not the installed package.
INSTALLED = r"""
import json, sys
import torch
from transformers import AutoModel, AutoTokenizer

words = json.loads(sys.argv[1])
results = {}
for folder in sys.argv[3:]:
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        inputs = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        results[folder] = model(**inputs).last_hidden_state
results["imported"] = sorted(m for m in ("elmo_core", "hf_elmo") if m in sys.modules)
results["modules"] = type(model).__module__
torch.save(results, sys.argv[2])
"""


def referenced_files(folder: Path) -> set[str]:
    """Every .py file the folder's auto_map names, and all their relative imports."""
    names = set()
    for config in ("config.json", "tokenizer_config.json"):
        if (folder / config).is_file():
            for ref in json.loads((folder / config).read_text()).get("auto_map", {}).values():
                for class_ref in ref if isinstance(ref, list) else [ref]:
                    if class_ref:
                        names.add(class_ref.split(".")[0] + ".py")
    pending = list(names)
    while pending:
        tree = ast.parse((folder / pending.pop()).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                for module in [node.module] if node.module else [a.name for a in node.names]:
                    if f"{module}.py" not in names:
                        names.add(f"{module}.py")
                        pending.append(f"{module}.py")
    return names


def test_saved_folder_holds_config_weights_tokenizer_and_its_code_files(saved_model_dir):
    assert {p.name for p in saved_model_dir.iterdir()} == SAVED_FILES
    config = json.loads((saved_model_dir / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_elmo.ElmoConfig",
        "AutoModel": "modeling_elmo.ElmoModel",
        "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
        "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    }
    tokenizer_config = json.loads((saved_model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"] == {"AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None]}
    assert referenced_files(saved_model_dir) == set(remote_code.GENERATED_FILES)


def test_saved_code_files_are_the_generated_ones(saved_model_dir, tmp_path, tiny_tokenizer):
    for name in remote_code.GENERATED_FILES:
        assert (saved_model_dir / name).read_bytes() == (remote_code.GENERATED_DIR / name).read_bytes(), name
    tiny_tokenizer.save_pretrained(tmp_path / "tokenizer")  # a tokenizer alone: its file and the shared definitions
    assert {p.name for p in (tmp_path / "tokenizer").iterdir()} == {
        "tokenizer_config.json",
        "tokenization_elmo.py",
        "encoding_elmo.py",
        "elmo_reference.py",
        "elmo_reference_runtime.py",
    }


def test_generated_code_files_are_up_to_date():
    stale = [
        name
        for name, text in generate.generated_sources().items()
        if (remote_code.GENERATED_DIR / name).read_text(encoding="utf-8") != text
    ]
    assert stale == [], (
        f"hf_elmo/remote_code/{', '.join(stale)} no longer match(es) the hf_elmo modules they copy. "
        f"Regenerate them with: {generate.COMMAND}"
    )


def test_generated_code_files_import_nothing_from_elmo_bilm_and_only_their_siblings_relatively():
    for name in remote_code.GENERATED_FILES:
        tree = ast.parse((remote_code.GENERATED_DIR / name).read_text(encoding="utf-8"))
        absolute, relative = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                absolute |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                (relative if node.level else absolute).add((node.module or "").split(".")[0])
        assert absolute & {"elmo_core", "hf_elmo", "spacy_elmo", "core"} == set(), name
        expected = {
            "configuration_elmo.py": {"elmo_reference", "elmo_reference_runtime"},
            "modeling_elmo.py": {"elmo_reference", "elmo_reference_runtime", "configuration_elmo"},
            "tokenization_elmo.py": {"elmo_reference", "elmo_reference_runtime", "encoding_elmo"},
            "encoding_elmo.py": {"elmo_reference"},
            "elmo_reference.py": set(),
            "elmo_reference_runtime.py": {"elmo_reference"},
        }
        assert relative == expected[name], name


def test_each_definition_is_written_once_across_the_folder():
    """The HF files import what they share from elmo_reference.py (BiLMOptions, the character ids,
    the errors), never define it again."""
    defined: dict[str, list[str]] = {}
    for name in remote_code.GENERATED_FILES:
        tree = ast.parse((remote_code.GENERATED_DIR / name).read_text(encoding="utf-8"))
        for node in tree.body:
            targets = [node.name] if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else []
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id != "__all__"]
            for target in targets:
                defined.setdefault(target, []).append(name)
    assert {k: v for k, v in defined.items() if len(v) > 1} == {}
    assert defined["BiLMOptions"] == ["elmo_reference.py"] and defined["BiLM"] == ["elmo_reference.py"]
    assert defined["word_to_char_ids"] == ["elmo_reference.py"]
    assert defined["ElmoModel"] == ["modeling_elmo.py"] and defined["ElmoConfig"] == ["configuration_elmo.py"]


def test_the_folders_code_is_hf_elmos_modules_copied_whole_with_their_core_imports_rewritten():
    """Every class and function of hf_elmo's three modules is in the folder, by name and code."""
    for name in generate.MODULES:
        original = ast.parse((generate.HF_DIR / f"{name}.py").read_text(encoding="utf-8"))
        copy = ast.parse((remote_code.GENERATED_DIR / f"{name}.py").read_text(encoding="utf-8"))

        def definitions(tree: ast.Module) -> dict[str, int]:
            return {
                n.name: len(n.body) - int(ast.get_docstring(n) is not None and len(n.body) > 1)
                for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            }

        assert definitions(copy) == definitions(original), name


def test_no_hf_elmo_only_blocks_remain_in_hf_elmo():
    for path in generate.HF_DIR.glob("*.py"):
        assert "hf_elmo only" not in path.read_text(encoding="utf-8"), path.name


def test_the_reference_names_the_installed_version_and_its_runtime_stand_ins_do_nothing(tmp_path):
    import elmo_core
    from hf_elmo.remote_code import elmo_reference
    from hf_elmo.remote_code import elmo_reference_runtime as runtime

    assert elmo_reference.ELMO_BILM_VERSION == elmo_core.__version__  # bump elmo_reference.py with the version
    assert runtime.serving_parts() == {} and runtime.window_batches() is None
    assert runtime.note_which_code_runs(tmp_path) is False
    save = object()
    assert runtime.save_atomically(save, tmp_path, "modeling_elmo.py") is save
    assert runtime.read_as_the_core_reads(lambda *a, **k: (a, k), "a Hub id", object)("x", y=1) == (("x",), {"y": 1})


def test_the_generator_refuses_a_core_name_the_reference_lacks():
    with pytest.raises(ValueError, match=r"imports \['embed_sentences'\] from elmo-bilm"):
        generate.copied("modeling_elmo", "from elmo_core import embed_sentences\n", {"BiLM": "elmo_reference"})


def test_save_generated_code_rejects_unknown_file_names(tmp_path):
    with pytest.raises(ValueError, match="not a generated code file"):
        remote_code.save_generated_code(tmp_path, "errors.py")


def test_saved_folder_loads_where_elmo_bilm_is_not_installed(tmp_path, tiny_hf_model, tiny_tokenizer, hf_env):
    folder, tokenizer_folder = tmp_path / "model", tmp_path / "tokenizer"
    tiny_hf_model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(tokenizer_folder)
    out = tmp_path / "out.pt"
    args = [folder, tokenizer_folder, tmp_path / "resaved", out, json.dumps(TOKENS)]
    result = run_script(ISOLATED, args, hf_env, tmp_path, without_elmo_bilm=True)
    assert result.returncode == 0, result.stderr[-3000:]
    got = torch.load(out)
    assert got["classes"] == ["ElmoConfig", "ElmoModel", "ElmoTokenizer", "ElmoTokenizer", "ElmoModel"]
    # Saved again by the folder's own classes: the same files, the same code.
    assert {p.name for p in (tmp_path / "resaved").iterdir()} == SAVED_FILES
    for name in remote_code.GENERATED_FILES:
        assert (tmp_path / "resaved" / name).read_bytes() == (remote_code.GENERATED_DIR / name).read_bytes(), name
    assert all(module.startswith("transformers_modules.") for module in got["modules"])
    assert got["imported"] == []
    inputs = batch(tiny_tokenizer)
    assert torch.equal(got["input_ids"], inputs["input_ids"]) and torch.equal(
        got["tokenizer_only_ids"], inputs["input_ids"]
    )
    with torch.no_grad():
        expected = tiny_hf_model(**inputs, output_hidden_states=True)
    torch.testing.assert_close(got["last_hidden_state"], expected.last_hidden_state, atol=1e-6, rtol=0)
    torch.testing.assert_close(got["hidden_states"], torch.stack(expected.hidden_states), atol=1e-6, rtol=0)
    torch.testing.assert_close(got["resaved_last_hidden_state"], expected.last_hidden_state, atol=1e-6, rtol=0)
    assert got["trainable"] == ["scalar_mixes.0.gamma", "scalar_mixes.0.scalar_weights"]
    assert got["tagger"] == [
        "ElmoForTokenClassification",
        [3, 3, 3],
        ["classifier.bias", "classifier.weight", "elmo.scalar_mixes.0.gamma", "elmo.scalar_mixes.0.scalar_weights"],
    ]


def test_saved_and_converted_folders_load_in_a_process_that_never_imported_hf_elmo(
    tmp_path, saved_model_dir, tiny_hf_model, tiny_tokenizer, tiny_bilm_hdf5, hf_env
):
    converted = tmp_path / "converted"
    result = CliRunner().invoke(app, ["convert", *map(str, tiny_bilm_hdf5), str(converted)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out.pt"
    args = [json.dumps(TOKENS), out, saved_model_dir, converted]
    result = run_script(INSTALLED, args, hf_env, tmp_path, without_elmo_bilm=False)
    assert result.returncode == 0, result.stderr[-3000:]
    got = torch.load(out)
    assert got["imported"] == []  # the folder's own code: neither the installed core nor hf_elmo
    assert got["modules"].startswith("transformers_modules.")
    with torch.no_grad():
        expected = tiny_hf_model(**batch(tiny_tokenizer)).last_hidden_state
    torch.testing.assert_close(got[str(saved_model_dir)], expected, atol=1e-6, rtol=0)
    # The converted folder holds make_tiny_elmo()'s biLM; its mix starts at w = 0, gamma = 1 too.
    torch.testing.assert_close(got[str(converted)], expected, atol=1e-6, rtol=0)


RAW_TEXT = r"""
import json, sys

import spacy  # importable here, as in a user's environment with spaCy but without elmo-bilm
from transformers import AutoTokenizer

folder, out, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
enc = tokenizer(texts, padding=True, return_offsets_mapping=True)
json.dump({
    "tokens": [enc.tokens(k) for k in range(len(texts))],
    "char_ids": enc["char_ids"], "offset_mapping": [[list(o) for o in row] for row in enc["offset_mapping"]],
    "imported": sorted(m for m in ("elmo_core", "hf_elmo", "spacy_elmo") if m in sys.modules),
}, open(out, "w"))
"""


def test_saved_folder_tokenises_raw_text_where_only_spacy_is_installed(
    tmp_path, saved_model_dir, tiny_tokenizer, hf_env
):
    pytest.importorskip("spacy")
    texts = ["The river bank.", "Don't stop-me  now!!", "naïve 😀"]
    out = tmp_path / "out.json"
    result = run_script(RAW_TEXT, [saved_model_dir, out, json.dumps(texts)], hf_env, tmp_path, without_elmo_bilm=True)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["imported"] == []
    expected = tiny_tokenizer(texts, padding=True, return_offsets_mapping=True)
    assert got["tokens"] == [expected.tokens(k) for k in range(len(texts))]  # the same tokens as a full install
    assert got["char_ids"] == expected["char_ids"]
    assert got["offset_mapping"] == [[list(o) for o in row] for row in expected["offset_mapping"]]


def test_saved_folder_tokenises_raw_text_with_lone_surrogates_as_its_pre_split_words(
    tmp_path, saved_model_dir, tiny_tokenizer, hf_env
):
    # The folder's own tokenizer code (trust_remote_code) splits as the installed one does.
    pytest.importorskip("spacy")
    texts = ["bad \ud800 surrogate here", "a\udc00b word\ud83d. end"]
    out = tmp_path / "out.json"
    result = run_script(RAW_TEXT, [saved_model_dir, out, json.dumps(texts)], hf_env, tmp_path, without_elmo_bilm=False)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(out.read_text())
    words = [["bad", "\ud800", "surrogate", "here"], ["a\udc00b", "word\ud83d", ".", "end"]]
    assert got["tokens"] == words
    assert got["char_ids"] == tiny_tokenizer(words, is_split_into_words=True, padding=True)["char_ids"]


# ------------------------------------------------------------------ which code a folder runs


def saved_tagger(folder: Path, tiny_tokenizer) -> Path:
    from hf_elmo import ElmoConfig, ElmoForTokenClassification

    from ..conftest import make_tiny_elmo

    core = make_tiny_elmo(dropout=0.0)
    tagger = ElmoForTokenClassification(ElmoConfig.from_options(core.options, dropout=0.0, num_labels=3))
    tagger.elmo.load_state_dict(core.state_dict())
    tagger.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def test_after_import_hf_elmo_a_folder_of_other_code_runs_the_installed_code_and_says_so_once(
    tmp_path, tiny_tokenizer, caplog
):
    """R46: transformers gives the registered classes precedence over auto_map; the README says so, and
    loading a folder saved by other code (a marker in its modeling_elmo.py) warns once, in every route."""
    import logging

    from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer, pipeline
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    import elmo_core
    import hf_elmo

    folder = saved_tagger(tmp_path / "tagger", tiny_tokenizer)
    assert json.loads((folder / "config.json").read_text())["elmo_bilm_version"] == elmo_core.__version__
    with caplog.at_level(logging.WARNING, logger="hf_elmo"):
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True)
        tagger = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True)
    assert not [r for r in caplog.records if r.name == "hf_elmo"]  # saved by this very code: nothing to say
    with (folder / "modeling_elmo.py").open("a", encoding="utf-8") as f:
        f.write('\nMARKER = "written by another version of elmo-bilm"\n')
    tokenizer_only = tmp_path / "tokenizer"
    tiny_tokenizer.save_pretrained(tokenizer_only)
    with (tokenizer_only / "tokenization_elmo.py").open("a", encoding="utf-8") as f:
        f.write('\nMARKER = "written by another version of elmo-bilm"\n')
    with caplog.at_level(logging.WARNING, logger="hf_elmo"):
        config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
        model = AutoModel.from_pretrained(folder, trust_remote_code=True)
        tagger = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True)
        extractor = pipeline("feature-extraction", model=str(folder), trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_only, trust_remote_code=True)
    assert (type(config), type(model), type(tagger), type(extractor.model)) == (
        hf_elmo.ElmoConfig,
        hf_elmo.ElmoModel,
        hf_elmo.ElmoForTokenClassification,
        hf_elmo.ElmoModel,
    )
    assert type(tokenizer) is hf_elmo.ElmoTokenizer
    told = [r for r in caplog.records if r.name == "hf_elmo"]
    assert len(told) == 2, [r.getMessage() for r in told]  # once for the tagger's folder, once for the tokenizer's
    assert "tokenization_elmo.py differ" in told[1].getMessage()
    message = told[0].getMessage()
    assert str(folder.resolve()) in message and "modeling_elmo.py differ" in message
    assert f"runs with the installed elmo-bilm {elmo_core.__version__}" in message
    assert "in a process that does not import hf_elmo" in message
    guide = Path(__file__).resolve().parents[2] / "docs" / "guides" / "hugging-face.md"
    guide_text = " ".join(guide.read_text(encoding="utf-8").split())
    assert "A folder always runs its own code" not in guide_text
    assert "takes precedence over a folder's `auto_map`, even with `trust_remote_code=True`" in guide_text
    # The folder's own code (what runs where hf_elmo is not imported) gives the same vectors.
    own = get_class_from_dynamic_module("modeling_elmo.ElmoModel", str(folder))
    assert own.__module__.startswith("transformers_modules.") and hasattr(
        __import__(own.__module__, fromlist=["x"]), "MARKER"
    )
    with torch.no_grad():
        expected = model(**batch(tiny_tokenizer)).last_hidden_state
        got = own.from_pretrained(folder).eval()(**batch(tiny_tokenizer)).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_a_folder_recording_another_version_is_named_with_that_version(tmp_path, tiny_tokenizer, caplog):
    import logging

    from transformers import AutoModel

    folder = saved_tagger(tmp_path / "old", tiny_tokenizer)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "elmo_bilm_version": "0.0.1"}))
    with caplog.at_level(logging.WARNING, logger="hf_elmo"):
        AutoModel.from_pretrained(folder)
        AutoModel.from_pretrained(folder)
    assert [r.getMessage().split(". It runs")[0] for r in caplog.records if r.name == "hf_elmo"] == [
        f"{folder.resolve()} was saved by elmo-bilm 0.0.1"
    ]


RUNTIME_NAMES = (
    "run_in_windows",  # the runtime's windowed inference loop (the model's window plan is in the folder)
    "iter_embeddings",
    "embed_sentences",
    "batches_by_token_budget",
    "malloc_trim",
    "release_free_memory",
    "forward_threads",
    "THREAD_RULE",
    "TokenCache",
    "CapturedRecurrence",
    "quantize_int8",
    "paired_training_stacks",
    "_forward_columns",  # the recurrence's fast paths: the folder runs the step loop only
    "_forward_fused",
    "run_in_chunks",
    "bf16_linear",
)


def test_a_saved_folder_carries_the_model_only_in_at_most_1600_lines(saved_model_dir):
    """What ElmoModel, its task models, ElmoConfig and ElmoTokenizer run, none of the
    runtime (its recurrence paths, caches, thread rule, batching, embed drivers, glibc calls): the
    runtime's parts stand in as no-ops in elmo_reference.py.
    Carried too: float32 weights under any default dtype, ids in other integer types, and the
    tokenizer's memory zone and first-use lock (concurrent first calls load its splitter once),
    and its splitter's rule for lone surrogates."""
    code = {p.name: p.read_text(encoding="utf-8") for p in saved_model_dir.glob("*.py")}
    assert sorted(code) == sorted(remote_code.GENERATED_FILES)
    assert sum(text.count("\n") for text in code.values()) <= 1600
    found = {(name, word) for name, text in code.items() for word in identifiers(text) & set(RUNTIME_NAMES)}
    assert found == set()
    assert all("ctypes" not in identifiers(text) for text in code.values())  # no glibc calls


def identifiers(source: str) -> set[str]:
    """Every name the code defines, reads or imports (not the words of its docstrings)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {part for alias in node.names for part in alias.name.split(".")}
    return names
