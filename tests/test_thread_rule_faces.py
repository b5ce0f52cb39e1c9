"""Every face's biLM work runs under the core's thread rule (`elmo_core.runtime.threads`), not torch's count.

The rule's choice is patched to a count no face would pick by itself (torch's count is 3,
the rule says 2), and the count torch has while the biLM computes is recorded from inside
its forward: the library's `embed`, the spaCy component (`nlp.pipe` and `nlp.update`, what
`spacy train` runs), and the Hugging Face model (`AutoModel` from a saved folder).
"""

from __future__ import annotations

import pytest
import torch

from elmo_core import embed_sentences
from elmo_core.files.model_folder import default_model_dir, load_elmo
from elmo_core.model.bilm import BiLM
from elmo_core.runtime import threads

CEILING, CHOSEN = 3, 2
SENTENCES = [["The", "river", "bank", "."], ["Stocks", "fell", "on", "Monday", "in", "New", "York", "."]]


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """torch's thread count seen inside each biLM forward, with the rule patched to CHOSEN."""
    seen: list[int] = []
    inner = BiLM._forward

    def recording(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(torch.get_num_threads())
        return inner(self, *args, **kwargs)

    monkeypatch.setattr(BiLM, "_forward", recording)
    monkeypatch.setattr(threads, "choose_threads", lambda ceiling, usable, others, running=1: CHOSEN)
    before_policy, before_threads = threads.thread_policy(), torch.get_num_threads()
    threads.set_thread_policy("auto")
    torch.set_num_threads(CEILING)
    yield seen
    threads.set_thread_policy(before_policy)
    torch.set_num_threads(before_threads)


def _check(seen: list[int]) -> None:
    assert seen, "the biLM forward never ran"
    assert set(seen) == {CHOSEN}, f"torch's count inside the biLM forward was {seen}, not the rule's {CHOSEN}"
    assert torch.get_num_threads() == CEILING  # put back afterwards


def test_library_embed_runs_under_the_thread_rule(observed):
    embed_sentences(load_elmo(), SENTENCES)
    _check(observed)


def test_spacy_component_runs_under_the_thread_rule_in_pipe_and_update(observed):
    spacy = pytest.importorskip("spacy")
    from spacy.tokens import Doc
    from spacy.training import Example

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.initialize()
    list(nlp.pipe([Doc(nlp.vocab, words=s) for s in SENTENCES]))
    _check(observed)

    observed.clear()
    ner = nlp.add_pipe(
        "ner",
        config={
            "model": {
                "@architectures": "spacy.TransitionBasedParser.v2",
                "state_type": "ner",
                "extra_state_tokens": False,
                "hidden_width": 16,
                "maxout_pieces": 2,
                "use_upper": True,
                "tok2vec": {
                    "@architectures": "spacy-elmo.ElmoListener.v2",
                    "upstream": "elmo",
                    "width": 16,
                    "tok2vec": {
                        "@architectures": "spacy.MultiHashEmbed.v2",
                        "width": 16,
                        "attrs": ["NORM"],
                        "rows": [100],
                        "include_static_vectors": False,
                    },
                },
            }
        },
    )
    ner.add_label("LOC")
    words = SENTENCES[1]
    example = Example.from_dict(Doc(nlp.vocab, words=words), {"entities": ["O"] * 5 + ["B-LOC", "L-LOC", "O"]})
    optimizer = nlp.initialize(lambda: [example])
    observed.clear()
    nlp.update([example], sgd=optimizer, annotates=["elmo"])  # what `spacy train` runs per step
    _check(observed)


def test_hf_model_runs_under_the_thread_rule(observed, tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModel, AutoTokenizer

    import hf_elmo  # noqa: F401 - registers the Auto classes

    AutoModel.from_pretrained(default_model_dir()).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(default_model_dir()).save_pretrained(tmp_path)
    tokenizer, model = AutoTokenizer.from_pretrained(tmp_path), AutoModel.from_pretrained(tmp_path).eval()
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        model(**batch)
    _check(observed)
