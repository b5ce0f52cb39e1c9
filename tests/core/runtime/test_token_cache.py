"""The layer-0 (char CNN) LRU cache: same values as no cache, bounded, never stale."""

from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest
import torch

from elmo_core import BiLM, Elmo, embed_sentences, load_bilm_tf, save_bilm_tf, words_to_char_ids
from elmo_core.runtime.parts import serving_parts
from elmo_core.runtime.token_cache import TokenCache
from tests.conftest import make_tiny_elmo, make_tiny_options

TEXT = [
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["the", "dog", "sat", "on", "a", "log", "."],
    ["a", "cat", "and", "a", "dog", "."],
    ["naïve", "😀", "中华人民共和国", "x" * 80, "the"],
    ["mat"],
]


def _distinct_words(sentences: list[list[str]]) -> int:
    """Distinct char-id rows the biLM sees: the words plus <S> and </S>."""
    return len({w for s in sentences for w in s}) + 2


def test_cached_vectors_equal_uncached_vectors():
    cached = make_tiny_elmo()
    uncached = make_tiny_elmo(token_cache_words=0)
    assert cached.bilm.token_cache is not None and uncached.bilm.token_cache is None
    expected = embed_sentences(uncached, TEXT, layers="all")
    # Cold, then warm (all hits), then a different batching that mixes hits and misses.
    for batch_size in (None, None, 2, 1):
        got = embed_sentences(cached, TEXT + [["unseen", "words", "cat"]], layers="all", batch_size=batch_size)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)
    assert cached.bilm.token_cache.hits > 0


def test_hits_and_misses_count_distinct_words():
    elmo = make_tiny_elmo()
    cache = elmo.bilm.token_cache
    embed_sentences(elmo, TEXT)  # one batch: every distinct word is a miss
    assert (cache.hits, cache.misses) == (0, _distinct_words(TEXT))
    assert len(cache) == _distinct_words(TEXT)
    cache.reset_stats()
    embed_sentences(elmo, TEXT)
    assert (cache.hits, cache.misses) == (_distinct_words(TEXT), 0)
    assert cache.hit_rate == 1.0


def test_cache_is_bounded_and_evicts_least_recently_used():
    elmo = make_tiny_elmo(token_cache_words=4)
    reference = make_tiny_elmo(token_cache_words=0)
    cache = elmo.bilm.token_cache
    # Each sentence brings 2 words + <S> + </S> = 4 rows: exactly the bound.
    for sentence in (["a", "b"], ["c", "d"], ["a", "b"]):
        got = embed_sentences(elmo, [sentence], layers="all")[0]
        np.testing.assert_allclose(got, embed_sentences(reference, [sentence], layers="all")[0], atol=1e-6, rtol=0)
        assert len(cache) <= 4
    # "a b" was evicted by "c d" (only <S>/</S> survived), so the third call missed twice.
    assert (cache.hits, cache.misses) == (2 + 2, 4 + 2 + 2)
    # A batch wider than the cache is computed without caching, and still right.
    wide = [["e", "f", "g", "h", "i"]]
    np.testing.assert_allclose(embed_sentences(elmo, wide)[0], embed_sentences(reference, wide)[0], atol=1e-6, rtol=0)


def test_changed_weights_are_never_served_from_the_cache():
    elmo = make_tiny_elmo()
    other = make_tiny_elmo(seed=1, token_cache_words=0)
    embed_sentences(elmo, TEXT)  # fill the cache with seed-0 vectors
    elmo.bilm.load_state_dict(other.bilm.state_dict())  # in-place copy: versions change
    expected = embed_sentences(other, TEXT, layers=0)
    for g, e in zip(embed_sentences(elmo, TEXT, layers=0), expected):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)
    # An optimizer-style in-place update is noticed too.
    with torch.no_grad():
        elmo.bilm.char_cnn.char_embedding.add_(0.25)
        other.bilm.char_cnn.char_embedding.add_(0.25)
    for g, e in zip(embed_sentences(elmo, TEXT, layers=0), embed_sentences(other, TEXT, layers=0)):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


def test_training_the_char_cnn_bypasses_the_cache():
    bilm = BiLM(make_tiny_options(), **serving_parts())  # trainable, cache on
    bilm.train()
    char_ids, mask = words_to_char_ids(TEXT, 50)
    for _ in range(2):
        bilm(char_ids, mask).activations.sum().backward()
    assert (bilm.token_cache.hits, bilm.token_cache.misses) == (0, 0)
    assert bilm.char_cnn.char_embedding.grad is not None
    assert bilm.char_cnn.char_embedding.grad.abs().sum() > 0
    # In training mode the cache stays unused even under no_grad: the next step changes the weights.
    with torch.no_grad():
        bilm(char_ids, mask)
    assert (bilm.token_cache.hits, bilm.token_cache.misses) == (0, 0)
    # In eval mode under no_grad (validation between steps) the cache is used.
    with torch.no_grad():
        bilm.eval()(char_ids, mask)
    assert bilm.token_cache.misses == _distinct_words(TEXT)


def test_cache_never_serves_layer0_of_older_weights_while_the_char_cnn_fine_tunes():
    elmo = make_tiny_elmo(dropout=0.0)  # frozen at construction, cache on
    reference = make_tiny_elmo(dropout=0.0, token_cache_words=0)
    embed_sentences(elmo, TEXT)  # the cache holds the starting weights' vectors
    char_ids, mask = words_to_char_ids(TEXT, 50)
    elmo.bilm.char_cnn.requires_grad_(True)
    reference.bilm.char_cnn.requires_grad_(True)
    start = elmo.bilm.char_cnn.char_embedding.detach().clone()
    for model in (elmo, reference):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(2):
            model.train()
            hits = model.bilm.token_cache.hits if model.bilm.token_cache else 0
            loss = (model(char_ids, mask).representations[0] * torch.linspace(-1, 1, 16)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if model.bilm.token_cache is not None:
                assert model.bilm.token_cache.hits == hits  # training: never a cached vector
            # An evaluation between steps (eval mode, no_grad) may use the cache, never stale.
            got = embed_sentences(model, TEXT, layers=0)
            model.eval()
            with torch.no_grad():
                fresh = model.bilm.char_cnn(words_to_char_ids([["the"]], 50)[0][0])
            np.testing.assert_allclose(got[0][0][:8], fresh[0].numpy(), atol=1e-6, rtol=1e-6)
    assert not torch.equal(elmo.bilm.char_cnn.char_embedding, start)  # the char CNN did change
    for g, e in zip(embed_sentences(elmo, TEXT, layers=0), embed_sentences(reference, TEXT, layers=0)):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def test_pickle_and_deepcopy_keep_the_bound_and_drop_the_entries():
    elmo = make_tiny_elmo(token_cache_words=123)
    expected = embed_sentences(elmo, TEXT)
    for clone in (pickle.loads(pickle.dumps(elmo)), copy.deepcopy(elmo)):
        cache = clone.bilm.token_cache
        assert cache.max_words == 123 and len(cache) == 0 and cache.misses == 0
        for g, e in zip(embed_sentences(clone, TEXT), expected):
            np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


def test_two_threads_share_one_cache_safely():
    elmo = make_tiny_elmo(token_cache_words=16)  # small: threads evict each other's words
    reference = make_tiny_elmo(token_cache_words=0)
    work = [[[f"w{(k * 7 + j) % 40}" for j in range(1 + k % 9)] for k in range(60)] for _ in range(2)]
    work[1] = work[1][::-1]
    results: list[list[np.ndarray] | BaseException] = [[], []]

    def run(k: int) -> None:
        try:
            results[k] = embed_sentences(elmo, work[k], batch_size=3)
        except BaseException as err:  # pragma: no cover - reported below
            results[k] = err

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for k in range(2):
        assert not isinstance(results[k], BaseException), results[k]
        for g, e in zip(results[k], embed_sentences(reference, work[k])):
            np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "big"])
def test_bad_cache_sizes_are_refused(bad):
    with pytest.raises(ValueError, match=r"token_cache_words must be a non-negative integer \(0 switches"):
        make_tiny_elmo(token_cache_words=bad)
    with pytest.raises(ValueError, match="max_words must be a positive integer"):
        TokenCache(bad if bad != -1 else 0)


def test_calling_the_model_after_inference_mode_runs_still_works():
    # The cache filled under torch.inference_mode (embed) must not break later calls
    # outside it, with grad or under no_grad: nothing may write into an inference tensor.
    elmo = make_tiny_elmo(num_output_representations=1)
    embed_sentences(elmo, TEXT)
    char_ids, mask = words_to_char_ids([["novel", "words", "cat"]], 50)
    with torch.no_grad():
        elmo(char_ids, mask)
    out = elmo(char_ids, mask)  # a task model's training step: the mix gets gradients
    out.representations[0].sum().backward()
    assert elmo.scalar_mixes[0].scalar_weights.grad is not None


def test_edits_through_data_are_noticed():
    elmo = make_tiny_elmo()
    embed_sentences(elmo, TEXT)
    for p in elmo.bilm.char_cnn.parameters():
        p.data.mul_(1.5)  # .data: no version-counter bump
    reference = make_tiny_elmo(token_cache_words=0)
    for p in reference.bilm.char_cnn.parameters():
        p.data.mul_(1.5)
    for g, e in zip(embed_sentences(elmo, TEXT, layers=0), embed_sentences(reference, TEXT, layers=0)):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


def _parts(elmo: Elmo) -> tuple[object, object, object]:
    bilm = elmo.bilm
    return bilm.recurrence, bilm.token_cache, bilm.char_cnn.training_path


def test_embed_sentences_leaves_a_model_built_by_hand_as_it_was():
    built = make_tiny_elmo()
    elmo = Elmo(make_tiny_options(), dropout=0.0).eval()  # no parts: the reference
    elmo.load_state_dict(built.state_dict())
    before = _parts(elmo)
    assert before == (None, None, None)
    got = embed_sentences(elmo, TEXT, layers="all")
    assert _parts(elmo) == before
    for g, e in zip(got, embed_sentences(built, TEXT, layers="all")):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


def test_embed_sentences_keeps_the_parts_a_model_was_built_with():
    elmo = make_tiny_elmo(token_cache_words=5, recurrence="step")
    before = _parts(elmo)
    embed_sentences(elmo, TEXT)
    assert _parts(elmo) == before
    assert elmo.bilm.recurrence.mode == "step" and elmo.bilm.token_cache.max_words == 5


def test_loading_bilm_tf_weights_fills_the_weights_and_leaves_the_parts(tmp_path):
    source = make_tiny_elmo()
    save_bilm_tf(source, tmp_path / "w.hdf5")
    elmo = Elmo(make_tiny_options())
    load_bilm_tf(elmo, tmp_path / "w.hdf5")
    assert _parts(elmo) == (None, None, None)
    elmo = Elmo(make_tiny_options(), **serving_parts(token_cache_words=0))
    before = _parts(elmo)
    load_bilm_tf(elmo, tmp_path / "w.hdf5")
    assert _parts(elmo) == before
