"""Capturing the model as a graph for deployment: `torch.export` and ONNX (`dynamo=True`).

TorchScript is refused. See docs/guides/deployment.md.
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
    """True while `torch.export` (or ONNX on it) captures the model. Always False before torch 2.7."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return is_exporting is not None and is_exporting()


def refuse_torchscript() -> None:
    """Raise `RuntimeError(TORCHSCRIPT_REFUSAL)` while `torch.jit.trace` records a call."""
    if torch.jit.is_tracing():
        raise RuntimeError(TORCHSCRIPT_REFUSAL)
