"""ElmoListener: a downstream component's window onto the upstream `elmo` component.

The listener sits where a biLM would sit in a downstream model (`ElmoLayers` in
`Tok2VecElmo`) and gives the same thing: every biLM layer of each Doc,
[n_layers + 1, tokens, dim]. It reads them from `doc._.elmo_layers`, which the
upstream component wrote (the upstream is an annotating component during training).
For Docs that did not pass through the upstream (for instance the sample Docs a
component initialises on, or a training loop without `annotates=["elmo"]`), it asks the
upstream to compute them. Because the biLM is frozen, nothing flows back.

spaCy links the listener to its upstream (`ElmoComponent.find_listeners`) when both
are in the pipeline. A listener that no ELMo component has linked raises a ValueError
naming its `upstream`, at `nlp.initialize()` or at its first call, instead of passing
zeros on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats3d

from .elmo_layers import set_dims_from_elmo

__all__ = ["ElmoListener", "LISTENER_NAME"]

LISTENER_NAME = "elmo_listener"


class Upstream(Protocol):
    """What a listener reads of its upstream component (`ElmoComponent`)."""

    name: str

    @property
    def elmo(self) -> Any: ...

    def predict(self, docs: Iterable[Doc]) -> Any: ...


class ElmoListener(Model):
    """Every biLM layer of each Doc, from the upstream ELMo component.

    Attributes:
        upstream_name: The name of the ELMo component to listen to ("*" = any).
        upstream: The linked component, set by `ElmoComponent.add_listener` (None
            until spaCy links the pipeline).

    Shape:
        output: one [nL, tokens, nO] float array per Doc (nL = n_layers + 1,
        nO = 2 * projection_dim), on the listener's device.
    """

    name = LISTENER_NAME

    def __init__(self, upstream_name: str) -> None:
        super().__init__(
            self.name, forward, init=init, dims={"nO": None, "nL": None}, attrs={"upstream_name": upstream_name}
        )
        self.upstream: Upstream | None = None

    @property
    def upstream_name(self) -> str:
        return self.attrs["upstream_name"]


def forward(model: ElmoListener, docs: list[Doc], is_train: bool):
    upstream = _linked_upstream(model)
    layers = [doc._.elmo_layers for doc in docs]
    missing = [i for i, (doc, x) in enumerate(zip(docs, layers)) if x is None or x.shape[1] != len(doc)]
    if missing:
        for i, x in zip(missing, upstream.predict([docs[i] for i in missing])):
            layers[i] = x
    n_outputs, dim = model.get_dim("nL"), model.get_dim("nO")
    for x in layers:
        if x.shape[0] != n_outputs or x.shape[2] != dim:
            raise ValueError(
                f"doc._.elmo_layers has shape {tuple(x.shape)}, but the ELMo component "
                f"'{upstream.name}' gives [{n_outputs}, tokens, {dim}]: the Doc was annotated by a "
                "different ELMo model. Run it through this pipeline's ELMo component again."
            )
    outputs = [model.ops.asarray3f(x) for x in layers]

    def backprop(d_outputs: list[Floats3d]) -> list[Doc]:
        # The biLM is frozen: the gradient stops here.
        return []

    return outputs, backprop


def init(model: ElmoListener, X: Any = None, Y: Any = None) -> None:
    upstream = _linked_upstream(model)
    set_dims_from_elmo(
        model,
        upstream.elmo,  # loads the biLM if the upstream has not yet
        owner=f"this ElmoListener (upstream {upstream.name!r})",
        fix="Retrain the listening component with this ELMo model.",
    )


def _linked_upstream(model: ElmoListener) -> Upstream:
    upstream = model.upstream
    if upstream is None:
        name = model.upstream_name
        raise ValueError(
            f"this ElmoListener listens to upstream = {name!r}, but no ELMo component of that name "
            "is linked to it: either the pipeline has no component called "
            f"{name!r} before the listening component, or {name!r} is not an ELMo component "
            "(factory 'elmo'). Add an 'elmo' component under that name before the component that "
            "listens, or set `upstream` to the name of your elmo component."
        )
    return upstream
