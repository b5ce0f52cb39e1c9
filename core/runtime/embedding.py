"""Tokenised sentences in, numpy vectors out: the convenience path for inference."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..model.characters import check_sentences, words_to_char_ids
from ..model.checks import check_setting
from ..model.errors import SettingError
from ..model.precision import check_cpu_precision
from .batching import DEFAULT_BATCH_TOKENS
from .quantization import is_quantized
from .windows import DEFAULT_WINDOW_TOKENS, OnWindow, RunBatch, check_window_settings, run_in_windows

if TYPE_CHECKING:
    from ..model.elmo import Elmo

__all__ = ["EmbedSettings", "embed_sentences", "iter_embeddings"]

LAYER_CHOICES = ("all", "top", "average", "mix")


def check_layers(layers: object, n_outputs: int, num_mixes: int) -> None:
    """Raise `SettingError` unless `layers` is one of LAYER_CHOICES or a layer index 0..L.

    Negative indices are refused, so -1 never silently selects a layer.
    """
    valid = f"'all', 'top', 'average', 'mix' or a layer index 0..{n_outputs - 1}"
    if isinstance(layers, str):
        if layers not in LAYER_CHOICES:
            raise SettingError(f"layers must be {valid}; got {layers!r}.", "layers")
        if layers == "mix" and num_mixes == 0:
            raise SettingError(
                "layers='mix' needs a model with at least one scalar mix "
                "(num_output_representations >= 1); use 'all', 'top' or 'average'.",
                "layers",
            )
        return
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)):
        raise SettingError(f"layers must be {valid}; got {layers!r} ({type(layers).__name__}).", "layers")
    if not 0 <= int(layers) < n_outputs:
        why = " Negative indices are not accepted." if int(layers) < 0 else f" This model has {n_outputs} layers."
        raise SettingError(f"layers must be {valid}; got {layers!r}.{why}", "layers")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class EmbedSettings:
    """How `embed_sentences`, `iter_embeddings` and `elmo embed` run a model.

    The functions take these fields as keywords too, and `elmo embed` as options.

    Attributes:
        layers: `"all"` -> [n_layers + 1, tokens, dim] per sentence. `"top"` (last LSTM
            layer), `"average"`, `"mix"` (the first scalar mix) or a layer index 0..n_layers
            -> [tokens, dim]. Layer 0 is the char CNN layer.
        batch_tokens: Budget of padded positions per batch, `rows * (longest + 2)`.
        batch_size: Optional cap on sentences per batch.
        device: Move the model here first. None leaves it where it is.
        autocast_dtype: `torch.bfloat16` or `torch.float16` for `torch.autocast` (about 3
            significant digits). Outputs stay float32. On the CPU only bfloat16, and only
            where the CPU computes it natively (AVX512-BF16 or AMX).
        window_tokens: Read a longer sentence in overlapping windows of this many tokens.
            None or 0 reads every sentence whole.
        window_context: Context tokens on each side of a window (default `window_tokens // 8`).

    Raises:
        ValueError: for a bad budget or window, or another `autocast_dtype`.
    """

    layers: str | int = field(default="all", metadata=_help("all | top | average | mix | a layer index 0..n_layers."))
    batch_tokens: int = field(default=DEFAULT_BATCH_TOKENS, metadata=_help("Padded positions per biLM batch."))
    batch_size: int | None = field(
        default=None, metadata=_help("At most this many sentences per batch (default: the token budget alone decides).")
    )
    device: str | torch.device | None = None
    autocast_dtype: torch.dtype | None = None
    window_tokens: int | None = field(
        default=DEFAULT_WINDOW_TOKENS,
        metadata=_help("Read a sentence longer than this in overlapping windows of this many tokens (0 = read whole)."),
    )
    window_context: int | None = field(
        default=None, metadata=_help("Context tokens on each side of a window (default: window-tokens // 8).")
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_tokens", check_setting("batch_tokens", self.batch_tokens))
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", check_setting("batch_size", self.batch_size))
        try:
            window_tokens = check_window_settings(self.window_tokens, self.window_context)
        except ValueError as err:
            raise SettingError(str(err), "window_tokens", "window_context") from None
        object.__setattr__(self, "window_tokens", window_tokens)
        if window_tokens is not None and self.window_context is not None:  # an int, as the window's
            object.__setattr__(self, "window_context", check_setting("window_context", self.window_context, minimum=0))
        if self.autocast_dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(
                f"autocast_dtype must be torch.bfloat16, torch.float16 or None; got {self.autocast_dtype!r}."
            )

    @classmethod
    def given(cls, settings: EmbedSettings | None, overrides: dict[str, Any]) -> EmbedSettings:
        """`settings` (default: `EmbedSettings()`) with the fields in `overrides` replaced.

        Raises:
            TypeError: for a `settings` that is not an `EmbedSettings`, or an unknown keyword.
        """
        if settings is not None and not isinstance(settings, cls):
            raise TypeError(
                f"settings must be an EmbedSettings, e.g. EmbedSettings(layers='top'); got {type(settings).__name__}."
            )
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"unknown embed settings {unknown}; valid: {[f.name for f in fields(cls)]}.")
        base = settings if settings is not None else cls()
        return replace(base, **overrides) if overrides else base


def iter_embeddings(
    model: Elmo,
    sentences: Sequence[Sequence[str]],
    settings: EmbedSettings | None = None,
    *,
    on_window: OnWindow | None = None,
    **overrides: Any,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield `(index, vectors)` for every sentence, batch by batch (not in input order).

    Memory is bounded by one batch. Arguments and shapes as `embed_sentences`.
    `on_window(index, kept_tokens)` is told after each window of a long sentence.
    """
    settings = EmbedSettings.given(settings, overrides)
    _check_call(model, sentences, settings)
    yield from _embeddings(model, sentences, settings, on_window)


def _embeddings(
    model: Elmo, sentences: Sequence[Sequence[str]], settings: EmbedSettings, on_window: OnWindow | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """`iter_embeddings` after its checks. Only the batches run in inference modes, not the caller's code."""
    if is_quantized(model):
        _check_int8_use(model, settings.device, settings.autocast_dtype)
    if settings.device is not None:
        model.to(settings.device)
    precision = _autocast(next(model.parameters()).device, settings.autocast_dtype)
    steps = run_in_windows(
        sentences,
        _batch_runner(model, settings.layers, precision),
        batch_tokens=settings.batch_tokens,
        batch_size=settings.batch_size,
        window_tokens=settings.window_tokens,
        window_context=settings.window_context,
        on_window=on_window,
    )
    yield from steps  # closing this generator closes `steps` (and its batch's arrays)


@contextlib.contextmanager
def inference_step(model: torch.nn.Module) -> Iterator[None]:
    """Run the block with `model` in eval mode under `torch.inference_mode`, then put both back.

    The mode comes back when the last block on the model, in any thread, ends.
    """
    _enter_eval(model)
    try:
        with torch.inference_mode():
            yield
    finally:
        _leave_eval(model)


def _check_call(model: Elmo, sentences: object, settings: EmbedSettings) -> None:
    check_sentences(sentences)
    check_model(model, settings)


def check_model(model: Elmo, settings: EmbedSettings) -> None:
    """Raise ValueError unless `model` is stateless and has the `layers` of `settings`."""
    check_layers(settings.layers, model.n_outputs, len(model.scalar_mixes))
    if model.bilm.stateful:
        raise ValueError(
            "embed() sorts sentences by length, which would scramble the LSTM states a "
            "stateful model carries between batch rows. Call the model on your own batches "
            "in stateful mode, or build it with stateful=False (the default)."
        )


def _batch_runner(model: Elmo, layers: str | int, precision: contextlib.AbstractContextManager) -> RunBatch:
    """`run_in_windows`'s `run_batch`: token lists -> float32 [batch, (n_layers + 1,) tokens, dim]."""
    C = model.options.char_cnn.max_characters_per_token

    def run_batch(texts: list[Sequence[str]]) -> np.ndarray:
        with inference_step(model), model.bilm.threads():  # the chosen layers are ours to compute too
            char_ids, mask = words_to_char_ids(texts, C)
            with precision:
                # The scalar mixes only when asked for: for the other choices they would be
                # computed and thrown away.
                out = model(char_ids, mask) if layers == "mix" else model.bilm(char_ids, mask)
            if layers == "all":
                result = out.activations.transpose(0, 1)  # [batch, layers, tokens, dim]
            elif layers == "top":
                result = out.activations[-1]
            elif layers == "average":
                result = out.activations.mean(dim=0)
            elif layers == "mix":
                result = out.representations[0]
            else:
                result = out.activations[int(layers)]
            return result.float().cpu().numpy()  # `out` and the inputs are freed on return

    return run_batch


# Steps running on each model (from any thread: `inference_step`), and the mode to put
# back when the last one ends: a second thread must not take the first one's eval() for
# the caller's mode, nor run with dropout on after the first one restored it.
_MODE_LOCK = threading.Lock()
_RUNNING: weakref.WeakKeyDictionary[torch.nn.Module, list] = weakref.WeakKeyDictionary()


def _enter_eval(model: torch.nn.Module) -> None:
    with _MODE_LOCK:
        entry = _RUNNING.setdefault(model, [0, model.training])
        entry[0] += 1
        model.eval()


def _leave_eval(model: torch.nn.Module) -> None:
    with _MODE_LOCK:
        entry = _RUNNING[model]
        entry[0] -= 1
        if entry[0] == 0:
            del _RUNNING[model]
            model.train(entry[1])


def _check_int8_use(model: torch.nn.Module, device: str | torch.device | None, autocast_dtype: object) -> None:
    """int8 layers run on the CPU in float32 only: say so before torch fails deep inside."""
    parameter = next(model.parameters())
    target = torch.device(device) if device is not None else parameter.device
    if target.type != "cpu" or parameter.dtype != torch.float32 or autocast_dtype is not None:
        raise ValueError(
            f"this model is int8-quantised (quantize_int8), which runs on the CPU in float32 only; "
            f"asked for device {target}, dtype {parameter.dtype}, autocast {autocast_dtype}. On a GPU "
            "use the float32 model with autocast_dtype=torch.bfloat16 instead."
        )


def _autocast(device: torch.device, dtype: torch.dtype | None):
    if dtype is None:
        return contextlib.nullcontext()
    if device.type == "cpu":
        check_cpu_precision(dtype)  # bf16 where the CPU computes it natively, nothing else (elmo_core.model.precision)
    return torch.autocast(device.type, dtype=dtype)


def embed_sentences(
    model: Elmo, sentences: Sequence[Sequence[str]], settings: EmbedSettings | None = None, **overrides: Any
) -> list[np.ndarray]:
    """ELMo vectors for tokenised sentences, one float32 CPU array per sentence, in order.

    Runs under `torch.inference_mode`. A sentence's vectors do not depend on the batching.

        embed_sentences(elmo, sentences, layers="top", batch_size=32)
        embed_sentences(elmo, sentences, EmbedSettings(layers="top"))   # the same

    Args:
        model: A stateless `Elmo`.
        sentences: Lists of token strings. An empty list gives an empty array.
        settings: `EmbedSettings`. Default `EmbedSettings()`.
        **overrides: `EmbedSettings` fields that replace those of `settings`.

    Returns:
        One float32 array per sentence, dim = 2 * projection_dim:
        [n_layers + 1, tokens, dim] for layers="all", else [tokens, dim].

    Raises:
        TypeError: if `sentences` is not a list of lists of str, or for an unknown keyword.
        ValueError: for a bad setting, a stateful model, or an `autocast_dtype` this CPU
            does not compute natively.
    """
    settings = EmbedSettings.given(settings, overrides)
    _check_call(model, sentences, settings)
    out: list[np.ndarray | None] = [None] * len(sentences)
    for i, vectors in _embeddings(model, sentences, settings):
        out[i] = vectors
    return out  # type: ignore[return-value]
