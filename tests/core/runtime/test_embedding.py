from __future__ import annotations

import numpy as np
import pytest
import torch

from elmo_core import embed_sentences, iter_embeddings, load_model_folder, save_model_folder
from tests.conftest import make_tiny_elmo

S = ["hello", "my", "name", "is", "mud", "."]


# The same sentence always gives the same vectors.
def test_same_sentence_same_vectors_across_calls_and_instances(tmp_path):
    elmo = make_tiny_elmo(dropout=0.5)
    elmo.train()  # embed() must not apply dropout even if the module is left in training mode
    save_model_folder(elmo, tmp_path / "m")
    for layers in ("all", "mix", 0, 1, 2):
        a = embed_sentences(elmo, [S], layers=layers)[0]
        b = embed_sentences(elmo, [S], layers=layers)[0]
        embed_sentences(elmo, [["unrelated", "filler", "words"]] * 8, layers=layers)
        d = embed_sentences(elmo, [S], layers=layers)[0]
        g = embed_sentences(load_model_folder(tmp_path / "m"), [S], layers=layers)[0]
        for other in (b, d, g):
            np.testing.assert_allclose(other, a, atol=1e-6, rtol=0)
    assert elmo.training  # the caller's mode is restored


# Outputs do not depend on the batch size.
def test_batch_size_does_not_change_vectors():
    elmo = make_tiny_elmo()
    sentences = [[f"w{j}" for j in range(1 + k % 12)] for k in range(40)]
    runs = {b: embed_sentences(elmo, sentences, layers="all", batch_size=b) for b in (1, 7, 32, 40)}
    for k, sentence in enumerate(sentences):
        assert runs[1][k].shape == (3, len(sentence), 16)
        for b in (7, 32, 40):
            np.testing.assert_allclose(runs[b][k], runs[1][k], atol=1e-5, rtol=1e-4)


def test_token_budget_does_not_change_vectors():
    elmo = make_tiny_elmo()
    sentences = [[f"w{j}" for j in range(1 + (7 * k) % 23)] for k in range(30)]
    reference = embed_sentences(elmo, sentences, layers="mix", batch_tokens=100_000)
    for budget in (1, 30, 257):
        for got, want in zip(embed_sentences(elmo, sentences, layers="mix", batch_tokens=budget), reference):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


# Empty sentences stay aligned and never crash.
def test_empty_sentences_keep_alignment():
    elmo = make_tiny_elmo()
    without = embed_sentences(elmo, [["a", "b"], ["c"]], layers="all")
    for batch_size in (1, 3):
        out = embed_sentences(elmo, [["a", "b"], [], ["c"]], layers="all", batch_size=batch_size)
        assert len(out) == 3
        assert out[1].shape == (3, 0, 16) and out[1].dtype == np.float32
        np.testing.assert_allclose(out[0], without[0], atol=1e-5)
        np.testing.assert_allclose(out[2], without[1], atol=1e-5)
    only = embed_sentences(elmo, [[]], layers="mix")
    assert len(only) == 1 and only[0].shape == (0, 16) and only[0].dtype == np.float32
    assert embed_sentences(elmo, []) == []


# Every layer selector means one thing; sentinels never index from the end.
def test_layer_selectors():
    elmo = make_tiny_elmo()
    sentence = [["a", "b", "c"]]
    every = embed_sentences(elmo, sentence, layers="all")[0]
    assert every.shape == (3, 3, 16)
    assert embed_sentences(elmo, sentence, layers="mix")[0].shape == (3, 16)
    np.testing.assert_array_equal(embed_sentences(elmo, sentence, layers="top")[0], every[2])
    np.testing.assert_allclose(embed_sentences(elmo, sentence, layers="average")[0], every.mean(0), atol=1e-6)
    for k in (0, 1, 2):
        np.testing.assert_array_equal(embed_sentences(elmo, sentence, layers=k)[0], every[k])
    for bad in (-1, -2, 3, "bogus", 1.0, True):
        with pytest.raises(ValueError, match="'all', 'top', 'average', 'mix' or a layer index 0..2"):
            embed_sentences(elmo, sentence, layers=bad)


# One call of many sentences is cut into bounded batches.
def test_large_calls_are_batched_by_the_token_budget():
    elmo = make_tiny_elmo()
    sizes = []
    elmo.bilm.register_forward_hook(lambda module, args, out: sizes.append(out.activations.shape[1:3]))
    sentences = [["w"] * 10] * 1200
    out = embed_sentences(elmo, sentences, layers="top", batch_tokens=600)
    assert len(out) == 1200
    assert all(rows * (tokens + 2) <= 600 for rows, tokens in sizes)
    assert len(sizes) == 1200 // (600 // 12)


def test_outputs_are_cpu_float32_numpy_without_graph():
    elmo = make_tiny_elmo()
    out = embed_sentences(elmo, [["a"]], layers="mix")
    assert isinstance(out[0], np.ndarray) and out[0].dtype == np.float32 and out[0].flags.c_contiguous


def test_stateful_models_are_refused():
    elmo = make_tiny_elmo(stateful=True)
    with pytest.raises(ValueError, match="stateful"):
        embed_sentences(elmo, [["a"]])


def test_string_instead_of_token_list_is_refused():
    with pytest.raises(TypeError, match="Split raw text into tokens first"):
        embed_sentences(make_tiny_elmo(), ["hello world"])


def test_argument_errors_name_the_argument_the_caller_gave(tmp_path):
    elmo = make_tiny_elmo()
    with pytest.raises(ValueError, match="batch_tokens must be a positive integer; got 0"):
        embed_sentences(elmo, [S], batch_tokens=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer; got 0"):
        embed_sentences(elmo, [S], batch_size=0)
    with pytest.raises(TypeError, match="sentences must be a list of sentences"):
        embed_sentences(elmo, None)
    # window_tokens=0 means "no windows", as on the command line.
    long = [f"w{k}" for k in range(50)]
    np.testing.assert_array_equal(
        embed_sentences(elmo, [long], window_tokens=0)[0], embed_sentences(elmo, [long], window_tokens=None)[0]
    )
    save_model_folder(elmo, tmp_path / "m")
    assert load_model_folder(tmp_path / "m", token_cache_words=0).bilm.token_cache is None
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file; a model folder is a directory"):
        save_model_folder(elmo, tmp_path / "file")


def test_layer_norm_mix_does_not_depend_on_batch_mates_or_batch_size():
    elmo = make_tiny_elmo(do_layer_norm=True, dropout=0.0)
    short = ["the", "bank", "of", "the", "river"]
    mate = ["a", "much", "longer", "sentence", "about", "money", "and", "banks", "with", "many", "words", "."]
    alone = embed_sentences(elmo, [short], layers="mix")[0]
    together = embed_sentences(elmo, [short, mate], layers="mix")[0]
    one_by_one = embed_sentences(elmo, [short, mate], layers="mix", batch_tokens=1)[0]
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(one_by_one, alone, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- one settings object (issue 26)
def test_the_sentences_are_checked_once_per_call(monkeypatch):
    import elmo_core.runtime.embedding as embedding

    calls = []
    check = embedding.check_sentences
    monkeypatch.setattr(embedding, "check_sentences", lambda sentences: calls.append(1) or check(sentences))
    embed_sentences(make_tiny_elmo(), [S, S[:2]])
    assert len(calls) == 1


def test_embed_settings_or_their_fields_as_keywords_give_the_same_vectors():
    from elmo_core import EmbedSettings, iter_embeddings

    elmo = make_tiny_elmo()
    sentences = [S, S[:3], S * 40]
    settings = EmbedSettings(layers="top", batch_size=2, window_tokens=64)
    by_keywords = embed_sentences(elmo, sentences, layers="top", batch_size=2, window_tokens=64)
    by_settings = embed_sentences(elmo, sentences, settings)
    changed = embed_sentences(elmo, sentences, EmbedSettings(layers=0, batch_size=2), layers="top", window_tokens=64)
    iterated = dict(iter_embeddings(elmo, sentences, settings))
    for i, reference in enumerate(by_keywords):
        assert reference.shape == (len(sentences[i]), 16)
        for other in (by_settings[i], changed[i], iterated[i]):
            np.testing.assert_array_equal(other, reference)


def test_embed_settings_are_checked_when_made():
    import torch

    from elmo_core import EmbedSettings

    with pytest.raises(ValueError, match="batch_tokens must be a positive integer; got 0"):
        EmbedSettings(batch_tokens=0)
    with pytest.raises(ValueError, match="autocast_dtype must be torch.bfloat16, torch.float16 or None"):
        EmbedSettings(autocast_dtype=torch.float64)
    with pytest.raises(ValueError, match="window"):
        EmbedSettings(window_tokens=100, window_context=50)
    assert EmbedSettings(window_tokens=0).window_tokens is None  # 0 = read whole, as on the command line
    with pytest.raises(TypeError, match=r"unknown embed settings \['batch'\]; valid: \['layers', 'batch_tokens'"):
        embed_sentences(make_tiny_elmo(), [S], batch=4)
    with pytest.raises(TypeError, match="settings must be an EmbedSettings, e.g. EmbedSettings"):
        embed_sentences(make_tiny_elmo(), [S], {"layers": "top"})


def test_iter_embeddings_runs_the_loop_body_in_the_callers_modes(sentences):
    # A task head trained around the model: the loop body runs in the caller's modes
    # (grad on, inference mode off, the model in training mode), while each batch of the
    # biLM still runs in eval mode under inference mode (the vectors of embed_sentences).
    elmo = make_tiny_elmo(dropout=0.5)
    expected = embed_sentences(elmo, sentences, layers="top")
    elmo.train()
    head = torch.nn.Linear(elmo.output_dim, 2)
    seen = []
    for i, vectors in iter_embeddings(elmo, sentences, layers="top", batch_size=1):
        seen.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled(), elmo.training))
        head.zero_grad()
        head(torch.from_numpy(vectors)).sum().backward()
        assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
        np.testing.assert_allclose(vectors, expected[i], rtol=0, atol=1e-6)
    assert seen == [(True, False, True)] * len(sentences)
    assert elmo.training


def test_iter_embeddings_switches_the_models_modes_once_per_batch_not_per_sentence(monkeypatch):
    """The sentences of a batch come out without another eval()/train() walk over the model."""
    elmo = make_tiny_elmo(dropout=0.5).train()
    switches = []
    real_train = torch.nn.Module.train

    def train(module, mode=True):
        if module is elmo:
            switches.append(mode)
        return real_train(module, mode)

    monkeypatch.setattr(torch.nn.Module, "train", train)
    sentences = [[f"w{i}", "and", f"v{i}"] for i in range(40)]
    out = list(iter_embeddings(elmo, sentences, layers="top", batch_tokens=1000))  # 40 x 5 positions: one batch
    assert len(out) == 40 and switches == [False, True]  # eval() for the batch, then the caller's mode back
    assert elmo.training


def test_iter_embeddings_left_suspended_leaves_the_callers_modes(sentences):
    elmo = make_tiny_elmo(dropout=0.5).train()
    steps = iter_embeddings(elmo, sentences, layers="top", batch_size=1)
    next(steps)
    assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), elmo.training) == (True, False, True)
    steps.close()
    assert elmo.training
