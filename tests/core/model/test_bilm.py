from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from elmo_core import BiLM, load_bilm_tf, read_options, words_to_char_ids
from elmo_core.model.characters import word_to_char_ids
from tests.conftest import DEVICES, make_tiny_elmo


def fixture_bilm(fixture_dir, **kwargs) -> BiLM:
    bilm = BiLM(read_options(fixture_dir / "options.json"), **kwargs)
    load_bilm_tf(bilm, fixture_dir / "lm_weights.hdf5")
    return bilm.eval()


def fixture_batches(fixture_dir) -> list[list[list[str]]]:
    """Batch i = [grid[0][i], grid[1][i], grid[2][i]], as the fixture README describes."""
    grid = json.loads((fixture_dir / "sentences.json").read_text())
    return [[grid[k][i].split() for k in range(3)] for i in range(10)]


def expected_top_layer(fixture_dir, k: int, i: int) -> np.ndarray:
    with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
        return np.concatenate([f[str(i)][0], f[str(i)][1]], axis=-1)


def test_stateful_mode_reproduces_the_original_top_layer(fixture_dir):
    bilm = fixture_bilm(fixture_dir, stateful=True)
    with torch.no_grad():
        for i, batch in enumerate(fixture_batches(fixture_dir)):
            char_ids, mask = words_to_char_ids(batch)
            out = bilm(char_ids, mask)
            assert out.mask.sum(1).tolist() == [len(s) for s in batch]
            for k, sentence in enumerate(batch):
                got = out.activations[-1, k, : len(sentence)].numpy()
                np.testing.assert_allclose(got, expected_top_layer(fixture_dir, k, i), atol=1e-6, rtol=1e-5)


def test_stateless_default_differs_after_the_first_batch_and_equals_stateful_on_it(fixture_dir):
    batches = fixture_batches(fixture_dir)
    stateless = fixture_bilm(fixture_dir)
    stateful = fixture_bilm(fixture_dir, stateful=True)
    with torch.no_grad():
        first = words_to_char_ids(batches[0])
        torch.testing.assert_close(stateless(*first).activations, stateful(*first).activations, atol=0, rtol=0)
        second = words_to_char_ids(batches[1])
        carried = stateful(*second).activations
        fresh = stateless(*second).activations
    # The carry-over is real: the original's numbers need it (docs/bilm_tf.md §6).
    assert (carried - fresh).abs().max() > 0.1
    stateful.reset_states()
    with torch.no_grad():
        torch.testing.assert_close(stateful(*second).activations, fresh, atol=0, rtol=0)


def test_char_cnn_reproduces_the_original_token_embeddings(fixture_dir):
    bilm = fixture_bilm(fixture_dir)
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][()]
    char_ids = torch.tensor([word_to_char_ids(w) for w in words])
    with torch.no_grad():
        got = bilm.char_cnn(char_ids).numpy()
    assert got.shape == expected.shape == (458, 16)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_layer_zero_is_the_token_vector_twice_and_boundaries_are_added(fixture_dir):
    bilm = fixture_bilm(fixture_dir, keep_sentence_boundaries=True)
    sentence = ["The", "sentence", "."]
    with torch.no_grad():
        out = bilm(*words_to_char_ids([sentence]))
        tokens = bilm.char_cnn(torch.tensor([word_to_char_ids(w) for w in ["<S>", *sentence, "</S>"]]))
    assert out.activations.shape == (3, 1, 5, 32)
    torch.testing.assert_close(out.activations[0, 0], torch.cat([tokens, tokens], -1), atol=1e-6, rtol=0)


def run(bilm: BiLM, sentences: list[list[str]]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = bilm(*words_to_char_ids(sentences))
    return [out.activations[:, k, : len(s)] for k, s in enumerate(sentences)]


SENTENCES = [[f"w{j}" for j in range(1 + k % 12)] for k in range(40)]


@pytest.mark.parametrize("batch_size", [1, 7, 32, 40])
def test_vectors_do_not_depend_on_batch_size_or_batch_mates(batch_size):
    bilm = make_tiny_elmo().bilm
    alone = [run(bilm, [s])[0] for s in SENTENCES]
    batched = []
    for start in range(0, len(SENTENCES), batch_size):
        batched += run(bilm, SENTENCES[start : start + batch_size])
    for a, b, s in zip(alone, batched, SENTENCES):
        assert b.shape == (3, len(s), 16)
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_padding_and_garbage_beyond_the_mask_are_never_read():
    bilm = make_tiny_elmo().bilm
    sentence = ["the", "river", "bank", "."]
    reference = run(bilm, [sentence])[0]
    char_ids, mask = words_to_char_ids([sentence])
    padded = torch.cat([char_ids, torch.randint(1, 262, (1, 9, 50))], dim=1)  # junk after the end
    padded_mask = torch.cat([mask, torch.zeros(1, 9, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        out = bilm(padded, padded_mask)
    torch.testing.assert_close(out.activations[:, 0, :4], reference, atol=1e-6, rtol=0)
    assert out.activations[:, 0, 4:].abs().max() == 0


def test_repeat_calls_give_identical_vectors():
    bilm = make_tiny_elmo().bilm
    first = run(bilm, SENTENCES[:5])
    run(bilm, [["unrelated", "filler", "words"]] * 8)
    again = run(bilm, SENTENCES[:5])
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_stateful_rows_keep_their_state_when_the_batch_shrinks():
    bilm = make_tiny_elmo().bilm
    bilm.stateful = True
    run(bilm, [["a", "b"], ["c", "d", "e"]])
    state_row1 = [h[1].clone() for h, _ in bilm._states["forward"]]
    run(bilm, [["f"]])  # batch of one: row 1 is untouched
    for before, (h, _) in zip(state_row1, bilm._states["forward"]):
        torch.testing.assert_close(h[1], before, atol=0, rtol=0)
    run(bilm, [["a"], ["b"], ["c"]])  # grown batch: row 2 starts from zeros
    assert bilm._states["forward"][0][0].shape[0] == 3


def test_empty_sentences_and_empty_batches():
    bilm = make_tiny_elmo().bilm
    with torch.no_grad():
        out = bilm(*words_to_char_ids([[], ["a", "b"], []]))
        assert out.activations.shape == (3, 3, 2, 16)
        assert out.mask.tolist() == [[False, False], [True, True], [False, False]]
        assert out.activations[:, [0, 2]].abs().max() == 0
        only_empty = bilm(*words_to_char_ids([[]]))
        assert only_empty.activations.shape == (3, 1, 0, 16)
        none = bilm(*words_to_char_ids([]))
        assert none.activations.shape == (3, 0, 0, 16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_runs_under_autocast(device, dtype):
    bilm = make_tiny_elmo().bilm.to(device)
    reference = run(bilm, SENTENCES[:6])
    with torch.autocast(device_type=device, dtype=dtype):
        low = run(bilm, SENTENCES[:6])
    for a, b in zip(reference, low):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b.float(), a, atol=0.15, rtol=0.1)


def test_inputs_follow_the_module_device():
    bilm = make_tiny_elmo().bilm
    char_ids, mask = words_to_char_ids([["a", "b"]])
    out = bilm(char_ids.to("cpu"), mask)
    assert out.activations.device.type == "cpu"


@pytest.mark.parametrize(
    "char_ids, error, match",
    [
        (torch.zeros(2, 7, dtype=torch.long), ValueError, r"must be 3-D \[batch, tokens, 50\]; got shape \(2, 7\)"),
        (torch.zeros(1, 2, 50), TypeError, "integer tensor"),
        (torch.full((1, 2, 50), 262), ValueError, r"must lie in \[0, 262\); found values from 262 to 262"),
        ([[1, 2]], TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_char_ids_raise_clear_errors(char_ids, error, match):
    with pytest.raises(error, match=match):
        make_tiny_elmo().bilm(char_ids)


def test_left_padding_is_refused():
    char_ids, _ = words_to_char_ids([["a", "b"]])
    char_ids = torch.cat([torch.zeros(1, 1, 50, dtype=torch.long), char_ids], dim=1)
    with pytest.raises(ValueError, match="padding must be on the right"):
        make_tiny_elmo().bilm(char_ids)


def test_reset_buffers_rebuilds_the_sentence_boundary_char_ids():
    bilm = make_tiny_elmo().bilm
    C = bilm.options.char_cnn.max_characters_per_token
    bilm.bos_char_ids.zero_()
    bilm.eos_char_ids.zero_()
    bilm.reset_buffers()
    assert bilm.bos_char_ids.tolist() == list(word_to_char_ids("<S>", C))
    assert bilm.eos_char_ids.tolist() == list(word_to_char_ids("</S>", C))


def test_char_cnn_reset_parameters_draws_the_char_embedding_in_minus_1_to_1():
    char_cnn = make_tiny_elmo().bilm.char_cnn  # test weights are N(0, 0.5): some beyond 1
    torch.manual_seed(0)
    char_cnn.reset_parameters()
    table = char_cnn.char_embedding
    assert table.abs().max() <= 1.0 and table.std() > 0.3  # uniform(-1, 1) has std 0.58


@pytest.mark.parametrize(
    ("n", "width", "high"),
    [(0, 50, 262), (1, 50, 262), (3000, 50, 262), (500, 7, 2), (200, 50, 2**40), (4000, 27, 262)],
)
def test_distinct_rows_are_torch_uniques_rows_order_and_inverse(n, width, high):
    # The packed 1-D keys must rank rows exactly as unique(dim=0) does: same rows, same
    # (lexicographic) order, same inverse, also for values too wide to pack (2**40).
    from elmo_core.model.bilm import distinct_rows

    generator = torch.Generator().manual_seed(n + width)
    rows = torch.randint(0, high, (max(n // 3, 1), width), generator=generator)
    rows[:, width // 2 :] = high - 1  # padding-like tails, as char ids have
    rows = rows[torch.randint(0, rows.shape[0], (n,), generator=generator)]  # repeats, shuffled
    expected_rows, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    got_rows, got_inverse = distinct_rows(rows)
    assert torch.equal(got_rows, expected_rows)
    assert torch.equal(got_inverse, expected_inverse)
