"""bf16 inference on the CPU: bf16 products with float32 accumulation, float32 everything else.

Under `embed(..., autocast_dtype=torch.bfloat16)` with no autograd (`cpu_bf16_active`),
the char CNN, highway, projection and LSTM products run in bf16 on weights converted and
packed once (`bf16_matmul`). Biases, gates, cell state, clips and outputs stay float32.
A kept copy follows a frozen weight's version and storage. A trainable weight's copy
lives one forward pass (`keep_bf16_copies`): fused optimizers update in place without a
new version. `check_cpu_precision` refuses a precision slower than float32 on this CPU.
"""

from __future__ import annotations

import contextvars
import functools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

WEIGHT_DTYPE = torch.float32
"""The dtype of every parameter the model builds, whatever torch's default (the files hold float32)."""

_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.cache
def cpu_bf16_support() -> str | None:
    """The CPU's native bf16 instructions ("amx_bf16" or "avx512_bf16"), or None.

    From `/proc/cpuinfo` on Linux, elsewhere from oneDNN's check ("native").
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


def check_cpu_precision(dtype: torch.dtype | None) -> None:
    """Raise `ValueError` unless `dtype` runs on this CPU at least as fast as float32.

    float32 or None always, bf16 where the CPU has native bf16 (`cpu_bf16_support`), nothing else.

    Args:
        dtype: The precision asked for: the autocast dtype, or the parameters' dtype.
    """
    if dtype in (None, torch.float32):
        return
    if dtype == torch.bfloat16 and cpu_bf16_support() is not None:
        return
    if dtype == torch.bfloat16:
        reason = "bf16 on the CPU needs native bf16 instructions (AVX512-BF16 or AMX), which this CPU does not have"
    else:
        name = {torch.float16: "fp16"}.get(dtype, str(dtype))
        reason = f"{name} has no native path on the CPU (it runs on GPUs)"
    raise ValueError(
        f"{reason}: it would run slower than float32 here. Use float32 (the default; --precision fp32) "
        "or int8 (--precision int8, elmo embed), or run it on a GPU."
    )


def check_cpu_bf16() -> None:
    """`check_cpu_precision(torch.bfloat16)`."""
    check_cpu_precision(torch.bfloat16)


def cpu_bf16_active(x: torch.Tensor) -> bool:
    """True when `x`'s products take the bf16 path: CPU, bf16 autocast, no autograd."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.is_grad_enabled()
    )


# (id(weight), ..., kind) -> (weak references, key made under, copy), for frozen weights. Not a
# WeakKeyDictionary (tensors compare element-wise), nor an attribute (it would be pickled).
_COPIES: dict[tuple, tuple[tuple[weakref.ref, ...], tuple, torch.Tensor]] = {}
# Inside `keep_bf16_copies`: (id(weight), ..., kind) -> (the weights, their copy), for trainable weights.
_PASS_COPIES: contextvars.ContextVar[dict[tuple, tuple] | None] = contextvars.ContextVar("bf16_pass", default=None)


@contextmanager
def keep_bf16_copies() -> Iterator[None]:
    """Keep the bf16 copies of trainable weights until the block ends (one forward pass). Nested blocks share them."""
    token = _PASS_COPIES.set(_PASS_COPIES.get() or {})
    try:
        yield
    finally:
        _PASS_COPIES.reset(token)


def _kept(
    weight: torch.Tensor | tuple[torch.Tensor, ...], kind: str, make: Callable[..., torch.Tensor]
) -> torch.Tensor:
    """`make(*weights)` on detached weights, made once and kept as long as it cannot be stale."""
    weights = weight if isinstance(weight, tuple) else (weight,)
    ident = (*map(id, weights), kind)
    if any(w.requires_grad for w in weights):
        pass_copies = _PASS_COPIES.get()
        if pass_copies is None:
            return make(*(w.detach() for w in weights))
        if ident not in pass_copies:  # the weights are held there, so their ids stay their own
            pass_copies[ident] = (weights, make(*(w.detach() for w in weights)))
        return pass_copies[ident][1]
    key = tuple((w._version, w.data_ptr(), w.device, w.shape) for w in weights)
    kept = _COPIES.get(ident)
    if kept is None or any(ref() is not w for ref, w in zip(kept[0], weights)) or kept[1] != key:
        refs = tuple(weakref.ref(w, lambda _: _COPIES.pop(ident, None)) for w in weights)
        kept = (refs, key, make(*(w.detach() for w in weights)))
        _COPIES[ident] = kept
    return kept[2]


def bf16_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 copy of `weight`, made once and kept as long as it cannot be stale."""
    return _kept(weight, "bf16", lambda w: w.to(torch.bfloat16))


def _packed(*weights: torch.Tensor) -> torch.Tensor:
    # oneDNN's blocked layout for its bf16 kernels (AMX tiles), as torch.compile's CPU
    # linears hold it. A plain weight is reordered into it at every product.
    return torch.ops.mkldnn._reorder_linear_weight(_joined_bf16(*weights), PACKED_ROWS)


PACKED_ROWS = 256
"""The row count oneDNN packs a weight for (a hint: any row count runs on it)."""


@functools.cache
def _packing_works() -> bool:
    try:
        x, w = torch.ones(2, 32, dtype=torch.bfloat16), torch.ones(16, 32)
        return bool(torch.ops.mkldnn._linear_pointwise(x, _packed(w), None, "none", [], "").eq(32).all())
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without oneDNN
        return False


def bf16_matmul(x: torch.Tensor, weight: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """`x @ weight.flatten(1).T` in bf16, accumulated in float32, on a weight packed once for oneDNN.

    A tuple of weights [out, in_k] acts as one weight, joined along its inputs: one product
    `[x_1, x_2] @ [W_1; W_2]` in place of two, whose results would each be rounded to bf16.

    Shape: x [rows, in] bf16, weight [out, ...] -> [rows, out] bf16
    """
    if x.device.type != "cpu" or not _packing_works():
        return F.linear(x, _kept(weight, "bf16 joined", _joined_bf16))
    return torch.ops.mkldnn._linear_pointwise(x, _kept(weight, "packed", _packed), None, "none", [], "")


def _joined_bf16(*weights: torch.Tensor) -> torch.Tensor:
    return torch.cat([w.flatten(1) for w in weights], dim=1).to(torch.bfloat16)


def bf16_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`bf16_matmul` of an input with any leading axes, as one 2-D product.

    Shape: x [..., in] (any float dtype), weight [out, in] -> [..., out] bf16
    """
    # A strided 3-D bf16 input would go through a batched product that copies the weight
    # once per batch entry.
    rows = x.to(torch.bfloat16).reshape(-1, x.shape[-1])  # [rows, in]
    return bf16_matmul(rows, weight).view(*x.shape[:-1], weight.shape[0])


def bf16_linear(x: torch.Tensor, layer: nn.Linear, bias: bool = True) -> torch.Tensor:
    """`layer(x)` with a bf16 product, the bias added in float32.

    Shape: x [..., in] (any float dtype) -> [..., out] float32
    """
    y = bf16_product(x, layer.weight).float()
    if bias and layer.bias is not None:
        y += layer.bias
    return y
