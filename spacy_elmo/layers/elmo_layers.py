"""The frozen biLM as a thinc layer.

    docs -> units (sentences, or whole Docs), whitespace tokens left out
         -> elmo_core's run_in_windows: windows, token-budget batches, an `ElmoShim` each
         -> per Doc: float32 numpy [n_layers + 1, len(doc), dim] (zero rows for whitespace)

A unit's frozen layers never change, so a `FeatureCache` may keep them across epochs.
Construction reads no file: `init` loads the configured source.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, cast

import numpy as np
import srsly
import torch
from spacy.attrs import IS_SPACE, ORTH, SENT_START
from spacy.tokens import Doc
from thinc.api import ArgsKwargs, Model, PyTorchShim, get_torch_default_device
from thinc.layers.pytorchwrapper import forward as pytorch_forward
from thinc.types import Floats3d

from elmo_core import Elmo, FeatureCache, load_elmo, load_model_folder, save_model_folder, words_to_char_ids
from elmo_core.face_api import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_WINDOW_TOKENS,
    bilm_is_trainable,
    check_int,
    check_window_settings,
    first_use_lock,
    inference_step,
    resolve_model_source,
    run_in_windows,
)

__all__ = [
    "ElmoShim",
    "build_elmo_layers",
    "check_frozen_for_training",
    "elmo_module",
    "feature_cache",
    "load_elmo_source",
    "set_dims_from_elmo",
    "set_elmo",
]

logger = logging.getLogger(__name__)

LAYER_NAME = "elmo_layers"


def build_elmo_layers(
    path: str = "",
    options: str = "",
    weights: str = "",
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    per_sentence: bool = True,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    cache_bytes: int = 0,
) -> Model[list[Doc], list[Floats3d]]:
    """The thinc layer. The arguments are `spacy_elmo.architectures.ElmoLayers_v2`'s."""
    check_int("max_batch_tokens", max_batch_tokens)
    window_tokens = check_window_settings(window_tokens, window_context)  # 0 = read every unit whole
    check_int("cache_bytes", cache_bytes, minimum=0, meaning="0 = no cache")
    return Model(
        LAYER_NAME,
        forward,
        init=init,
        layers=[_wrap(None)],  # a placeholder until init or deserialization
        dims={"nO": None, "nL": None},
        attrs={
            "source": {"path": path or "", "options": options or "", "weights": weights or ""},
            "max_batch_tokens": max_batch_tokens,
            "per_sentence": per_sentence,
            "window_tokens": window_tokens,
            "window_context": window_context,
            # Not serialised (thinc skips attrs msgpack cannot write); a copy starts empty.
            "feature_cache": FeatureCache(cache_bytes) if cache_bytes else None,
            # Used by nlp.replace_listeners (see architectures.py).
            "replace_listener": _replace_listener,
            "replace_listener_cfg": _replace_listener_cfg,
        },
    )


def forward(model: Model[list[Doc], list[Floats3d]], docs: list[Doc], is_train: bool):
    elmo = elmo_module(model)
    if elmo is None:  # a first call before any initialisation: the one load, now
        model.initialize()  # concurrent first calls load once (`init`)
        elmo = elmo_module(model)
        assert elmo is not None  # initialize() loaded it
    if is_train:
        check_frozen_for_training(elmo)
    _follow_thinc_device(elmo)
    with elmo.bilm.threads():  # the library's work on the biLM: its thread rule (elmo_core.runtime.threads)
        return _forward(model, elmo, docs)


def _forward(model: Model[list[Doc], list[Floats3d]], elmo: Elmo, docs: list[Doc]):
    n_outputs, dim = model.get_dim("nL"), model.get_dim("nO")
    outputs = [np.zeros((n_outputs, len(doc), dim), dtype="float32") for doc in docs]
    units = list(_units(docs, model.attrs["per_sentence"]))
    cache: FeatureCache | None = model.attrs["feature_cache"]
    missing = []  # units the biLM has to read
    for doc_index, token_indices, words in units:
        cached = cache.get(tuple(words)) if cache is not None else None
        if cached is None:
            missing.append((doc_index, token_indices, words))
        else:
            outputs[doc_index][:, token_indices] = cached  # a copy: the cache stays read-only
    # The core's one windowed, batched loop; each batch runs through the PyTorchWrapper.
    completed = run_in_windows(
        [words for _, _, words in missing],
        model.layers[0].predict,
        batch_tokens=model.attrs["max_batch_tokens"],
        window_tokens=model.attrs["window_tokens"],
        window_context=model.attrs["window_context"],
    )
    with torch.inference_mode():
        for u, layers in completed:  # [layers, unit tokens, dim], a copy
            doc_index, token_indices, _ = missing[u]
            outputs[doc_index][:, token_indices] = layers
    if cache is not None:
        for doc_index, token_indices, words in missing:  # whole units, after all their windows
            cache.put(tuple(words), outputs[doc_index][:, token_indices])

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        # The biLM is frozen and Docs take no gradient.
        return []

    return outputs, backprop


def check_frozen_for_training(elmo: Elmo) -> None:
    """Refuse to train with a biLM the user unfroze: spaCy's layers would leave it unchanged.

    AllenNLP chose this error over silent freezing (allenai/allennlp#1644).

    Raises:
        ValueError: if a biLM parameter has `requires_grad`.
    """
    if bilm_is_trainable(elmo.bilm):
        trainable = [name for name, p in elmo.bilm.named_parameters() if p.requires_grad]
        raise ValueError(
            f"the ELMo biLM has {len(trainable)} parameter(s) with requires_grad=True (e.g. "
            f"bilm.{trainable[0]}), but spaCy's ELMo layers run the biLM frozen, so training would not "
            "change them. Fine-tune the biLM in PyTorch (elmo_core.Elmo or hf_elmo.ElmoModel; README, "
            "'Fine-tuning the biLM'), save it with elmo_core.save_model_folder and set the component's "
            "model path to that folder; or freeze it again: nlp.get_pipe('elmo').elmo.bilm.requires_grad_(False)."
        )


def init(model: Model[list[Doc], list[Floats3d]], X: Any = None, Y: Any = None) -> None:
    """The layer's one load: the configured source, unless the layer holds a biLM already.

    Concurrent first calls load once (`first_use_lock` on the placeholder shim).
    """
    if elmo_module(model) is not None:
        return
    with first_use_lock(model.layers[0].shims[0]):
        if elmo_module(model) is None:
            logger.info("loading the ELMo biLM from %s", _describe_source(model.attrs["source"]))
            set_elmo(model, load_elmo_source(**model.attrs["source"]))


# ------------------------------------------------------------------ the torch module
class ElmoShim(PyTorchShim):
    """The `PyTorchShim` that runs the frozen `Elmo`, with the module as `elmo`.

    thinc's shim gives no public access to its module (spacy-transformers' `HFShim` does
    the same). Serialisation writes the model folder, not a pickled state dict.

    Args:
        elmo: The biLM, or None for a placeholder.
    """

    def __init__(self, elmo: Elmo | None) -> None:
        self.elmo = elmo
        super().__init__(elmo, serialize_model=serialize_elmo, deserialize_model=self._deserialize)

    def _deserialize(self, current: Elmo | None, data: bytes, device: torch.device) -> Elmo | None:
        self.elmo = deserialize_elmo(current, data, device)
        return self.elmo

    def predict(self, inputs: ArgsKwargs) -> Any:
        """The module's output, in eval mode under `torch.inference_mode`, for this call only.

        thinc's `predict` leaves the module in train mode, even under another thread's call.
        """
        assert self.elmo is not None  # `forward` loaded it
        with inference_step(self.elmo), torch.autocast(device_type="cuda", enabled=self._mixed_precision):
            return self._model(*inputs.args, **inputs.kwargs)


def _wrap(elmo: Elmo | None) -> Model:
    # What PyTorchWrapper_v3 builds, with the shim that keeps the module (as spacy-transformers' HFWrapper).
    return Model(
        "pytorch",
        pytorch_forward,
        attrs={"convert_inputs": _convert_inputs, "convert_outputs": _convert_outputs},
        shims=[ElmoShim(elmo)],
        dims={"nI": None, "nO": None},
    )


def _convert_inputs(model: Model, sentences: list[list[str]], is_train: bool):
    shim = cast(ElmoShim, model.shims[0])
    assert shim.elmo is not None  # `forward` loaded it
    C = shim.elmo.options.char_cnn.max_characters_per_token
    char_ids, mask = words_to_char_ids(sentences, C)  # CPU; BiLM.forward moves them to its device

    def backprop(d_inputs: Any) -> list:
        return []

    return ArgsKwargs(args=(char_ids, mask), kwargs={}), backprop


def _convert_outputs(model: Model, inputs_outputs: tuple, is_train: bool):
    sentences, output = inputs_outputs
    activations = output.activations.float().cpu().numpy()  # [layers, batch, tokens, dim]
    per_sentence = [activations[:, row, : len(words)] for row, words in enumerate(sentences)]

    def backprop(d_outputs: Any) -> ArgsKwargs:
        return ArgsKwargs(args=(), kwargs={})

    return per_sentence, backprop


def elmo_module(model: Model) -> Elmo | None:
    """The torch `Elmo` inside an ElmoLayers layer, or None before it is loaded."""
    return cast(ElmoShim, model.layers[0].shims[0]).elmo


def feature_cache(model: Model) -> FeatureCache | None:
    """The layer's `FeatureCache` (None when `cache_bytes` is 0). Read `.stats`."""
    return model.attrs["feature_cache"]


def set_elmo(model: Model, elmo: Elmo) -> None:
    """Put `elmo` into the layer and set its dims.

    Raises:
        ValueError: if the layer's dims were already set for a differently shaped model.
    """
    set_dims_from_elmo(
        model,
        elmo,
        owner="this ELMo layer",
        fix="A saved pipeline and the model it loads must have the same shape.",
    )
    model.layers[0] = _wrap(elmo.eval())
    cache = model.attrs["feature_cache"]
    if cache is not None:
        cache.clear()  # the layers it holds came from another biLM


def set_dims_from_elmo(model: Model, elmo: Elmo, *, owner: str, fix: str) -> None:
    """Set nO (vector width) and nL (n_layers + 1) from the biLM.

    Raises:
        ValueError: if a dim was set to another value. The message names `owner`, then `fix`.
    """
    for name, value, meaning in (("nO", elmo.output_dim, "vector width"), ("nL", elmo.n_outputs, "output layers")):
        if model.has_dim(name) and model.get_dim(name) != value:
            raise ValueError(
                f"{owner} was set up for {name}={model.get_dim(name)} ({meaning}), but the biLM "
                f"being loaded has {name}={value}. {fix}"
            )
        model.set_dim(name, value)


def _follow_thinc_device(elmo: Elmo) -> None:
    device = get_torch_default_device()
    parameter = next(elmo.parameters(), None)
    if parameter is not None and parameter.device != device:
        elmo.to(device)


# ------------------------------------------------------------------ sources and bytes
def load_elmo_source(path: str = "", options: str = "", weights: str = "") -> Elmo:
    """Load a biLM from a model folder, a bilm-tf options/hdf5 pair, or the default model.

    Always stateless, without sentence-boundary positions, whatever the folder says.

    Raises:
        elmo_core.ElmoError: for an unclear source, or a missing or broken file.
    """
    return load_elmo(path, options, weights, map_location="cpu", stateful=False, keep_sentence_boundaries=False)


def _describe_source(source: dict[str, str]) -> str:
    try:
        return resolve_model_source(source["path"], source["options"], source["weights"]).describe()
    except ValueError:  # a bad source: loading it raises the error that explains it
        return str(source)


def serialize_elmo(elmo: Elmo | None) -> bytes:
    """The model folder files of `elmo` (safetensors weights, JSON config), as msgpack."""
    if elmo is None:
        return b""
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        save_model_folder(elmo, tmp)
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())}
    return srsly.msgpack_dumps({"model_folder": files})


def deserialize_elmo(current: Elmo | None, data: bytes, device: torch.device) -> Elmo | None:
    """Rebuild the `Elmo` that `serialize_elmo` wrote, on `device`."""
    if not data:
        return current
    files = srsly.msgpack_loads(data)["model_folder"]
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_") as tmp:
        for name, content in files.items():
            (Path(tmp) / name).write_bytes(content)
        return load_model_folder(tmp, map_location=device).eval()


# ------------------------------------------------------------------ Docs to units
def _units(docs: list[Doc], per_sentence: bool):
    """(doc index, token indices, token texts) of each stretch the biLM reads as one sequence."""
    for d, doc in enumerate(docs):
        if not len(doc):
            continue
        # Doc.to_array, not Tokens: a Doc -> Token -> Doc cycle keeps Docs alive until the cyclic GC runs.
        attrs = doc.to_array([ORTH, IS_SPACE, SENT_START])  # uint64 [tokens, 3]; -1 wraps around
        starts = [0]
        if per_sentence and doc.has_annotation("SENT_START"):
            starts = [0] + [int(i) for i in np.flatnonzero(attrs[1:, 2] == 1) + 1]
        strings = doc.vocab.strings
        for start, end in zip(starts, starts[1:] + [len(doc)]):
            indices = [i for i in range(start, end) if not attrs[i, 1]]
            if indices:
                yield d, indices, [strings[int(attrs[i, 0])] for i in indices]


# ------------------------------------------------------------------ replace_listeners
def _replace_listener(model: Model, listener: Model, upstream: Any) -> Model:
    # nlp.replace_listeners hook: the copied layer takes the listener's place. The trained mix after it stays.
    return model


def _replace_listener_cfg(elmo_layers_cfg: dict[str, Any], tok2vec_cfg: dict[str, Any]) -> dict[str, Any]:
    """`nlp.replace_listeners` hook: the `ElmoListener.vN` block in `model.tok2vec` becomes `Tok2VecElmo.vN`."""
    listeners = [tok2vec_cfg] if _is_listener_cfg(tok2vec_cfg) else list(_listener_cfgs(tok2vec_cfg))
    if len(listeners) != 1:
        raise ValueError(
            f"replace_listeners expected one spacy-elmo.ElmoListener block in the component's "
            f"model.tok2vec config; found {len(listeners)}. Give the listener's own path, e.g. "
            f'"model.tok2vec" or "model.tok2vec.embed".'
        )
    listener_cfg = listeners[0]
    version = listener_cfg["@architectures"].rsplit(".", 1)[-1]  # the same settings in both, version by version
    rest = {k: v for k, v in listener_cfg.items() if k not in ("@architectures", "upstream")}
    return {"@architectures": f"spacy-elmo.Tok2VecElmo.{version}", "elmo": dict(elmo_layers_cfg), **rest}


def _is_listener_cfg(cfg: Any) -> bool:
    return isinstance(cfg, dict) and str(cfg.get("@architectures", "")).startswith("spacy-elmo.ElmoListener.")


def _listener_cfgs(cfg: Any):  # noqa: ANN202
    if isinstance(cfg, dict):
        for value in cfg.values():
            if _is_listener_cfg(value):
                yield value
            else:
                yield from _listener_cfgs(value)
