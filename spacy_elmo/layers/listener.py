"""ElmoListener: a downstream component's window onto the upstream `elmo` component.

It reads `doc._.elmo_layers`, and asks the upstream for Docs without them. An unlinked
listener raises rather than pass zeros on.
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
        upstream_name: The ELMo component's name ("*" = any).
        upstream: The linked component, or None.

    Shape:
        output: one [nL, tokens, nO] array per Doc (nL = n_layers + 1, nO = 2 * projection_dim).
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
