"""`adaptive_log_prob` gives `AdaptiveLogSoftmaxWithLoss`'s log-probabilities and gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from elmo_core.apps.training import softmax as softmax_module
from elmo_core.apps.training.softmax import adaptive_log_prob


def _softmax() -> nn.AdaptiveLogSoftmaxWithLoss:
    torch.manual_seed(0)
    return nn.AdaptiveLogSoftmaxWithLoss(16, 300, [20, 100], div_value=2.0, head_bias=True)


def _run(fn, softmax, hidden, target):
    softmax.zero_grad(set_to_none=True)
    x = hidden.clone().requires_grad_(True)
    out = fn(softmax, x, target)
    (out * torch.linspace(-1, 2, out.shape[0])).sum().backward()  # a different weight per row
    return out.detach(), x.grad, [p.grad.clone() if p.grad is not None else None for p in softmax.parameters()]


def _module(softmax, x, target):
    return softmax(x, target).output


@pytest.mark.parametrize("compiled", ["1", "0"], ids=["compiled", "eager"])
@pytest.mark.parametrize("clusters_hit", ["all", "head only", "second cluster empty"])
def test_adaptive_log_prob_equals_the_module_with_gradients(monkeypatch, clusters_hit, compiled):
    monkeypatch.setenv("ELMO_COMPILE", compiled)
    for kernel in (softmax_module._log_sum_exp, softmax_module._logits_grad):
        monkeypatch.setattr(kernel, "block_rows", 7)  # eager: several row blocks, the last one partial
    softmax = _softmax()
    torch.manual_seed(1)
    # 101 rows: the head's products run on bucket_rows(101) = 104 rows and the largest
    # cluster's on more rows than it has (elmo_core.model.kernels); the padding changes nothing.
    hidden = torch.randn(101, 16)
    high = {"all": 300, "head only": 20, "second cluster empty": 100}[clusters_hit]
    target = torch.randint(0, high, (101,))
    target[0] = high - 1
    expected = _run(_module, softmax, hidden, target)
    got = _run(adaptive_log_prob, softmax, hidden, target)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)
    for g, e in zip(got[2], expected[2]):
        if e is None:  # a cluster no target falls in gets no gradient, as in the module
            assert g is None
        else:
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_adaptive_log_prob_under_bf16_autocast_is_closer_to_float32_than_the_module():
    softmax = _softmax()
    torch.manual_seed(2)
    hidden, target = torch.randn(200, 16) * 3, torch.randint(0, 300, (200,))
    with torch.no_grad():
        reference = _module(softmax, hidden, target)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            module = _module(softmax, hidden.bfloat16(), target).float()
            got = adaptive_log_prob(softmax, hidden, target)
    assert got.dtype == torch.float32
    # The module's log-softmax runs in bf16 on the CPU; here only the products do.
    assert (got - reference).abs().mean() < 0.5 * (module - reference).abs().mean()
    assert (got - reference).abs().max() < 0.1


def test_adaptive_log_prob_rejects_targets_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 300\); found values from 0 to 300"):
        adaptive_log_prob(_softmax(), torch.randn(2, 16), torch.tensor([0, 300]))


def test_adaptive_log_prob_backward_runs_once_and_says_so():
    x = torch.randn(4, 16, requires_grad=True)
    out = adaptive_log_prob(_softmax(), x, torch.tensor([0, 1, 2, 3])).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once per forward"):
        out.backward()
