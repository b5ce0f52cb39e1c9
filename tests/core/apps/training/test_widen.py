"""Net2WiderNet for the biLM (`elmo_core.apps.training.widen`, `elmo widen`): the wider model
computes the narrower one's function, layer by layer and in its perplexity."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from typer.testing import CliRunner

from elmo_core.apps.cli import app
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel, load_language_model, save_language_model
from elmo_core.apps.training.perplexity import evaluate
from elmo_core.apps.training.widen import widen_language_model
from elmo_core.model.errors import ElmoError
from tests.core.apps.training.conftest import make_corpus, make_lm, make_lm_options, write_lines

runner = CliRunner()


def trained_lm(vocab, corpus, steps=3):
    """A tiny model a few Adam steps away from its random start (weights of different sizes)."""
    lm = make_lm(vocab, seed=3)
    optimizer = torch.optim.Adam(lm.parameters(), lr=0.01)
    batch = make_batch(corpus[:16], vocab)
    for _ in range(steps):
        optimizer.zero_grad()
        lm(batch.char_ids, batch.mask, batch.targets).loss.backward()
        optimizer.step()
    return lm.eval()


def old_feature_index(new_width: int, old_width: int) -> torch.Tensor:
    """Where each feature of a widened layer [forward half, backward half] comes from."""
    half = torch.arange(new_width) % old_width
    return torch.cat([half, old_width + half])


@pytest.mark.parametrize(("dim", "projection_dim"), [(64, 64), (96, 16), (32, 48)])
def test_every_layer_of_the_wider_model_is_the_old_one_repeated(vocab, corpus, dim, projection_dim):
    lm = trained_lm(vocab, corpus)
    wide = widen_language_model(lm, dim=dim, projection_dim=projection_dim, noise=0.0).eval()
    assert (wide.options.lstm.dim, wide.options.lstm.projection_dim) == (dim, projection_dim)
    batch = make_batch(corpus[20:28], vocab)
    with torch.no_grad():
        old = lm.bilm(batch.char_ids, batch.mask).activations  # [layers, batch, tokens, 2 * 16]
        new = wide.bilm(batch.char_ids, batch.mask).activations  # [layers, batch, tokens, 2 * projection_dim]
    assert new.shape == (*old.shape[:-1], 2 * projection_dim)
    torch.testing.assert_close(new, old[..., old_feature_index(projection_dim, 16)], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        old_out, new_out = (
            lm(batch.char_ids, batch.mask, batch.targets),
            wide(batch.char_ids, batch.mask, batch.targets),
        )
    torch.testing.assert_close(new_out.forward_loss, old_out.forward_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(new_out.backward_loss, old_out.backward_loss, rtol=1e-6, atol=0)


def test_noise_sets_the_extra_copies_apart_and_keeps_the_first(vocab, corpus):
    lm = trained_lm(vocab, corpus)
    exact = widen_language_model(lm, dim=64, projection_dim=64, noise=0.0)
    noisy = widen_language_model(lm, dim=64, projection_dim=64, noise=0.01, seed=1)
    name = "bilm.forward_layers.layers.0.input_linear.weight"  # [4 * 64, 64]: gate rows i, j, f, o
    a, b = exact.state_dict()[name], noisy.state_dict()[name]
    first = torch.cat([block * 64 + torch.arange(32) for block in range(4)])  # each block's first copies
    extra = torch.cat([block * 64 + 32 + torch.arange(32) for block in range(4)])
    assert torch.equal(a[first], b[first])
    spread = (b[extra] - a[extra]).std() / lm.state_dict()[name].std()
    assert 0.007 < float(spread) < 0.013  # the noise asked for: 1% of the weight's std
    assert torch.equal(b, widen_language_model(lm, dim=64, projection_dim=64, noise=0.01, seed=1).state_dict()[name])
    sentences = make_corpus(30, seed=5)
    before = evaluate(lm, sentences, vocab).average
    after = evaluate(noisy, sentences, vocab).average
    assert after == pytest.approx(before, rel=0.02) and after != before


def test_widening_refuses_what_it_cannot_keep(vocab):
    lm = make_lm(vocab)
    with pytest.raises(
        ValueError, match=r"the LSTM cell size \(--lstm-dim\) must be a whole multiple of the model's 32"
    ):
        widen_language_model(lm, dim=48, projection_dim=64)
    with pytest.raises(
        ValueError, match=r"the projection \(--projection-dim\) must be a whole multiple of the model's 16"
    ):
        widen_language_model(lm, dim=64, projection_dim=8)
    with pytest.raises(ValueError, match="a projection of 32 equals the char CNN's 32 filters"):
        widen_language_model(lm, dim=64, projection_dim=32)
    with pytest.raises(ValueError, match="noise is a relative std >= 0; got -1"):
        widen_language_model(lm, dim=64, projection_dim=64, noise=-1.0)
    options = make_lm_options()
    unprojected = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, projection_dim=32))
    with pytest.raises(ValueError, match="the char CNN's 32 filters are the token embedding itself"):
        widen_language_model(BiLMLanguageModel(unprojected, len(vocab)), dim=64, projection_dim=64)


def test_elmo_widen_writes_a_folder_with_the_same_perplexity_that_trains_on(tmp_path, vocab, corpus, valid_file):
    save_language_model(trained_lm(vocab, corpus), vocab, tmp_path / "small")
    args = ["widen", "--model", tmp_path / "small", "--out", tmp_path / "wide", "--lstm-dim", 64]
    result = runner.invoke(app, [str(a) for a in [*args, "--projection-dim", 64, "--noise", 0]])
    assert result.exit_code == 0, result.output
    assert "LSTM 32/16 -> 64/64" in result.output
    wide, wide_vocab, _ = load_language_model(tmp_path / "wide")
    small, _, _ = load_language_model(tmp_path / "small")
    assert wide_vocab == vocab and wide.options.lstm.dim == 64
    sentences = make_corpus(30, seed=6)
    assert evaluate(wide, sentences, vocab).average == pytest.approx(evaluate(small, sentences, vocab).average, 1e-6)
    train = write_lines(tmp_path / "train.txt", corpus)
    more = ["train", "--model", tmp_path / "wide", "--out", tmp_path / "run", "--train", train, "--valid", valid_file]
    result = runner.invoke(app, [str(a) for a in [*more, "--pretokenized", "--max-steps", 2, "--no-progress"]])
    assert result.exit_code == 0, result.output
    assert load_language_model(tmp_path / "run")[0].options.lstm.projection_dim == 64


def test_elmo_widen_refuses_to_write_over_its_model_and_bad_sizes(tmp_path, vocab, corpus):
    save_language_model(trained_lm(vocab, corpus), vocab, tmp_path / "small")
    before = {p.name: p.read_bytes() for p in (tmp_path / "small").iterdir()}
    sizes = ["--lstm-dim", 64, "--projection-dim", 64]
    result = runner.invoke(
        app, [str(a) for a in ["widen", "--model", tmp_path / "small", "--out", tmp_path / "small", *sizes]]
    )
    assert isinstance(result.exception, ElmoError)
    assert "where this command writes 'config.json': it would destroy the input" in str(result.exception)
    assert {p.name: p.read_bytes() for p in (tmp_path / "small").iterdir()} == before
    odd = ["widen", "--model", tmp_path / "small", "--out", tmp_path / "w", "--lstm-dim", 40, "--projection-dim", 64]
    result = runner.invoke(app, [str(a) for a in odd])
    assert isinstance(result.exception, ElmoError)
    expected = "the LSTM cell size (--lstm-dim) must be a whole multiple of the model's 32 to widen it; got 40."
    assert str(result.exception) == expected
    assert not (tmp_path / "w").exists()
