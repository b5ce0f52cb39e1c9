"""The char CNN's training path (`elmo_core.model.char_cnn_training`) computes the model's
char CNN over all `max_characters_per_token` slots: values and gradients."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from elmo_core import Elmo
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model import char_cnn_training
from elmo_core.model.char_cnn import CharCNN
from elmo_core.model.char_cnn_training import encode_for_training
from tests.conftest import make_tiny_elmo, make_tiny_options

FILTERS = ((1, 4), (2, 8), (3, 4), (5, 8))  # widths 1 .. 5, as the shipped model's banks


def _char_cnn(seed: int = 0, training_path=encode_for_training) -> CharCNN:  # noqa: ANN001
    options = make_tiny_options()
    options = dataclasses.replace(options, char_cnn=dataclasses.replace(options.char_cnn, filters=FILTERS))
    torch.manual_seed(seed)
    return CharCNN(options, training_path=training_path)


def _char_ids(words: list[str]) -> torch.Tensor:
    return make_batch([words], Vocabulary(["<S>", "</S>", "<UNK>"])).char_ids[0]  # [words, 50]


def _all_slots(cnn: CharCNN, char_ids: torch.Tensor) -> torch.Tensor:
    """The model's function written out: every bank over all 50 slots, max-pooled, then relu."""
    x = F.embedding(char_ids, cnn.embedding_table()).transpose(1, 2)  # [tokens, E, 50]
    features = torch.cat([torch.relu(conv(x).amax(dim=2)) for conv in cnn.convolutions], dim=1)
    return cnn.projection(cnn.highway(features))


def _value_and_grads(cnn: CharCNN, fn, char_ids: torch.Tensor):  # noqa: ANN001
    cnn.zero_grad(set_to_none=True)
    out = fn(cnn, char_ids)
    weights = torch.linspace(-1, 1, out.numel()).view_as(out)
    (out.float() * weights).sum().backward()
    return out.detach(), [p.grad.clone() for p in cnn.parameters()]


# Longest token (slots, marks included): short; mid; 45 + widest 5 = 50 exactly (the cut
# reaches the last slot); 46 and 50, where the narrower banks' windows past 45 hold real
# characters and their last windows must stop at their own last starts.
@pytest.mark.parametrize("longest", [3, 12, 45, 46, 50])
def test_training_path_equals_every_bank_over_all_50_slots_values_and_gradients(longest, monkeypatch):
    cnn = _char_cnn()
    char_ids = _char_ids(["a", "q" + "xyz" * 20, "c"])  # 3, 50 and 3 slots, the middle one cut below
    char_ids[1, longest - 1] = char_ids[1, 49]  # the end-of-word mark at slot longest - 1
    char_ids[1, longest:] = char_ids[0, -1]  # then padding
    windows = []
    pool = char_cnn_training._max_over_windows

    def recording_pool(responses, last_start):  # noqa: ANN001, ANN202
        windows.append(responses.shape[0])
        return pool(responses, last_start)

    monkeypatch.setattr(char_cnn_training, "_max_over_windows", recording_pool)
    out, grads = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    assert windows == [longest + 1 if longest + 5 <= 50 else 50]  # one window per start the max needs
    expected, expected_grads = _value_and_grads(cnn, _all_slots, char_ids)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_gradient_of_a_tie_goes_to_the_first_window_that_reaches_the_max():
    responses = torch.tensor([[[1.0, 5.0]], [[3.0, 5.0]], [[3.0, 9.0]]], requires_grad=True)  # [S=3, 1, F=2]
    last_start = torch.tensor([2, 1], dtype=torch.int32)  # filter 1's window 2 is not the model's
    pooled = char_cnn_training._MaxOverWindows.apply(responses, last_start)
    pooled.backward(torch.tensor([[10.0, 20.0]]))
    assert pooled.tolist() == [[3.0, 5.0]]
    assert responses.grad[:, 0].tolist() == [[0.0, 20.0], [10.0, 0.0], [0.0, 0.0]]


def test_under_bf16_autocast_the_training_path_stays_close_to_float32():
    cnn = _char_cnn()
    char_ids = _char_ids(["the", "cat", "sat", "on", "extraordinarily", "."])
    expected, expected_grads = _value_and_grads(cnn, _all_slots, char_ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    assert out.dtype == torch.bfloat16
    assert ((out.float() - expected).norm() / expected.norm()).item() < 2e-2
    for got, want in zip(grads, expected_grads):
        assert ((got - want).norm() / want.norm()).item() < 5e-2


def test_eager_operators_give_the_compiled_kernels_values(monkeypatch):
    cnn = _char_cnn()
    char_ids = _char_ids(["a", "bb", "ccc", "dddd", "e" * 47])
    compiled = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    monkeypatch.setenv("ELMO_COMPILE", "0")
    eager = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    torch.testing.assert_close(compiled[0], eager[0], atol=1e-6, rtol=1e-6)
    for got, want in zip(compiled[1], eager[1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_loaders_build_with_the_path_and_a_char_cnn_without_it_computes_the_same():
    elmo = make_tiny_elmo()
    assert elmo.bilm.char_cnn.training_path is encode_for_training  # built as the loaders build
    assert Elmo(make_tiny_options()).bilm.char_cnn.training_path is None  # built by hand: the blocks
    cnn = _char_cnn()
    char_ids = _char_ids(["one", "two", "three"])
    with_path = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    plain = _char_cnn(training_path=None)  # the same weights, the model's blocks, with autograd
    without = _value_and_grads(plain, CharCNN.__call__, char_ids)
    torch.testing.assert_close(with_path[0], without[0], atol=1e-6, rtol=1e-6)
    for got, want in zip(with_path[1], without[1]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_word_count_padded_to_its_bucket_gives_the_unpadded_values_and_gradients():
    # 37 distinct words: the products run on bucket_rows(37) = 38 rows, one of them padding.
    cnn = _char_cnn()
    words = [f"w{k}{'x' * (k % 7)}" for k in range(37)]
    char_ids = _char_ids(words)
    out, grads = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    assert out.shape == (37, 8)
    expected, expected_grads = _value_and_grads(cnn, _all_slots, char_ids)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    for got, want in zip(grads, expected_grads):  # sums of 37 words' terms, gradients up to ~2: float32 order
        torch.testing.assert_close(got, want, atol=3e-5, rtol=1e-5)


def test_under_bf16_the_short_words_group_gives_what_one_group_gives(monkeypatch):
    cnn = _char_cnn()
    words = ["a", "the", "cat", "extraordinarily", "sat", "x" * 30, "on", "counterrevolutionary", "."]
    char_ids = _char_ids(words)  # 5 + 2 words longer than SHORT_SLOTS, in between the short ones
    with torch.autocast("cpu", dtype=torch.bfloat16):
        grouped, grouped_grads = _value_and_grads(cnn, CharCNN.__call__, char_ids)
        monkeypatch.setattr(char_cnn_training, "SHORT_SLOTS", 50)  # every word short: one group
        one, one_grads = _value_and_grads(cnn, CharCNN.__call__, char_ids)
    torch.testing.assert_close(grouped.float(), one.float(), atol=1e-2, rtol=1e-2)
    for got, want in zip(grouped_grads, one_grads):
        assert ((got - want).norm() / want.norm()).item() < 1e-2
