"""Property-based checks of the `elmo` component on texts drawn from all of Unicode."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..core.test_fuzz import ODD_TOKENS
from .conftest import DIM

# Texts: any code point except surrogates (a Python str with a lone surrogate cannot
# be a spaCy text), mixed with the odd tokens and plain words, joined by odd spacing.
pieces = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20),
    st.sampled_from([t for t in ODD_TOKENS if "\ud800" not in t and "\udfff" not in t] + ["word", "."]),
)
texts = st.lists(pieces, max_size=10).flatmap(
    lambda parts: st.lists(st.sampled_from([" ", "  ", "\n", "\t", ""]), min_size=len(parts), max_size=len(parts)).map(
        lambda seps: "".join(p + s for p, s in zip(parts, seps))
    )
)

FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(batch=st.lists(texts, min_size=1, max_size=5), batch_size=st.sampled_from([1, 2, 64]))
def test_any_text_gives_one_finite_row_per_token_whatever_the_batch(nlp, batch, batch_size):
    docs = list(nlp.pipe(batch, batch_size=batch_size))
    assert [d.text for d in docs] == batch
    for doc in docs:
        assert doc.tensor.shape == (len(doc), DIM) and doc.tensor.dtype == np.float32
        assert np.isfinite(doc.tensor).all() and np.isfinite(doc._.elmo_layers).all()
        alone = nlp(doc.text)
        np.testing.assert_allclose(doc.tensor, alone.tensor, atol=1e-5, rtol=1e-4)
        for token in doc:
            if token.is_space:
                assert not token.vector.any()
