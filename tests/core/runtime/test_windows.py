"""Long inputs in overlapping windows (elmo_core.runtime.windows): plan, exactness, edge effects, memory."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

import elmo_core.apps.cli.embed
import elmo_core.runtime.windows
from elmo_core import embed_sentences
from elmo_core.apps.cli import app
from elmo_core.model.recurrence.time_chunks import CHUNK_STEPS
from elmo_core.runtime.windows import DEFAULT_WINDOW_TOKENS, check_window_settings, plan_windows, run_in_windows
from tests.conftest import make_tiny_elmo


def words(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"w{int(k)}" for k in rng.integers(0, 500, size=n)]


# ---------------------------------------------------------------- the plan
@pytest.mark.parametrize(
    "num_tokens, window, context",
    [
        (0, 8, 1),
        (8, 8, 1),
        (9, 8, 1),
        (100, 32, 4),
        (1000, 64, 0),
        (1000, 64, 31),
        (65, 64, None),
        (100_000, 1024, None),
    ],
)
def test_windows_tile_the_sequence_and_give_every_kept_token_its_context(num_tokens, window, context):
    plan = plan_windows(num_tokens, window, context)
    context = window // 8 if context is None else context
    assert plan[0].keep_start == 0 and plan[-1].keep_end == num_tokens
    for a, b in zip(plan, plan[1:]):
        assert a.keep_end == b.keep_start and a.keep_end > a.keep_start
    for w in plan:
        assert 0 <= w.start <= w.keep_start <= w.keep_end <= w.end <= num_tokens
        assert w.end - w.start <= window
        # At least `context` tokens on each side, except at the true ends of the sequence.
        assert w.start == 0 or w.keep_start - w.start >= context
        assert w.end == num_tokens or w.end - w.keep_end >= context
    if num_tokens <= window:
        assert plan == [(0, num_tokens, 0, num_tokens)]


def test_bad_window_arguments_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="window_tokens must be a positive integer .* 1024 is a good value"):
        plan_windows(10, 0)
    with pytest.raises(ValueError, match=r"window_context \(4\) must be less than half of window_tokens \(8\)"):
        plan_windows(10, 8, 4)
    with pytest.raises(ValueError, match="window_context must be a non-negative integer"):
        plan_windows(10, 8, -1)
    with pytest.raises(ValueError, match="window_tokens must be a positive integer"):
        embed_sentences(make_tiny_elmo(), [["a"]], window_tokens=-5)


# ---------------------------------------------------------------- what windows do to vectors
# ---------------------------------------------------------------- the windowed, batched loop
def position_features(batch: list[list[str]]) -> np.ndarray:
    """A stand-in biLM: [batch, 2, longest, 3]; token `k` of a piece -> int(token) + 1000 * k
    (so the output says which piece, and where in it, each token was read); padding NaN."""
    longest = max((len(tokens) for tokens in batch), default=0)
    out = np.full((len(batch), 2, longest, 3), np.nan)
    for row, tokens in enumerate(batch):
        for k, token in enumerate(tokens):
            out[row, :, k, :] = int(token) + 1000 * k
    return out


@pytest.mark.parametrize("window, context, budget", [(None, None, 64), (8, 2, 16), (8, 0, 1000), (16, None, 40)])
def test_run_in_windows_keeps_each_token_from_the_window_that_keeps_it(window, context, budget):
    lengths = [0, 3, 8, 9, 30, 17, 1]
    sequences = [[str(t) for t in range(n)] for n in lengths]
    calls = []

    def run_batch(batch):
        calls.append([len(tokens) for tokens in batch])
        return position_features(batch)

    settings = {"window_tokens": window, "window_context": context}
    results = list(run_in_windows(sequences, run_batch, batch_tokens=budget, **settings))
    assert sorted(i for i, _ in results) == list(range(len(lengths)))  # each sequence exactly once
    for i, array in results:
        n = lengths[i]
        plan = [(0, n, 0, n)] if window is None else plan_windows(n, window, context)
        expected = np.empty((2, n, 3))
        for start, _, keep_start, keep_end in plan:
            for t in range(keep_start, keep_end):
                expected[:, t, :] = t + 1000 * (t - start)
        assert array.dtype == np.float32 and array.flags.c_contiguous and array.flags.owndata  # a copy
        np.testing.assert_array_equal(array, expected)
    for sizes in calls:  # every batch within the budget (a piece over it alone), pieces within the window
        assert len(sizes) == 1 or len(sizes) * (max(sizes) + 2) <= budget
        assert window is None or max(sizes) <= window


def test_run_in_windows_hands_memory_back_after_every_batch(monkeypatch):
    trims = []
    monkeypatch.setattr(elmo_core.runtime.windows, "release_free_memory", lambda: trims.append(1))
    sequences = [["1", "2"], ["3"], ["4", "5", "6"]]
    out = list(run_in_windows(sequences, position_features, batch_tokens=5, window_tokens=None))
    assert len(out) == 3 and len(trims) == 3  # one sequence per batch under this budget


def test_window_settings_read_0_as_whole_and_refuse_bad_values():
    assert check_window_settings(0, None) is None
    assert check_window_settings(None, 5) is None
    assert check_window_settings(64, 8) == 64
    with pytest.raises(ValueError, match="window_context .5. must be less than half of window_tokens .8."):
        check_window_settings(8, 5)
    with pytest.raises(ValueError, match="window_tokens must be a positive integer"):
        list(run_in_windows([["a"]], position_features, batch_tokens=8, window_tokens=-1))


def test_inputs_no_longer_than_the_window_are_read_whole_exactly():
    elmo = make_tiny_elmo()
    for n in (1, 63, 64):
        sentence = words(n)
        whole = embed_sentences(elmo, [sentence], layers="all", window_tokens=None)[0]
        np.testing.assert_array_equal(embed_sentences(elmo, [sentence], layers="all", window_tokens=64)[0], whole)


def test_600_token_document_default_window_equals_a_window_longer_than_the_document():
    # Any internal windowing gives the values of a long-enough window.
    assert DEFAULT_WINDOW_TOKENS >= 600
    elmo = make_tiny_elmo()
    doc = words(600)
    reference = embed_sentences(elmo, [doc], layers="all", window_tokens=5000)[0]
    for kwargs in ({}, {"window_tokens": 600}, {"window_tokens": None}):
        np.testing.assert_allclose(
            embed_sentences(elmo, [doc], layers="all", **kwargs)[0], reference, atol=1e-5, rtol=1e-4
        )


def _distance_to_a_cut(num_tokens: int, window: int, context: int) -> np.ndarray:
    """For each token, how far it sits from the nearest artificial edge of the window that keeps it."""
    far = np.iinfo(np.int64).max
    distance = np.full(num_tokens, far)
    for w in plan_windows(num_tokens, window, context):
        for t in range(w.keep_start, w.keep_end):
            left = t - w.start if w.start > 0 else far
            right = w.end - 1 - t if w.end < num_tokens else far
            distance[t] = min(left, right)
    return distance


def test_edge_effects_decay_with_the_distance_to_the_cut():
    # Measured on TINY (random weights, which remember longer than a trained biLM).
    # Numbers seen: max |difference| by distance to the cut, window 512 without context:
    # [0, 8): 1.46, [8, 32): 0.71, [32, 64): 0.4, [64, 128): 0.2, [128, 256): 0.04.
    elmo = make_tiny_elmo()
    doc = words(1500)
    whole = embed_sentences(elmo, [doc], layers="all", window_tokens=None)[0]
    cut = embed_sentences(elmo, [doc], layers="all", window_tokens=512, window_context=0)[0]
    diff = np.abs(cut - whole).max(axis=2)  # [layers, tokens]
    np.testing.assert_allclose(cut[0], whole[0], atol=1e-6, rtol=0)  # layer 0: the token alone
    distance = _distance_to_a_cut(len(doc), 512, 0)
    bins = [(0, 8), (8, 32), (32, 64), (64, 128), (128, 256)]
    worst = [float(diff[1:, (distance >= lo) & (distance < hi)].max()) for lo, hi in bins]
    assert worst[0] > 0.1  # the cut is real: the biLM restarts at <S> / </S>
    assert all(a > b for a, b in zip(worst, worst[1:])), worst
    assert worst[-1] < 0.1, worst


def test_default_context_keeps_vectors_close_to_a_whole_document_run():
    # Numbers seen on TINY: window 1024 with the default context (128): max |difference|
    # 0.047, mean 0.0004 (against 1.3 / 0.006 without context); LSTM outputs are ~0.8 in size.
    elmo = make_tiny_elmo()
    doc = words(3000)
    whole = embed_sentences(elmo, [doc], layers="all", window_tokens=None)[0]
    with_context = np.abs(embed_sentences(elmo, [doc], layers="all")[0] - whole)
    without = np.abs(embed_sentences(elmo, [doc], layers="all", window_context=0)[0] - whole)
    assert with_context.max() < 0.1 and with_context[1:].mean() < 0.005
    assert with_context.max() < without.max() / 10


def test_windows_do_not_depend_on_batch_mates_or_budget():
    elmo = make_tiny_elmo()
    doc, short = words(700), words(5, seed=1)
    alone = embed_sentences(elmo, [doc], layers="mix", window_tokens=128)[0]
    for budget in (200, 4096):
        together = embed_sentences(elmo, [short, doc, short], layers="mix", window_tokens=128, batch_tokens=budget)
        np.testing.assert_allclose(together[1], alone, atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(together[0], embed_sentences(elmo, [short], layers="mix")[0], atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- bounded memory
def _passes(elmo, sentences, **kwargs) -> list[tuple[int, int]]:
    """(rows, tokens) of every biLM call that embedding `sentences` makes."""
    seen = []
    handle = elmo.bilm.register_forward_hook(lambda module, args, out: seen.append(tuple(out.activations.shape[1:3])))
    try:
        out = embed_sentences(elmo, sentences, layers="mix", **kwargs)
    finally:
        handle.remove()
    assert [len(o) for o in out] == [len(s) for s in sentences]
    return seen


def _longest_pass(elmo, sentences, **kwargs) -> tuple[int, int]:
    """(most tokens in one biLM sequence, most positions one biLM call steps at once).

    A call steps `rows x (tokens + 2)` positions at once, or `rows x CHUNK_STEPS` when
    its rows are longer and it steps them a chunk at a time.
    """
    seen = _passes(elmo, sentences, **kwargs)
    return max(t for _, t in seen), max(rows * min(t + 2, CHUNK_STEPS) for rows, t in seen)


def test_a_long_document_is_read_in_passes_bounded_by_the_window_and_budget():
    elmo = make_tiny_elmo()
    for n in (3_000, 10_000):
        longest, positions = _longest_pass(elmo, [words(n)], window_tokens=256, batch_tokens=1024)
        assert longest <= 256 and positions <= 1024
    longest, _ = _longest_pass(elmo, [words(3_000)], window_tokens=None)
    assert longest == 3_000  # without windows the whole document is one sequence


def test_a_long_lines_windows_share_a_batch_as_many_as_the_budget_steps_at_once():
    """One line of 20,000 tokens at the default window (1024) and budget (4096): its 26
    windows go 16 to a biLM call (4096 // CHUNK_STEPS), not 3 (4096 // 1026), so the
    LSTM's products run on 16 columns per step; the vectors stay those of one window per call."""
    elmo = make_tiny_elmo()
    doc = words(20_000)
    windows = plan_windows(len(doc))
    seen = _passes(elmo, [doc])
    assert sorted(seen, reverse=True) == [(16, DEFAULT_WINDOW_TOKENS), (len(windows) - 16, DEFAULT_WINDOW_TOKENS)]
    assert 4096 // CHUNK_STEPS == 16
    one_per_call = embed_sentences(elmo, [doc], layers="top", batch_size=1)[0]
    np.testing.assert_allclose(embed_sentences(elmo, [doc], layers="top")[0], one_per_call, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_100000_token_document_through_embed_in_bounded_passes():
    elmo = make_tiny_elmo()
    doc = words(100_000)
    longest, positions = _longest_pass(elmo, [doc])
    assert longest <= DEFAULT_WINDOW_TOKENS and positions <= 4096


# ---------------------------------------------------------------- the CLI
def _cli_embed(monkeypatch, tmp_path, doc: list[str], *options: str):
    """`elmo embed` on one line holding `doc`, with a hooked TINY model; (vectors, longest pass)."""
    elmo = make_tiny_elmo(dropout=0.0)
    seen = []
    elmo.bilm.register_forward_hook(lambda module, args, out: seen.append(out.activations.shape[2]))
    monkeypatch.setattr(elmo_core.apps.cli.embed, "load_model", lambda *args, **kwargs: elmo)
    (tmp_path / "in.txt").write_text(" ".join(doc) + "\nshort line\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--layers", "top", "--no-progress", *options],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        vectors = f["0"][()]
        assert f["1"].shape == (2, 16)
    return elmo, vectors, max(seen)


def test_cli_reads_a_long_line_in_windows_of_the_given_size(monkeypatch, tmp_path):
    doc = words(5_000)
    elmo, vectors, longest = _cli_embed(monkeypatch, tmp_path, doc, "--window-tokens", "256", "--window-context", "16")
    assert vectors.shape == (5_000, 16) and longest <= 256
    expected = embed_sentences(elmo, [doc], layers="top", window_tokens=256, window_context=16)[0]
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=1e-4)
    _, whole, longest = _cli_embed(monkeypatch, tmp_path, doc, "--window-tokens", "0", "--overwrite")
    assert longest == 5_000
    np.testing.assert_allclose(
        whole, embed_sentences(elmo, [doc], layers="top", window_tokens=None)[0], atol=1e-5, rtol=1e-4
    )


def test_cli_refuses_a_bad_window_with_a_one_line_error(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "embed",
            str(tmp_path / "in.txt"),
            str(tmp_path / "out.hdf5"),
            "--window-tokens",
            "64",
            "--window-context",
            "40",
        ],
    )
    assert result.exit_code != 0
    assert "--window-context (40) must be less than half of --window-tokens (64)" in str(result.exception)
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.slow
def test_cli_embeds_a_100000_token_line_in_bounded_passes(monkeypatch, tmp_path):
    _, vectors, longest = _cli_embed(monkeypatch, tmp_path, words(100_000))
    assert vectors.shape == (100_000, 16) and longest <= DEFAULT_WINDOW_TOKENS


@pytest.mark.parametrize("budget", [64, 100_000, None])
def test_read_in_windows_gives_a_padded_batch_the_vectors_of_run_in_windows(budget):
    """The tensor form (hf_elmo's ElmoModel) cuts and keeps exactly as `embed` does; padding stays zero."""
    import torch

    from elmo_core import words_to_char_ids
    from elmo_core.runtime.batching import batches_by_token_budget
    from elmo_core.runtime.windows import read_in_windows

    elmo = make_tiny_elmo()
    words = ["river", "bank", "Ada", ",", "notes", "the", "was", "steep"]
    sentences = [[words[(i * 5) % 8] + str(i % 4) for i in range(n)] for n in (150, 7, 0, 97)]
    char_ids, mask = words_to_char_ids(sentences, 50)
    batches = None if budget is None else (lambda lengths: batches_by_token_budget(lengths, budget))
    with torch.no_grad():
        out, out_mask = read_in_windows(
            lambda c, m: elmo.bilm(c, m).activations, char_ids, None, batches=batches, window_tokens=40
        )
    assert out.shape == (3, 4, 150, 16) and torch.equal(out_mask, mask)
    for row, expected in enumerate(embed_sentences(elmo, sentences, window_tokens=40)):
        n = len(sentences[row])
        np.testing.assert_allclose(out[:, row, :n].numpy(), expected, atol=1e-5, rtol=0)
        if n < 150:
            assert out[:, row, n:].abs().max() == 0
    # Nothing to cut: None (the caller reads the batch as it is); a mask that is not right-padded: refused.
    assert read_in_windows(lambda c, m: None, char_ids, mask, batches=batches, window_tokens=150) is None
    bad = mask.clone()
    bad[0, 3] = False
    with pytest.raises(ValueError, match="padding must be on the right"):
        read_in_windows(lambda c, m: None, char_ids, bad, batches=batches, window_tokens=40)
