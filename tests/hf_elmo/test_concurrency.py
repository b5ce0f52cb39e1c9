"""Two threads calling one loaded ElmoModel get what one thread gets."""

from __future__ import annotations

import torch

from hf_elmo import ElmoTokenizer

from ..conftest import make_tiny_elmo
from ..core.test_concurrency import run_in_threads
from .conftest import TOKENS, batch, make_tiny_hf_model


def test_two_threads_on_one_model_match_one_thread(tiny_tokenizer):
    model = make_tiny_hf_model()
    inputs = [batch(tiny_tokenizer, TOKENS), batch(tiny_tokenizer, [["hello", "my", "name", "is", "mud", "."]])]
    with torch.no_grad():
        expected = [model(**x, output_hidden_states=True) for x in inputs]

    def work(i: int) -> int:
        torch.set_num_threads(1)
        with torch.no_grad():
            for round in range(40):
                k = (round + i) % 2
                out = model(**inputs[k], output_hidden_states=True)
                torch.testing.assert_close(out.last_hidden_state, expected[k].last_hidden_state, atol=1e-6, rtol=0)
                torch.testing.assert_close(
                    torch.stack(out.hidden_states), torch.stack(expected[k].hidden_states), atol=1e-6, rtol=0
                )
        return round + 1

    assert run_in_threads(work) == [40, 40]


def test_concurrent_first_raw_text_calls_load_the_splitter_once(monkeypatch):
    from hf_elmo import tokenization_elmo

    from ..spacy_elmo.test_concurrency import _counting_loads, _first_calls_at_once

    text = "The river bank flooded after the storm."
    expected = ElmoTokenizer.from_options(make_tiny_elmo().options)(text)["char_ids"]
    loads = _counting_loads(monkeypatch, tokenization_elmo, "_load_text_tokenizer")
    tokenizer = ElmoTokenizer.from_options(make_tiny_elmo().options)  # splits raw text on first use
    results = _first_calls_at_once(lambda: tokenizer(text)["char_ids"])
    assert len(loads) == 1, f"{len(loads)} loads of the raw-text splitter for 8 concurrent first calls"
    assert all(result == expected for result in results)
