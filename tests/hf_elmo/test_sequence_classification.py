"""ElmoForSequenceClassification: the mix pooled over real tokens, transformers' loss rules, Trainer, pipeline."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    pipeline,
)

from hf_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoTokenizer

from ..conftest import make_tiny_elmo
from .conftest import TOKENS, batch, run_script


def make_classifier(num_labels: int = 2, seed: int = 0, **settings) -> ElmoForSequenceClassification:
    """A classifier over `make_tiny_elmo(seed)`'s biLM and mix, its head seeded."""
    settings = {"dropout": 0.0, **settings}
    core = make_tiny_elmo(seed, dropout=0.0)
    torch.manual_seed(seed)
    model = ElmoForSequenceClassification(ElmoConfig.from_options(core.options, num_labels=num_labels, **settings))
    model.elmo.load_state_dict(core.state_dict())
    return model.eval()


@pytest.mark.parametrize("pooling", ["mean", "max", "first"])
def test_the_pooling_reads_only_each_texts_real_tokens(tiny_tokenizer, pooling):
    model = make_classifier(classifier_pooling=pooling)
    inputs = batch(tiny_tokenizer)
    with torch.no_grad():
        logits = model(**inputs).logits  # [3, 2]
        vectors = model.elmo(**inputs).last_hidden_state
        for row, sentence in enumerate(TOKENS):
            own = vectors[row, : len(sentence)]  # the real tokens of this row
            pooled = {"mean": own.mean(0), "max": own.amax(0), "first": own[0]}[pooling]
            torch.testing.assert_close(logits[row], model.classifier(pooled), atol=1e-6, rtol=0)
            alone = model(**batch(tiny_tokenizer, [sentence])).logits[0]  # no batch mates, no padding
            torch.testing.assert_close(logits[row], alone, atol=1e-6, rtol=0)


def test_a_text_without_tokens_pools_to_zeros_and_a_bad_pooling_is_refused(tiny_tokenizer):
    model = make_classifier()
    inputs = tiny_tokenizer([[], ["a"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits[0], model.classifier.bias, atol=0, rtol=0)
    with pytest.raises(ValueError, match="classifier_pooling must be one of"):
        ElmoConfig(classifier_pooling="cls")
    with pytest.raises(ValueError, match="keep_sentence_boundaries=False"):
        make_classifier(keep_sentence_boundaries=True)


def test_the_loss_follows_transformers_problem_type_rules(tiny_tokenizer):
    inputs = batch(tiny_tokenizer)
    single = make_classifier(num_labels=3)
    out = single(**inputs, labels=torch.tensor([0, 2, 1]))
    assert single.config.problem_type == "single_label_classification"
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 2, 1])))
    multi = make_classifier(num_labels=3)
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    out = multi(**inputs, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, targets))
    regression = make_classifier(num_labels=1)
    scores = torch.tensor([0.5, -1.0, 2.0])
    out = regression(**inputs, labels=scores)
    assert regression.config.problem_type == "regression" and out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), scores))


POSITIVE = ["good film", "a good day", "good good", "very good", "good"]
NEGATIVE = ["bad film", "a bad day", "bad bad", "very bad", "bad"]


def test_trains_with_trainer_on_a_tiny_labelled_set_and_fits_it(tmp_path, tiny_tokenizer, caplog):
    model = make_classifier(id2label={0: "NEG", 1: "POS"}, label2id={"NEG": 0, "POS": 1})
    words = [t.split() for t in NEGATIVE + POSITIVE]
    labels = [0] * len(NEGATIVE) + [1] * len(POSITIVE)
    features = [{**tiny_tokenizer(w, is_split_into_words=True), "labels": label} for w, label in zip(words, labels)]
    collate = DataCollatorWithPadding(tiny_tokenizer)
    everything = collate(features)

    def loss() -> float:
        with torch.no_grad():
            return float(model.eval()(**everything).loss)

    before = loss()
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=10,
        num_train_epochs=60,
        learning_rate=0.1,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(
            model=model, args=args, train_dataset=features, data_collator=collate, processing_class=tiny_tokenizer
        )
        trainer.train()
    assert not [r for r in caplog.records if "PAD/BOS/EOS" in r.getMessage()]  # the config agrees with the tokenizer
    assert loss() < before / 2
    with torch.no_grad():
        predicted = model(**everything).logits.argmax(-1).tolist()
    assert predicted == labels  # the tiny set is fitted
    assert not any(p.requires_grad for p in model.elmo.bilm.parameters())  # the biLM stayed frozen


def test_text_classification_pipeline_gives_the_labels_and_scores(tiny_tokenizer):
    pytest.importorskip("spacy")  # raw text
    model = make_classifier(num_labels=3, id2label={0: "A", 1: "B", 2: "C"}, label2id={"A": 0, "B": 1, "C": 2})
    classify = pipeline("text-classification", model=model, tokenizer=tiny_tokenizer, top_k=None)
    texts = ["The river bank.", "Hello world!"]
    got = classify(texts)
    with torch.no_grad():
        probabilities = model(**tiny_tokenizer(texts, padding=True, return_tensors="pt")).logits.softmax(-1)
    for row, scores in zip(probabilities, got):
        assert {d["label"]: d["score"] for d in scores} == pytest.approx(dict(zip("ABC", row.tolist())), abs=1e-6)


def test_auto_classes_build_it_and_a_base_models_folder_starts_one(tmp_path, saved_model_dir):
    config = AutoConfig.from_pretrained(saved_model_dir)
    assert config.pad_token_id == 0 == ElmoTokenizer.from_pretrained(saved_model_dir).pad_token_id
    classifier = AutoModelForSequenceClassification.from_pretrained(saved_model_dir, num_labels=4)
    assert type(classifier) is ElmoForSequenceClassification and classifier.classifier.out_features == 4
    trainable = sorted(n for n, p in classifier.named_parameters() if p.requires_grad)
    assert trainable == [
        "classifier.bias",
        "classifier.weight",
        "elmo.scalar_mixes.0.gamma",
        "elmo.scalar_mixes.0.scalar_weights",
    ]


# Run where elmo-bilm is not installed (conftest.WITHOUT_ELMO_BILM).
ISOLATED = r"""
import json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

folder, out, words = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
inputs = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(**inputs).logits
torch.save({
    "class": type(model).__name__, "module": type(model).__module__, "logits": logits,
    "decoded": tokenizer.batch_decode(inputs["input_ids"], skip_special_tokens=True),
    "imported": sorted(m for m in ("elmo_core", "hf_elmo") if m in sys.modules),
}, out)
"""


def test_a_saved_classifier_loads_where_elmo_bilm_is_not_installed(tmp_path, tiny_tokenizer, hf_env):
    model = make_classifier(num_labels=3, classifier_pooling="max")
    with torch.no_grad():
        model.classifier.bias.add_(0.25)  # a trained-looking head, saved and read back
    folder = tmp_path / "classifier"
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSequenceClassification"] == "modeling_elmo.ElmoForSequenceClassification"
    out = tmp_path / "out.pt"
    result = run_script(ISOLATED, [folder, out, json.dumps(TOKENS)], hf_env, tmp_path, without_elmo_bilm=True)
    assert result.returncode == 0, result.stderr[-3000:]
    got = torch.load(out)
    assert got["class"] == "ElmoForSequenceClassification" and got["module"].startswith("transformers_modules.")
    assert got["imported"] == []
    assert got["decoded"] == [" ".join(s) for s in TOKENS]
    with torch.no_grad():
        expected = model(**batch(tiny_tokenizer)).logits
    torch.testing.assert_close(got["logits"], expected, atol=1e-6, rtol=0)
