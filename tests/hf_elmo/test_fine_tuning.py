"""Fine-tuning the biLM gives the same result through the core's `Elmo` and `ElmoModel` (R44)."""

from __future__ import annotations

import pytest
import torch

from elmo_core import words_to_char_ids

from ..conftest import make_tiny_elmo
from .conftest import make_tiny_hf_model

SENTENCES = [["The", "river", "bank", "."], ["a", "bank", "loan"]]


def _train(model, forward, steps: int = 2) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    losses = []
    for _ in range(steps):
        mixed = forward(model)
        loss = (mixed * torch.linspace(-1.0, 1.0, mixed.shape[-1])).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("subset", ["all", "char_cnn", "forward_layers"])
def test_core_elmo_unfrozen_after_construction_fine_tunes_as_ElmoModel(subset):
    char_ids, mask = words_to_char_ids(SENTENCES)
    core = make_tiny_elmo(dropout=0.0)
    hf = make_tiny_hf_model(dropout=0.0)
    for model in (core, hf):
        (model.bilm if subset == "all" else getattr(model.bilm, subset)).requires_grad_(True)
    core_losses = _train(core, lambda m: m(char_ids, mask).representations[0])
    hf_losses = _train(hf, lambda m: m(char_ids=char_ids, attention_mask=mask).last_hidden_state)
    assert core_losses == pytest.approx(hf_losses, rel=1e-6)
    assert core_losses[1] != core_losses[0]
    hf_state = hf.state_dict()
    changed = 0
    start = make_tiny_elmo(dropout=0.0).state_dict()
    for name, value in core.state_dict().items():
        torch.testing.assert_close(value, hf_state[name], atol=1e-6, rtol=1e-6, msg=name)
        changed += name.startswith("bilm.") and not torch.equal(value, start[name])
    assert changed > 0  # biLM weights moved, the same way in both
