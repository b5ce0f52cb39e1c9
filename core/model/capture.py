"""Capturing the model as a graph for deployment: `torch.export` and ONNX (`dynamo=True`).

A captured graph holds no Python. While `capturing()` is True the biLM takes its plain
path: no checks that read values, the char CNN on every position (padding masked), and
the masked recurrence as one `scan` (`recurrence/scan.py`). Eager calls never take it.
TorchScript (`torch.jit.script`, `torch.jit.trace`, `torch.onnx.export(dynamo=False)`)
is refused at once by `refuse_torchscript`. See docs/guides/deployment.md.
"""

from __future__ import annotations

import torch

__all__ = ["TORCHSCRIPT_REFUSAL", "capturing", "refuse_torchscript"]

TORCHSCRIPT_REFUSAL = (
    "ELMo cannot be captured by TorchScript (torch.jit.script, torch.jit.trace or "
    "torch.onnx.export(..., dynamo=False)): a trace would fix the batch and length of the example. "
    "Use torch.export.export(...) or torch.onnx.export(..., dynamo=True) with dynamic_shapes "
    "(see the deployment guide)."
)


def capturing() -> bool:
    """True while `torch.export` (or the ONNX exporter built on it) captures the model.

    Always False before torch 2.7, which has no `torch.compiler.is_exporting`.
    """
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return is_exporting is not None and is_exporting()


def refuse_torchscript() -> None:
    """Raise `RuntimeError(TORCHSCRIPT_REFUSAL)` while `torch.jit.trace` records a call."""
    if torch.jit.is_tracing():
        raise RuntimeError(TORCHSCRIPT_REFUSAL)
