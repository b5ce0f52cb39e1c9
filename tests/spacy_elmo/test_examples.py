"""The spaCy examples run (tiny model; no network)."""

from __future__ import annotations

import runpy

import pytest

from ..conftest import REPO

SCRIPT = REPO / "examples" / "spacy_elmo" / "01_contextual_vectors.py"


def test_contextual_vectors_example_runs(tiny_model_dir, capsys):
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--model", str(tiny_model_dir)]) == 0
    out = capsys.readouterr().out
    assert "river 1 / money 1" in out and "layer 0" in out and "mixed vectors: same sense" in out
    # Layer 0 (char CNN) sees only the word: every "bank" gets the same vector there.
    for line in out.splitlines():
        if " / " in line:
            assert line[20:].split()[0] == "1.000", line


def test_contextual_vectors_example_explains_a_missing_default_model(monkeypatch, tmp_path, capsys):
    import elmo_core.files.model_folder as model_folder

    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_DIR", tmp_path / "missing")
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main([]) == 2
    assert "no default model is installed" in capsys.readouterr().err


def test_contextual_vectors_example_explains_a_same_sense_pair_least_similar_at_the_top_layer(capsys):
    """With the shipped model, the two money banks are the least similar pair at layer 2: the script says why."""
    from elmo_core.files.model_folder import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "config.json").is_file():
        pytest.skip("no default model is installed")
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main([]) == 0
    out = capsys.readouterr().out
    rows = {line[:20].strip(): [float(v) for v in line[20:].split()[:4]] for line in out.splitlines() if " / " in line}
    top = {pair: values[2] for pair, values in rows.items()}
    assert min(top, key=top.__getitem__) == "money 1 / money 2"  # what the explanation is for
    assert "a same-sense pair (money 1 and money 2): a small biLM's top layer holds mostly what predicts" in out
    # Layer 1 separates the senses, as the docstring says.
    same = [rows["river 1 / river 2"][1], rows["money 1 / money 2"][1]]
    assert min(same) > max(v[1] for pair, v in rows.items() if pair.split()[0] != pair.split()[-2])
    assert "layer 1 separates these senses" in runpy.run_path(str(SCRIPT))["__doc__"]
