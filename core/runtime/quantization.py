"""Opt-in int8 inference on the CPU: dynamic quantisation of the LSTMs' Linear layers.

Dynamic quantisation stores each `nn.Linear` weight as int8 (one scale per output row)
and quantises each input on the fly, so the matrix products run as int8 GEMMs (fbgemm /
x86 kernels) with float32 in and out. In the ELMo biLM that covers the LSTM input,
recurrent and projection products of both stacks: about 90% of the FLOPs of the
original model once the token cache answers most words. The token layer (char CNN,
highway, projection) stays float32: it is layer 0, which is context-independent and
cached per word, and an int8 version would make a cached vector depend on the batch
that first computed it (its inputs are quantised with one scale per batch). Cell state,
clipping, gates and the scalar mix stay float32 too.

This is an approximation: `benchmarks/bench_core.py --int8` prints the speed-up and the
cosine similarity and maximum difference of every layer and of the mix against float32
(`benchmarks/README.md` has the numbers for 2,000 real sentences).

Library choice: torch's own `torch.ao.quantization.quantize_dynamic`. It is deprecated
in favour of the separate torchao package but still ships with the torch versions we
support, and its kernels are part of torch; the import is checked so that a torch
without it gets a clear error rather than an AttributeError.
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
    """A copy of `elmo` whose Linear layers run as int8 dynamic quantisation (CPU only).

    The copy is for inference: its int8 layers have no gradients, and it cannot be
    saved with `save_model_folder`, moved to a GPU or run in another dtype. Quantise
    after loading instead: `quantize_int8(load_model_folder(p))`. The original model is
    left unchanged. Layer 0 is exactly the float32 model's; the LSTM layers and the mix
    are approximations (cosine about 0.999 per token), and vary slightly with a
    sentence's batch mates.

    Args:
        elmo: A float32 `Elmo` on the CPU.

    Returns:
        A new `Elmo` in eval mode, with the same scalar mixes and an empty token cache.

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
    """Replace every `nn.Linear` in `module` (in place) by its int8 dynamic version.

    Weights get one int8 scale per output row (per-channel); inputs are quantised per
    call, with one scale per input tensor, which is why int8 vectors vary slightly with
    a sentence's batch mates (float32 vectors do not).

    Returns:
        `module`.

    Raises:
        RuntimeError: if this torch build has no dynamic quantisation.
    """
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:  # pragma: no cover - depends on the torch build
        raise RuntimeError(
            f"torch {torch.__version__} has no torch.ao.quantization.quantize_dynamic; int8 "
            "inference needs a torch that still ships it (2.6 to 2.13 do)."
        ) from err
    with warnings.catch_warnings():
        # "torch.ao.quantization is deprecated": known, see the module docstring.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao")
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*")
        quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
    return module


def is_quantized(module: nn.Module) -> bool:
    """True if any submodule is a dynamically quantised (int8) layer."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in module.modules())
