"""Opt-in int8 inference on the CPU: dynamic quantisation of the LSTMs' Linear layers.

Layer 0 stays float32: int8 inputs are scaled per batch, and a cached word vector must
not depend on its batch. torch's `quantize_dynamic` is deprecated for torchao but ships.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from ..model.elmo import Elmo

__all__ = ["quantize_int8"]


def quantize_int8(elmo: Elmo) -> Elmo:
    """A copy of `elmo` whose LSTM Linear layers run as int8 dynamic quantisation, on the CPU.

    For inference only: it cannot be trained, saved, moved or cast. Layer 0 is exact. The
    LSTM layers vary slightly with a sentence's batch (`benchmarks/bench_core.py --int8`).

    Args:
        elmo: A float32 `Elmo` on the CPU.

    Returns:
        A new `Elmo` in eval mode, with an empty token cache.

    Raises:
        ValueError: if the model is not on the CPU, not float32, or already quantised.
        RuntimeError: if this torch build has no dynamic quantisation.
    """
    if is_quantized(elmo):
        raise ValueError("this model is already quantised to int8; quantise the float32 model once.")
    parameter = next(elmo.parameters())
    if parameter.device.type != "cpu" or parameter.dtype != torch.float32:
        raise ValueError(
            f"int8 dynamic quantisation runs on the CPU in float32; the model is on "
            f"{parameter.device} in {parameter.dtype}. Call .to('cpu', torch.float32) first, "
            "or on a GPU use bf16 autocast (embed(..., autocast_dtype=torch.bfloat16)) instead."
        )
    model = copy.deepcopy(elmo).eval()
    quantize_linear_layers(model.bilm.forward_layers)
    quantize_linear_layers(model.bilm.backward_layers)
    if model.bilm.token_cache is not None:
        model.bilm.token_cache.clear()
    return model


def quantize_linear_layers(module: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` in `module`, in place, by its int8 version (per-channel weight scales)."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:  # pragma: no cover - depends on the torch build
        raise RuntimeError(
            f"torch {torch.__version__} has no torch.ao.quantization.quantize_dynamic; int8 "
            "inference needs a torch that still ships it (2.6 to 2.13 do)."
        ) from err
    with warnings.catch_warnings():
        # "torch.ao.quantization is deprecated": known (the module docstring).
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*")
        quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    return module


def is_quantized(module: nn.Module) -> bool:
    """True if any submodule is a dynamically quantised (int8) layer."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in module.modules())
