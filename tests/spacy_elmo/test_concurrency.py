"""Threads sharing one `nlp`, and nlp.pipe(n_process=2) under the fork and spawn start methods."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch

from ..core.test_concurrency import run_in_threads
from .conftest import DIM, make_nlp

TEXTS = ["Apple is a company .", "The river bank .", "Don't stop-me now!!", "", "a"] * 4


def test_two_threads_sharing_one_nlp_match_one_thread(nlp):
    expected = [doc.tensor.copy() for doc in nlp.pipe(TEXTS)]

    def work(i: int) -> int:
        torch.set_num_threads(1)
        for round in range(6):
            docs = list(nlp.pipe(TEXTS, batch_size=3 + i)) if round % 2 else [nlp(t) for t in TEXTS]
            for doc, want in zip(docs, expected):
                np.testing.assert_allclose(doc.tensor, want, atol=1e-6, rtol=0)
        return round + 1

    assert run_in_threads(work) == [6, 6]


# The child sets the start method before anything else (spaCy's nlp.pipe uses the
# default multiprocessing context), so the pytest process itself is unaffected.
CHILD = textwrap.dedent(
    """
    import json, multiprocessing, sys

    if __name__ == "__main__":
        multiprocessing.set_start_method(sys.argv[1])
        import numpy as np
        import spacy

        nlp = spacy.load(sys.argv[2])
        texts = json.loads(sys.argv[4])
        one = list(nlp.pipe(texts, n_process=1))  # torch runs in the parent first
        two = list(nlp.pipe(texts, n_process=2, batch_size=4))
        arrays = {}
        for name, docs in (("one", one), ("two", two)):
            for i, doc in enumerate(docs):
                arrays[f"{name}{i}_tensor"] = doc.tensor
                arrays[f"{name}{i}_vectors"] = np.stack([t.vector for t in doc]) if len(doc) else doc.tensor
        np.savez(sys.argv[3], **arrays)
        print(json.dumps({"method": multiprocessing.get_start_method(), "texts": [d.text for d in two]}))
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pipe_with_two_processes_matches_one_process(nlp, tmp_path, method):
    if method == "fork" and sys.platform != "linux":
        pytest.skip("fork is only the default, and only safe, on Linux")
    nlp.to_disk(tmp_path / "pipeline")
    expected = list(nlp.pipe(TEXTS))
    script = tmp_path / "child.py"  # spawn re-imports the main module: it must be a file
    script.write_text(CHILD, encoding="utf-8")
    out = tmp_path / "out.npz"
    done = subprocess.run(
        [sys.executable, str(script), method, str(tmp_path / "pipeline"), str(out), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"method": method, "texts": TEXTS}
    with np.load(out) as npz:  # closed here: a GC'd NpzFile is a ResourceWarning in a later test
        arrays = dict(npz)
    for name in ("one", "two"):
        for i, doc in enumerate(expected):
            tensor = arrays[f"{name}{i}_tensor"]
            assert tensor.shape == (len(doc), DIM)
            np.testing.assert_allclose(tensor, doc.tensor, atol=1e-5, rtol=0)
            np.testing.assert_allclose(arrays[f"{name}{i}_vectors"], doc.tensor, atol=1e-5, rtol=0)
            if len(doc):
                assert np.abs(tensor).sum(axis=1).all()  # no token silently became zeros


def test_pipe_with_two_processes_matches_elmo_embed_of_the_same_lines(nlp, tiny_model_dir, tmp_path):
    """The two ways to embed many texts on the CPU (README "Big corpora") agree."""
    import h5py
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app

    if sys.platform != "linux":
        pytest.skip("the fork start method is Linux's default")
    nlp.to_disk(tmp_path / "pipeline")
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), "fork", str(tmp_path / "pipeline"), str(tmp_path / "out.npz"), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as npz:
        arrays = dict(npz)
    (tmp_path / "lines.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "embed",
            str(tmp_path / "lines.txt"),
            str(tmp_path / "out.hdf5"),
            "--model",
            str(tiny_model_dir),
            "--tokenize",
            "--layers",
            "mix",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        for i, text in enumerate(TEXTS):
            assert list(f[str(i)].attrs["tokens"]) == [t.text for t in nlp.make_doc(text)]
            np.testing.assert_allclose(f[str(i)][()], arrays[f"two{i}_tensor"], atol=1e-5, rtol=0)


SIMILARITY_CHILD = textwrap.dedent(
    """
    import json
    import multiprocessing
    import sys

    if __name__ == "__main__":
        multiprocessing.set_start_method(sys.argv[1], force=True)
        import spacy

        def similarities(docs):
            river, money = docs
            return [
                river[2].similarity(money[0]),  # the two "bank" tokens
                river[2:3].similarity(money[0:1]),
                river[1:3].similarity(money[0:2]),
                river.similarity(money),
                river[2].similarity(river[2]),
            ]

        nlp = spacy.load(sys.argv[2])
        texts = ["The river bank .", "bank loan rates"]
        one = similarities(list(nlp.pipe(texts, n_process=1)))
        two = list(nlp.pipe(texts, n_process=2, batch_size=1))
        as_sent = similarities(two)  # the Docs as spaCy's workers send them back: no hooks

        import spacy_elmo

        restored = spacy_elmo.restore_docs(two)
        pairs = list(nlp.pipe([(t, i) for i, t in enumerate(texts)], as_tuples=True, n_process=2))
        restored += spacy_elmo.restore_docs(doc for doc, _ in pairs)
        report = {
            "one": one,
            "as_sent": as_sent,
            "two": similarities(two),
            "tuples": similarities([doc for doc, _ in pairs]),
            "restored": restored,
            "pipe_is_spacys": type(nlp).pipe is spacy.language.Language.pipe and "pipe" not in vars(nlp),
        }
        print(json.dumps(report))
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pipe_with_two_processes_then_restore_docs_gives_the_similarity_of_one_process(nlp, tmp_path, method):
    """Docs sent back by spaCy's workers lose their user hooks (W109); restore_docs gives them back."""
    if method == "fork" and sys.platform != "linux":
        pytest.skip("fork is only the default, and only safe, on Linux")
    nlp.to_disk(tmp_path / "pipeline")
    script = tmp_path / "child.py"
    script.write_text(SIMILARITY_CHILD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), method, str(tmp_path / "pipeline")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    one = report["one"]
    assert one[0] < 0.999  # contextual: the two "bank"s differ (spaCy's own rule says 1.0)
    assert one[1] == pytest.approx(one[0], abs=1e-6) and one[4] == pytest.approx(1.0, abs=1e-6)
    # What the documented step is for: without the hooks spaCy's own rule says 1.0 for the two "bank"s.
    assert report["as_sent"][0] == 1.0 and "W109" in done.stderr
    assert report["restored"] == 4
    for route in ("two", "tuples"):
        assert report[route] == pytest.approx(one, abs=1e-5), route
    assert report["pipe_is_spacys"] is True


def _first_calls_at_once(call, threads: int = 8) -> list:
    """`call()` from `threads` threads released together by a barrier (a server starting under traffic)."""
    barrier = threading.Barrier(threads)

    def work(i: int):
        barrier.wait(60)
        return call()

    return run_in_threads(work, threads)


def _counting_loads(monkeypatch, module, name: str) -> list[int]:
    """Count calls of `module.name`; each call lingers so that concurrent first calls overlap."""
    loads: list[int] = []
    load = getattr(module, name)

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        loads.append(1)
        time.sleep(0.3)
        return load(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return loads


def test_concurrent_first_calls_load_the_bilm_once(tiny_model_dir, monkeypatch):
    from spacy_elmo.layers import elmo_layers

    expected = make_nlp(tiny_model_dir)("The river bank flooded after the storm .").tensor
    loads = _counting_loads(monkeypatch, elmo_layers, "load_elmo_source")
    nlp = make_nlp(tiny_model_dir)  # not initialised: the first call loads the biLM
    docs = _first_calls_at_once(lambda: nlp("The river bank flooded after the storm ."))
    assert len(loads) == 1, f"{len(loads)} loads for 8 concurrent first calls"
    for doc in docs:
        np.testing.assert_allclose(doc.tensor, expected, atol=1e-6, rtol=0)


def test_concurrent_first_calls_of_the_elmo_layers_load_the_bilm_once(tiny_model_dir, monkeypatch):
    import spacy
    from spacy.tokens import Doc

    from spacy_elmo.layers import elmo_layers

    vocab = spacy.blank("en").vocab
    docs = [Doc(vocab, words=["The", "river", "bank", "."])]
    expected = elmo_layers.build_elmo_layers(str(tiny_model_dir)).predict(docs)[0]
    loads = _counting_loads(monkeypatch, elmo_layers, "load_elmo_source")
    layer = elmo_layers.build_elmo_layers(str(tiny_model_dir))  # used before any initialisation
    outputs = _first_calls_at_once(lambda: layer.predict(docs))
    assert len(loads) == 1, f"{len(loads)} loads for 8 concurrent first calls"
    for output in outputs:
        np.testing.assert_allclose(output[0], expected, atol=1e-6, rtol=0)
