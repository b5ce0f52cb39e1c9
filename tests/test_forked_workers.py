"""Workers forked from a process that has run the model embed, in every face, with no setting.

GNU OpenMP (torch's CPU builds) is not fork-safe: a process forked after its parent ran
a parallel region waits for the parent's thread team at its first parallel region of its
own. The parent here runs every forward with two threads (`OMP_NUM_THREADS=2`,
`ELMO_THREADS=2`), as a `gunicorn --preload` master's warm-up does, then two workers from
`multiprocessing`'s fork context embed the same text. A hang fails the test when the
workers do not finish within the script's timeout (and the whole process group is ended).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, sys
    import numpy as np
    from elmo_core import embed_sentences, load_elmo, words_to_char_ids
    from elmo_core.files.model_folder import default_model_dir

    face = sys.argv[1]
    words = [f"word{i % 17}" for i in range(63)] + ["."]
    sentences = [words, ["The", "river", "bank"]]

    if face == "core":
        elmo = load_elmo(dropout=0.0)
        def embed():
            return embed_sentences(elmo, sentences, layers="all")
    elif face == "module":  # the torch module called directly, with its scalar mix
        import torch
        elmo = load_elmo(dropout=0.0).eval()
        def embed():
            char_ids, mask = words_to_char_ids(sentences)
            with torch.inference_mode():
                out = elmo(char_ids, mask)
            return [out.representations[0][i, : len(s)].numpy() for i, s in enumerate(sentences)]
    elif face == "hf":
        import torch
        from transformers import AutoModel, AutoTokenizer
        import hf_elmo  # noqa: F401
        model = AutoModel.from_pretrained(default_model_dir())
        tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
        def embed():
            batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
            with torch.inference_mode():
                out = model(**batch)
            return [out.last_hidden_state[i, : len(s)].numpy() for i, s in enumerate(sentences)]
    elif face == "spacy":
        import spacy
        from spacy.tokens import Doc
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo")
        def embed():
            return [nlp(Doc(nlp.vocab, words=s))._.elmo_layers for s in sentences]

    def work(_):
        return embed()

    if __name__ == "__main__":
        expected = embed()
        embed()  # the warm-up a preloading master does
        with multiprocessing.get_context("fork").Pool(2) as pool:
            results = pool.map_async(work, range(2)).get(timeout=60)
        gaps = [float(np.abs(got - want).max()) for result in results for got, want in zip(result, expected)]
        print(json.dumps({"workers": len(results), "arrays": len(gaps), "gap": max(gaps)}))
    """
)


@pytest.mark.parametrize("face", ["core", "module", "hf", "spacy"])
def test_workers_forked_after_a_forward_embed_like_the_parent(face, tmp_path):
    if face == "hf":
        pytest.importorskip("transformers")
    if face == "spacy":
        pytest.importorskip("spacy")
    script = tmp_path / "forked.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "2", "ELMO_THREADS": "2"}
    process = subprocess.Popen(
        [sys.executable, str(script), face],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: a hung worker is ended with it
    )
    try:
        out, err = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"the {face} face's forked workers did not finish (a hang)")
    assert process.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["workers"] == 2 and report["arrays"] == 4
    assert report["gap"] <= 1e-5, report
