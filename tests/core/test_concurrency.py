"""Two threads embedding through one loaded model get what one thread gets."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from elmo_core import embed_sentences
from tests.conftest import make_tiny_elmo

SENTENCES = [[f"w{j}" for j in range(1 + k % 9)] for k in range(12)] + [["hello", "my", "name", "is", "mud", "."]]


def run_in_threads(work, threads: int = 2, timeout: float = 120):
    """Run `work(i)` in `threads` threads at once; a hang fails after `timeout` seconds."""
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(work, i) for i in range(threads)]
        return [f.result(timeout=timeout) for f in futures]


@pytest.mark.parametrize("training", [False, True])
def test_two_threads_on_one_model_match_one_thread(training):
    # A model left in training mode is the hard case: embed() switches it to eval()
    # and back, which raced between threads (one ran with dropout on, and the
    # caller's mode was lost) until the switch was shared between concurrent calls.
    elmo = make_tiny_elmo(dropout=0.5)
    expected = embed_sentences(elmo, SENTENCES, layers="all", batch_size=4)
    mixed = embed_sentences(elmo, SENTENCES, layers="mix", batch_size=4)
    elmo.train(training)

    def work(i: int) -> int:
        for round in range(40):
            layers = "all" if (round + i) % 2 else "mix"
            out = embed_sentences(elmo, SENTENCES, layers=layers, batch_size=4)
            for got, want in zip(out, expected if layers == "all" else mixed):
                np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
        return round + 1

    assert run_in_threads(work) == [40, 40]
    assert elmo.training == training  # the caller's mode comes back


def test_concurrent_first_embeds_of_a_hand_built_model_leave_it_as_built():
    from elmo_core.model.elmo import Elmo
    from tests.spacy_elmo.test_concurrency import _first_calls_at_once

    built = make_tiny_elmo()
    expected = embed_sentences(built, SENTENCES, layers="all")
    elmo = Elmo(built.options)  # built by hand: no parts, the reference
    elmo.load_state_dict(built.state_dict())
    results = _first_calls_at_once(lambda: embed_sentences(elmo, SENTENCES, layers="all"))
    assert elmo.bilm.recurrence is None and elmo.bilm.token_cache is None
    for result in results:
        for got, want in zip(result, expected):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
