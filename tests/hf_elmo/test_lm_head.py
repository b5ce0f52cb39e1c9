"""ElmoLMHeadModel: a trained folder's biLM and softmax score text as `elmo perplexity` does."""

from __future__ import annotations

import math

import pytest
import torch
from typer.testing import CliRunner

import elmo_core
from elmo_core.apps.cli import app
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import save_language_model
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model.errors import WeightFileError
from hf_elmo import ElmoLMHeadModel

from ..core.apps.training.conftest import make_corpus, make_lm, write_lines


@pytest.fixture
def trained_folder(tmp_path):
    """A folder as `elmo train` writes it: a model folder, vocab.txt and lm_head.safetensors."""
    corpus = make_corpus(60)
    vocab = Vocabulary.build(corpus[:40])  # words of the later sentences may be unknown
    folder = tmp_path / "trained"
    save_language_model(make_lm(vocab, dropout=0.0), vocab, folder)
    return folder


def test_lm_head_perplexity_equals_elmo_perplexitys_on_the_same_text(tmp_path, trained_folder):
    sentences = make_corpus(15, seed=3)
    text = write_lines(tmp_path / "text.txt", sentences)
    result = CliRunner().invoke(app, ["perplexity", "--model", str(trained_folder), "--pretokenized", str(text)])
    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[1].split("\t")
    lm = ElmoLMHeadModel.from_pretrained(trained_folder)
    p = lm.perplexity(sentences)
    assert [f"{p.forward:.3f}", f"{p.backward:.3f}", f"{p.average:.3f}", str(p.tokens)] == row[1:5]
    assert p == elmo_core.perplexity(sentences, trained_folder)  # the core's public function: the same sums
    assert p.tokens == sum(len(s) + 1 for s in sentences)
    assert p.forward == pytest.approx(math.exp(-p.forward_log_likelihood / p.tokens), rel=1e-12)
    assert p.average == pytest.approx(math.exp(-p.average_log_likelihood / p.tokens), rel=1e-12)
    # forward() gives one batch's mean losses, the same numbers.
    char_ids, mask, targets, _ = make_batch(sentences, lm.vocab)
    with torch.no_grad():
        out = lm(char_ids=char_ids, attention_mask=mask.long(), labels=targets)
    assert float(out.forward_loss) == pytest.approx(p.forward_nll / p.tokens, rel=1e-5)
    assert float(out.loss) == pytest.approx(-p.average_log_likelihood / p.tokens, rel=1e-5)


def test_lm_head_saves_a_folder_elmo_perplexity_reads(tmp_path, trained_folder):
    sentences = make_corpus(5, seed=4)
    lm = ElmoLMHeadModel.from_pretrained(trained_folder)
    lm.save_pretrained(tmp_path / "again")
    assert elmo_core.perplexity(sentences, tmp_path / "again") == lm.perplexity(sentences)


def test_a_folder_without_a_softmax_is_refused_with_the_fix(saved_model_dir):
    with pytest.raises(WeightFileError, match="has no language-model head.*elmo train --model"):
        ElmoLMHeadModel.from_pretrained(saved_model_dir)
    with pytest.raises(TypeError, match="a string .* or a list of token strings"):
        elmo_core.perplexity([1, 2])
