"""spaCy face: nothing saved refers to a device; a pipeline saved on a GPU loads without one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import spacy

from .conftest import DIM, make_nlp

DEVICE_WORDS = re.compile(rb"cuda|cpu|device", re.IGNORECASE)


def device_mentions(folder: Path) -> list[tuple[str, bytes]]:
    """Every mention of a device in the saved files (code files aside: they are code)."""
    return [
        (str(path.relative_to(folder)), match.group(0))
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix != ".py"
        for match in DEVICE_WORDS.finditer(path.read_bytes())
    ]


def test_nothing_in_a_saved_pipeline_refers_to_a_device(nlp, tmp_path):
    nlp("a b")
    nlp.to_disk(tmp_path / "pipeline")
    assert device_mentions(tmp_path / "pipeline") == []


LOAD_ON_CPU = textwrap.dedent(
    """
    import sys
    import numpy as np
    import spacy, torch
    assert not torch.cuda.is_available()
    doc = spacy.load(sys.argv[1])("a b")
    np.save(sys.argv[2], doc.tensor)
    """
)


@pytest.mark.gpu
def test_pipeline_saved_on_gpu_loads_and_runs_without_one(tiny_model_dir, tmp_path):
    spacy.require_gpu()
    try:
        nlp = make_nlp(tiny_model_dir)
        doc = nlp("a b")
        assert next(nlp.get_pipe("elmo").elmo.parameters()).device.type == "cuda"
        assert isinstance(doc.tensor, np.ndarray) and doc.tensor.shape == (2, DIM)
        nlp.to_disk(tmp_path / "pipeline")
    finally:
        spacy.require_cpu()
    assert device_mentions(tmp_path / "pipeline") == []
    script = tmp_path / "load_on_cpu.py"
    script.write_text(LOAD_ON_CPU, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "pipeline"), str(tmp_path / "out.npy")],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), doc.tensor, atol=1e-4, rtol=1e-3)
