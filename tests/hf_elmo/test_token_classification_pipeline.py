"""transformers' own `pipeline("token-classification")` with `ElmoForTokenClassification`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import pipeline

from hf_elmo import ElmoConfig, ElmoForTokenClassification, ElmoTokenizer

from ..conftest import make_tiny_elmo, missing_data
from .conftest import WIKIGOLD, read_conll, run_script

LABELS = {0: "O", 1: "B-PER", 2: "I-PER"}
TEXTS = [
    "Ada Lovelace met Charles Babbage in London.",
    "  Grace   Hopper's compiler, 1952!",
    "naïve café 😀 in Zürich",
    "x",
]
STRATEGIES = ["none", "simple", "first", "average", "max"]


def make_tagger(seed: int = 0) -> ElmoForTokenClassification:
    """A tiny tagger whose random head predicts all three labels somewhere in TEXTS."""
    core = make_tiny_elmo(seed, dropout=0.0)
    config = ElmoConfig.from_options(
        core.options, dropout=0.0, num_labels=3, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
    )
    tagger = ElmoForTokenClassification(config)
    tagger.elmo.load_state_dict(core.state_dict())
    torch.manual_seed(seed)
    with torch.no_grad():
        tagger.classifier.weight.normal_(0.0, 3.0)
    return tagger.eval()


def tagger_pipeline(tagger, tokenizer, strategy: str):
    return pipeline(
        "token-classification", model=tagger, tokenizer=tokenizer, aggregation_strategy=strategy, ignore_labels=[]
    )


def plain(results):
    """Pipeline results as plain, rounded values (numpy floats and ints -> Python)."""
    if isinstance(results, list):
        return [plain(r) for r in results]
    return {
        k: round(float(v), 5) if k == "score" else (int(v) if k in ("start", "end", "index") else v)
        for k, v in results.items()
    }


@pytest.fixture
def tagger() -> ElmoForTokenClassification:
    return make_tagger()


@pytest.fixture
def tokenizer(tagger) -> ElmoTokenizer:
    pytest.importorskip("spacy")
    return ElmoTokenizer.from_options(tagger.config.to_options())


def test_none_gives_one_result_per_token_at_its_characters_with_the_models_scores(tagger, tokenizer):
    pipe = tagger_pipeline(tagger, tokenizer, "none")
    for text in TEXTS:
        results = pipe(text)
        tokens, offsets = tokenizer._split_with_offsets(text)
        assert [r["word"] for r in results] == tokens
        assert [(r["start"], r["end"]) for r in results] == offsets
        assert all(text[r["start"] : r["end"]] == r["word"] for r in results)
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            probs = torch.softmax(tagger(**enc).logits[0], dim=-1).numpy()
        assert [r["entity"] for r in results] == [LABELS[int(i)] for i in probs.argmax(-1)]
        np.testing.assert_allclose([r["score"] for r in results], probs.max(-1), rtol=1e-5, atol=1e-6)
        assert [r["index"] for r in results] == list(range(len(tokens)))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_aggregation_strategy_points_at_the_input_characters(tagger, tokenizer, strategy):
    pipe = tagger_pipeline(tagger, tokenizer, strategy)
    labels_seen = set()
    for text in TEXTS:
        results = pipe(text)
        tokens, offsets = tokenizer._split_with_offsets(text)
        starts, ends = {a for a, _ in offsets}, {b for _, b in offsets}
        assert results, text
        for r in results:
            span = text[r["start"] : r["end"]]
            # Entities start and end on token boundaries; their words are the tokens inside.
            assert r["start"] in starts and r["end"] in ends, (text, r)
            inside = [t for t, (a, b) in zip(tokens, offsets) if r["start"] <= a and b <= r["end"]]
            assert r["word"] == " ".join(inside) and "".join(inside) == "".join(span.split()), (text, r)
            labels_seen.add(r.get("entity", r.get("entity_group")))
        if strategy != "simple" and strategy != "none":
            # Word-level strategies: every token is a whole word, so nothing is merged into a word.
            assert sum(len(r["word"].split()) for r in results) == len(tokens)
    assert len(labels_seen) >= 2  # the test sees more than one label


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_batched_calls_give_what_single_calls_give(tagger, tokenizer, strategy):
    pipe = tagger_pipeline(tagger, tokenizer, strategy)
    single = [plain(pipe(text)) for text in TEXTS]
    assert plain(pipe(TEXTS, batch_size=3)) == single
    assert plain(pipe(TEXTS[::-1], batch_size=4)) == single[::-1]


def test_pretokenized_input_points_at_the_joined_words(tagger, tokenizer):
    words = ["Ada", "Lovelace", "met", "Babbage", "."]
    (results,) = tagger_pipeline(tagger, tokenizer, "none")(words, is_split_into_words=True)  # one sentence
    sentence = " ".join(words)
    assert [sentence[r["start"] : r["end"]] for r in results] == words == [r["word"] for r in results]


FRESH = r"""
import json, sys
from transformers import pipeline
folder, texts, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def plain(entity):
    return {
        k: (round(float(v), 5) if k == "score" else (int(v) if k in ("start", "end", "index") else v))
        for k, v in entity.items()
    }

results = {}
for strategy in ("none", "simple", "first", "average", "max"):
    pipe = pipeline("token-classification", model=folder, trust_remote_code=True,
                    aggregation_strategy=strategy, ignore_labels=[])
    results[strategy] = [[plain(r) for r in pipe(t)] for t in texts]
    results[strategy + "-batched"] = [[plain(r) for r in rs] for rs in pipe(texts, batch_size=3)]
results["imported"] = sorted(m for m in ("elmo_core", "hf_elmo", "spacy_elmo") if m in sys.modules)
json.dump(results, open(out, "w"))
"""


@pytest.mark.parametrize("without_elmo_bilm", [False, True], ids=["hf_elmo-never-imported", "elmo-bilm-not-installed"])
def test_saved_tagger_folder_runs_the_pipeline_in_a_fresh_process(
    tmp_path: Path, tagger, tokenizer, hf_env, without_elmo_bilm
):
    pytest.importorskip("spacy")  # raw text
    folder = tmp_path / "tagger"
    tagger.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    out = tmp_path / "out.json"
    result = run_script(FRESH, [folder, json.dumps(TEXTS), out], hf_env, tmp_path, without_elmo_bilm=without_elmo_bilm)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(out.read_text())
    imported = got.pop("imported")
    if without_elmo_bilm:
        assert imported == []
    else:  # the raw-text rules come from spacy_elmo's `spacy-en` plug-in, which imports the core
        assert imported == ["elmo_core", "spacy_elmo"]
    for strategy in STRATEGIES:
        expected = [plain(tagger_pipeline(tagger, tokenizer, strategy)(t)) for t in TEXTS]
        assert got[strategy] == expected, strategy
        assert got[strategy + "-batched"] == expected, strategy


def gold_spans(sentence: list[tuple[str, str]]) -> set[tuple[int, int, str]]:
    """(start, end, type) of each gold entity in `" ".join(words)` (IO or BIO tags)."""
    spans, position, open_span = set(), 0, None
    for word, tag in sentence:
        start, end = position, position + len(word)
        kind = tag.split("-", 1)[-1] if tag != "O" else None
        if open_span and (kind != open_span[2] or tag.startswith("B-")):
            spans.add(tuple(open_span))
            open_span = None
        if kind and open_span:
            open_span[1] = end
        elif kind:
            open_span = [start, end, kind]
        position = end + 1
    if open_span:
        spans.add(tuple(open_span))
    return spans


def test_tagger_fine_tuned_on_wikigold_finds_entities_at_their_characters():
    if not WIKIGOLD.is_file():
        pytest.skip(missing_data("ner/wikigold/wikigold.conll.txt"))
    pytest.importorskip("spacy")
    from transformers import AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification

    from elmo_core.files.model_folder import default_model_dir

    sentences = read_conll(WIKIGOLD, limit=600)
    train, held_out = sentences[:500], sentences[500:]
    labels = sorted({tag for sentence in sentences for _, tag in sentence})
    label2id = {label: i for i, label in enumerate(labels)}
    model = AutoModelForTokenClassification.from_pretrained(
        default_model_dir(), num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id
    )
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    collate = DataCollatorForTokenClassification(tokenizer)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(50):  # 50 steps of 16 sentences
        picked = torch.randint(len(train), (16,), generator=generator).tolist()
        features = [
            {
                **tokenizer([w for w, _ in train[i]], is_split_into_words=True),
                "labels": [label2id[t] for _, t in train[i]],
            }
            for i in picked
        ]
        loss = model(**collate(features)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()

    texts = [" ".join(w for w, _ in sentence) for sentence in held_out]
    results = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple")(
        texts, batch_size=16
    )
    found, correct = 0, 0
    for text, sentence, entities in zip(texts, held_out, results):
        gold = gold_spans(sentence)
        for entity in entities:
            span = text[entity["start"] : entity["end"]]
            # The entity's text is the input's characters (its tokens joined by spaces).
            assert span and span == span.strip(), (text, entity)
            assert entity["word"].replace(" ", "") == span.replace(" ", ""), (text, entity)
            found += 1
            correct += (entity["start"], entity["end"], entity["entity_group"]) in gold
    assert found >= 50 and correct / found > 0.3, (found, correct)
