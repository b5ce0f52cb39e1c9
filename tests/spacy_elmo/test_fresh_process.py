"""A saved pipeline in a fresh process that imports only spaCy, and nlp.pipe(n_process=2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from .conftest import DIM

TEXTS = ["Apple is a company .", "The river bank ."] * 10

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import spacy

    path, out = sys.argv[1], sys.argv[2]
    texts = json.loads(sys.argv[3])
    before = "spacy_elmo" in sys.modules
    nlp = spacy.load(path)
    single = nlp("a b")
    A = list(nlp.pipe(texts, n_process=1))  # the parent process runs torch multithreaded first
    start = time.perf_counter()
    B = list(nlp.pipe(texts, n_process=2))
    seconds = time.perf_counter() - start
    arrays = {"single": single.tensor}
    for name, docs in (("A", A), ("B", B)):
        for i, doc in enumerate(docs):
            arrays[f"{name}{i}_tensor"] = doc.tensor
            arrays[f"{name}{i}_layers"] = doc._.elmo_layers
            arrays[f"{name}{i}_vectors"] = np.stack([t.vector for t in doc])
    np.savez(out, **arrays)
    print(json.dumps({"imported_before_load": before, "imported_after_load": "spacy_elmo" in sys.modules,
                      "texts_B": [d.text for d in B], "seconds": seconds}))
    """
)


def test_saved_pipeline_loads_and_pipes_with_two_processes_in_a_fresh_process(nlp, tmp_path):
    nlp.to_disk(tmp_path / "pipeline")
    expected = list(nlp.pipe(TEXTS))
    out = tmp_path / "out.npz"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "pipeline"), str(out), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Found through the spacy_factories entry point, not an import.
    assert report == {**report, "imported_before_load": False, "imported_after_load": True}
    assert report["texts_B"] == TEXTS and report["seconds"] < 120
    with np.load(out) as npz:  # closed here: a GC'd NpzFile is a ResourceWarning in a later test
        arrays = dict(npz)
    np.testing.assert_allclose(arrays["single"], nlp("a b").tensor, rtol=0, atol=1e-6)
    for name in ("A", "B"):
        for i, doc in enumerate(expected):
            np.testing.assert_allclose(arrays[f"{name}{i}_tensor"], doc.tensor, rtol=0, atol=1e-5)
            np.testing.assert_allclose(arrays[f"{name}{i}_layers"], doc._.elmo_layers, rtol=0, atol=1e-5)
            vectors = arrays[f"{name}{i}_vectors"]
            assert vectors.shape == (len(doc), DIM) and np.abs(vectors).sum(axis=1).all()
            np.testing.assert_allclose(vectors, doc.tensor, rtol=0, atol=1e-5)
