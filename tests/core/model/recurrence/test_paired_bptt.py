"""The training recurrence (`elmo_core.model.recurrence.paired_bptt`) computes the step loop's loss and gradients."""

from __future__ import annotations

import dataclasses
import inspect

import torch

from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model.recurrence import resolve_recurrence
from elmo_core.model.recurrence.paired_bptt import cell_backward, cell_forward, paired_training_stacks
from elmo_core.runtime import threads
from tests.conftest import make_tiny_options, rebuilt

SENTENCES = [  # rows deliberately not sorted by length, one word at the 50-slot limit
    ["a", "b"],
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["x" * 60, "y"],
    ["w"],
    ["one", "two", "three", "four"],
]


def _clip_free_lm(seed: int = 0) -> BiLMLanguageModel:
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    torch.manual_seed(seed)
    vocab = _vocab()
    lm = BiLMLanguageModel(options, len(vocab), dropout=0.0)
    with torch.no_grad():
        for p in lm.bilm.parameters():
            p.normal_(0.0, 0.5)  # larger than the default init, so that gates saturate somewhere
    return lm.train()


def _vocab() -> Vocabulary:
    words = sorted({w for s in SENTENCES for w in s})
    return Vocabulary(["<S>", "</S>", "<UNK>", *words])


def _loss_and_grads(lm: BiLMLanguageModel, recurrence: str, dtype: torch.dtype | None = None):
    lm = rebuilt(lm, recurrence)
    batch = make_batch(SENTENCES, _vocab())
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        out = lm(batch.char_ids, batch.mask, batch.targets)
    out.loss.backward()
    return out.loss.detach(), {name: p.grad.clone() for name, p in lm.named_parameters() if p.grad is not None}


def test_auto_trains_a_clip_free_biLM_on_the_cpu_with_the_paired_recurrence():
    lm = _clip_free_lm()
    stacks = (lm.bilm.forward_layers, lm.bilm.backward_layers)
    cpu = torch.device("cpu")
    assert resolve_recurrence("auto", stacks, cpu, True, False) == "paired"
    assert resolve_recurrence("auto", stacks, cpu, False, False) == "step"  # inference: unchanged
    assert resolve_recurrence("auto", stacks, cpu, True, True) == "step"  # stateful: the carry-over


def test_paired_training_step_equals_the_step_loop_in_float32():
    lm = _clip_free_lm()
    loss_step, grads_step = _loss_and_grads(lm, "step")
    loss_new, grads_new = _loss_and_grads(lm, "auto")
    torch.testing.assert_close(loss_new, loss_step, atol=1e-5, rtol=1e-5)
    assert grads_new.keys() == grads_step.keys()
    for name, g in grads_step.items():
        torch.testing.assert_close(grads_new[name], g, atol=2e-5, rtol=1e-4, msg=name)


def test_paired_training_stacks_give_each_row_what_it_gives_alone():
    lm = _clip_free_lm()
    stacks = (lm.bilm.forward_layers, lm.bilm.backward_layers)
    torch.manual_seed(1)
    tokens = torch.randn(3, 5, 8)
    lengths = torch.tensor([2, 5, 3])  # not sorted: the function sorts and restores the rows
    tokens[0, 2:] = tokens[2, 3:] = 0
    forward_out, backward_out = paired_training_stacks(stacks, tokens, lengths)
    for row in range(3):
        n = int(lengths[row])
        alone_f, alone_b = paired_training_stacks(stacks, tokens[row : row + 1, :n], lengths[row : row + 1])
        for got, alone in zip(forward_out + backward_out, alone_f + alone_b):
            torch.testing.assert_close(got[:n, row], alone[:, 0], atol=2e-6, rtol=1e-5)
            assert got[n:, row].abs().max() == 0 if n < 5 else True  # zero past the row's end


def test_paired_training_step_under_bf16_autocast_stays_within_its_stated_tolerance():
    """bf16 products, float32 state: the loss within 0.1% of the float32 step loop's, every
    gradient within 10% of it (in norm; 5% at most on this model), and on average over the
    parameters no further from it than 1.5x the step loop's own bf16 gradients are."""
    lm = _clip_free_lm()
    loss_ref, grads_ref = _loss_and_grads(lm, "step")
    loss_new, grads_new = _loss_and_grads(lm, "auto", torch.bfloat16)
    _, grads_old = _loss_and_grads(lm, "step", torch.bfloat16)
    assert abs(loss_new.item() / loss_ref.item() - 1) < 1e-3

    def errors(grads: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.stack([(grads[name] - g).norm() / g.norm().clamp_min(1e-12) for name, g in grads_ref.items()])

    new, old = errors(grads_new), errors(grads_old)
    assert new.max() < 0.1, new.max()
    assert new.mean() < 1.5 * old.mean(), (new.mean(), old.mean())


def test_the_fused_cell_kernels_are_built_a_few_times_whatever_the_batch_shapes_and_dtypes():
    # torch.compile builds a function at most 8 times per process, then leaves it eager for
    # good: slices of states with more rows, or a step at storage offset 0, each made a
    # build of their own (8, the limit, after one bf16 and one fp32 model here).
    # (Each thread count is a build too: the inductor's loops are compiled for one. The
    # thread rule is held to torch's count here, so that only shapes and dtypes vary.)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    lm = _clip_free_lm()
    vocab = _vocab()
    words = vocab.tokens[3:]  # every word of SENTENCES, after <S>, </S>, <UNK>
    batches = [
        [words[k : k + length] for length in lengths]
        for k, lengths in enumerate([(7, 3, 3, 1), (5, 5), (6, 4, 2, 2, 1), (1,), (8, 8, 7, 2), (3, 2, 1)])
    ]
    before = threads.thread_policy()
    threads.set_thread_policy("torch")
    torch._dynamo.reset()
    try:
        for dtype in (torch.bfloat16, None):
            for sentences in batches:
                batch = make_batch(sentences, vocab)
                with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                    out = lm(batch.char_ids, batch.mask, batch.targets)
                out.loss.backward()
    finally:
        threads.set_thread_policy(before)  # also when a step fails: the other tests keep their rule
    for kernel in (cell_forward, cell_backward):
        builds = len(_debug_get_cache_entry_list(inspect.unwrap(kernel).__code__))
        assert 2 <= builds <= 6, (kernel.__name__, builds)  # per dtype: the first shape, any rows, 1 row
