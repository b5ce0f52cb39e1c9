"""ELMo's plain forward, what a saved folder runs instead of elmo_core/model: no fast paths, the same
state dict keys. Tests check its vectors against the core's (max |diff| <= 1e-6)."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

ELMO_BILM_VERSION = "0.1.0"  # the elmo-bilm this file was written with (a test keeps it current)

# ---- characters (elmo_core/model/characters.py): UTF-8 bytes + 1 between word markers
BEGINNING_OF_SENTENCE_CHARACTER = 256
END_OF_SENTENCE_CHARACTER = 257
BEGINNING_OF_WORD_CHARACTER = 258
END_OF_WORD_CHARACTER = 259
PADDING_CHARACTER = 260
CHAR_ID_OFFSET = 1  # every id is shifted by one so that 0 = padded position
BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"


def word_to_char_ids(word: str, max_characters_per_token: int = 50) -> tuple[int, ...]:
    if not isinstance(word, str):
        raise TypeError(f"tokens must be str; got {type(word).__name__} {word!r}.")
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    if word in (BOS_TOKEN, EOS_TOKEN):
        data = [BEGINNING_OF_SENTENCE_CHARACTER if word == BOS_TOKEN else END_OF_SENTENCE_CHARACTER]
    else:
        max_bytes = max_characters_per_token - 2
        data = list(word[:max_bytes].encode("utf-8", "ignore")[:max_bytes])
    ids[1 : len(data) + 1] = data
    ids[len(data) + 1] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


# ---- errors and options (elmo_core/model/options.py): bilm-tf's options.json keys
class ElmoError(ValueError): ...


class OptionsError(ElmoError): ...


class WeightFileError(ElmoError): ...


def check_int(name: str, value: object, *, minimum: int = 1, error: type[Exception] = ValueError) -> int:
    try:
        number = None if isinstance(value, bool) or getattr(value, "ndim", 0) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = None
    if number is None or number < minimum:
        raise error(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return number


MAX_CHARACTERS_PER_TOKEN = 1024
DEFAULT_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


@dataclass(frozen=True)
class CharCNNOptions:
    embedding_dim: int = 16
    filters: tuple[tuple[int, int], ...] = DEFAULT_FILTERS
    n_highway: int = 2
    n_characters: int = 262
    max_characters_per_token: int = 50
    activation: str = "relu"

    @property
    def n_filters(self) -> int:
        return sum(count for _, count in self.filters)


@dataclass(frozen=True)
class LSTMOptions:
    dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True


@dataclass(frozen=True)
class BiLMOptions:
    char_cnn: CharCNNOptions = field(default_factory=CharCNNOptions)
    lstm: LSTMOptions = field(default_factory=LSTMOptions)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        cc, lstm = self.char_cnn, self.lstm
        for name in ("embedding_dim", "max_characters_per_token"):
            check_int(f"char_cnn.{name}", getattr(cc, name), error=OptionsError)
        if not 3 <= cc.max_characters_per_token <= MAX_CHARACTERS_PER_TOKEN or cc.n_characters != 262:
            raise OptionsError(f"char_cnn needs 3 to {MAX_CHARACTERS_PER_TOKEN} characters and 262 ids; got {cc}.")
        check_int("char_cnn.n_highway", cc.n_highway, minimum=0, error=OptionsError)
        if cc.activation not in ("relu", "tanh") or not cc.filters:
            raise OptionsError(f"char_cnn needs activation relu or tanh and at least one filter; got {cc}.")
        for k, bank in enumerate(cc.filters):
            width = check_int(f"char_cnn.filters[{k}]", bank[0], error=OptionsError) if len(bank) == 2 else 0
            if not 0 < width <= cc.max_characters_per_token:
                raise OptionsError(f"char_cnn.filters[{k}] must be [width <= max characters, count]; got {bank}.")
            check_int(f"char_cnn.filters[{k}] count", bank[1], error=OptionsError)
        for name in ("dim", "projection_dim", "n_layers"):
            check_int(f"lstm.{name}", getattr(lstm, name), error=OptionsError)
        for value in (lstm.cell_clip, lstm.proj_clip):
            number = value is None or (not isinstance(value, bool) and isinstance(value, (int, float)))
            if not number or (value is not None and not (math.isfinite(value) and value >= 0)):
                raise OptionsError(f"lstm clips must be finite numbers >= 0 or null; got {value!r}.")
        if not isinstance(lstm.use_skip_connections, bool):
            raise OptionsError(f"lstm.use_skip_connections must be true or false; got {lstm.use_skip_connections!r}.")

    @property
    def n_outputs(self) -> int:
        return self.lstm.n_layers + 1

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiLMOptions:
        if not isinstance(data, dict) or not all(isinstance(data.get(s), dict) for s in ("lstm", "char_cnn")):
            raise OptionsError(f"options must be an object with 'lstm' and 'char_cnn' objects; got {data!r}.")
        cc, lstm = dict(data["char_cnn"]), dict(data["lstm"])
        try:
            n_characters = cc.pop("n_characters")
            char_cnn = CharCNNOptions(
                embedding_dim=cc.pop("embedding")["dim"],
                filters=tuple(tuple(bank) for bank in cc.pop("filters")),
                n_characters=262 if n_characters == 261 else n_characters,  # bilm-tf training files say 261
                **{k: cc.pop(k) for k in ("n_highway", "max_characters_per_token", "activation")},
            )
            clip: dict[str, Any] = {k: lstm.pop(k, None) or None for k in ("cell_clip", "proj_clip")}  # 0: no clip
            lstm_options = LSTMOptions(
                use_skip_connections=lstm.pop("use_skip_connections", False),
                **{k: lstm.pop(k) for k in ("dim", "projection_dim", "n_layers")},
                **clip,
            )
        except (KeyError, TypeError) as err:
            raise OptionsError(f"options do not have bilm-tf's options.json keys and types: {err!r}") from None
        extra = {k: v for k, v in data.items() if k not in ("lstm", "char_cnn")}
        extra.update({k: v for k, v in (("char_cnn", cc), ("lstm", lstm)) if v})
        return cls(char_cnn=char_cnn, lstm=lstm_options, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        cc, lstm = self.char_cnn, self.lstm
        out: dict[str, Any] = {
            "lstm": dict(use_skip_connections=lstm.use_skip_connections, projection_dim=lstm.projection_dim,
                         cell_clip=lstm.cell_clip, proj_clip=lstm.proj_clip, dim=lstm.dim, n_layers=lstm.n_layers),
            "char_cnn": dict(activation=cc.activation, filters=[list(b) for b in cc.filters], n_highway=cc.n_highway,
                             embedding={"dim": cc.embedding_dim}, n_characters=cc.n_characters,
                             max_characters_per_token=cc.max_characters_per_token),
        }  # fmt: skip
        for key, value in self.extra.items():
            out[key] = {**value, **out[key]} if key in out else value
        return out


def capturing() -> bool:  # torch.export (or ONNX's exporter on it) is capturing a graph: no reading values
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return is_exporting is not None and is_exporting()


# ---- char CNN with highway (elmo_core/model/char_cnn.py)
class Highway(nn.Module):
    def __init__(self, size: int, n_highway: int) -> None:
        super().__init__()
        self.size = size
        self.layers = nn.ModuleList(self.init_carry_bias(nn.Linear(size, 2 * size)) for _ in range(n_highway))

    def init_carry_bias(self, layer: nn.Linear) -> nn.Linear:
        nn.init.constant_(layer.bias[self.size :], -2.0)  # bilm-tf starts the gate carrying its input
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            candidate, gate = layer(x).chunk(2, dim=-1)  # 2 x [tokens, F]
            gate = torch.sigmoid(gate)  # TF's gate is on the candidate: g * relu(Wx) + (1 - g) * x
            x = gate * torch.relu(candidate) + (1 - gate) * x
        return x


class CharCNN(nn.Module):
    def __init__(self, options: BiLMOptions) -> None:
        super().__init__()
        cc = options.char_cnn
        self.char_embedding = nn.Parameter(torch.empty(cc.n_characters - 1, cc.embedding_dim))  # id 0: zeros
        self.reset_parameters()
        self.convolutions = nn.ModuleList(nn.Conv1d(cc.embedding_dim, n, width) for width, n in cc.filters)
        self.activation = cc.activation
        self.highway = Highway(cc.n_filters, cc.n_highway)
        P = options.lstm.projection_dim
        self.projection: nn.Module = nn.Linear(cc.n_filters, P) if cc.n_filters != P else nn.Identity()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        table = torch.cat([self.char_embedding.new_zeros(1, self.char_embedding.shape[1]), self.char_embedding])
        x = F.embedding(char_ids, table).transpose(1, 2)  # [tokens, E, chars]
        pooled = [conv(x).amax(dim=2) for conv in self.convolutions]  # max over positions: [tokens, count]
        features = torch.cat([torch.relu(y) if self.activation == "relu" else torch.tanh(y) for y in pooled], 1)
        return self.projection(self.highway(features))  # [tokens, P]


# ---- the LSTM with projection, one step at a time (elmo_core/model/recurrence/lstm.py)
FORGET_BIAS = 1.0  # TensorFlow LSTMCell's default, added at run time


class LSTMCellWithProjection(nn.Module):
    def __init__(self, input_size: int, dim: int, projection_dim: int, cell_clip: Any, proj_clip: Any) -> None:
        super().__init__()
        self.dim, self.projection_dim, self.cell_clip, self.proj_clip = dim, projection_dim, cell_clip, proj_clip
        self.input_linear = nn.Linear(input_size, 4 * dim)
        self.state_linear = nn.Linear(projection_dim, 4 * dim, bias=False)
        self.state_projection = nn.Linear(dim, projection_dim, bias=False)

    def forward(self, x: torch.Tensor, active: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        """x [steps, batch, in], active [steps, batch] bool -> outputs [steps, batch, P] (0 where inactive)."""
        steps, batch, _ = x.shape
        h, c = state if state is not None else (x.new_zeros(batch, self.projection_dim), x.new_zeros(batch, self.dim))
        pre = self.input_linear(x)  # [steps, batch, 4D]
        pre[..., 2 * self.dim : 3 * self.dim] += FORGET_BIAS  # gate order i, j, f, o (TF's)
        if capturing():  # a graph's length is symbolic: torch's scan (ONNX's Scan) runs the steps
            from torch._higher_order_ops.scan import scan

            (h, c), out = scan(self.step, (h, c), (pre, active[..., None]))
            return out, (h, c)
        outputs = []
        for t in range(steps):
            (h, c), y = self.step((h, c), (pre[t], active[t, :, None]))
            outputs.append(y)
        return (torch.stack(outputs) if outputs else x.new_zeros(0, batch, self.projection_dim)), (h, c)

    def step(self, state: tuple[torch.Tensor, torch.Tensor], inputs: tuple[torch.Tensor, torch.Tensor]) -> Any:
        (h, c), (pre_t, keep) = state, inputs  # [batch, P], [batch, D]; [batch, 4D], [batch, 1]
        i, j, f, o = (pre_t + F.linear(h, self.state_linear.weight)).chunk(4, dim=1)  # [batch, D] each
        c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
        if self.cell_clip:
            c_t = c_t.clamp(-self.cell_clip, self.cell_clip)
        h_t = F.linear(torch.sigmoid(o) * torch.tanh(c_t), self.state_projection.weight)  # [batch, P]
        if self.proj_clip:
            h_t = h_t.clamp(-self.proj_clip, self.proj_clip)
        # A row past its end keeps its final state and writes zeros.
        return (torch.where(keep, h_t, h), torch.where(keep, c_t, c)), h_t * keep.to(h_t.dtype)


class LSTMStack(nn.Module):
    def __init__(self, options: LSTMOptions) -> None:
        super().__init__()
        self.use_skip_connections = options.use_skip_connections
        P = options.projection_dim
        self.layers = nn.ModuleList(
            LSTMCellWithProjection(P, options.dim, P, options.cell_clip, options.proj_clip)
            for _ in range(options.n_layers)
        )

    def forward(self, x: torch.Tensor, active: torch.Tensor, states: Any = None) -> tuple[list, list]:
        outputs, finals = [], []
        for k, layer in enumerate(self.layers):
            y, final = layer(x, active, states[k] if states else None)
            if k > 0 and self.use_skip_connections:
                y = y + x
            outputs.append(y)
            finals.append(final)
            x = y
        return outputs, finals


# ---- the biLM (elmo_core/model/bilm.py)
class BiLMOutput(NamedTuple):
    activations: torch.Tensor  # [n_layers + 1, batch, tokens, 2P]
    mask: torch.Tensor  # [batch, tokens] bool


def check_char_ids(char_ids: object, max_characters_per_token: int, n_characters: int) -> torch.Tensor:
    if not isinstance(char_ids, torch.Tensor):
        raise TypeError(f"char_ids must be a torch.Tensor; got {type(char_ids).__name__}.")
    if char_ids.dim() != 3 or char_ids.shape[-1] != max_characters_per_token:
        raise ValueError(
            f"char_ids must be 3-D [batch, tokens, {max_characters_per_token}]; got shape {tuple(char_ids.shape)}."
        )
    dtype = char_ids.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or torch.iinfo(dtype).max < n_characters - 1:
        raise TypeError(f"char_ids must be int16, int32 or int64; got dtype {dtype}.")
    if char_ids.numel() and not capturing() and (int(char_ids.min()) < 0 or int(char_ids.max()) >= n_characters):
        raise ValueError(f"char_ids must lie in [0, {n_characters}); 0 marks a padded position.")
    return char_ids.long()


class BiLM(nn.Module):
    bos_char_ids: torch.Tensor  # buffers (not saved): the char ids of <S> and </S>
    eos_char_ids: torch.Tensor

    def __init__(self, options: BiLMOptions, *, stateful: bool = False, keep_sentence_boundaries: bool = False) -> None:
        super().__init__()
        self.options, self.stateful, self.keep_sentence_boundaries = options, stateful, keep_sentence_boundaries
        self.char_cnn = CharCNN(options)
        self.forward_layers = LSTMStack(options.lstm)
        self.backward_layers = LSTMStack(options.lstm)
        C = options.char_cnn.max_characters_per_token
        self.register_buffer("bos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.register_buffer("eos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.reset_buffers()
        self._states: dict[str, list] | None = None

    def reset_buffers(self) -> None:
        C = self.options.char_cnn.max_characters_per_token
        with torch.no_grad():
            self.bos_char_ids.copy_(torch.tensor(word_to_char_ids(BOS_TOKEN, C)))
            self.eos_char_ids.copy_(torch.tensor(word_to_char_ids(EOS_TOKEN, C)))

    def threads(self) -> AbstractContextManager:
        return nullcontext()  # torch's own threads: the core's thread rule is a runtime part

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> BiLMOutput:
        char_ids = char_ids.to(self.bos_char_ids.device)  # ElmoModel checked them (check_char_ids)
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.shape != char_ids.shape[:2]):
            raise ValueError(f"mask must be a [batch, tokens] = {tuple(char_ids.shape[:2])} tensor.")
        real = (char_ids != 0).any(dim=-1) if mask is None else mask.bool().to(char_ids.device)
        batch, T, C = char_ids.shape
        lengths = real.sum(dim=1)  # [batch]
        if not capturing() and not torch.equal(real, torch.arange(T, device=real.device)[None, :] < lengths[:, None]):
            raise ValueError("padding must be on the right: each mask row is True for its first n positions.")
        ids = char_ids.new_zeros(batch, T + 2, C)  # <S> tokens </S>, the biLM's own boundaries
        ids[:, 1 : T + 1] = char_ids * real[..., None]
        ids[:, 0] = self.bos_char_ids
        ids[torch.arange(batch), lengths + 1] = self.eos_char_ids
        full = torch.arange(T + 2, device=ids.device)[None, :] < (lengths + 2)[:, None]  # [batch, T + 2]
        tokens = self.char_cnn(ids.flatten(0, 1)).view(batch, T + 2, -1)  # [batch, T + 2, P]
        embedded = tokens * full[..., None].to(tokens.dtype)  # padding zeroed
        forward_out, backward_out = self._run_stacks(embedded, lengths + 2, full)
        keep = slice(None) if self.keep_sentence_boundaries else slice(1, T + 1)
        layers = [torch.cat([embedded, embedded], dim=-1)]  # layer 0: the token vector twice
        layers += [torch.cat([f, b], dim=-1) for f, b in zip(forward_out, backward_out)]
        activations = torch.stack(layers)[:, :, keep]  # [n_layers + 1, batch, tokens (+ 2), 2P]
        if self.keep_sentence_boundaries:
            return BiLMOutput(activations, full)
        return BiLMOutput(activations * real[None, :, :, None].to(activations.dtype), real)

    def _run_stacks(self, x: torch.Tensor, lengths: torch.Tensor, full: torch.Tensor) -> tuple[list, list]:
        steps = torch.arange(x.shape[1], device=x.device)[:, None]  # [steps, 1]
        reverse = torch.where(steps < lengths[None, :], lengths[None, :] - 1 - steps, steps)  # each row reversed

        def flip(t: torch.Tensor) -> torch.Tensor:  # [steps, batch, dim], reversed within each row's length
            return t.gather(0, reverse[..., None].expand(-1, -1, t.shape[-1]))

        x, active = x.transpose(0, 1), full.t()  # [steps, batch, P], [steps, batch]
        forward_init, backward_init = self._initial_states(x.shape[1])
        forward_out, forward_final = self.forward_layers(x, active, forward_init)
        backward_out, backward_final = self.backward_layers(flip(x), active, backward_init)
        if self.stateful:
            self._store_states(forward_final, backward_final)
        return [y.transpose(0, 1) for y in forward_out], [flip(y).transpose(0, 1) for y in backward_out]

    def _initial_states(self, batch: int) -> Any:
        if not self.stateful or self._states is None:
            return None, None

        def take(h: torch.Tensor) -> torch.Tensor:
            return torch.cat([h, h.new_zeros(max(0, batch - h.shape[0]), *h.shape[1:])])[:batch]

        return tuple([(take(h), take(c)) for h, c in self._states[d]] for d in ("forward", "backward"))

    def _store_states(self, forward_final: list, backward_final: list) -> None:
        new = {}
        for direction, finals in (("forward", forward_final), ("backward", backward_final)):
            layers = []
            for k, (h, c) in enumerate(finals):
                h, c = h.detach().float(), c.detach().float()
                if self._states is not None and self._states[direction][k][0].shape[0] > h.shape[0]:
                    old_h, old_c = self._states[direction][k]  # rows beyond this batch keep their states
                    h, c = torch.cat([h, old_h[h.shape[0] :]]), torch.cat([c, old_c[c.shape[0] :]])
                layers.append((h, c))
            new[direction] = layers
        self._states = new


# ---- scalar mix and Elmo (elmo_core/model/elmo.py): gamma * sum_k softmax(w)_k * h_k
class ScalarMix(nn.Module):  # trainable unless given its weights, gamma starts at 1
    def __init__(self, n_outputs: int, do_layer_norm: bool, weights: Sequence[float] | None, scope: str) -> None:
        super().__init__()
        initial = [0.0] * n_outputs if weights is None else list(weights)
        if scope not in ("sentence", "batch") or len(initial) != n_outputs:
            raise ValueError(f"ScalarMix needs {n_outputs} weights and scope sentence or batch; got {initial}.")
        self.do_layer_norm, self.layer_norm_scope = do_layer_norm, scope
        self.initial_scalar_parameters = tuple(float(v) for v in initial)
        self.scalar_weights = nn.Parameter(torch.empty(n_outputs), requires_grad=weights is None)
        self.gamma = nn.Parameter(torch.empty(1), requires_grad=weights is None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.scalar_weights.copy_(torch.tensor(self.initial_scalar_parameters))
            self.gamma.fill_(1.0)

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        if self.do_layer_norm:
            layers = [_masked_layer_norm(layer, mask, self.layer_norm_scope == "sentence") for layer in layers]
        dtype = layers[0].dtype
        weights, gamma = torch.softmax(self.scalar_weights, dim=0).to(dtype), self.gamma.to(dtype)
        mixed = weights[0] * layers[0]
        for weight, layer in zip(weights[1:], layers[1:]):
            mixed = mixed + weight * layer  # [batch, tokens, dim]
        return gamma * mixed


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, per_sentence: bool) -> torch.Tensor:
    m = mask[:, :, None].to(layer.dtype)  # [batch, tokens, 1]
    dims = (1, 2) if per_sentence else (0, 1, 2)
    count = (m.sum(dim=dims, keepdim=True) * layer.shape[-1]).clamp(min=1)
    mean = (layer * m).sum(dim=dims, keepdim=True) / count
    var = (((layer - mean) * m) ** 2).sum(dim=dims, keepdim=True) / count
    return (layer - mean) / torch.sqrt(var + 1e-12)


ELMO_SETTINGS: dict[str, Any] = dict(  # Elmo's defaults, the settings a config.json stores
    num_output_representations=1, dropout=0.5, do_layer_norm=False, keep_sentence_boundaries=False, stateful=False,
    scalar_mix_parameters=None, layer_norm_scope="sentence",
)  # fmt: skip


class Elmo(nn.Module):
    def __init__(self, options: BiLMOptions, **s: Any) -> None:  # s: every ELMO_SETTINGS key (ElmoConfig's)
        super().__init__()
        if not 0.0 <= s["dropout"] < 1.0:
            raise ValueError(f"Elmo needs dropout in [0, 1); got {s['dropout']}.")
        self.bilm = BiLM(options, stateful=s["stateful"], keep_sentence_boundaries=s["keep_sentence_boundaries"])
        self.bilm.requires_grad_(False)
        mix = (options.n_outputs, s["do_layer_norm"], s["scalar_mix_parameters"], s["layer_norm_scope"])
        self.scalar_mixes = nn.ModuleList(ScalarMix(*mix) for _ in range(s["num_output_representations"]))


def bilm_is_trainable(bilm: nn.Module) -> bool:
    return any(p.requires_grad for p in bilm.parameters())


def run_bilm(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool | None = None) -> BiLMOutput:
    frozen = not bilm_is_trainable(bilm) if frozen is None else frozen
    with torch.no_grad() if frozen else nullcontext():  # frozen: no graph through the biLM
        return bilm(char_ids, mask)


def mix_representations(
    mixes: Iterable[nn.Module], layers: Sequence[torch.Tensor], mask: torch.Tensor, dropout: float, training: bool
) -> list[torch.Tensor]:
    return [F.dropout(mix(layers, mask) * mask[..., None].to(layers[0].dtype), dropout, training) for mix in mixes]
