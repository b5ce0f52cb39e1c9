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

One rule decides which precision may run on the CPU (`check_cpu_precision`), for every
command and function that takes one: a reduced precision runs there only where it is not
slower than float32. That is bf16 on a CPU with native bf16 (the path above, and torch's
oneDNN kernels for training). On a CPU without native bf16, bf16 is emulated, product by
product; fp16 has no native CPU path here at all (torch's CPU autocast converts its
operands on every call). Both are refused there with one message rather than running slower.

The bf16 copies cost memory: half the float32 size of the char CNN and LSTM weights
(about 185 MB for the original model's shape, 5 MB for the shipped one). How long a copy
is kept depends on whether its weight is frozen (`bf16_weight`):
- a frozen weight (`requires_grad` False, ELMo's biLM as `Elmo` and `ElmoModel` load it):
  while the model lives, replaced when the weight's version or storage changes (every
  in-place change of a frozen weight, `load_state_dict` or `copy_`, bumps its version);
- a trainable weight: for one forward pass of the biLM (`keep_bf16_copies`, which
  `BiLM.forward` enters), since an optimizer may update it in place without bumping its
  version (torch's fused Adam, `Adam(fused=True)`, does not), and a copy kept across
  steps would then score stale weights.
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
"""The dtype every parameter of the model is built in, whatever torch's default dtype.

The weight files hold float32, and a program may set another default for a model of its
own (`torch.set_default_dtype(torch.bfloat16)`). Each module passes this dtype to the
parameters it creates, so a load gives the float32 model and its vectors, and torch's
default is neither read nor changed. Another precision is the user's choice afterwards:
`model.to(dtype)`, or `autocast_dtype` for the products alone.
"""

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


def check_cpu_precision(dtype: torch.dtype | None) -> None:
    """Raise `ValueError` unless `dtype` runs on this CPU at least as fast as float32.

    The one rule for a precision on the CPU (module docstring): float32 (or None: the
    model's own) always; bf16 where the CPU computes it natively (`cpu_bf16_support`);
    nothing else.

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
    """Raise `ValueError` unless this CPU computes bf16 natively (`check_cpu_precision`)."""
    check_cpu_precision(torch.bfloat16)


def cpu_bf16_active(x: torch.Tensor) -> bool:
    """True when `x`'s products should take the bf16 path: CPU, bf16 autocast, no autograd."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.is_grad_enabled()
    )


# (id(weight), kind) -> (a weak reference to it, the key it was made under, its copy), for
# frozen weights. Not a WeakKeyDictionary (tensors compare element-wise) nor an attribute of
# the weight (it would be pickled with the weight, e.g. by torch.save of a state_dict).
_COPIES: dict[tuple[int, str], tuple[weakref.ref, tuple, torch.Tensor]] = {}
# Inside `keep_bf16_copies`: (id(weight), kind) -> (the weight, its copy), for trainable weights.
_PASS_COPIES: contextvars.ContextVar[dict[tuple[int, str], tuple] | None] = contextvars.ContextVar(
    "bf16_pass", default=None
)


@contextmanager
def keep_bf16_copies() -> Iterator[None]:
    """Keep the bf16 copies of trainable weights until the block ends (one forward pass).

    Outside such a block a trainable weight is converted at every call. A nested block
    shares the outer block's copies.
    """
    token = _PASS_COPIES.set(_PASS_COPIES.get() or {})
    try:
        yield
    finally:
        _PASS_COPIES.reset(token)


def _kept(weight: torch.Tensor, kind: str, make: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`make(weight)`, kept as long as it cannot be stale (module docstring)."""
    ident = (id(weight), kind)
    if weight.requires_grad:
        pass_copies = _PASS_COPIES.get()
        if pass_copies is None:
            return make(weight.detach())
        if ident not in pass_copies:  # the weight is held there, so its id stays its own
            pass_copies[ident] = (weight, make(weight.detach()))
        return pass_copies[ident][1]
    key = (weight._version, weight.data_ptr(), weight.device, weight.shape)
    kept = _COPIES.get(ident)
    if kept is None or kept[0]() is not weight or kept[1] != key:
        kept = (weakref.ref(weight, lambda _: _COPIES.pop(ident, None)), key, make(weight.detach()))
        _COPIES[ident] = kept
    return kept[2]


def bf16_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 copy of `weight`, made once and kept as long as it cannot be stale.

    Shape: weight [...] float -> [...] bfloat16
    """
    return _kept(weight, "bf16", lambda w: w.to(torch.bfloat16))


def _packed(weight: torch.Tensor) -> torch.Tensor:
    # oneDNN's blocked layout for its bf16 kernels (AMX tiles), as torch.compile's CPU
    # linears hold it. A plain weight is reordered into it at every product.
    return torch.ops.mkldnn._reorder_linear_weight(weight.to(torch.bfloat16), PACKED_ROWS)


PACKED_ROWS = 256
"""The row count oneDNN packs a weight for (a hint: any row count runs on it)."""


@functools.cache
def _packing_works() -> bool:
    try:
        x, w = torch.ones(2, 32, dtype=torch.bfloat16), torch.ones(16, 32)
        return bool(torch.ops.mkldnn._linear_pointwise(x, _packed(w), None, "none", [], "").eq(32).all())
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without oneDNN
        return False


def bf16_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x @ weight.T` in bf16 with float32 accumulation, on a weight packed once and kept.

    The same values as `F.linear(x, bf16_weight(weight))`.

    Shape: x [rows, in] bf16; weight [out, in] float -> [rows, out] bf16
    """
    if x.device.type != "cpu" or not _packing_works():
        return F.linear(x, bf16_weight(weight))
    return torch.ops.mkldnn._linear_pointwise(x, _kept(weight, "packed", _packed), None, "none", [], "")


def bf16_linear(x: torch.Tensor, layer: nn.Linear, bias: bool = True) -> torch.Tensor:
    """`layer(x)` with a bf16 product and a float32 result (bias added in float32).

    Shape: x [..., in] (any float dtype) -> [..., out] float32
    """
    # As one 2-D product: a strided 3-D bf16 input would go through a batched product
    # that copies the weight once per batch entry.
    rows = x.to(torch.bfloat16).reshape(-1, x.shape[-1])  # [rows, in]
    y = bf16_matmul(rows, layer.weight).float().reshape(*x.shape[:-1], layer.out_features)
    if bias and layer.bias is not None:
        y += layer.bias
    return y
