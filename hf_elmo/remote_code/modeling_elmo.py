# Generated from hf_elmo/modeling_elmo.py and the code of the 10 elmo_core modules named in its
# sections, so that a saved model folder needs no elmo-bilm. Do not edit: edit those, then run
#     python -m hf_elmo.remote_code.generate
"""ELMo as a transformers model: ElmoPreTrainedModel, ElmoModel, ElmoForTokenClassification.

The modules are elmo_core's (`BiLM`, `ScalarMix`), held directly as `self.bilm` and
`self.scalar_mixes`, so the state dict has the keys of `elmo_core.Elmo` (`bilm.*`,
`scalar_mixes.*`; `elmo.` in front inside a task model): a folder written by
`elmo_core.save_model_folder` loads with `ElmoModel.from_pretrained`, and one written by
`save_pretrained` loads with `elmo_core.load_model_folder`.

    char_ids        [batch, tokens, 50]  character ids (ElmoTokenizer; no <S>/</S>); also
                                         accepted as input_ids (ElmoTokenizer's input_ids
                                         are one id per token, [batch, tokens])
      -> biLM                            n_layers + 1 layers [batch, tokens, 2P]  = hidden_states
      -> scalar mix(es) + dropout        [batch, tokens, 2P]                      = last_hidden_state
      -> (token classification) linear   [batch, tokens, num_labels]
"""

from __future__ import annotations

import contextvars
import functools
import getpass
import os
import re
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.utils import ModelOutput

from .configuration_elmo import (
    BOS_TOKEN,
    BiLMOptions,
    CharCNNOptions,
    DEFAULT_WINDOW_TOKENS,
    EOS_TOKEN,
    ElmoConfig,
    ElmoError,
    _check_window,
    check_window_settings,
    word_to_char_ids,
)


# ---- elmo_core/model/kernels.py -----------------------------------------------

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"

Fn = TypeVar("Fn", bound=Callable[..., Any])  # not F: torch.nn.functional in the generated remote code

_BUILD_FAILED: list[str] = []  # the first kernel torch.compile could not build, once one failed


def compile_enabled() -> bool:
    value = os.environ.get("ELMO_COMPILE", "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(
            f"ELMO_COMPILE must be 0 (torch's eager operators) or 1 (the fused kernels, the default); got {value!r}."
        )
    return value != "0"


def compile_cache_folder() -> Path:
    folder = os.environ.get(CACHE_VARIABLE)
    if folder is None:
        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        folder = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    return Path(os.path.abspath(folder))


def fused_kernel(fn: Fn, *, dynamic: bool | None = None) -> Fn:
    return _compiled_or_eager(fn, dynamic=dynamic)  # type: ignore[return-value]


def _compiled_or_eager(
    fn: Callable[..., Any], eager: Callable[..., Any] | None = None, dynamic: bool | None = None
) -> Callable[..., Any]:
    run_eager = fn if eager is None else eager
    compiled: list[Callable[..., Any]] = []  # torch.compile(fn), made on first use
    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if _BUILD_FAILED or not compile_enabled():
            return run_eager(*args)
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=dynamic))
        try:  # every call: a new shape makes torch compile the kernel again, which can fail too
            return compiled[0](*args)
        except Exception as error:  # noqa: BLE001  (no compiler, unsupported platform, ...)
            _BUILD_FAILED.append(fn.__qualname__)
            if isinstance(error, OSError):  # a file of the compile cache could not be written
                fix = f"Set {CACHE_VARIABLE} to a writable folder (now {compile_cache_folder()}) for the fused kernels"
            else:
                fix = "Install a C++ compiler (gcc or clang) for the fused kernels"
            warnings.warn(
                f"torch.compile could not build the fused kernel {fn.__qualname__} "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                "training goes on with torch's eager operators: the same numbers, slower. "
                f"{fix}, or set ELMO_COMPILE=0 to silence this.",
                RuntimeWarning,
                stacklevel=2,
            )
            return run_eager(*args)
    return call


# ---- elmo_core/model/errors.py ------------------------------------------------

class WeightFileError(ElmoError):
    pass


# ---- elmo_core/model/precision.py ---------------------------------------------

WEIGHT_DTYPE = torch.float32


def cpu_bf16_active(x: torch.Tensor) -> bool:
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.is_grad_enabled()
    )


_COPIES: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}
_PASS_COPIES: contextvars.ContextVar[dict[int, tuple] | None] = contextvars.ContextVar("bf16_pass", default=None)


@contextmanager
def keep_bf16_copies() -> Iterator[None]:
    token = _PASS_COPIES.set(_PASS_COPIES.get() or {})
    try:
        yield
    finally:
        _PASS_COPIES.reset(token)


def bf16_weight(weight: torch.Tensor) -> torch.Tensor:
    if weight.requires_grad:
        pass_copies = _PASS_COPIES.get()
        if pass_copies is None:
            return weight.detach().to(torch.bfloat16)
        if id(weight) not in pass_copies:  # the weight is held there, so its id stays its own
            pass_copies[id(weight)] = (weight, weight.detach().to(torch.bfloat16))
        return pass_copies[id(weight)][1]
    key = (weight._version, weight.data_ptr(), weight.device, weight.shape)
    kept = _COPIES.get(id(weight))
    if kept is None or kept[0]() is not weight or kept[1] != key:
        ident = id(weight)
        kept = (weakref.ref(weight, lambda _: _COPIES.pop(ident, None)), key, weight.detach().to(torch.bfloat16))
        _COPIES[ident] = kept
    return kept[2]


def bf16_linear(x: torch.Tensor, layer: nn.Linear, bias: bool = True) -> torch.Tensor:
    rows = x.to(torch.bfloat16).reshape(-1, x.shape[-1])  # [rows, in]
    y = F.linear(rows, bf16_weight(layer.weight)).float().reshape(*x.shape[:-1], layer.out_features)
    if bias and layer.bias is not None:
        y += layer.bias
    return y


# ---- elmo_core/model/char_cnn.py ----------------------------------------------

BLOCK_TOKENS = 32


HIGHWAY_BLOCK_TOKENS = 256


class Highway(nn.Module):
    def __init__(self, size: int, n_highway: int) -> None:
        super().__init__()
        self.size = size
        self.layers = nn.ModuleList(nn.Linear(size, 2 * size, dtype=WEIGHT_DTYPE) for _ in range(n_highway))
        for layer in cast(Iterable[nn.Linear], self.layers):  # torch types a ModuleList's items as Module
            self.init_carry_bias(layer)
    def init_carry_bias(self, layer: nn.Linear) -> None:
        nn.init.constant_(layer.bias[self.size :], -2.0)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bf16 = cpu_bf16_active(x)  # bf16 products, float32 gating (elmo_core.model.precision)
        for layer in cast(Iterable[nn.Linear], self.layers):
            candidate, gate = (bf16_linear(x, layer) if bf16 else layer(x)).chunk(2, dim=-1)  # 2 x [..., F]
            gate = torch.sigmoid(gate)
            x = gate * torch.relu(candidate) + (1 - gate) * x
        return x


TrainingPath = Callable[["CharCNN", torch.Tensor], torch.Tensor]


def max_pool_bf16(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return y.amax(dim=2).float() + bias


bf16_max_pool = fused_kernel(max_pool_bf16, dynamic=True)  # one kernel for every bank's shape


class CharCNN(nn.Module):
    def __init__(self, options: BiLMOptions, training_path: TrainingPath | None = None) -> None:
        super().__init__()
        cc = options.char_cnn
        self.max_characters_per_token = cc.max_characters_per_token
        self.n_characters = cc.n_characters
        self.char_embedding = nn.Parameter(torch.empty(cc.n_characters - 1, cc.embedding_dim, dtype=WEIGHT_DTYPE))
        self.reset_parameters()
        self.convolutions = nn.ModuleList(
            nn.Conv1d(cc.embedding_dim, count, width, dtype=WEIGHT_DTYPE) for width, count in cc.filters
        )
        self.activation = cc.activation
        self.highway = Highway(cc.n_filters, cc.n_highway)
        projection_dim = options.lstm.projection_dim
        self.projection: nn.Module = (
            nn.Linear(cc.n_filters, projection_dim, dtype=WEIGHT_DTYPE)
            if cc.n_filters != projection_dim
            else nn.Identity()
        )
        self.training_path = training_path
    def reset_parameters(self) -> None:
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)
    def embedding_table(self) -> torch.Tensor:
        zero = self.char_embedding.new_zeros(1, self.char_embedding.shape[1])
        return torch.cat([zero, self.char_embedding], dim=0)
    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and self.training_path is not None and char_ids.shape[0]:
            return self.training_path(self, char_ids)
        table = self.embedding_table()
        bf16 = cpu_bf16_active(table)  # bf16 products, float32 results (elmo_core.model.precision)
        features = torch.cat([self._convolve(table, block, bf16) for block in char_ids.split(BLOCK_TOKENS)])
        return torch.cat([self._project(block, bf16) for block in features.split(HIGHWAY_BLOCK_TOKENS)])
    def _convolve(self, table: torch.Tensor, char_ids: torch.Tensor, bf16: bool) -> torch.Tensor:
        x = F.embedding(char_ids, table).transpose(1, 2).to(torch.bfloat16 if bf16 else table.dtype)  # [tokens, E, W]
        pooled = []
        for conv in cast(Iterable[nn.Conv1d], self.convolutions):  # torch types a ModuleList's items as Module
            if bf16 and conv.bias is not None:  # the bias is the same in every window: added after the max, in float32
                y = bf16_max_pool(F.conv1d(x, bf16_weight(conv.weight)), conv.bias)  # [tokens, count]
            else:
                y = conv(x).amax(dim=2)  # [tokens, count]
            pooled.append(torch.relu(y) if self.activation == "relu" else torch.tanh(y))
        return torch.cat(pooled, dim=1)  # [tokens, F]
    def _project(self, features: torch.Tensor, bf16: bool) -> torch.Tensor:
        highway = self.highway(features)
        if bf16 and isinstance(self.projection, nn.Linear):
            return bf16_linear(highway, self.projection)
        return self.projection(highway)


# ---- elmo_core/model/recurrence/lstm.py ---------------------------------------

LSTMState = tuple[torch.Tensor, torch.Tensor]

StackOutputs = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]


StackRun = tuple[list[torch.Tensor], list[LSTMState]]
RunDirections = Callable[[Callable[[], StackRun], Callable[[], StackRun]], tuple[StackRun, StackRun]]

FORGET_BIAS = 1.0  # TensorFlow LSTMCell's default, added at run time

INPUT_BLOCK_ROWS = 128


def input_block_steps(batch_size: int) -> int:
    return max(1, -(-INPUT_BLOCK_ROWS // max(batch_size, 1)))


def lstm_gates(z: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    i, j, f, o = z.chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, torch.sigmoid(o) * torch.tanh(c_t)


def _lstm_gates_in_place(
    z: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    i, j, f, o = z.chunk(4, dim=1)
    c_t = f.sigmoid_().mul_(c).add_(i.sigmoid_().mul_(j.tanh_()))
    if cell_clip:
        c_t.clamp_(-cell_clip, cell_clip)
    return c_t, o.sigmoid_().mul_(torch.tanh(c_t))


def lstm_gates_bf16(
    pre: torch.Tensor, bias: torch.Tensor, recurrent: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    i, j, f, o = (pre.float() + bias).chunk(4, dim=1)  # block order i, j, f, o
    z = torch.cat([i, j, f + FORGET_BIAS, o], dim=1) + recurrent.float()  # [n, 4D]
    c_t, gated = lstm_gates(z, c, cell_clip)
    return c_t, gated.to(torch.bfloat16)


bf16_gates = fused_kernel(lstm_gates_bf16, dynamic=True)  # rows change at every step

_COMPILED_GATES = None


def _compiled_gates():
    global _COMPILED_GATES
    if _COMPILED_GATES is None:
        _COMPILED_GATES = torch.compile(lstm_gates, dynamic=True)
    return _COMPILED_GATES


def reverse_index(lengths: torch.Tensor, num_steps: int) -> torch.Tensor:
    steps = torch.arange(num_steps, device=lengths.device)[:, None]  # [steps, 1]
    row_len = lengths[None, :]  # [1, batch]
    return torch.where(steps < row_len, row_len - 1 - steps, steps)


def sort_rows(lengths: torch.Tensor, num_steps: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    sorted_lengths, order = lengths.sort(descending=True, stable=True)
    steps = torch.arange(num_steps, device=lengths.device)
    return sorted_lengths, order, (sorted_lengths[None, :] > steps[:, None]).sum(dim=1).tolist()


class LSTMCellWithProjection(nn.Module):
    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        cell_clip: float | None = None,
        proj_clip: float | None = None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.dim = dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.compile_recurrence = False  # see compile_recurrence()
        self.input_linear = nn.Linear(input_size, 4 * dim, dtype=WEIGHT_DTYPE)
        self.state_linear = nn.Linear(projection_dim, 4 * dim, bias=False, dtype=WEIGHT_DTYPE)
        self.state_projection = nn.Linear(dim, projection_dim, bias=False, dtype=WEIGHT_DTYPE)
    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_state: LSTMState | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[torch.Tensor, LSTMState | None]:
        if fused and not self.can_fuse:
            raise ValueError(
                "fused=True needs a cell without cell_clip/proj_clip and with float (not int8) weights: "
                "torch's fused LSTM kernels cannot clip. Leave fused=None to choose automatically."
            )
        if (self.can_fuse if fused is None else fused) and batch_sizes and batch_sizes[0] == inputs.shape[1]:
            return self._forward_fused(inputs, batch_sizes, initial_state, final_state)
        outputs, state = self._forward_steps(inputs, batch_sizes, initial_state)
        return outputs, state if final_state else None
    def _forward_steps(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None
    ) -> tuple[torch.Tensor, LSTMState]:
        num_steps, batch_size, _ = inputs.shape
        D = self.dim
        if initial_state is None:
            h = inputs.new_zeros(batch_size, self.projection_dim)
            c = inputs.new_zeros(batch_size, D)
        else:
            h, c = initial_state
        if self._takes_columns(inputs):
            return self._forward_columns(inputs, batch_sizes, h, c)
        outputs = []
        grad = torch.is_grad_enabled()
        if getattr(self, "compile_recurrence", False):
            gates = _compiled_gates()
        else:
            gates = lstm_gates if grad else _lstm_gates_in_place
        float_linears = self.has_float_linears
        bf16 = cpu_bf16_active(inputs) and float_linears
        recurrent = bf16_weight(self.state_linear.weight) if bf16 else None
        pre: tuple[torch.Tensor, ...] = ()
        block = input_block_steps(batch_size)
        for t in range(num_steps):
            if t % block == 0:
                pre, pre_t = (), None  # free the last block before computing the next
                pre = self._input_products(inputs[t : t + block], bf16).unbind(0)
            n = batch_sizes[t]
            pre_t = pre[t % block]
            if recurrent is not None:  # bf16: the [n, 4D] product in bf16; the sum and the gates in one pass
                c_t, gated = bf16_gates(
                    pre_t[:n],
                    self.input_linear.bias,
                    F.linear(h[:n].to(torch.bfloat16), recurrent),
                    c[:n],
                    self.cell_clip,
                )
            else:
                c_t, gated = gates(self._step_sum(pre_t[:n], h[:n], grad, float_linears), c[:n], self.cell_clip)
            h_t = bf16_linear(gated, self.state_projection) if bf16 else self.state_projection(gated)  # [n, P]
            if self.proj_clip:
                h_t = h_t.clamp(-self.proj_clip, self.proj_clip)
            if n == batch_size:
                h, c = h_t, c_t
            else:  # rows n.. have ended: keep their final state
                h = torch.cat([h_t, h[n:].to(h_t.dtype)])
                c = torch.cat([c_t, c[n:].to(c_t.dtype)])
            if grad:  # out of place, for autograd
                outputs.append(F.pad(h_t, (0, 0, 0, batch_size - n)))
            else:  # written in place: no per-step padded copies and no stack (half the memory)
                if t == 0:
                    output = h_t.new_zeros(num_steps, batch_size, h_t.shape[1])
                output[t, :n] = h_t
        if num_steps == 0:
            return inputs.new_zeros(0, batch_size, self.projection_dim), (h, c)
        return (torch.stack(outputs) if outputs else output), (h, c)
    def _step_sum(self, pre: torch.Tensor, h: torch.Tensor, grad: bool, float_linears: bool) -> torch.Tensor:
        if grad:
            return pre + self.state_linear(h)
        if float_linears:  # in one product: one [n, 4D] tensor per step
            return torch.addmm(pre, h, self.state_linear.weight.t())
        z = self.state_linear(h)  # int8 layers (elmo_core.runtime.quantization): through the module
        z += pre  # in place: one [n, 4D] tensor per step, not two
        return z
    def _takes_columns(self, inputs: torch.Tensor) -> bool:
        return (
            inputs.device.type == "cpu"
            and inputs.dtype == torch.float32
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and self.has_float_linears
            and not getattr(self, "compile_recurrence", False)
        )
    def _forward_columns(
        self, inputs: torch.Tensor, batch_sizes: list[int], h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState]:
        num_steps, batch_size, _ = inputs.shape
        D, running = self.dim, batch_size
        h_out, c_out = h.clone(), c.clone()  # the final states, row by row as rows end
        h_cols = h.t().contiguous()  # [P, running]; replaced, never written in place
        c_cols = c.t().clone(memory_format=torch.contiguous_format)  # [D, running], updated in place
        output = inputs.new_zeros(num_steps, batch_size, self.projection_dim)
        w_x, w_h, w_p = self.input_linear.weight, self.state_linear.weight, self.state_projection.weight
        bias = self.input_linear.bias[:, None]  # [4D, 1]
        block = input_block_steps(batch_size)
        pre_buffer = inputs.new_empty(4 * D * min(block, num_steps) * batch_size)
        z_buffer = inputs.new_empty(4 * D * batch_size)
        pre = pre_buffer
        for t in range(num_steps):
            if t % block == 0:
                x_cols = inputs[t : t + block].reshape(-1, inputs.shape[-1]).t().contiguous()  # [in, rows]
                pre = pre_buffer[: 4 * D * x_cols.shape[1]].view(4 * D, -1)  # step s: columns s*batch..
                torch.addmm(bias, w_x, x_cols, out=pre)
                pre[2 * D : 3 * D] += FORGET_BIAS  # block order i, j, f, o
            n = batch_sizes[t]
            if n < running:  # rows n.. have ended: keep their final state, drop their columns
                h_out[n:running], c_out[n:running] = h_cols[:, n:].t(), c_cols[:, n:].t()
                h_cols, c_cols, running = h_cols[:, :n].contiguous(), c_cols[:, :n].contiguous(), n
            first = (t % block) * batch_size
            z = torch.addmm(pre[:, first : first + n], w_h, h_cols, out=z_buffer[: 4 * D * n].view(4 * D, n))
            i, j, f, o = z.chunk(4, dim=0)  # [D, n] each, contiguous
            c_cols.mul_(f.sigmoid_()).add_(i.sigmoid_().mul_(j.tanh_()))
            if self.cell_clip:
                c_cols.clamp_(-self.cell_clip, self.cell_clip)
            h_cols = torch.mm(w_p, o.sigmoid_().mul_(torch.tanh(c_cols, out=i)))  # [P, n]
            if self.proj_clip:
                h_cols.clamp_(-self.proj_clip, self.proj_clip)
            output[t, :n] = h_cols.t()
        h_out[:running], c_out[:running] = h_cols.t(), c_cols.t()
        return output, (h_out, c_out)
    def _input_products(self, inputs: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        if bf16:  # the bf16 product alone: `bf16_gates` adds the biases in float32, in the step's one pass
            rows = inputs.to(torch.bfloat16).reshape(-1, inputs.shape[-1])  # [steps * batch, in]
            return F.linear(rows, bf16_weight(self.input_linear.weight)).view(*inputs.shape[:-1], 4 * self.dim)
        pre = self.input_linear(inputs.reshape(-1, inputs.shape[-1])).view(*inputs.shape[:-1], 4 * self.dim)
        pre[..., 2 * self.dim : 3 * self.dim] += FORGET_BIAS  # block order i, j, f, o; in place: no copy
        return pre
    @property
    def has_float_linears(self) -> bool:
        return all(type(m) is nn.Linear for m in (self.input_linear, self.state_linear, self.state_projection))
    @property
    def can_fuse(self) -> bool:
        return not self.cell_clip and not self.proj_clip and self.has_float_linears
    def torch_lstm_weights(self) -> list[torch.Tensor]:
        def reorder(w: torch.Tensor) -> torch.Tensor:
            i, j, f, o = w.chunk(4, dim=0)
            return torch.cat([i, f, j, o])
        i, j, f, o = self.input_linear.bias.chunk(4)
        b_ih = torch.cat([i, f + FORGET_BIAS, j, o])
        return [
            reorder(self.input_linear.weight),
            reorder(self.state_linear.weight),
            b_ih,
            torch.zeros_like(b_ih),
            self.state_projection.weight,
        ]
    def _forward_fused(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None, final_state: bool
    ) -> tuple[torch.Tensor, LSTMState | None]:
        num_steps, batch_size, _ = inputs.shape
        sizes = torch.tensor(batch_sizes)
        lengths = (sizes[:, None] > torch.arange(batch_size)[None, :]).sum(dim=0)  # [batch]
        weights = self.torch_lstm_weights()
        dtype = weights[0].dtype  # float32 state and products, also under autocast (see below)
        h0, c0 = self._fused_initial_state(inputs, initial_state, dtype)
        flags = (True, 1, 0.0, self.training, False)
        padded = not final_state and inputs.device.type == "cpu"
        with torch.autocast(inputs.device.type, enabled=False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            if padded:
                outputs, _, _ = torch.lstm(inputs.to(dtype), (h0, c0), weights, *flags, False)  # batch_first=False
                active = torch.arange(num_steps)[:, None] < lengths[None, :]  # [steps, batch]
                return outputs * active[..., None].to(outputs.device), None
            packed = pack_padded_sequence(inputs, lengths, enforce_sorted=True)
            data, h, c = torch.lstm(packed.data.to(dtype), packed.batch_sizes, (h0, c0), weights, *flags)
        outputs, _ = pad_packed_sequence(
            PackedSequence(data, packed.batch_sizes), total_length=num_steps
        )  # [steps, batch, P], zeros where a row has ended
        return outputs, ((h[0], c[0]) if final_state else None)
    def _fused_initial_state(
        self, inputs: torch.Tensor, initial_state: LSTMState | None, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if initial_state is None:
            batch_size = inputs.shape[1]
            h0 = inputs.new_zeros(1, batch_size, self.projection_dim, dtype=dtype)
            c0 = inputs.new_zeros(1, batch_size, self.dim, dtype=dtype)
            return h0, c0
        h0, c0 = (s.unsqueeze(0).to(dtype) for s in initial_state)
        return h0, c0


class LSTMStack(nn.Module):
    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        n_layers: int,
        cell_clip: float | None,
        proj_clip: float | None,
        use_skip_connections: bool,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.use_skip_connections = use_skip_connections
        self.dropout = dropout
        self.layers = nn.ModuleList(
            LSTMCellWithProjection(input_size if k == 0 else projection_dim, dim, projection_dim, cell_clip, proj_clip)
            for k in range(n_layers)
        )
    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_states: list[LSTMState | None] | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[list[torch.Tensor], list[LSTMState | None]]:
        outputs: list[torch.Tensor] = []
        final_states: list[LSTMState | None] = []
        x = inputs
        for k, layer in enumerate(self.layers):
            layer_input = F.dropout(x, self.dropout, self.training) if self.dropout else x
            state = initial_states[k] if initial_states is not None else None
            y, final = layer(layer_input, batch_sizes, state, fused=fused, final_state=final_state)
            if k > 0 and self.use_skip_connections:
                y = y + layer_input
            outputs.append(y)
            final_states.append(final)
            x = y
        return outputs, final_states


# ---- elmo_core/model/bilm.py --------------------------------------------------

class BiLMOutput(NamedTuple):
    activations: torch.Tensor
    mask: torch.Tensor


Stacks = tuple[LSTMStack, LSTMStack]  # forward, backward


class TokenVectors(Protocol):
    def lookup(self, words: torch.Tensor, char_cnn: nn.Module) -> torch.Tensor:
        ...
    def clear(self) -> None:
        ...


class StackRunner(Protocol):
    def threads(self, device: torch.device) -> AbstractContextManager:
        ...
    def plan(self, stacks: Stacks, tokens: torch.Tensor, *, stateful: bool, dropout: bool) -> Any:
        ...
    def run(self, plan: Any, stacks: Stacks, tokens: torch.Tensor, lengths: torch.Tensor) -> StackOutputs:
        ...


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, width = rows.shape
    if n == 0 or width == 0:
        return torch.unique(rows, dim=0, return_inverse=True)
    bits = max(1, int(rows.max()).bit_length())  # per column value
    rank_bits = max(1, n.bit_length())  # ranks are < n
    per_key = max(1, (63 - rank_bits) // bits)  # columns per int64 key
    if rank_bits + bits > 63:  # values too wide to pack: torch's own path
        return torch.unique(rows, dim=0, return_inverse=True)
    shifts = torch.arange(per_key - 1, -1, -1, device=rows.device) * bits  # most significant first
    rank = torch.zeros(n, dtype=torch.int64, device=rows.device)
    for start in range(0, width, per_key):
        block = rows[:, start : start + per_key].long()
        key = (block << shifts[-block.shape[1] :]).sum(dim=1)  # [n], disjoint bits: exact
        rank = torch.unique((rank << (bits * block.shape[1])) | key, return_inverse=True)[1]
    first = torch.empty(int(rank.max()) + 1, dtype=torch.int64, device=rows.device)
    first.scatter_(0, rank, torch.arange(n, device=rows.device))  # one row of each rank
    return rows[first], rank


def check_char_ids(char_ids: object, max_characters_per_token: int, n_characters: int) -> torch.Tensor:
    if not isinstance(char_ids, torch.Tensor):
        raise TypeError(
            f"char_ids must be a torch.Tensor; got {type(char_ids).__name__}. "
            "Build it with `char_ids, mask = elmo_core.words_to_char_ids(sentences)` (a pair)."
        )
    if char_ids.dim() != 3 or char_ids.shape[-1] != max_characters_per_token:
        raise ValueError(
            f"char_ids must be 3-D [batch, tokens, {max_characters_per_token}]; got shape "
            f"{tuple(char_ids.shape)}. Did you pass word ids? Use words_to_char_ids()."
        )
    dtype = char_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or torch.iinfo(dtype).max < n_characters - 1:
        raise TypeError(
            f"char_ids must be an integer tensor whose dtype holds ids up to {n_characters - 1} (int16, int32 or "
            f"int64); got dtype {dtype}. Make them as int64 (words_to_char_ids and ElmoTokenizer do), or "
            "convert ids held in a wide enough dtype with char_ids.long()."
        )
    if char_ids.numel():
        low, high = int(char_ids.min()), int(char_ids.max())
        if low < 0 or high >= n_characters:
            raise ValueError(
                f"char_ids must lie in [0, {n_characters}); found values from {low} to {high}. "
                "Ids are UTF-8 bytes + 1 and markers 257..261 (see elmo_core.model.characters); "
                "0 marks a padded position."
            )
    return char_ids.long()  # no copy when they are int64 already


def _check_part(name: str, value: object, method: str) -> None:
    if value is not None and not hasattr(value, method):
        raise TypeError(
            f"{name} must be an object with a {method} method (see elmo_core.runtime.parts), or None; got {value!r}. "
            "To choose parts by name or size, load with load_elmo(..., recurrence='step', token_cache_words=n)."
        )


class BiLM(nn.Module):
    bos_char_ids: torch.Tensor  # buffers (not saved): the char ids of <S> and </S>, [C] int64
    eos_char_ids: torch.Tensor
    def __init__(
        self,
        options: BiLMOptions,
        *,
        stateful: bool = False,
        keep_sentence_boundaries: bool = False,
        dropout: float = 0.0,
        token_cache: TokenVectors | None = None,
        recurrence: StackRunner | None = None,
        char_cnn_training: TrainingPath | None = None,
    ) -> None:
        super().__init__()
        self.options = options
        self.stateful = stateful
        self.keep_sentence_boundaries = keep_sentence_boundaries
        lstm = options.lstm
        _check_part("recurrence", recurrence, "plan")
        _check_part("token_cache", token_cache, "lookup")
        _check_part("char_cnn_training", char_cnn_training, "__call__")
        self.char_cnn = CharCNN(options, training_path=char_cnn_training)
        stack_args = (
            lstm.projection_dim,
            lstm.dim,
            lstm.projection_dim,
            lstm.n_layers,
            lstm.cell_clip,
            lstm.proj_clip,
            lstm.use_skip_connections,
            dropout,
        )
        self.forward_layers = LSTMStack(*stack_args)
        self.backward_layers = LSTMStack(*stack_args)
        C = options.char_cnn.max_characters_per_token
        self.register_buffer("bos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.register_buffer("eos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.reset_buffers()
        self._states: dict[str, list[LSTMState]] | None = None
        self.token_cache = token_cache
        self.recurrence = recurrence
    @property
    def output_dim(self) -> int:
        return self.options.output_dim
    @property
    def n_outputs(self) -> int:
        return self.options.n_outputs
    def reset_buffers(self) -> None:
        C = self.options.char_cnn.max_characters_per_token
        with torch.no_grad():
            self.bos_char_ids.copy_(torch.tensor(word_to_char_ids(BOS_TOKEN, C)))
            self.eos_char_ids.copy_(torch.tensor(word_to_char_ids(EOS_TOKEN, C)))
    def reset_states(self) -> None:
        self._states = None
    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> BiLMOutput:
        C = self.options.char_cnn.max_characters_per_token
        char_ids = check_char_ids(char_ids, C, self.options.char_cnn.n_characters)
        with self.threads(), keep_bf16_copies():
            return self._forward(char_ids, mask, self.bos_char_ids.device)
    def threads(self) -> AbstractContextManager:
        if self.recurrence is None or torch.compiler.is_compiling():
            return nullcontext()
        return self.recurrence.threads(self.bos_char_ids.device)
    def _forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None, device: torch.device) -> BiLMOutput:
        char_ids = char_ids.to(device)
        real = (char_ids != 0).any(dim=-1) if mask is None else _check_mask(mask, char_ids).to(device)
        ids, full_lengths, full_mask = self._add_sentence_boundaries(char_ids, real)
        token_embedding = self._token_embedding(ids, full_mask)  # [batch, tokens + 2, P]
        forward_out, backward_out, order = self._run_stacks(token_embedding, full_lengths)
        activations = self._gather_activations(token_embedding, forward_out, backward_out, order)
        if self.keep_sentence_boundaries:
            return BiLMOutput(activations, full_mask)
        activations *= real[None, :, :, None].to(activations.dtype)
        return BiLMOutput(activations, real)
    def _add_sentence_boundaries(
        self, char_ids: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch_size, num_tokens, C = char_ids.shape
        device = char_ids.device
        lengths = real.sum(dim=1)  # [batch]
        positions = torch.arange(num_tokens, device=device)
        if not torch.equal(real, positions[None, :] < lengths[:, None]):
            raise ValueError(
                "padding must be on the right: every row of the mask (or of non-zero char_ids) "
                "must be True for its first n positions and False after. Build inputs with "
                "words_to_char_ids()."
            )
        ids = char_ids.new_zeros(batch_size, num_tokens + 2, C)
        ids[:, 1 : num_tokens + 1] = char_ids * real[..., None]
        ids[:, 0] = self.bos_char_ids
        ids[torch.arange(batch_size, device=device), lengths + 1] = self.eos_char_ids
        full_lengths = lengths + 2
        full_mask = torch.arange(num_tokens + 2, device=device)[None, :] < full_lengths[:, None]
        return ids, full_lengths, full_mask
    def _gather_activations(
        self,
        token_embedding: torch.Tensor,
        forward_out: list[torch.Tensor],
        backward_out: list[torch.Tensor],
        order: torch.Tensor,
    ) -> torch.Tensor:
        batch_size, num_steps, P = token_embedding.shape
        num_tokens = num_steps - 2
        keep = slice(None) if self.keep_sentence_boundaries else slice(1, num_tokens + 1)
        dtype = forward_out[-1].dtype
        activations = token_embedding.new_empty(
            len(forward_out) + 1,
            batch_size,
            num_steps if self.keep_sentence_boundaries else num_tokens,
            2 * P,
            dtype=dtype,
        )
        activations[0, ..., :P] = token_embedding[:, keep]  # layer 0: the token vector twice
        activations[0, ..., P:] = token_embedding[:, keep]
        for k in reversed(range(len(forward_out))):
            for half, outputs in ((slice(0, P), forward_out), (slice(P, 2 * P), backward_out)):
                y = outputs.pop().transpose(0, 1)[:, keep].to(dtype)  # layer k [sorted batch, T, P], freed once copied
                activations[k + 1, ..., half].index_copy_(0, order, y)  # row r of y is batch row order[r]
        return activations
    def _token_embedding(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        words, inverse = distinct_rows(ids[mask])  # [distinct, chars], [num_real]
        cache = self.token_cache
        parameters = list(self.char_cnn.parameters())
        char_cnn_trains = any(p.requires_grad for p in parameters) and (torch.is_grad_enabled() or self.training)
        if cache is None or char_cnn_trains:
            vectors = self.char_cnn(words)
        else:  # nothing to differentiate: reuse earlier vectors of the same words
            vectors = cache.lookup(words, self.char_cnn)
        embedded = vectors[inverse]  # [num_real, P]
        out = embedded.new_zeros(*mask.shape, embedded.shape[-1])
        out[mask] = embedded
        return out
    def _run_stacks(self, tokens: torch.Tensor, lengths: torch.Tensor) -> StackOutputs:
        if self.recurrence is None:  # the reference: the step loop with torch's threads
            return self.run_sorted(tokens, lengths)
        stacks = (self.forward_layers, self.backward_layers)
        dropout = self.training and any(stack.dropout for stack in stacks)
        plan = self.recurrence.plan(stacks, tokens, stateful=self.stateful, dropout=dropout)
        if plan.fast:  # paired, CUDA graphs or time chunks: elmo_core.model.recurrence
            return self.recurrence.run(plan, stacks, tokens, lengths)
        return self.run_sorted(tokens, lengths, fused=plan.path == "fused", run_directions=plan.run_directions)
    def run_sorted(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        *,
        fused: bool = False,
        run_directions: RunDirections | None = None,
    ) -> StackOutputs:
        batch_size, num_steps, _ = tokens.shape
        sorted_lengths, order, batch_sizes = sort_rows(lengths, num_steps)
        x = tokens.index_select(0, order).transpose(0, 1)  # [steps, batch, P], sorted rows
        reverse = reverse_index(sorted_lengths, num_steps)[..., None]  # [steps, batch, 1]
        def flip(t: torch.Tensor) -> torch.Tensor:
            return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))
        forward_init, backward_init = self._initial_states(order, batch_size)
        run = {"fused": fused, "final_state": self.stateful}  # final states feed only the carry-over
        if run_directions is not None:
            backward_x = flip(x)
            (forward_out, forward_final), (backward_out, backward_final) = run_directions(
                lambda: self.forward_layers(x, batch_sizes, forward_init, **run),
                lambda: self.backward_layers(backward_x, batch_sizes, backward_init, **run),
            )
        else:
            forward_out, forward_final = self.forward_layers(x, batch_sizes, forward_init, **run)
            x = flip(x)  # the sorted input is not needed any more: one copy alive, not two
            backward_out, backward_final = self.backward_layers(x, batch_sizes, backward_init, **run)
        backward_out = [flip(y) for y in backward_out]
        if self.stateful:
            self._store_states(order, forward_final, backward_final)
        return forward_out, backward_out, order
    def _initial_states(
        self, order: torch.Tensor, batch_size: int
    ) -> tuple[list[LSTMState] | None, list[LSTMState] | None]:
        if not self.stateful or self._states is None:
            return None, None
        def take(h: torch.Tensor) -> torch.Tensor:
            if h.shape[0] < batch_size:
                h = torch.cat([h, h.new_zeros(batch_size - h.shape[0], *h.shape[1:])])
            return h[:batch_size].index_select(0, order)
        forward, backward = ([(take(h), take(c)) for h, c in self._states[d]] for d in ("forward", "backward"))
        return forward, backward
    def _store_states(
        self, order: torch.Tensor, forward_final: list[LSTMState], backward_final: list[LSTMState]
    ) -> None:
        batch_size = order.shape[0]
        new: dict[str, list[LSTMState]] = {}
        for direction, finals in (("forward", forward_final), ("backward", backward_final)):
            layers = []
            for k, (h, c) in enumerate(finals):
                h = h.detach().float()
                c = c.detach().float()
                h_rows = torch.empty_like(h)
                c_rows = torch.empty_like(c)
                h_rows[order] = h  # back to batch-row order
                c_rows[order] = c
                if self._states is not None:
                    old_h, old_c = self._states[direction][k]
                    if old_h.shape[0] > batch_size:
                        h_rows = torch.cat([h_rows, old_h[batch_size:]])
                        c_rows = torch.cat([c_rows, old_c[batch_size:]])
                layers.append((h_rows, c_rows))
            new[direction] = layers
        self._states = new


def _check_mask(mask: object, char_ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2]):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a [batch, tokens] = {tuple(char_ids.shape[:2])} tensor; got {shape}.")
    return mask.bool()


# ---- elmo_core/model/elmo.py --------------------------------------------------

LAYER_NORM_SCOPES = ("sentence", "batch")

ArrayT = Any  # a torch tensor or numpy/cupy array (or a number): the formulas below use only *, + and .sum()


def softmax_weights(scalar_weights: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scalar_weights, dim=0)


def weighted_layer_sum(layers: Sequence[ArrayT] | ArrayT, weights: ArrayT, gamma: ArrayT) -> ArrayT:
    mixed = weights[0] * layers[0]
    for weight, layer in zip(weights[1:], layers[1:]):
        mixed = mixed + weight * layer  # [..., dim]
    return gamma * mixed


def scalar_mix(layers: Sequence[torch.Tensor], scalar_weights: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    dtype = layers[0].dtype
    return weighted_layer_sum(layers, softmax_weights(scalar_weights).to(dtype), gamma.to(dtype))


class ScalarMix(nn.Module):
    def __init__(
        self,
        n_outputs: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
        gamma: float = 1.0,
        layer_norm_scope: Literal["sentence", "batch"] = "sentence",
    ) -> None:
        super().__init__()
        if layer_norm_scope not in LAYER_NORM_SCOPES:
            raise ValueError(
                f"layer_norm_scope must be one of {LAYER_NORM_SCOPES}; got {layer_norm_scope!r}. "
                "'sentence' (the default) keeps each sentence independent of its batch mates."
            )
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * n_outputs
        if len(initial_scalar_parameters) != n_outputs:
            raise ValueError(
                f"initial_scalar_parameters must have one value per layer ({n_outputs}); got "
                f"{len(initial_scalar_parameters)}: {list(initial_scalar_parameters)}."
            )
        self.n_outputs = n_outputs
        self.do_layer_norm = do_layer_norm
        self.layer_norm_scope = layer_norm_scope
        self.initial_scalar_parameters = tuple(float(v) for v in initial_scalar_parameters)
        self.initial_gamma = float(gamma)
        self.scalar_weights = nn.Parameter(torch.empty(n_outputs, dtype=WEIGHT_DTYPE), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.empty(1, dtype=WEIGHT_DTYPE), requires_grad=trainable)
        self.reset_parameters()
    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.scalar_weights.copy_(torch.tensor(self.initial_scalar_parameters))
            self.gamma.fill_(self.initial_gamma)
    @property
    def normalized_weights(self) -> torch.Tensor:
        return softmax_weights(self.scalar_weights.detach())
    def forward(
        self, activations: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        layers = activations.unbind(0) if isinstance(activations, torch.Tensor) else tuple(activations)
        if len(layers) != self.n_outputs:
            raise ValueError(
                f"ScalarMix was built for {self.n_outputs} layers but got {len(layers)} "
                f"(activations of shape {_shape(activations)}); build it with n_outputs = n_layers + 1."
            )
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm=True needs the mask of real positions.")
            per_sentence = self.layer_norm_scope == "sentence"
            layers = tuple(_masked_layer_norm(layer, mask, per_sentence) for layer in layers)
        return scalar_mix(layers, self.scalar_weights, self.gamma)  # [batch, tokens, dim]


def _shape(activations: torch.Tensor | Sequence[torch.Tensor]) -> object:
    if isinstance(activations, torch.Tensor):
        return tuple(activations.shape)
    return [tuple(layer.shape) for layer in activations]


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, per_sentence: bool, eps: float = 1e-12) -> torch.Tensor:
    m = mask[:, :, None].to(layer.dtype)  # [batch, tokens, 1]
    dims = (1, 2) if per_sentence else (0, 1, 2)
    count = m.sum(dim=dims, keepdim=True) * layer.shape[-1]  # [batch or 1, 1, 1]
    safe = count.clamp(min=1)  # an empty sentence: nothing to normalise, no division by 0
    mean = (layer * m).sum(dim=dims, keepdim=True) / safe
    var = (((layer - mean) * m) ** 2).sum(dim=dims, keepdim=True) / safe
    return (layer - mean) / torch.sqrt(var + eps)


class ElmoOutput(NamedTuple):
    representations: list[torch.Tensor]
    activations: torch.Tensor
    mask: torch.Tensor


class Elmo(nn.Module):
    def __init__(
        self,
        options: BiLMOptions,
        num_output_representations: int = 1,
        dropout: float = 0.5,
        do_layer_norm: bool = False,
        keep_sentence_boundaries: bool = False,
        requires_grad: bool = False,
        stateful: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        layer_norm_scope: Literal["sentence", "batch"] = "sentence",
        *,
        recurrence: StackRunner | None = None,
        token_cache: TokenVectors | None = None,
        char_cnn_training: TrainingPath | None = None,
    ) -> None:
        super().__init__()
        if num_output_representations < 0:
            raise ValueError(f"num_output_representations must be >= 0; got {num_output_representations}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        self.options = options
        self.dropout = dropout
        self.bilm = BiLM(
            options,
            stateful=stateful,
            keep_sentence_boundaries=keep_sentence_boundaries,
            token_cache=token_cache,
            recurrence=recurrence,
            char_cnn_training=char_cnn_training,
        )
        self.bilm.requires_grad_(requires_grad)
        self.scalar_mixes = nn.ModuleList(
            ScalarMix(
                options.n_outputs,
                do_layer_norm=do_layer_norm,
                layer_norm_scope=layer_norm_scope,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            for _ in range(num_output_representations)
        )
    @property
    def requires_grad(self) -> bool:
        return bilm_is_trainable(self.bilm)
    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.bilm.requires_grad_(bool(value))
    @property
    def output_dim(self) -> int:
        return self.options.output_dim
    @property
    def n_outputs(self) -> int:
        return self.options.n_outputs
    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        with self.bilm.threads():  # the mixes too: the thread rule's count (BiLM.threads)
            out = run_bilm(self.bilm, char_ids, mask)
            layers = out.activations.unbind(0)
            representations = mix_representations(self.scalar_mixes, layers, out.mask, self.dropout, self.training)
        return ElmoOutput(representations, out.activations, out.mask)


def bilm_is_trainable(bilm: BiLM) -> bool:
    return any(p.requires_grad for p in bilm.parameters())


def run_bilm(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool | None = None) -> BiLMOutput:
    if frozen is None:
        frozen = not bilm_is_trainable(bilm)
    with torch.no_grad() if frozen else nullcontext():  # frozen: no graph through the biLM
        return bilm(char_ids, mask)


def mix_representations(
    scalar_mixes: Iterable[nn.Module],
    layers: Sequence[torch.Tensor],
    mask: torch.Tensor,
    dropout: float,
    training: bool,
) -> list[torch.Tensor]:
    representations = []
    for mix in scalar_mixes:
        mixed = mix(layers, mask) * mask[..., None].to(layers[0].dtype)  # [batch, tokens, dim]
        representations.append(F.dropout(mixed, dropout, training))
    return representations


# ---- elmo_core/files/weights.py -----------------------------------------------

def count_non_finite(values: torch.Tensor | np.ndarray, rows_per_block: int | None = None) -> int:
    if isinstance(values, np.ndarray):
        return int(values.size - np.count_nonzero(np.isfinite(values))) if values.dtype.kind == "f" else 0
    if not values.is_floating_point():
        return 0
    if values.dim() == 0:
        return int(not bool(torch.isfinite(values)))
    step = rows_per_block or max(values.shape[0], 1)
    return sum(
        int(torch.isfinite(values[start : start + step]).logical_not_().sum())
        for start in range(0, values.shape[0], step)
    )


def non_finite_error(source: object, what: str, count: int, fix: str) -> WeightFileError:
    return WeightFileError(
        f"{source}: {what} holds {count} NaN or infinite values, so every vector would be NaN. {fix}"
    )


# ---- elmo_core/files/model_folder.py ------------------------------------------

NON_FINITE_FIX = "The file is damaged or came from a diverged training run; save or download the model again."


# ---- elmo_core/runtime/windows.py ---------------------------------------------

class Window(NamedTuple):
    start: int
    end: int
    keep_start: int
    keep_end: int


def plan_windows(
    num_tokens: int, window_tokens: int = DEFAULT_WINDOW_TOKENS, context: int | None = None
) -> list[Window]:
    context = _check_window(window_tokens, context)
    if num_tokens <= window_tokens:
        return [Window(0, num_tokens, 0, num_tokens)]
    windows = []
    keep_start = 0
    while True:
        start = max(0, keep_start - context)
        end = start + window_tokens
        if end >= num_tokens:  # the last window: read the final window_tokens tokens
            windows.append(Window(max(0, num_tokens - window_tokens), num_tokens, keep_start, num_tokens))
            return windows
        windows.append(Window(start, end, keep_start, end - context))
        keep_start = end - context


PlanBatches = Callable[[list[int]], Iterable[Sequence[int]]]


ReadPieces = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def read_in_windows(
    read: ReadPieces,
    char_ids: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    batches: PlanBatches | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    boundaries: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    window_tokens = check_window_settings(window_tokens, window_context)
    to_cut = _rows_to_cut(char_ids, mask, window_tokens)
    if to_cut is None or window_tokens is None:
        return None
    mask, lengths = to_cut
    pieces = [(i, w) for i, n in enumerate(lengths) for w in plan_windows(n, window_tokens, window_context)]
    kept: dict[int, torch.Tensor] = {}  # piece -> its kept output
    edge = int(boundaries)  # read output rows before a piece's first token
    piece_lengths = [w.end - w.start for _, w in pieces]
    for batch in batches(piece_lengths) if batches is not None else [list(range(len(pieces)))]:
        out = read(*_piece_inputs(char_ids, mask, [pieces[k] for k in batch]))  # [..., pieces, longest (+ 2), dim]
        for row, k in enumerate(batch):
            kept[k] = out[..., row, _kept_span(pieces[k][1], lengths[pieces[k][0]], edge), :]  # [..., kept, dim]
    rows = [torch.cat([kept[k] for k, (j, _) in enumerate(pieces) if j == i], dim=-2) for i in range(len(lengths))]
    return _assemble(rows, char_ids.shape[1] + 2 * edge)


def _rows_to_cut(
    char_ids: torch.Tensor, mask: torch.Tensor | None, window_tokens: int | None
) -> tuple[torch.Tensor, list[int]] | None:
    if not isinstance(char_ids, torch.Tensor) or char_ids.dim() != 3 or window_tokens is None:
        return None  # read whole (ids of the wrong kind get `read`'s error)
    if char_ids.shape[1] <= window_tokens:
        return None
    if mask is not None and (not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2])):
        return None  # `read` names the mask's problem
    mask = (char_ids != 0).any(dim=-1) if mask is None else mask.bool()
    lengths_tensor = mask.sum(dim=1)  # [batch]
    if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths_tensor[:, None]):
        raise ValueError(
            "padding must be on the right: every row of the mask (or of non-zero char_ids) must be True "
            "for its first n positions and False after. Build inputs with words_to_char_ids()."
        )
    lengths = [int(n) for n in lengths_tensor.tolist()]
    return None if max(lengths, default=0) <= window_tokens else (mask, lengths)


def _piece_inputs(
    char_ids: torch.Tensor, mask: torch.Tensor, pieces: list[tuple[int, Window]]
) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(w.end - w.start for _, w in pieces)
    piece_ids = char_ids.new_zeros((len(pieces), longest, char_ids.shape[-1]))  # [pieces, longest, chars]
    piece_mask = mask.new_zeros((len(pieces), longest))
    for row, (i, w) in enumerate(pieces):
        piece_ids[row, : w.end - w.start] = char_ids[i, w.start : w.end]
        piece_mask[row, : w.end - w.start] = True
    return piece_ids, piece_mask


def _kept_span(w: Window, length: int, edge: int) -> slice:
    first = 0 if edge and w.keep_start == 0 else w.keep_start - w.start + edge  # 0: the row's <S>
    last = w.keep_end - w.start + edge + (edge if w.keep_end == length else 0)  # + 1: the row's </S>
    return slice(first, last)


def _assemble(rows: list[torch.Tensor], num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    padded = [torch.cat([r, r.new_zeros((*r.shape[:-2], num_steps - r.shape[-2], r.shape[-1]))], dim=-2) for r in rows]
    output = torch.stack(padded, dim=-3)  # [..., batch, tokens (+ 2), dim]
    positions = torch.arange(num_steps, device=output.device)  # the mask goes where `read` put the output
    lengths = torch.tensor([r.shape[-2] for r in rows], device=output.device)
    return output, positions[None, :] < lengths[:, None]


# ---- hf_elmo/modeling_elmo.py -------------------------------------------------

__all__ = ["ElmoModelOutput", "ElmoPreTrainedModel", "ElmoModel", "ElmoForTokenClassification"]


@dataclass
class ElmoModelOutput(ModelOutput):
    """What `ElmoModel` returns.

    Attributes:
        last_hidden_state: The ELMo vectors: the first scalar mix of the biLM layers
            (`gamma * sum_k softmax(w)_k * h_k`), zero at padded positions.
            [batch, tokens, 2 * projection_dim].
        hidden_states: With `output_hidden_states`: every biLM layer, `n_layers + 1`
            tensors [batch, tokens, 2 * projection_dim]; index 0 is the char CNN's token
            vector (repeated twice to the full width), index l the l-th LSTM layer
            `[forward ; backward]`.
        representations: With `num_output_representations > 1`: every scalar mix,
            `last_hidden_state` first.
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    representations: tuple[torch.Tensor, ...] | None = None


def _loaded(tensor: torch.Tensor) -> bool:
    """True for a tensor that `from_pretrained` filled from the checkpoint."""
    return getattr(tensor, "_is_hf_initialized", False)


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation, saving and loading shared by the ELMo models.

    transformers 5 builds a model on the meta device, loads the checkpoint, then calls
    `_init_weights` on every module: a tensor it loaded carries `_is_hf_initialized`,
    and `_init_weights` never touches those, so imported weights stay exactly as saved.
    What it does initialise (a missing tensor, or every tensor of a model built from a
    config) gets the value elmo_core's constructors give it, from the core's own methods:
    `reset_parameters` (ScalarMix, CharCNN, and torch's Linear/Conv1d),
    `Highway.init_carry_bias` and `BiLM.reset_buffers`.
    """

    config: ElmoConfig
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    _no_split_modules = ["BiLM"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # elmo_core's own initialisation (the constructors' values), for what was not loaded.
        if isinstance(module, BiLM):
            module.reset_buffers()  # the <S>/</S> char ids: non-persistent, never in a checkpoint
        own = list(module.parameters(recurse=False))
        reset_parameters = getattr(module, "reset_parameters", None)
        if reset_parameters is None or not own or all(_loaded(p) for p in own):
            return
        kept = [(p, p.detach().clone()) for p in own if _loaded(p)]  # a partly loaded module
        reset_parameters()  # ScalarMix, CharCNN (char_embedding), torch's Linear/Conv1d
        for p, value in kept:
            p.copy_(value)
        highway = self._highway_holding(module)
        if highway is not None and isinstance(module, nn.Linear) and not _loaded(module.bias):
            highway.init_carry_bias(module)

    def _highway_holding(self, layer: nn.Module) -> Highway | None:
        # transformers skips modules without parameters of their own (Highway), so its
        # layers are recognised here.
        for module in self.modules():
            if isinstance(module, Highway) and any(candidate is layer for candidate in module.layers):
                return module
        return None

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """As transformers', and the biLM (and a fixed scalar mix) stay frozen.

        A local folder's config.json is checked against its weights' headers before
        anything is allocated. With elmo-bilm installed, a local folder is read as the core reads it
        (`_read_as_the_core_reads`: its one `variant=` of the weights without naming it,
        and the core's diagnosis of a broken folder).

        transformers 5 wraps every loaded tensor in a new `nn.Parameter` with
        `requires_grad=True`, which would silently make the frozen biLM trainable
        (only the scalar mix is meant to train); this puts the constructor's choice back.
        """
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        load = _shapes_checked_first(super().from_pretrained, cls, source)
        loaded = load(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True
        for name, tensor in model.state_dict().items():
            bad = count_non_finite(tensor)
            if bad:
                raise non_finite_error(source, f"tensor '{name}'", bad, NON_FINITE_FIX)
        model.freeze_bilm()
        return loaded

    def freeze_bilm(self) -> None:
        """Make the biLM (and scalar mixes fixed by the config) untrainable, as built."""
        for module in self.modules():
            if isinstance(module, BiLM):
                module.requires_grad_(False)
            elif isinstance(module, ScalarMix) and self.config.scalar_mix_parameters is not None:
                module.requires_grad_(False)

    # ------------------------------------------------------------------ input embeddings
    def get_input_embeddings(self) -> nn.Module:
        """The char CNN: ELMo's input layer, from characters to token vectors (layer 0).

        There is no word-embedding matrix: every token, whatever its string, is embedded
        from its characters (`char_cnn.char_embedding` holds the character vectors).
        """
        return cast(ElmoModel, self.base_model).bilm.char_cnn

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Refused: the char CNN is part of the biLM's pretrained weights.

        Raises:
            ValueError: always; explains why and what to do instead.
        """
        raise ValueError(
            "ElmoModel's input layer is the pretrained char CNN (characters -> token vectors), not a word "
            f"embedding, so it cannot be replaced by a {type(value).__name__}. Load other ELMo weights instead "
            "(from_pretrained, or elmo convert for bilm-tf files)."
        )

    def resize_token_embeddings(  # type: ignore[override]  # returns the char CNN: ELMo has no nn.Embedding
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, *args: Any, **kwargs: Any
    ) -> nn.Module:
        """Nothing to resize: returns `get_input_embeddings()` (the char CNN), unchanged.

        ELMo reads characters, so a token added to the tokenizer (`tokenizer.add_tokens`)
        already has an input representation; recipes that call
        `model.resize_token_embeddings(len(tokenizer))` after adding tokens work as they
        are. (The config has no `vocab_size`: ELMo has no word vocabulary.)
        """
        return self.get_input_embeddings()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """As transformers', with the generated, self-contained code files.

        `auto_map` names both models of `modeling_elmo.py`, so that a tagger's folder
        also loads as a base `AutoModel`, and a base model's folder as the start of an
        `AutoModelForTokenClassification`, wherever the folder's code runs. transformers
        copies this module's file (and `configuration_elmo.py`) into the folder; they are
        replaced by their generated copies, which need no elmo-bilm (see
        `hf_elmo.remote_code`).
        """
        if self._auto_class is not None:
            module = type(self).__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.ElmoModel",
                "AutoModelForTokenClassification": f"{module}.ElmoForTokenClassification",
            }
        save = super().save_pretrained
        save(save_directory, *args, **kwargs)


def _shapes_checked_first(load: Any, cls: Any, source: Any) -> Any:
    """`load` (transformers' `from_pretrained`), after comparing a local folder's weights' headers with the
    shapes its config.json implies, on the meta device: transformers compares them after building the model."""

    def read(*args: Any, **kwargs: Any) -> Any:
        folder = os.fspath(source) if isinstance(source, (str, os.PathLike)) else ""
        weights = os.path.join(folder, "model.safetensors")
        if folder and os.path.isfile(weights) and not kwargs.get("ignore_mismatched_sizes"):
            from safetensors import safe_open

            config = kwargs.get("config")
            config = config if isinstance(config, ElmoConfig) else cls.config_class.from_pretrained(folder)
            with torch.device("meta"):
                expected = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
            prefix = f"{cls.base_model_prefix}."
            with safe_open(weights, framework="pt") as f:
                for key in f.keys():
                    name = next((n for n in (key, prefix + key, key.removeprefix(prefix)) if n in expected), None)
                    shape = tuple(f.get_slice(key).get_shape())
                    if name is not None and shape != expected[name]:
                        raise ValueError(
                            f"{weights}: tensor '{key}' has shape {shape}, but config.json implies {expected[name]}. "
                            "Use the config.json saved with these weights."
                        )
        return load(*args, **kwargs)

    return read


def _char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None, options: CharCNNOptions) -> torch.Tensor:
    """The char ids to read, checked and as int64: `char_ids`, or `input_ids` when they are char ids (3-D).

    Checked here, before the windows cut them: ids of any integer dtype that holds them
    (`elmo_core.model.check_char_ids`).
    """
    ids = _given_char_ids(input_ids, char_ids)
    return check_char_ids(ids, options.max_characters_per_token, options.n_characters)


def _given_char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None) -> torch.Tensor | None:
    if char_ids is not None:
        if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and isinstance(char_ids, torch.Tensor):
            if tuple(input_ids.shape) != tuple(char_ids.shape[:2]):
                raise ValueError(
                    f"input_ids {tuple(input_ids.shape)} and char_ids {tuple(char_ids.shape)} disagree on "
                    "[batch, tokens]; pass both from the same ElmoTokenizer call (or char_ids alone)."
                )
        return char_ids
    if input_ids is None:
        raise ValueError(
            "ElmoModel needs input_ids or char_ids: the character ids [batch, tokens, 50] that ElmoTokenizer "
            "returns as char_ids."
        )
    if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2:
        raise ValueError(
            f"input_ids of shape {tuple(input_ids.shape)} are one id per token, but ELMo reads characters: "
            "pass the char_ids [batch, tokens, 50] that ElmoTokenizer returns with them "
            "(model(**tokenizer(texts, return_tensors='pt')) does)."
        )
    return input_ids


def _asked_dtype(config: ElmoConfig) -> torch.dtype | None:
    """The float dtype `from_pretrained(..., dtype=...)` asked for, if any other than float32.

    transformers records the asked dtype in `config.dtype`. The core builds float32
    whatever torch's default dtype, so another precision comes from this request alone.
    """
    dtype = getattr(config, "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype != torch.float32:
        return dtype
    return None


def _refuse_attentions(output_attentions: bool | None, config: ElmoConfig) -> None:
    if output_attentions or (output_attentions is None and getattr(config, "output_attentions", False)):
        raise ValueError(
            "output_attentions=True cannot be honoured: ELMo is a biLSTM and has no attention weights. "
            "Leave it unset; output_hidden_states=True gives every biLM layer."
        )


class ElmoModel(ElmoPreTrainedModel):
    """The biLM and its scalar mix(es): contextual word vectors (Peters et al. 2018).

    Stateless by default: a sentence's vectors depend only on its own tokens, not on
    batch mates, padding or earlier calls. The biLM is frozen (no gradient, no autograd
    graph); the scalar mixes are trainable unless the config fixes them. To fine-tune
    the biLM too, call `model.bilm.requires_grad_(True)`.

    Raises:
        ValueError: if `config.num_output_representations` < 1 (there would be no
            `last_hidden_state`).
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_output_representations < 1:
            raise ValueError(
                "ElmoModel needs num_output_representations >= 1 (last_hidden_state is the first "
                f"scalar mix); got {config.num_output_representations}. Use "
                "output_hidden_states=True for the raw biLM layers."
            )
        parts: dict[str, Any] = {}  # a saved folder's copy runs the reference step loop
        core = Elmo(config.to_options(), **config.elmo_settings(), **parts)  # the core's construction rules: float32
        asked = _asked_dtype(config)
        if asked is not None:
            core.to(asked)
        self.bilm: BiLM = core.bilm
        self.scalar_mixes: nn.ModuleList = core.scalar_mixes
        # Rows are stateless: reading the windows of a long input all at once or in budgeted
        # batches gives the same vectors; the budget bounds memory.
        self._window_batches = None
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ElmoModelOutput | tuple[torch.Tensor, ...]:
        """Run the biLM once and every scalar mix over it.

        A row longer than `config.window_tokens` (1024) is read in the core's overlapping
        windows (see `_read`), so its vectors are those of `embed_sentences`, `elmo embed`
        and the spaCy component; shorter rows are read whole, exactly as without windows.

        Args:
            input_ids: `ElmoTokenizer`'s one id per token [batch, tokens] (read only
                for its shape: the biLM reads `char_ids`), or the character ids
                themselves [batch, tokens, 50] when `char_ids` is not given.
            attention_mask: 1 for real tokens, 0 for padding (on the right). Derived
                from the char ids when omitted.
            char_ids: Character ids from `ElmoTokenizer` (or
                `elmo_core.words_to_char_ids`), without `<S>`/`</S>` (the biLM adds
                them). Padded positions are all zeros. Moved to the model's device.
            output_hidden_states: Also return every biLM layer (default:
                `config.output_hidden_states`). They are the tensors the scalar mix
                reads, so with a trainable biLM their gradients exist.
            output_attentions: Must be False or None: ELMo has no attention.
            return_dict: Return an `ElmoModelOutput` rather than a tuple (default:
                `config.return_dict`).

        Returns:
            `ElmoModelOutput`, or the tuple of its non-None fields.

        Shape:
            char_ids: [batch, tokens, 50] int64; input_ids, attention_mask: [batch, tokens]
            last_hidden_state: [batch, tokens, 2 * projection_dim] float
            (tokens + 2 with `keep_sentence_boundaries`)

        Raises:
            ValueError: for missing char ids, ids of the wrong shape or outside
                [0, n_characters), a mask that is not right-padded, or
                `output_attentions=True`.
            TypeError: for char ids that are not an integer tensor, or whose dtype cannot
                hold the ids (int8, uint8); int16 and int32 ids give the int64 ids' vectors.
        """
        input_ids = _char_ids(input_ids, char_ids, self.bilm.options.char_cnn)
        _refuse_attentions(output_attentions, self.config)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = attention_mask.bool() if isinstance(attention_mask, torch.Tensor) else attention_mask
        frozen = not bilm_is_trainable(self.bilm)  # the core's one rule for "frozen"
        with self.bilm.threads():  # the windows and mixes too: the runtime's thread rule (BiLM.threads)
            activations, out_mask = self._read(input_ids, mask, frozen)
            output = self._mix(activations, out_mask, bool(output_hidden_states))
        return output if return_dict else output.to_tuple()

    def _mix(self, activations: torch.Tensor, out_mask: torch.Tensor, output_hidden_states: bool) -> ElmoModelOutput:
        """Every scalar mix over the biLM layers [n_layers + 1, batch, tokens, 2P], as an `ElmoModelOutput`."""
        # The mixes read these very tensors: with a trainable biLM, their .grad exists (as for BERT).
        hidden_states = activations.unbind(0)  # n_layers + 1 x [batch, tokens, 2P]
        mixes, dropout = self.scalar_mixes, self.config.dropout
        representations = mix_representations(mixes, hidden_states, out_mask, dropout, self.training)
        return ElmoModelOutput(
            last_hidden_state=representations[0],
            hidden_states=hidden_states if output_hidden_states else None,
            representations=tuple(representations) if len(representations) > 1 else None,
        )

    def _read(
        self, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The biLM's activations and mask, a row longer than `config.window_tokens` read in windows.

        The windows are the core's (`elmo_core.runtime.windows.read_in_windows`, the plan of
        `embed_sentences` and the spaCy component). The biLM's working memory is bounded by a
        batch of windows (the runtime's `DEFAULT_BATCH_TOKENS` positions; a saved folder's own
        code, run where elmo-bilm is not installed, reads them all at once), not by the row.
        The scalar mixes and `hidden_states` get the assembled layers, so a trainable mix (and
        a trainable biLM, window by window) gets its gradients as without windows; while
        training, the graphs of all windows are kept until the backward pass.
        """
        window_tokens = None if self.config.stateful else self.config.window_tokens
        windowed = read_in_windows(
            lambda ids, piece_mask: run_bilm(self.bilm, ids, piece_mask, frozen).activations,
            char_ids,
            mask,
            batches=self._window_batches,
            window_tokens=window_tokens,
            window_context=self.config.window_context,
            boundaries=self.bilm.keep_sentence_boundaries,
        )
        if windowed is not None:
            return windowed
        out = run_bilm(self.bilm, char_ids, mask, frozen)  # checks ids: shape, dtype, range
        return out.activations, out.mask


class ElmoForTokenClassification(ElmoPreTrainedModel):
    """ELMo vectors and a linear layer per token (e.g. NER), as in `BertForTokenClassification`.

    The biLM is frozen; what trains is the scalar mix (w, gamma), whose output gets
    `config.dropout` while training, and the linear head. `labels` of -100 are ignored
    by the loss (cross-entropy over the real positions), so label only the positions
    you score.

    Raises:
        ValueError: if the config has no labels (`config.id2label` is None).
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_labels is None:
            raise ValueError("ElmoForTokenClassification needs labels: set config.id2label (or num_labels).")
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self.classifier = nn.Linear(config.output_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        """Scores per token, and the loss when `labels` are given.

        Args: as `ElmoModel.forward`, plus `labels` (-100 = not scored).

        Shape:
            char_ids: [batch, tokens, 50]; input_ids, attention_mask, labels: [batch, tokens]
            logits: [batch, tokens, num_labels]

        Raises:
            ValueError: as `ElmoModel.forward`, or if `labels` do not have the shape of
                the scored positions.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            char_ids=char_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.classifier(outputs.last_hidden_state)  # [batch, tokens, num_labels]
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(logits.shape[:2]):
                raise ValueError(
                    f"labels must be [batch, tokens] = {tuple(logits.shape[:2])}; got {tuple(labels.shape)}. "
                    "Pad labels with -100 (DataCollatorForTokenClassification does)."
                )
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)
        return output if return_dict else output.to_tuple()
