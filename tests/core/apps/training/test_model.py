from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from elmo_core import BiLMOutput, load_model_folder, save_model_folder
from elmo_core.apps.training import model as model_module
from elmo_core.apps.training.config import TrainConfig
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel, default_cutoffs, load_language_model, save_language_model
from elmo_core.apps.training.trainer import Trainer
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model.errors import WeightFileError
from tests.core.apps.training.conftest import make_lm, make_lm_options


def zero_softmax(lm: BiLMLanguageModel) -> None:
    with torch.no_grad():
        for p in lm.softmax.parameters():
            p.zero_()


def test_lm_output_counts_one_prediction_per_word_and_boundary(vocab):
    lm = make_lm(vocab).eval()
    batch = make_batch([["the", "cat"], ["a", "dog", "ran"]], vocab)
    out = lm(batch.char_ids, batch.mask, batch.targets)
    assert out.forward_tokens == out.backward_tokens == 2 + 3 + 2
    assert out.forward_loss.shape == () and out.forward_loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, 0.5 * (out.forward_loss + out.backward_loss), rtol=0, atol=0)


@pytest.mark.parametrize("recurrence", ["step", "fused", "paired"])
def test_bf16_autocast_trains_on_the_cpu_with_every_recurrence(vocab, recurrence):
    # The fused and paired paths return float32 on the CPU (torch.lstm is not autocast
    # there), which torch's adaptive softmax could not mix with its bf16 cluster outputs.
    options = make_lm_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    torch.manual_seed(0)
    lm = BiLMLanguageModel(options, len(vocab), cutoffs=[8], recurrence=recurrence).eval()
    batch = make_batch([["the", "cat", "sat"], ["a", "dog", "ran", "home"], ["a"]], vocab)
    assert (batch.targets >= 8).any() and (batch.targets < 8).any()  # the head and the tail cluster

    def loss_and_grads(autocast: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        lm.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = lm(batch.char_ids, batch.mask, batch.targets).loss
        loss.backward()
        return loss.detach(), {n: p.grad.flatten() for n, p in lm.named_parameters() if p.grad is not None}

    exact_loss, exact_grads = loss_and_grads(autocast=False)
    loss, grads = loss_and_grads(autocast=True)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, exact_loss, rtol=2e-2, atol=0)
    assert grads.keys() == exact_grads.keys()
    for name, grad in exact_grads.items():  # bf16 keeps 8 bits of mantissa: the same directions
        assert F.cosine_similarity(grads[name].float(), grad, dim=0) > 0.99, name


def test_a_uniform_softmax_gives_perplexity_equal_to_the_vocabulary_size(vocab):
    # cutoffs [V - 1]: a head of V - 1 words + 1 cluster entry, and a one-word cluster,
    # so zero weights give every word probability exactly 1 / V.
    lm = make_lm(vocab, cutoffs=[len(vocab) - 1]).eval()
    zero_softmax(lm)
    batch = make_batch([["the", "cat", "sat"], ["it"]], vocab)
    out = lm(batch.char_ids, batch.mask, batch.targets)
    torch.testing.assert_close(out.forward_loss.exp().item(), float(len(vocab)), rtol=1e-5, atol=0)
    torch.testing.assert_close(out.backward_loss.exp().item(), float(len(vocab)), rtol=1e-5, atol=0)


def test_perplexity_matches_a_hand_computation_with_two_softmax_clusters():
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b", "c", "d", "e", "f", "g"])
    torch.manual_seed(0)
    lm = BiLMLanguageModel(make_lm_options(), len(vocab), dropout=0.0, cutoffs=[6]).eval()
    zero_softmax(lm)
    # Head: ids 0..5 and one cluster entry, uniform: p = 1/7. Cluster: ids 6..9: p = 1/7 * 1/4.
    batch = make_batch([["a", "e"]], vocab)
    out = lm(batch.char_ids, batch.mask, batch.targets)
    # forward predicts a, e, </S>; backward predicts <S>, a, e
    expected = (2 * math.log(7) + math.log(28)) / 3
    torch.testing.assert_close(out.forward_loss.item(), expected, rtol=1e-6, atol=0)
    torch.testing.assert_close(out.backward_loss.item(), expected, rtol=1e-6, atol=0)


class FakeBiLM(nn.Module):
    """Returns fixed activations and mask, whatever the input."""

    def __init__(self, top, mask):
        super().__init__()
        self.top, self.mask = top, mask

    def forward(self, char_ids, mask):
        return BiLMOutput(self.top[None], self.mask)


class RecordingSoftmax:
    """Stands in for the softmax's log-probabilities: records what it is asked to predict from what."""

    def __call__(self, softmax, hidden, target):
        self.hidden, self.target = hidden, target
        return torch.zeros(target.shape[0])


def test_forward_predicts_the_next_token_and_backward_the_previous(vocab, monkeypatch):
    lm = make_lm(vocab).eval()
    P = lm.options.lstm.projection_dim
    batch = make_batch([["the", "cat", "sat"], ["it"]], vocab)
    # A fake biLM whose top layer holds +position in the forward half, -position backward.
    positions = torch.arange(5, dtype=torch.float32)[None, :, None]  # [1, tokens + 2, 1]
    top = torch.cat([positions.expand(2, 5, P), -positions.expand(2, 5, P)], dim=-1)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    lm.bilm = FakeBiLM(top, mask)
    recorded = RecordingSoftmax()
    monkeypatch.setattr(model_module, "adaptive_log_prob", recorded)
    lm(batch.char_ids, batch.mask, batch.targets)
    n = 4 + 2
    forward_from = recorded.hidden[:n, 0].tolist()
    backward_from = (-recorded.hidden[n:, 0]).tolist()
    the, cat, sat, it = vocab.encode(["the", "cat", "sat", "it"])
    # Row 0: <S> the cat sat </S>; row 1: <S> it </S> (rows flattened in row-major order).
    assert forward_from == [0, 1, 2, 3, 0, 1]
    assert recorded.target[:n].tolist() == [the, cat, sat, 1, it, 1]
    assert backward_from == [1, 2, 3, 4, 1, 2]
    assert recorded.target[n:].tolist() == [0, the, cat, sat, 0, it]


def test_losses_do_not_depend_on_batch_mates_or_padding(vocab):
    lm = make_lm(vocab).eval()
    sentences = [["the", "cat", "sat", "on", "a", "mat"], ["it"], ["dog", "ran"]]
    together = lm(*make_batch(sentences, vocab)[:3])
    forward_sum = backward_sum = 0.0
    for sentence in sentences:
        alone = lm(*make_batch([sentence], vocab)[:3])
        forward_sum += alone.forward_loss.item() * alone.forward_tokens
        backward_sum += alone.backward_loss.item() * alone.backward_tokens
    tolerance = {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(together.forward_loss.item() * together.forward_tokens, forward_sum, **tolerance)
    torch.testing.assert_close(together.backward_loss.item() * together.backward_tokens, backward_sum, **tolerance)


def test_lm_rejects_targets_without_boundary_columns(vocab):
    lm = make_lm(vocab)
    batch = make_batch([["the", "cat"]], vocab)
    with pytest.raises(ValueError, match=r"targets must be \[batch, tokens \+ 2\]"):
        lm(batch.char_ids, batch.mask, batch.targets[:, 1:-1])


def test_default_cutoffs_scale_with_the_vocabulary_and_projection():
    assert default_cutoffs(50, 16) == [49]
    assert default_cutoffs(50_000, 128) == [4_000, 20_000]
    assert default_cutoffs(500_000, 128) == [4_000, 20_000, 100_000]
    assert default_cutoffs(500_000, 16) == [4_000, 20_000]  # 16 / 4**3 < 1 feature
    with pytest.raises(ValueError, match="leaves cluster 2 no features"):
        BiLMLanguageModel(make_lm_options(), 500, cutoffs=[10, 20, 30])


def test_loss_falls_on_a_fixed_batch(vocab):
    lm = make_lm(vocab, dropout=0.0)
    sentences = ["the cat sat on a mat .", "the dog ran to a big red house .", "it was red .", "a cat ran ."]
    batch = make_batch([s.split() for s in sentences], vocab)
    config = TrainConfig(max_steps=30, lr=1e-2, progress=False, checkpoint_every=0, validate_every=0)
    losses = []
    Trainer(lm, vocab, itertools.repeat(batch), config).fit(callback=lambda step, r: losses.append(r.loss))
    assert len(losses) == 30
    assert losses[-1] < 0.6 * losses[0], losses


def test_model_folder_round_trip_keeps_bilm_softmax_and_vocabulary(tmp_path, vocab):
    lm = make_lm(vocab).eval()
    save_language_model(lm, vocab, tmp_path / "model")
    elmo = load_model_folder(tmp_path / "model")
    for name, tensor in lm.bilm.state_dict().items():
        assert torch.equal(elmo.bilm.state_dict()[name], tensor), name
    loaded, loaded_vocab, settings = load_language_model(tmp_path / "model")
    assert loaded_vocab == vocab and settings["num_output_representations"] == 1
    batch = make_batch([["the", "cat"], ["zebra", "ran"]], vocab)
    expected = lm(*batch[:3])
    got = loaded(*batch[:3])
    assert got.forward_loss.item() == expected.forward_loss.item()
    assert got.backward_loss.item() == expected.backward_loss.item()


def test_load_language_model_explains_a_folder_without_a_softmax(tmp_path, vocab):
    lm = make_lm(vocab)
    from elmo_core import Elmo

    elmo = Elmo(lm.options)
    save_model_folder(elmo, tmp_path / "plain")
    with pytest.raises(WeightFileError, match="no language-model head"):
        load_language_model(tmp_path / "plain")
