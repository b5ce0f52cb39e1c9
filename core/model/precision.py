"""bf16 inference on the CPU: bf16 matrix products, float32 accumulation and state.

On a CPU with native bf16 (AVX512-BF16, AMX-BF16) a bf16 matrix product runs several
times faster than a float32 one (the products accumulate in float32 inside the kernel;
only the result is rounded to bf16), and its weights take half the memory traffic,
which is what bounds the LSTM's per-step products. Plain `torch.autocast` on the CPU
does not get that speed here: it casts every weight again at each call (under
`torch.inference_mode` the cast cache does not apply), and it runs the gates and the cell
state in bf16. So inside `embed(..., autocast_dtype=torch.bfloat16)` on the CPU
(`elmo embed --precision bf16`), the char CNN, highway, projection and LSTM products take
bf16 inputs and weights converted once and kept (`bf16_weight`), and everything else stays
float32: the bias additions, the highway's gating, the LSTM gates, the cell state, the
clips, the layer outputs. Exactness is reported per layer by
`benchmarks/bench_contention.py --precision-shapes original,default` (cosine to float32).

When it applies (`cpu_bf16_active`): a CPU tensor, autocast enabled for the CPU with
bf16, and no autograd (inference). Training under autocast keeps torch's autocast.

On a CPU without native bf16, bf16 runs slower than float32 (each product is emulated);
`check_cpu_bf16` refuses it there with a message rather than running slower.

The bf16 copies cost memory: half the float32 size of the char CNN and LSTM weights
(about 185 MB for the original model's shape, 5 MB for the shipped one), kept while the
model lives and replaced when a weight changes (its version or storage).
"""

from __future__ import annotations

import functools
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["bf16_linear", "bf16_weight", "check_cpu_bf16", "cpu_bf16_active", "cpu_bf16_support"]

_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.cache
def cpu_bf16_support() -> str | None:
    """The CPU's native bf16 instructions ("amx_bf16" or "avx512_bf16"), or None.

    From `/proc/cpuinfo` on Linux; elsewhere from oneDNN's own check (which does not name
    the instructions: "native").
    """
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return next((f for f in _BF16_FLAGS if f in flags), None)
    except OSError:
        pass
    try:
        return "native" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the build
        return None


def check_cpu_bf16() -> None:
    """Raise `ValueError` unless this CPU computes bf16 natively (see the module docstring)."""
    if cpu_bf16_support() is None:
        raise ValueError(
            "bf16 on the CPU needs native bf16 instructions (AVX512-BF16 or AMX), which this CPU "
            "does not have: it would run slower than float32 here. Use float32 (the default; "
            "--precision fp32) or int8 (--precision int8), or bf16 on a GPU."
        )


def cpu_bf16_active(x: torch.Tensor) -> bool:
    """True when `x`'s products should take the bf16 path: CPU, bf16 autocast, no autograd."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.is_grad_enabled()
    )


# id(weight) -> (a weak reference to it, the key it was copied under, its bf16 copy). Not a
# WeakKeyDictionary (tensors compare element-wise) nor an attribute of the weight (it would
# be pickled with the weight, e.g. by torch.save of a state_dict).
_COPIES: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}


def bf16_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 copy of `weight`, made once and kept until the weight changes or is freed."""
    key = (weight._version, weight.data_ptr(), weight.device, weight.shape)
    kept = _COPIES.get(id(weight))
    if kept is None or kept[0]() is not weight or kept[1] != key:
        with torch.autocast("cpu", enabled=False), torch.no_grad():
            copy = weight.detach().to(torch.bfloat16)
        ident = id(weight)
        kept = (weakref.ref(weight, lambda _: _COPIES.pop(ident, None)), key, copy)
        _COPIES[ident] = kept
    return kept[2]


def bf16_linear(x: torch.Tensor, layer: nn.Linear, bias: bool = True) -> torch.Tensor:
    """`layer(x)` with a bf16 product and a float32 result (bias added in float32).

    Shape: x [..., in] (any float dtype) -> [..., out] float32
    """
    # As one 2-D product: a strided 3-D bf16 input would go through a batched product
    # that copies the weight once per batch entry.
    rows = x.to(torch.bfloat16).reshape(-1, x.shape[-1])  # [rows, in]
    y = F.linear(rows, bf16_weight(layer.weight)).float().reshape(*x.shape[:-1], layer.out_features)
    if bias and layer.bias is not None:
        y += layer.bias
    return y
