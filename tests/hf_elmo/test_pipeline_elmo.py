from __future__ import annotations

import pytest
import torch
from transformers import pipeline

from elmo_core import embed_sentences
from elmo_core.files.model_folder import default_model_dir
from elmo_core.runtime.batching import batches_by_token_budget
from hf_elmo import ElmoFeatureExtractionPipeline

TASK = "elmo-feature-extraction"  # registered by `import hf_elmo`

TEXTS = ["Hello world.", "Don't stop-me now, the river bank is near!", "A", "Two words"]


@pytest.fixture(autouse=True)
def _needs_spacy():
    pytest.importorskip("spacy_elmo.tokenization")


def alone(model, tokenizer, text: str) -> torch.Tensor:
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]


def test_transformers_feature_extraction_pipeline_takes_raw_strings_in_batches(tiny_hf_model, tiny_tokenizer):
    extractor = pipeline("feature-extraction", model=tiny_hf_model, tokenizer=tiny_tokenizer)
    for batch_size in (1, 3):
        results = extractor(TEXTS, batch_size=batch_size)
        assert len(results) == len(TEXTS)
        for text, result in zip(TEXTS, results):
            expected = alone(tiny_hf_model, tiny_tokenizer, text)
            got = torch.tensor(result[0])
            n = expected.shape[0]
            torch.testing.assert_close(got[:n], expected, atol=1e-5, rtol=1e-4)
            if got.shape[0] > n:  # transformers' pipeline keeps the batch padding: zero vectors
                assert got[n:].abs().max() == 0


def test_elmo_pipeline_returns_each_texts_own_tokens_whatever_the_batch_size(
    saved_model_dir, tiny_hf_model, tiny_tokenizer
):
    extractor = pipeline(TASK, model=saved_model_dir)
    assert isinstance(extractor, ElmoFeatureExtractionPipeline)
    by_size = {b: extractor(TEXTS, batch_size=b) for b in (1, 4)}
    for k, text in enumerate(TEXTS):
        expected = alone(tiny_hf_model, tiny_tokenizer, text)
        for results in by_size.values():
            got = torch.tensor(results[k])
            assert got.shape == (1, *expected.shape)
            torch.testing.assert_close(got[0], expected, atol=1e-5, rtol=1e-4)
    as_tensors = extractor(TEXTS[:2], batch_size=2, return_tensors=True)
    assert [t.shape[1] for t in as_tensors] == [3, len(tiny_tokenizer.tokenize(TEXTS[1]))]


def test_import_hf_elmo_registers_the_elmo_pipeline_with_the_default_model():
    from transformers.pipelines import PIPELINE_REGISTRY

    task, registered, _ = PIPELINE_REGISTRY.check_task(TASK)
    assert registered["impl"] is ElmoFeatureExtractionPipeline and registered["type"] == "text"
    assert registered["default"] == {"model": (str(default_model_dir()), None)}
    extractor = pipeline(TASK)
    assert isinstance(extractor, ElmoFeatureExtractionPipeline) and extractor.batch_tokens == 4096
    assert len(extractor("Hello world .")[0]) == 3


# Issue 8: a list of strings is batched by length and a token budget, in input order.
def test_elmo_pipeline_batches_by_length_and_token_budget(saved_model_dir, tiny_hf_model, tiny_tokenizer):
    texts = [" ".join(f"w{j}" for j in range(1 + (7 * k) % 13)) for k in range(20)]
    lengths = [len(tiny_tokenizer.tokenize(t)) for t in texts]
    calls: list[tuple[int, ...]] = []
    for budget, cap in ((40, None), (4096, None), (4096, 3)):
        extractor = pipeline(TASK, model=saved_model_dir, batch_tokens=budget)
        calls.clear()
        hook = extractor.model.register_forward_hook(lambda m, args, kwargs_out: calls.append(0))
        kwargs = {} if cap is None else {"batch_size": cap}
        results = extractor(texts, **kwargs)
        hook.remove()
        assert len(calls) == len(batches_by_token_budget(lengths, budget, max_batch_size=cap))
        for text, n, result in zip(texts, lengths, results):  # input order, own tokens only
            got = torch.tensor(result[0])
            assert got.shape[0] == n
            torch.testing.assert_close(got, alone(tiny_hf_model, tiny_tokenizer, text), atol=1e-5, rtol=1e-4)
    # A cap given when the pipeline is made counts too, and tuples are lists.
    extractor = pipeline(TASK, model=saved_model_dir, batch_size=2)
    calls.clear()
    hook = extractor.model.register_forward_hook(lambda m, args, kwargs_out: calls.append(0))
    assert len(extractor(tuple(texts[:6]))) == 6
    hook.remove()
    assert len(calls) == 3
    with pytest.raises(ValueError, match="batch_tokens must be a positive integer"):
        pipeline(TASK, model=saved_model_dir, batch_tokens=0)


def test_pipeline_results_match_elmo_embed_of_the_same_lines(saved_model_dir, tmp_path):
    """The pipeline and `elmo embed --tokenize --layers mix` (README "Big corpora") agree."""
    import h5py
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app

    extractor = pipeline(TASK, model=saved_model_dir)
    results = extractor(TEXTS, batch_size=2)
    (tmp_path / "lines.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    done = CliRunner().invoke(
        app,
        [
            "embed",
            str(tmp_path / "lines.txt"),
            str(tmp_path / "out.hdf5"),
            "--model",
            str(saved_model_dir),
            "--tokenize",
            "--layers",
            "mix",
            "--no-progress",
        ],
    )
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        for i, (text, result) in enumerate(zip(TEXTS, results)):
            assert list(f[str(i)].attrs["tokens"]) == extractor.tokenizer.tokenize(text)
            torch.testing.assert_close(torch.tensor(result[0]), torch.from_numpy(f[str(i)][()]), atol=1e-5, rtol=0)


def test_every_face_gives_a_2501_token_line_the_same_vectors(tmp_path, tiny_tokenizer):
    """R45: a line past `window_tokens` is windowed as the core does, in every face (mix included)."""
    import h5py
    from transformers import AutoModel, AutoTokenizer
    from typer.testing import CliRunner

    from elmo_core import load_model_folder
    from elmo_core.apps.cli import app

    from .conftest import make_tiny_hf_model

    model = make_tiny_hf_model()
    with torch.no_grad():
        model.scalar_mixes[0].scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.scalar_mixes[0].gamma.fill_(1.5)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    assert json_config(folder)["window_tokens"] == 1024 and json_config(folder)["window_context"] is None
    words = ["The", "river", "bank", "was", "steep", ",", "and", "Ada", "walked", "on"]
    text = " ".join(words[i % len(words)] for i in range(2500)) + " ."
    tokens = tiny_tokenizer.tokenize(text)
    assert len(tokens) == 2501
    expected = embed_sentences(load_model_folder(folder, dropout=0.0), [tokens], layers="mix")[0]  # [2501, 16]
    expected = torch.from_numpy(expected)

    def same(got: torch.Tensor) -> None:
        torch.testing.assert_close(got.reshape(expected.shape), expected, atol=1e-5, rtol=0)

    same(pipeline(TASK, model=folder)(text, return_tensors=True)[0])
    same(pipeline("feature-extraction", model=str(folder))(text, return_tensors=True)[0])
    auto_model, auto_tokenizer = AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        batched = auto_model(**auto_tokenizer([text, "a short one"], padding=True, return_tensors="pt"))
    same(batched.last_hidden_state[0])
    assert batched.last_hidden_state[1, 3:].abs().max() == 0  # the short row's padding stays zero
    (tmp_path / "line.txt").write_text(text + "\n", encoding="utf-8")
    args = ["embed", str(tmp_path / "line.txt"), str(tmp_path / "out.h5"), "--model", str(folder)]
    done = CliRunner().invoke(app, [*args, "--tokenize", "--layers", "mix", "--no-progress"])
    assert done.exit_code == 0, done.output
    with h5py.File(tmp_path / "out.h5", "r") as f:
        same(torch.from_numpy(f["0"][()]))
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(folder)}})
    doc = nlp(text)
    assert [t.text for t in doc] == tokens
    same(torch.from_numpy(doc.tensor))
    # Windows matter here: read whole, the vectors differ (so the agreement above is the windows').
    whole = AutoModel.from_pretrained(folder, window_tokens=None)
    with torch.no_grad():
        read_whole = whole(**auto_tokenizer(text, return_tensors="pt")).last_hidden_state[0]
    assert (read_whole - expected).abs().max() > 1e-2


def json_config(folder) -> dict:
    import json

    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def test_an_empty_string_gives_one_row_of_zero_tokens_of_the_full_width(saved_model_dir):
    """[1, 0, hidden], as a tensor and as lists (which alone would read as [1, 0]), alone or in a batch."""
    import json
    import pickle

    import numpy as np

    extractor = pipeline(TASK, model=saved_model_dir)
    alone = extractor("")
    assert np.asarray(alone).shape == (1, 0, 16) and alone == [[]] and json.dumps(alone) == "[[]]"
    assert extractor("", return_tensors=True).shape == (1, 0, 16)
    empty, two = extractor(["", "two words"])
    assert np.asarray(empty).shape == (1, 0, 16) and np.asarray(two).shape == (1, 2, 16)
    assert np.asarray(pickle.loads(pickle.dumps(empty))).shape == (1, 0, 16)
    np.testing.assert_array_equal(np.asarray(two), np.array(list(two), dtype=np.float32))
    assert np.asarray(pipeline(TASK)("")).shape == (1, 0, 256)  # the default model


def test_no_texts_give_an_empty_list(tiny_hf_model, tiny_tokenizer):
    extractor = pipeline(TASK, model=tiny_hf_model, tokenizer=tiny_tokenizer)
    assert extractor([]) == [] and extractor(()) == []
    assert extractor([], return_tensors=True) == []
