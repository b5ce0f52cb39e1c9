from __future__ import annotations

import math

import pytest
import torch

from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.perplexity import Perplexity, evaluate
from tests.core.apps.training.conftest import make_lm


def test_average_perplexity_is_exp_of_the_mean_of_the_two_losses():
    p = Perplexity(forward_nll=10 * math.log(4), backward_nll=10 * math.log(9), tokens=10, sentences=2, unknown=0)
    assert p.forward == pytest.approx(4.0)
    assert p.backward == pytest.approx(9.0)
    assert p.average == pytest.approx(6.0)  # sqrt(4 * 9): the geometric mean, not (4 + 9) / 2
    assert (p + p).average == pytest.approx(6.0) and (p + p).tokens == 20


def test_evaluate_sums_every_prediction_whatever_the_batching(vocab, corpus):
    lm = make_lm(vocab)
    sentences = corpus[:20] + [[]]  # an empty sentence is skipped
    one_batch = evaluate(lm, sentences, vocab, batch_tokens=100_000)
    tiny_batches = evaluate(lm, sentences, vocab, batch_tokens=1)
    assert one_batch.sentences == 20 and one_batch.tokens == sum(len(s) + 1 for s in corpus[:20])
    torch.testing.assert_close(one_batch.forward_nll, tiny_batches.forward_nll, rtol=1e-5, atol=0)
    torch.testing.assert_close(one_batch.backward_nll, tiny_batches.backward_nll, rtol=1e-5, atol=0)
    out = lm.eval()(*make_batch(corpus[:20], vocab)[:3])
    torch.testing.assert_close(one_batch.forward, math.exp(out.forward_loss.item()), rtol=1e-5, atol=0)
    assert lm.training is False


def test_evaluate_counts_unknown_words_and_restores_training_mode(vocab):
    lm = make_lm(vocab).train()
    p = evaluate(lm, [["the", "zebra", "okapi"]], vocab)
    assert p.unknown == 2 and p.tokens == 4
    assert lm.training is True


def test_perplexity_of_raw_text_from_python_equals_elmo_perplexitys(tmp_path, vocab):
    pytest.importorskip("spacy")
    from typer.testing import CliRunner

    from elmo_core import perplexity
    from elmo_core.apps.cli import app
    from elmo_core.apps.training.model import save_language_model

    save_language_model(make_lm(vocab, dropout=0.0), vocab, tmp_path / "model")
    paragraphs = ["The cat sat on a mat. It was red!", "a big dog ran to the house ."]
    (tmp_path / "raw.txt").write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["perplexity", "--model", str(tmp_path / "model"), str(tmp_path / "raw.txt")])
    assert result.exit_code == 0, result.output
    p = perplexity(paragraphs, tmp_path / "model")
    assert p.sentences == 3  # the first paragraph is two sentences
    row = result.stdout.splitlines()[1].split("\t")
    assert row[1:7] == [f"{p.forward:.3f}", f"{p.backward:.3f}", f"{p.average:.3f}", *map(str, p[2:5])]
    mixed = perplexity([paragraphs[1], ["The", "cat", "sat"]], tmp_path / "model")
    assert mixed.sentences == 2 and mixed.tokens == 9 + 4  # raw text and a token list, side by side
