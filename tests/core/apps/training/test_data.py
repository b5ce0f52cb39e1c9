from __future__ import annotations

import itertools
import lzma

import pytest
import torch

from elmo_core.apps.training.corpus import cut_sentence, iter_sentences, pretokenize_files
from elmo_core.apps.training.data import PAD_TARGET, TrainingStream, make_batch
from elmo_core.apps.training.vocab import Vocabulary
from tests.core.apps.training.conftest import make_corpus, write_lines


def batch_rows(batch, vocab):
    """The sentences of a batch, read back from its targets."""
    rows = []
    for row in batch.targets.tolist():
        ids = [i for i in row if i != PAD_TARGET]
        rows.append(tuple(vocab.decode(ids[1:-1])))
    return rows


def take(stream, n):
    return list(itertools.islice(iter(stream), n))


def test_make_batch_shapes_targets_and_padding(vocab):
    sentences = [["the", "cat"], ["a", "dog", "ran", "zebra"]]
    batch = make_batch(sentences, vocab)
    assert batch.char_ids.shape == (2, 4, 50)
    assert batch.mask.tolist() == [[True, True, False, False], [True, True, True, True]]
    assert batch.targets.shape == (2, 6)
    assert batch.targets[0].tolist() == [0, *vocab.encode(["the", "cat"]), 1, PAD_TARGET, PAD_TARGET]
    assert batch.targets[1, 4].item() == vocab.unk_id  # "zebra"
    assert (batch.char_ids[0, 2:] == 0).all()  # padded positions are all-zero ids
    assert batch.num_words == 6


def test_cut_sentence_keeps_every_token_in_pieces():
    tokens = [str(i) for i in range(7)]
    assert cut_sentence(tokens, 3) == [["0", "1", "2"], ["3", "4", "5"], ["6"]]
    assert cut_sentence(tokens, None) == [tokens]


def test_stream_respects_the_token_budget_and_covers_each_sentence_once_per_epoch(train_file, corpus, vocab):
    stream = TrainingStream([train_file], vocab, batch_tokens=64, buffer_sentences=50, epochs=1)
    seen = []
    for batch in stream:
        rows, width = batch.targets.shape
        assert rows == 1 or rows * width <= 64
        seen.extend(batch_rows(batch, vocab))
    assert sorted(seen) == sorted(tuple(s) for s in corpus)


def test_stream_is_deterministic_and_depends_on_the_seed(train_file, vocab):
    def rows(seed):
        stream = TrainingStream([train_file], vocab, batch_tokens=64, buffer_sentences=50, seed=seed)
        return [batch_rows(b, vocab) for b in take(stream, 40)]  # crosses an epoch boundary

    assert rows(0) == rows(0)
    assert rows(0) != rows(1)


@pytest.mark.parametrize("stop_after", [1, 3, 7, 25])
def test_stream_resumes_from_its_state_dict_with_the_same_batches(train_file, vocab, stop_after):
    def make():
        return TrainingStream([train_file, train_file], vocab, batch_tokens=64, buffer_sentences=13, seed=3)

    straight = [b.targets for b in take(make(), stop_after + 10)]
    first = make()
    iterator = iter(first)
    for _ in range(stop_after):
        next(iterator)
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    again = [b.targets for b in take(resumed, 10)]
    for a, b in zip(straight[stop_after:], again):
        assert torch.equal(a, b)


def test_stream_resumes_inside_a_paragraph_of_raw_text(tmp_path, vocab):
    paragraphs = [" | ".join(" ".join(s) for s in make_corpus(5, seed=k)) for k in range(12)]
    path = tmp_path / "raw.txt"
    path.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")

    def split(text):
        return [part.split() for part in text.split("|")]

    def make():
        return TrainingStream([path], vocab, batch_tokens=40, buffer_sentences=7, splitter=split, seed=1)

    straight = [b.targets for b in take(make(), 30)]
    first = make()
    iterator = iter(first)
    for _ in range(11):
        next(iterator)
    state = first.state_dict()
    assert state["sentence"] > 0  # the buffer started in the middle of a paragraph
    resumed = make()
    resumed.load_state_dict(state)
    assert all(torch.equal(a, b.targets) for a, b in zip(straight[11:], take(resumed, 19)))


def test_ranks_read_disjoint_lines_that_cover_the_file(train_file, corpus, vocab):
    shares = []
    for rank in range(3):
        stream = TrainingStream([train_file], vocab, batch_tokens=64, rank=rank, world_size=3, epochs=1)
        shares.append(sorted(row for batch in stream for row in batch_rows(batch, vocab)))
    expected = [sorted(tuple(s) for s in corpus[rank::3]) for rank in range(3)]
    assert shares == expected


def test_stream_rejects_a_state_from_another_rank(train_file, vocab):
    state = TrainingStream([train_file], vocab, 64, rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="saved with rank=0"):
        TrainingStream([train_file], vocab, 64, rank=1, world_size=2).load_state_dict(state)


def test_stream_explains_an_empty_file(tmp_path, vocab):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentences"):
        next(iter(TrainingStream([path], vocab, 64)))


def test_xz_and_plain_files_read_the_same_and_pretokenize_round_trips(tmp_path, corpus):
    paragraphs = [" | ".join(" ".join(s) for s in corpus[k : k + 3]) for k in range(0, 30, 3)]
    paragraphs[0] += " | odd\u00a0token"  # a token with a no-break space inside
    text = "\n\n".join(paragraphs) + "\n"  # an empty line between "articles"
    plain = tmp_path / "raw.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "raw.txt.xz"
    packed.write_bytes(lzma.compress(text.encode("utf-8")))

    def split(paragraph):
        return [sentence.strip().split(" ") for sentence in paragraph.split("|")]

    from_plain = list(iter_sentences([plain], split))
    assert from_plain == list(iter_sentences([packed], split))
    assert len(from_plain) == 31 and from_plain[3] == ["odd", "token"]  # re-split on any whitespace
    cache = tmp_path / "cache.txt.xz"
    assert pretokenize_files([packed], cache, split) == (31, sum(map(len, from_plain)))
    assert list(iter_sentences([cache])) == from_plain


def test_training_stream_runs_on_raw_text_with_the_spacy_splitter(tmp_path):
    pytest.importorskip("spacy")
    from elmo_core.apps.training.corpus import get_sentence_splitter

    split = get_sentence_splitter("spacy-en-sentences")
    assert split("Dr. Smith arrived. It rained!  Then it stopped.") == [
        ["Dr.", "Smith", "arrived", "."],
        ["It", "rained", "!"],
        ["Then", "it", "stopped", "."],
    ]
    path = write_lines(tmp_path / "raw.txt", [["It", "is", "here.", "So", "is", "that."]])
    vocab = Vocabulary.build(iter_sentences([path], split))
    batch = next(iter(TrainingStream([path], vocab, 64, splitter=split)))
    assert sorted(batch_rows(batch, vocab)) == [("It", "is", "here", "."), ("So", "is", "that", ".")]


def test_prefetching_stream_yields_the_same_batches_and_positions(train_file, vocab):
    from elmo_core.apps.training.data import PrefetchingStream

    def make():
        return TrainingStream([train_file], vocab, batch_tokens=64, buffer_sentences=13, seed=2)

    plain = make()
    plain_iterator = iter(plain)
    prefetched = PrefetchingStream(make(), depth=4)
    rng = torch.get_rng_state()
    prefetched_iterator = iter(prefetched)
    for _ in range(9):
        assert torch.equal(next(plain_iterator).targets, next(prefetched_iterator).targets)
    assert torch.equal(torch.get_rng_state(), rng)  # dropout masks stay those of a run without it
    assert prefetched.state_dict() == plain.state_dict()  # handed out, not built ahead
    resumed = PrefetchingStream(make(), depth=2)
    resumed.load_state_dict(prefetched.state_dict())
    assert all(torch.equal(next(plain_iterator).targets, b.targets) for b in take(resumed, 5))


# ---------------------------------------------------------------------- held-out sentences
def test_hold_out_sets_a_seeded_share_aside_and_keeps_the_order():
    from elmo_core.apps.training.corpus import hold_out

    lines = [f"sentence {i}" for i in range(100)] + ["  "]
    kept, held = hold_out(lines, 0.05, seed=3)
    assert len(held) == 5 and len(kept) == 95  # the blank line is dropped
    assert sorted(kept + held, key=lambda s: int(s.split()[1])) == lines[:100]
    assert kept == sorted(kept, key=lambda s: int(s.split()[1])) and held == sorted(
        held, key=lambda s: int(s.split()[1])
    )
    assert hold_out(lines, 0.05, seed=3) == (kept, held)  # the same seed, the same split
    assert hold_out(lines, 0.05, seed=4)[1] != held
    assert hold_out(["a", "b", "c"], 0.01)[1] != [] and len(hold_out(["a", "b"], 0.99)[0]) == 1  # at least one each


def test_hold_out_explains_a_bad_fraction_or_too_few_sentences():
    from elmo_core.apps.training.corpus import hold_out

    with pytest.raises(ValueError, match=r"held-out fraction must be in \(0, 1\), e\.g\. 0\.05; got 5\.0"):
        hold_out(["a", "b"], 5.0)
    with pytest.raises(ValueError, match="needs at least 2 of them; got 1"):
        hold_out(["a", ""], 0.5)
