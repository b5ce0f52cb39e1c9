"""examples/ner/ner_benchmark.py: spaCy's NER with and without ELMo, end to end on invented data."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import spacy
import torch
from spacy.tokens import Doc, Span
from spacy.training import Example

from spacy_elmo.layers.scalar_mix import SCALAR_MIX_NAME

from ..conftest import REPO

SCRIPT = REPO / "examples" / "ner" / "ner_benchmark.py"

# Invented sentences (no corpus text): (words, tags), tags IOB2.
PEOPLE = ["Anna Berg", "Tom Kale", "Rosa Lind", "Ivo Marsh", "Lena Holt"]
PLACES = ["Oslo", "Lima", "Turin", "Quito", "Perth"]
COMPANIES = ["Zeno Corp", "Arcwell", "Bluefin Labs", "Nordic Air", "Tessera"]


def invented_sentences(n: int) -> list[list[tuple[str, str]]]:
    sentences = []
    for i in range(n):
        person, place, company = PEOPLE[i % 5], PLACES[(i * 2) % 5], COMPANIES[(i * 3) % 5]
        parts = [(person, "PER"), ("moved to", None), (place, "LOC"), ("to join", None), (company, "ORG"), (".", None)]
        sentence = []
        for text, label in parts:
            for j, word in enumerate(text.split()):
                sentence.append((word, "O" if label is None else ("B-" if j == 0 else "I-") + label))
        sentences.append(sentence)
    return sentences


def write_conll(path, sentences) -> None:
    blocks = ["-DOCSTART- -X- -X- O\n"] + ["".join(f"{w} X X {t}\n" for w, t in s) for s in sentences]
    path.write_text("\n".join(blocks), encoding="utf-8")


@pytest.fixture
def benchmark():
    return runpy.run_path(str(SCRIPT))


def invented_run(tmp_path, n_train: int, n_dev: int) -> tuple[Path, Path, Path, list[str]]:
    """Invented train and dev files, the output folder, and the arguments that name the three."""
    train, dev, out = tmp_path / "train.txt", tmp_path / "dev.txt", tmp_path / "out"
    write_conll(train, invented_sentences(n_train))
    write_conll(dev, invented_sentences(n_dev))
    return train, dev, out, ["--train", str(train), "--dev", str(dev), "--eval", f"held={dev}", "--out", str(out)]


def test_benchmark_runs_end_to_end_and_prints_prf_per_type(benchmark, tiny_model_dir, tmp_path, capsys):
    train, dev, out, files = invented_run(tmp_path, 20, 6)
    settings = ["--max-steps", "2", "--seeds", "0", "1", "--elmo-model", str(tiny_model_dir), "--cache-mb", "1"]
    argv = [*files, "--eval", str(train), *settings]
    assert benchmark["main"](argv) == 0
    printed = capsys.readouterr().out
    assert f"held ({dev}); seeds 0 1; mean ± std" in printed and f"train ({train})" in printed
    rows = [line.split() for line in printed.splitlines() if line.startswith(("baseline ", "elmo "))]
    # 2 eval files x 2 variants x (PER, LOC, ORG, ALL)
    assert len(rows) == 16
    assert {(r[0], r[1]) for r in rows} == {(v, t) for v in ("baseline", "elmo") for t in ("LOC", "ORG", "PER", "ALL")}
    assert all(r[2] == {"PER": "6", "LOC": "6", "ORG": "6", "ALL": "18"}[r[1]] for r in rows if r in rows[:8])
    for name in ("baseline.cfg", "elmo.cfg", "results.json", "elmo/seed1/model-last/elmo/model/model.safetensors"):
        assert (out / name).exists(), name
    runs = json.loads((out / "results.json").read_text(encoding="utf-8"))["runs"]
    assert runs["baseline/seed0"]["train_cache"] is None
    cache = runs["elmo/seed0"]["train_cache"]
    assert cache["misses"] > 0 and 0 < cache["nbytes"] <= cache["max_bytes"] == 1 << 20
    nlp = spacy.load(out / "elmo" / "seed0" / "model-last")
    assert nlp.pipe_names == ["elmo", "ner"]  # by default ELMo enters at the input: the NER owns its tok2vec


def test_configs_differ_only_by_the_elmo_features(benchmark):
    settings = {"max_steps": 10, "eval_frequency": 5, "cache_bytes": 123, "elmo_dropout": 0.25, "mix_l2": 0.5}
    assert benchmark["make_configs"](**settings)["elmo"]["nlp"]["pipeline"] == ["elmo", "ner"]  # input, the default
    configs = benchmark["make_configs"](**settings, elmo_enters="output")
    base, elmo = configs["baseline"], configs["elmo"]
    assert base["nlp"]["pipeline"] == ["tok2vec", "ner"] and elmo["nlp"]["pipeline"] == ["elmo", "tok2vec", "ner"]
    listener = elmo["components"]["ner"]["model"]["tok2vec"]
    assert listener["@architectures"] == "spacy-elmo.ElmoListener.v2"
    assert (listener["dropout"], listener["mix_l2"]) == (0.25, 0.5)
    assert listener["tok2vec"] == base["components"]["ner"]["model"]["tok2vec"]  # the standard features, kept
    assert elmo["components"]["elmo"]["model"]["cache_bytes"] == 123
    for section in ("training", "components"):
        for key in base[section]:
            if (section, key) not in {("training", "annotating_components"), ("components", "ner")}:
                assert elmo[section][key] == base[section][key], (section, key)
    assert base["corpora"]["train"]["gold_preproc"] is True and base["training"]["max_steps"] == 10


def test_entity_scores_equal_a_hand_count(benchmark):
    vocab = spacy.blank("en").vocab

    def doc(words, ents):
        d = Doc(vocab, words=words)
        d.ents = [Span(d, s, e, label) for s, e, label in ents]
        return d

    s1, s2 = "John lives in Paris".split(), "Acme Corp hired Mary".split()
    examples = [
        # PER right; Paris predicted ORG instead of LOC: an ORG false positive and a LOC miss.
        Example(doc(s1, [(0, 1, "PER"), (3, 4, "ORG")]), doc(s1, [(0, 1, "PER"), (3, 4, "LOC")])),
        # ORG right; Mary (PER) missed.
        Example(doc(s2, [(0, 2, "ORG")]), doc(s2, [(0, 2, "ORG"), (3, 4, "PER")])),
    ]
    scores = benchmark["entity_scores"](examples)
    # PER: tp 1, fn 1. LOC: fn 1. ORG: tp 1, fp 1. All: tp 2, fp 1, fn 2.
    expected = {
        "PER": (100.0, 50.0, 100 * 2 / 3, 2),
        "LOC": (0.0, 0.0, 0.0, 1),
        "ORG": (50.0, 100.0, 100 * 2 / 3, 1),
        "ALL": (100 * 2 / 3, 50.0, 100 * 4 / 7, 4),
    }
    assert set(scores) == set(expected)
    for label, (p, r, f, n) in expected.items():
        assert scores[label]["p"] == pytest.approx(p) and scores[label]["r"] == pytest.approx(r)
        assert scores[label]["f"] == pytest.approx(f) and scores[label]["n"] == n


def test_benchmark_refuses_a_missing_file(benchmark, tmp_path, capsys):
    with pytest.raises(SystemExit):
        benchmark["main"](["--train", str(tmp_path / "nope.txt"), "--dev", "x", "--eval", "x", "--out", str(tmp_path)])
    assert "no such file" in capsys.readouterr().err


def test_patience_trains_to_convergence_and_scores_the_best_model_on_dev(benchmark, tiny_model_dir, tmp_path):
    configs = benchmark["make_configs"](max_steps=0, eval_frequency=200, patience=1600)
    for config in configs.values():
        assert config["training"]["patience"] == 1600 and config["training"]["max_steps"] == 0
    _, _, out, files = invented_run(tmp_path, 12, 4)
    argv = [*files, "--max-steps", "4", "--patience", "2", "--eval-frequency", "1", "--variants", "baseline"]
    assert benchmark["main"](argv) == 0
    run = json.loads((out / "results.json").read_text(encoding="utf-8"))["runs"]["baseline/seed0"]
    assert run["scored"] == "model-best" and (out / "baseline" / "seed0" / "model-best").is_dir()
    # spaCy's own early stopping: the scored model is the one with the best dev score.
    best = spacy.load(out / "baseline" / "seed0" / "model-best")
    assert best.meta["performance"]["ents_f"] * 100 == pytest.approx(run["scores"]["held"]["ALL"]["f"], abs=1e-6)


def test_benchmark_refuses_no_step_cap_without_patience(benchmark, tmp_path, capsys):
    train = tmp_path / "train.txt"
    write_conll(train, invented_sentences(2))
    with pytest.raises(SystemExit):
        benchmark["main"](
            [
                "--train",
                str(train),
                "--dev",
                str(train),
                "--eval",
                str(train),
                "--out",
                str(tmp_path),
                "--max-steps",
                "0",
            ]
        )
    assert "--max-steps must be > 0" in capsys.readouterr().err


def test_elmo_entering_at_the_input_joins_the_embeddings_before_the_cnn_encoder(benchmark):
    configs = benchmark["make_configs"](max_steps=10, eval_frequency=5, elmo_dropout=0.25, elmo_enters="input")
    base, elmo = configs["baseline"], configs["elmo"]
    assert elmo["nlp"]["pipeline"] == ["elmo", "ner"] and "tok2vec" not in elmo["components"]
    tok2vec = elmo["components"]["ner"]["model"]["tok2vec"]
    standard = base["components"]["tok2vec"]["model"]
    assert tok2vec["@architectures"] == standard["@architectures"] and tok2vec["encode"] == standard["encode"]
    listener = tok2vec["embed"]
    assert listener["@architectures"] == "spacy-elmo.ElmoListener.v2" and listener["width"] == 96
    assert listener["dropout"] == 0.25
    assert listener["tok2vec"] == {**standard["embed"], "width": 96}  # the standard embeddings, kept
    # both: the same, and a second listener (a mix of its own) at the tok2vec's output.
    both = benchmark["make_configs"](max_steps=10, eval_frequency=5, elmo_dropout=0.25, elmo_enters="both")["elmo"]
    outer = both["components"]["ner"]["model"]["tok2vec"]
    assert outer["@architectures"] == "spacy-elmo.ElmoListener.v2" and outer["width"] is None
    assert outer["tok2vec"] == tok2vec and both["nlp"]["pipeline"] == ["elmo", "ner"]
    with pytest.raises(ValueError, match=r"elmo_enters must be one of \('output', 'input', 'both'\); got 'middle'"):
        benchmark["make_configs"](max_steps=10, eval_frequency=5, elmo_enters="middle")


@pytest.mark.parametrize("enters", ["output", "input", "both"])
def test_where_elmo_enters_sets_which_tokens_one_tokens_elmo_layers_reach(benchmark, tiny_model_dir, tmp_path, enters):
    _, _, out, files = invented_run(tmp_path, 12, 4)
    argv = [*files, "--max-steps", "2", "--variants", "elmo", "--elmo-model", str(tiny_model_dir), "--cache-mb", "1"]
    assert benchmark["main"]([*argv, "--elmo-enters", enters]) == 0
    nlp = spacy.load(out / "elmo" / "seed0" / "model-last")
    assert nlp.pipe_names == (["elmo", "tok2vec", "ner"] if enters == "output" else ["elmo", "ner"])
    mixes = [node for node in nlp.get_pipe("ner").model.walk() if node.name == SCALAR_MIX_NAME]
    assert len(mixes) == (2 if enters == "both" else 1)
    doc = nlp.get_pipe("elmo")(nlp.make_doc("Anna Berg moved to Oslo to join Arcwell ."))
    if "tok2vec" in nlp.pipe_names:
        doc = nlp.get_pipe("tok2vec")(doc)
    # The parser's tok2vec: ours, then its projection to the hidden width (64).
    ner_tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec")
    before = ner_tok2vec.predict([doc])
    assert before.shape == (len(doc), 64)
    # Change the ELMo layers of token 2 only. At the output, only token 2 changes; at the
    # input, spaCy's CNN encoder (4 layers of window 1) carries the change to every token
    # up to 4 away, and to no token further away.
    doc._.elmo_layers = doc._.elmo_layers.copy()
    doc._.elmo_layers[:, 2] *= 3.0
    changed = abs(ner_tok2vec.predict([doc]) - before).max(axis=1) > 1e-6
    reach = 0 if enters == "output" else 4
    assert changed.tolist() == [abs(i - 2) <= reach for i in range(len(doc))]


# ---------------------------------------------------------------- static vectors and adaptation
def embedding_of(config) -> dict:
    """The one spacy.MultiHashEmbed.v2 of a benchmark config, wherever ELMo's listener put it."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("@architectures") == "spacy.MultiHashEmbed.v2":
                found.append(node)
            for value in node.values():
                walk(value)

    walk(config["components"])
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("enters", ["output", "input", "both"])
def test_the_vectors_variants_read_static_vectors_and_the_others_do_not(benchmark, enters):
    settings = {"max_steps": 10, "eval_frequency": 5, "elmo_enters": enters}
    configs = benchmark["make_configs"](**settings, vectors="/vectors/folder", adapted_path="/adapted/model")
    assert list(configs) == ["baseline", "elmo", "adapted", "vectors", "elmo+vectors", "adapted+vectors"]
    for name, config in configs.items():
        with_vectors = name.endswith("vectors")
        assert config.interpolate()["initialize"]["vectors"] == ("/vectors/folder" if with_vectors else None), name
        assert embedding_of(config)["include_static_vectors"] is with_vectors, name
    # Each +vectors config is its config without vectors, plus the vectors and nothing else.
    for name, plain in (("vectors", "baseline"), ("elmo+vectors", "elmo"), ("adapted+vectors", "adapted")):
        embedding_of(configs[name])["include_static_vectors"] = False
        configs[name]["paths"]["vectors"] = None
        assert configs[name] == configs[plain], name
    assert configs["adapted"]["components"]["elmo"]["model"]["path"] == "/adapted/model"
    configs["adapted"]["components"]["elmo"]["model"]["path"] = ""
    assert configs["adapted"] == configs["elmo"]
    plain = benchmark["make_configs"](**settings)
    assert list(plain) == ["baseline", "elmo"] and plain["baseline"] == configs["baseline"]


def tiny_vectors(path: Path, width: int = 8) -> Path:
    """A spaCy vectors folder (what `spacy init vectors` writes) for the invented words."""
    import numpy as np

    nlp = spacy.blank("en")
    words = sorted({w for s in invented_sentences(5) for w, _ in s})
    rng = np.random.default_rng(0)
    for word in words:
        nlp.vocab.set_vector(word, rng.standard_normal(width).astype("float32"))
    nlp.to_disk(path)
    return path


def test_the_vectors_and_adapted_variants_train_end_to_end(benchmark, tiny_model_dir, tmp_path, capsys):
    from elmo_core import load_model_folder

    _, _, out, files = invented_run(tmp_path, 40, 4)
    vectors = tiny_vectors(tmp_path / "vectors")
    settings = ["--max-steps", "2", "--elmo-model", str(tiny_model_dir), "--cache-mb", "1", "--vectors", str(vectors)]
    adapting = ["--adapt-max-steps", "3", "--adapt-validate-every", "1", "--adapt-held-out", "0.1"]
    variants = ["--variants", "vectors", "elmo+vectors", "adapted", "adapted+vectors"]
    assert benchmark["main"]([*files, *settings, *adapting, *variants]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["runs"]) == {f"{v}/seed0" for v in variants[1:]}
    for name in ("vectors", "elmo+vectors", "adapted+vectors"):
        nlp = spacy.load(out / name / "seed0" / "model-last")
        words = len({w for s in invented_sentences(5) for w, _ in s})
        assert (nlp.vocab.vectors.n_keys, nlp.vocab.vectors.shape[1]) == (words, 8), name
        assert nlp.vocab["Oslo"].has_vector and embedding_of(nlp.config)["include_static_vectors"], name
    assert spacy.load(out / "adapted" / "seed0" / "model-last").vocab.vectors.n_keys == 0
    # The adaptation: 36 of the 40 sentences kept, 4 held out, at most 3 steps.
    adaptation = results["adaptation"]
    assert adaptation["sentences"] == {"kept": 36, "held_out": 4} and adaptation["steps"] <= 3
    assert adaptation["held_out_ppl"]["before"] is None  # the tiny model has no softmax: a new one is trained
    assert adaptation["held_out_ppl"]["after"] > 1
    kept = (out / "adapt_text" / "kept.txt").read_text(encoding="utf-8").splitlines()
    assert len(kept) == 36 and kept[0] == "Anna Berg moved to Oslo to join Zeno Corp ."
    # A model folder like any other, holding the best-validated weights (trained ones, unless the start was best).
    adapted, tiny = load_model_folder(out / "adapted_elmo"), load_model_folder(tiny_model_dir)
    changed = [n for n, t in adapted.bilm.state_dict().items() if not torch.equal(t, tiny.bilm.state_dict()[n])]
    assert bool(changed) is (adaptation["best_step"] > 0)
    # A second run with the same settings reuses the adapted model.
    capsys.readouterr()
    assert benchmark["main"]([*files, *settings, *adapting, "--variants", "adapted"]) == 0
    assert "from an earlier run" in capsys.readouterr().out


def test_benchmark_refuses_vectors_variants_without_vectors_and_a_folder_that_holds_none(benchmark, tmp_path, capsys):
    _, _, _, files = invented_run(tmp_path, 2, 2)
    with pytest.raises(SystemExit):
        benchmark["main"]([*files, "--variants", "baseline", "elmo+vectors"])
    assert "--variants elmo+vectors need --vectors PATH_OR_PIPELINE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        benchmark["main"]([*files, "--variants", "vectors", "--vectors", str(tmp_path)])
    assert "is a folder without vocab/vectors; make one with: spacy init vectors" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        benchmark["main"]([*files, "--variants", "vectors", "--vectors", "en_no_such_pipeline"])
    assert "neither a folder (spacy init vectors en FILE OUT) nor an installed pipeline" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--max-steps", "0"], ["--adapted-model", "missing"], ["--elmo-model", "missing"]])
def test_a_bad_step_cap_or_model_folder_is_refused_before_out_is_written(benchmark, tmp_path, capsys, bad):
    # These were found only after the data had been converted into OUT/data (and, for a
    # missing --adapted-model, the configs written), the last with a traceback.
    _, _, out, files = invented_run(tmp_path, 2, 2)
    bad = [bad[0], str(tmp_path / bad[1])] if bad[0] != "--max-steps" else bad
    with pytest.raises(SystemExit) as stopped:
        benchmark["main"]([*files, "--variants", "adapted", *bad])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "--max-steps must be > 0" in err if bad[0] == "--max-steps" else f"{bad[0]} {bad[1]} is not a model" in err
    assert not out.exists()


def test_jobs_train_runs_side_by_side_on_one_thread_each_and_a_stopped_table_goes_on(
    benchmark, tiny_model_dir, tmp_path, capsys
):
    train, dev, out, files = invented_run(tmp_path, 12, 4)
    settings = ["--max-steps", "2", "--seeds", "0", "1", "--variants", "baseline", "--elmo-model", str(tiny_model_dir)]
    assert benchmark["main"]([*files, *settings, "--jobs", "2"]) == 0
    records = {seed: json.loads((out / "baseline" / f"seed{seed}" / "run.json").read_text()) for seed in (0, 1)}
    assert {r["threads"] for r in records.values()} == {1}  # each worker on one thread
    assert (out / "baseline" / "seed1" / "train.log").read_text().count("=== training baseline/seed1") == 1
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert {run: r["scores"] for run, r in runs.items()} == {f"baseline/seed{s}": records[s]["scores"] for s in (0, 1)}
    capsys.readouterr()

    # A table stopped after seed 0: --keep-finished keeps it and trains seed 1 only.
    (out / "baseline" / "seed1" / "run.json").unlink()
    assert benchmark["main"]([*files, *settings, "--keep-finished"]) == 0
    printed = capsys.readouterr().out
    assert "baseline/seed0: kept from an earlier invocation" in printed
    assert "=== training baseline/seed1" in printed and "=== training baseline/seed0" not in printed
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert runs["baseline/seed0"] == records[0] and runs["baseline/seed1"]["threads"] >= 1

    # A kept run must have been trained with the same settings.
    with pytest.raises(SystemExit, match=r"seed0/run.json was trained with other settings \(max_steps differ\)"):
        benchmark["main"]([*files, *settings[2:], "--max-steps", "3", "--keep-finished"])
