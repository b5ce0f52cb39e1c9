"""The spaCy examples run (tiny model; no network)."""

from __future__ import annotations

import runpy

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
