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


TEXTS = [
    ("John Smith visited Paris .", ["NNP", "NNP", "VBD", "NNP", "."], "TRAVEL"),
    ("The bank raised its rates .", ["DT", "NN", "VBD", "PRP$", "NNS", "."], "MONEY"),
    ("She flew to Rome today .", ["PRP", "VBD", "TO", "NNP", "NN", "."], "TRAVEL"),
    ("Savings earn less interest now .", ["NNS", "VBP", "JJR", "NN", "RB", "."], "MONEY"),
]


def _docbin(path, component: str):
    """A tiny .spacy corpus labelled for `component`: tags for the tagger, cats for textcat."""
    import spacy
    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("en").vocab
    docs = []
    for text, tags, label in TEXTS:
        doc = Doc(vocab, words=text.split())
        if component == "tagger":
            for token, tag in zip(doc, tags):
                token.tag_ = tag
        else:
            doc.cats = {"TRAVEL": float(label == "TRAVEL"), "MONEY": float(label == "MONEY")}
        docs.append(doc)
    DocBin(docs=docs).to_disk(path)
    return path


@pytest.mark.parametrize("component", ["tagger", "textcat"])
def test_tagger_and_textcat_example_configs_train_with_the_listener(tmp_path, tiny_model_dir, component):
    import os
    import subprocess
    import sys

    import numpy as np
    import spacy

    from spacy_elmo import get_scalar_mix_weights

    from .conftest import NUM_LAYERS

    config = REPO / "examples" / "spacy_elmo" / f"{component}_elmo.cfg"
    data = _docbin(tmp_path / "data.spacy", component)
    width = f"--components.{component}.model.tok2vec.encode"
    command = [sys.executable, "-m", "spacy", "train", str(config), "--output", str(tmp_path / "out")]
    command += ["--paths.train", str(data), "--paths.dev", str(data), "--paths.elmo", str(tiny_model_dir)]
    command += ["--training.max_steps", "3", "--training.eval_frequency", "1", f"{width}.width", "32"]
    command += [f"{width}.depth", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    score = {"tagger": "TAG_ACC", "textcat": "CATS_SCORE"}[component]
    assert score in done.stdout and "POS_ACC" not in done.stdout and "SENTS_F" not in done.stdout

    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert nlp.pipe_names == ["sentencizer", "elmo", component]
    mix = get_scalar_mix_weights(nlp, component)
    assert mix.normalized_weights.shape == (NUM_LAYERS,)
    np.testing.assert_allclose(mix.normalized_weights.sum(), 1.0, rtol=1e-6)
    doc = nlp("The bank raised its rates .")
    if component == "tagger":
        assert set(nlp.get_pipe("tagger").labels) == {t for _, tags, _ in TEXTS for t in tags}
        assert all(token.tag_ for token in doc)
    else:
        assert set(doc.cats) == {"TRAVEL", "MONEY"} and abs(sum(doc.cats.values()) - 1.0) < 1e-5
    # The component reads ELMo: changed layers change its tok2vec's output.
    tok2vec = nlp.get_pipe(component).model.get_ref("tok2vec")
    before = tok2vec.predict([doc])[0]
    doc._.elmo_layers = doc._.elmo_layers * 3.0
    assert np.abs(tok2vec.predict([doc])[0] - before).max() > 1e-6


def test_the_guides_elmo_block_pasted_into_spacy_init_config_trains(tmp_path, tiny_model_dir):
    """docs/guides/spacy.md: the `[components.elmo]` block and two edits turn `spacy init config` into ELMo."""
    import os
    import re
    import subprocess
    import sys
    import textwrap

    import numpy as np
    import spacy

    from spacy_elmo import get_scalar_mix_weights

    from .conftest import NUM_LAYERS

    guide = (REPO / "docs" / "guides" / "spacy.md").read_text(encoding="utf-8")
    section = guide[guide.index("### ELMo in a config from `spacy init config`") :]
    section = section[: section.index("\n## ")]
    init = re.search(r"```bash\n(python -m spacy init config .*)\n```", section)[1]
    (paste,) = [textwrap.dedent(block) for block in re.findall(r"```ini\n(.*?)```", section, re.DOTALL)]
    pipeline = re.search(r"`(pipeline = \[.*?\])`", section)[1]
    annotating = re.search(r"`(annotating_components = \[.*?\])`", section)[1]

    subprocess.run([sys.executable, *init.split()[1:]], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    config = (tmp_path / "config.cfg").read_text(encoding="utf-8")
    replaced = re.compile(r"^\[components\.tok2vec\.model\.embed\]\n(?:[^\[\n].*\n|\n)*", re.MULTILINE)
    assert len(replaced.findall(config)) == 1
    config = replaced.sub("", config) + "\n" + paste
    config = re.sub(r"^pipeline = \[.*\]$", pipeline, config, count=1, flags=re.MULTILINE)
    config = re.sub(r"^annotating_components = \[\]$", annotating, config, count=1, flags=re.MULTILINE)
    (tmp_path / "config.cfg").write_text(config, encoding="utf-8")

    _docbin(tmp_path / "data.spacy", "tagger")
    command = [sys.executable, "-m", "spacy", "train", "config.cfg", "--output", "out"]
    command += ["--paths.train", "data.spacy", "--paths.dev", "data.spacy", "--training.max_steps", "3"]
    command += ["--components.elmo.model.path", str(tiny_model_dir), "--components.tok2vec.model.encode.depth", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    nlp = spacy.load(tmp_path / "out" / "model-last")
    assert nlp.pipe_names == ["elmo", "tok2vec", "tagger", "ner"]
    assert get_scalar_mix_weights(nlp, "tok2vec").normalized_weights.shape == (NUM_LAYERS,)
    doc = nlp("The bank raised its rates .")
    tok2vec = nlp.get_pipe("tok2vec").model
    before = tok2vec.predict([doc])[0]
    doc._.elmo_layers = doc._.elmo_layers * 3.0
    assert np.abs(tok2vec.predict([doc])[0] - before).max() > 1e-6  # the shared tok2vec reads ELMo
