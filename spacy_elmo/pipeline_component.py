"""The `elmo` pipeline component: contextual vectors on every Doc, shared with listeners."""

# No `from __future__ import annotations` here: spaCy builds the registered functions' arguments from their
# annotations, and confection before 1.0 (spaCy 3.7's) cannot resolve them as strings.

import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
import srsly
from spacy import util
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer
from thinc.types import Floats3d

from elmo_core import Elmo, ElmoError, ScalarMix, load_model_folder, release_free_memory, save_model_folder
from elmo_core.face_api import atomic_folder, first_use_lock

from .layers.elmo_layers import check_frozen_for_training, elmo_module, set_dims_from_elmo, set_elmo
from .layers.listener import ElmoListener
from .util import (
    ScalarMixWeights,
    install_extensions,
    mix_layers,
    set_similarity_hooks,
)

__all__ = ["DEFAULT_CONFIG_STR", "ElmoComponent"]  # the factory is reached by its name, "elmo"

DEFAULT_CONFIG_STR = """
[elmo]

[elmo.model]
@architectures = "spacy-elmo.ElmoLayers.v2"
"""
"""The component's defaults. spaCy fills in the `spacy-elmo.ElmoLayers.v2` arguments from
its signature (`nlp.get_pipe_config("elmo")` shows them)."""

DEFAULT_CONFIG = Config().from_str(DEFAULT_CONFIG_STR)

install_extensions()


@Language.factory(
    "elmo",
    assigns=["doc.tensor", "doc._.elmo_layers", "doc._.elmo_mix"],
    default_config=DEFAULT_CONFIG["elmo"],
)
def make_elmo(nlp: Language, name: str, model: Model[list[Doc], list[Floats3d]]) -> "ElmoComponent":
    """The `elmo` component: a frozen ELMo biLM that annotates every Doc.

    Add it with `nlp.add_pipe("elmo", config={"model": {"path": "path/to/model"}})`, or
    `factory = "elmo"` in a config. Each Doc gets every biLM layer in `doc._.elmo_layers`
    ([n_layers + 1, tokens, dim]) and their scalar mix in `doc.tensor` ([tokens, dim]).
    `token.vector`, `doc.vector` and `similarity` then give ELMo vectors, while the vocab
    has no static vectors. Put `elmo` before spaCy's `tok2vec`, which writes `doc.tensor`
    too. For training, list it in `[training] annotating_components`.

    name (str): The component's name, which listeners give as `upstream`. Leave it "elmo".
    model (Model): A `spacy-elmo.ElmoLayers.v2` block: the biLM's source (`path`, or
        `options` and `weights`, all empty for the default model) and how it runs.
    """
    return ElmoComponent(nlp.vocab, model, name=name)


class _LoadedBiLM(NamedTuple):
    elmo: Elmo
    mix: np.ndarray  # float32 [n_layers + 2], read-only: softmax(w) of the first mix, then gamma


class ElmoComponent(TrainablePipe):
    """The `elmo` pipeline component (`nlp.get_pipe("elmo")`): a frozen biLM over every Doc.

    Attributes:
        model: The `spacy-elmo.ElmoLayers.v2` layer (wraps the torch `Elmo`).
        listener_map: The listeners of each downstream component, by component name.
    """

    def __init__(self, vocab: Vocab, model: Model[list[Doc], list[Floats3d]], name: str = "elmo") -> None:
        self.vocab = vocab
        self.model = model
        self.name = name
        self.cfg: dict[str, Any] = {}
        self.listener_map: dict[str, list[Model]] = {}
        self._loaded: _LoadedBiLM | None = None  # set by `_load`, the one load
        install_extensions()

    # ------------------------------------------------------------------ listeners
    @property
    def listeners(self) -> list[Model]:
        """Every listener linked to this component."""
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> list[str]:
        """Names of the components that listen to this one."""
        return list(self.listener_map.keys())

    def add_listener(self, listener: ElmoListener, component_name: str) -> None:
        """Link a listener of `component_name` to this component (spaCy calls this)."""
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream = self
        if self._loaded is not None:  # otherwise `_load` sizes it
            self._set_listener_dims(listener, self._loaded.elmo)

    def remove_listener(self, listener: ElmoListener, component_name: str) -> bool:
        """Unlink a listener. Returns whether it was linked."""
        if listener in self.listener_map.get(component_name, []):
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            if listener.upstream is self:
                listener.upstream = None
            return True
        return False

    def find_listeners(self, component: Any) -> None:
        """Link the ElmoListener layers of `component` that name this component.

        Raises:
            ValueError: if `component` has a plain spaCy tok2vec listener naming this one.
        """
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            return
        for node in model.walk():
            if isinstance(node, ElmoListener) and node.upstream_name in ("*", self.name):
                self.add_listener(node, component.name)
            elif getattr(node, "upstream_name", None) == self.name and not isinstance(node, ElmoListener):
                raise ValueError(
                    f"component {component.name!r} has a {type(node).__name__} (e.g. "
                    f"spacy.Tok2VecListener.v1) with upstream = {self.name!r}, but {self.name!r} is an "
                    "ELMo component. Use spacy-elmo.ElmoListener.v2 for its tok2vec."
                )

    @property
    def elmo(self) -> Elmo:
        """The torch `Elmo`, loaded on first use."""
        return self._bilm().elmo

    @property
    def mix_weights(self) -> ScalarMixWeights:
        """The scalar mix behind `doc.tensor`."""
        elmo, mix = self._bilm()
        w = np.zeros(len(mix) - 1, dtype="float32")
        if elmo.scalar_mixes:
            w = cast(ScalarMix, elmo.scalar_mixes[0]).scalar_weights.detach().float().cpu().numpy().copy()
        return ScalarMixWeights(w, mix[:-1].copy(), float(mix[-1]))

    # ------------------------------------------------------------------ inference
    def __call__(self, doc: Doc) -> Doc:
        """Annotate one Doc."""
        error_handler = self.get_error_handler()
        try:
            mix = self._bilm().mix
            self._annotate([doc], self.model.predict([doc]), mix)
            return doc
        except Exception as e:
            error_handler(self.name, self, [doc], e)
            return doc  # a handler that returns lets the Doc through unannotated (None would be spaCy's E005)

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of Docs, `batch_size` at a time, giving freed memory back to the OS after each."""
        error_handler = self.get_error_handler()
        for docs in util.minibatch(stream, size=batch_size):
            try:
                mix = self._bilm().mix
                self._annotate(docs, self.model.predict(docs), mix)
                release_free_memory()
                yield from docs
            except Exception as e:
                error_handler(self.name, self, docs, e)

    def predict(self, docs: Iterable[Doc]) -> list[Floats3d]:
        """Every biLM layer of each Doc, without gradients.

        Returns:
            One float32 numpy array per Doc, [n_layers + 1, len(doc), dim], on the CPU.
        """
        self._bilm()
        return self.model.predict(list(docs))

    def set_annotations(self, docs: Iterable[Doc], layers: list[Floats3d]) -> None:
        """Write the layers, the mix, `doc.tensor` and the similarity hooks."""
        self._annotate(docs, layers, self._bilm().mix)

    @staticmethod
    def _annotate(docs: Iterable[Doc], layers: list[Floats3d], mix: np.ndarray) -> None:
        for doc, x in zip(docs, layers):
            doc._.elmo_layers = x
            doc._.elmo_mix = mix
            doc.tensor = mix_layers(cast(np.ndarray, x), mix)  # numpy: the layer's outputs are on the CPU
            set_similarity_hooks(doc)

    # ------------------------------------------------------------------ training
    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optimizer | None = None,
        losses: dict[str, float] | None = None,
    ) -> dict[str, float]:
        """Record a zero loss: the biLM is frozen, and each listener trains its own scalar mix.

        Raises:
            ValueError: if a biLM parameter has `requires_grad`, which spaCy would leave unchanged.
        """
        validate_examples(examples, "ElmoComponent.update")
        check_frozen_for_training(self.elmo)  # a biLM unfrozen by the user would silently stay frozen
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        return losses

    def get_loss(self, examples: Iterable[Example], scores: Any) -> tuple[float, Any]:
        """No loss of its own (see `update`)."""
        return 0.0, None

    def initialize(self, get_examples: Callable[[], Iterable[Example]], *, nlp: Language | None = None) -> None:
        """Load the biLM from the configured source. The examples are not needed."""
        validate_get_examples(get_examples, "ElmoComponent.initialize")
        self._load()

    def finish_update(self, sgd: Optimizer) -> None:
        """No-op: the biLM is frozen (see `update`)."""

    # ------------------------------------------------------------------ serialisation
    def to_disk(self, path: str | Path, *, exclude: Iterable[str] = tuple()) -> None:
        """Write `cfg`, the vocab and the biLM, as a model folder under `path / "model"`.

        `elmo embed --model PATH/model` reads that folder too.
        """
        serialize = {
            "cfg": lambda p: srsly.write_json(p, self.cfg),
            "vocab": lambda p: self.vocab.to_disk(p, exclude=exclude),
            "model": lambda p: save_model_folder(self.elmo, p),
        }
        with atomic_folder(path) as staging:  # spaCy writes in place: each file is renamed in whole
            util.to_disk(staging, serialize, exclude)

    def from_disk(self, path: str | Path, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        """Load what `to_disk` wrote. The configured source is not read."""

        def load_model(p: Path) -> None:
            try:
                elmo = load_model_folder(p, map_location="cpu")
            except ElmoError as err:  # a missing or damaged file: say which pipeline, and what to do
                raise type(err)(
                    f"the saved pipeline's '{self.name}' component cannot load its biLM from {p}: {err} "
                    "The pipeline folder is incomplete or damaged; copy it again whole, or save it "
                    "again with nlp.to_disk()."
                ) from err
            set_elmo(self.model, elmo)
            self._load()

        deserialize: dict[str, Callable[[Path], Any]] = {
            "vocab": lambda p: self.vocab.from_disk(p, exclude=exclude),
            "cfg": lambda p: self.cfg.update(srsly.read_json(p)),
            "model": load_model,
        }
        util.from_disk(path, deserialize, exclude)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """The content of `to_disk`, with safetensors bytes for the weights."""
        self._bilm()  # load the biLM first if nothing loaded it
        serialize = {
            "cfg": lambda: srsly.json_dumps(self.cfg),
            "vocab": lambda: self.vocab.to_bytes(exclude=exclude),
            "model": self.model.to_bytes,
        }
        return util.to_bytes(serialize, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        def load_model(b: bytes) -> None:
            self.model.from_bytes(b)
            self._load()

        deserialize: dict[str, Callable[[bytes], Any]] = {
            "cfg": lambda b: self.cfg.update(srsly.json_loads(b)),
            "vocab": lambda b: self.vocab.from_bytes(b, exclude=exclude),
            "model": load_model,
        }
        util.from_bytes(bytes_data, deserialize, exclude)
        return self

    # ------------------------------------------------------------------ the one load
    def _bilm(self) -> _LoadedBiLM:
        return self._loaded if self._loaded is not None else self._load()

    def _load(self) -> _LoadedBiLM:
        # The one load: by initialize, from_disk, from_bytes, or first use. Never per batch.
        with first_use_lock(self):  # concurrent first calls load once; the others find it loaded
            return self._load_once()

    def _load_once(self) -> _LoadedBiLM:
        self.model.initialize()
        elmo = elmo_module(self.model)
        assert elmo is not None  # initialize() loaded it
        if self._loaded is not None and self._loaded.elmo is elmo:
            return self._loaded
        loaded = _LoadedBiLM(elmo, _tensor_mix(elmo))
        for listener in self.listeners:
            self._set_listener_dims(listener, elmo)
        self._loaded = loaded  # only once every check passed: a failed load is tried again
        if self.vocab.vectors.size > 0:
            warnings.warn(
                f"the vocab of the pipeline with {self.name!r} has static word vectors, so spaCy's "
                "token.vector, span.vector and doc.vector return those, not ELMo's. ELMo's vectors "
                "are in doc.tensor (mixed) and doc._.elmo_layers (every layer).",
                UserWarning,
                stacklevel=4,
            )
        return self._loaded

    def _set_listener_dims(self, listener: Model, elmo: Elmo) -> None:
        set_dims_from_elmo(
            listener,
            elmo,
            owner=f"a listener of {self.name!r}",
            fix="Retrain the listening component with this ELMo model.",
        )


def _tensor_mix(elmo: Elmo) -> np.ndarray:
    """float32 [n_layers + 2], read-only: softmax(w) of the first mix (or the average), then gamma."""
    mix = cast(ScalarMix, elmo.scalar_mixes[0]) if elmo.scalar_mixes else None
    if mix is not None and mix.do_layer_norm and mix.layer_norm_scope == "batch":
        raise ValueError(
            "the model folder's scalar mix uses do_layer_norm=True with layer_norm_scope='batch', "
            "which normalises over a whole batch, so a Doc's doc.tensor would depend on its batch "
            "mates. Save the model with layer_norm_scope='sentence' (the default) for use in spaCy."
        )
    if mix is not None:
        weights = mix.normalized_weights.float().cpu().numpy()
        gamma = float(mix.gamma.detach().float().cpu()[0])
    else:
        weights = np.full(elmo.n_outputs, 1.0 / elmo.n_outputs, dtype="float32")
        gamma = 1.0
    tensor_mix = np.concatenate([weights, [gamma]]).astype("float32")
    tensor_mix.setflags(write=False)
    return tensor_mix
