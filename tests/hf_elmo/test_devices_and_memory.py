"""Hugging Face face: pipeline pooling without padding, no growth or graphs, nothing tied to a device."""

from __future__ import annotations

import gc
import re
import sys

import numpy as np
import pytest
import torch
from transformers import pipeline

from hf_elmo import ElmoFeatureExtractionPipeline

from .conftest import batch, make_tiny_hf_model

TEXTS = ["Short one.", "This is a much longer sentence with many more tokens in it ."]


def test_pipeline_results_and_their_means_exclude_padding(tiny_tokenizer):
    # The product's only HF pooling-like output is the feature-extraction pipeline; its
    # per-string results must hold the string's own tokens only, so any mean of them
    # is the mean over attention_mask == 1.
    model = make_tiny_hf_model()
    extractor = pipeline("elmo-feature-extraction", model=model, tokenizer=tiny_tokenizer, batch_size=2)
    assert isinstance(extractor, ElmoFeatureExtractionPipeline)
    results = extractor(TEXTS, return_tensors=True)
    inputs = tiny_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        padded = model(**inputs).last_hidden_state
    mask = inputs["attention_mask"]
    assert mask[0].sum() < mask.shape[1]  # the short text really is padded
    for k, result in enumerate(results):
        n = int(mask[k].sum())
        assert tuple(result.shape) == (1, n, 16)
        masked_mean = (padded[k] * mask[k, :, None]).sum(0) / mask[k].sum()
        torch.testing.assert_close(result[0].mean(0), masked_mean, atol=1e-6, rtol=0)
        alone = extractor(TEXTS[k], return_tensors=True)
        torch.testing.assert_close(result[0].mean(0), alone[0].mean(0), atol=1e-5, rtol=0)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for RSS")
def test_model_under_no_grad_does_not_grow_and_returns_no_graphs(tiny_tokenizer):
    model = make_tiny_hf_model()
    rng = np.random.default_rng(0)
    sentences = [[f"w{j % 50}" for j in range(int(rng.integers(50, 201)))] for _ in range(210)]
    with torch.no_grad():
        for sentence in sentences[:10]:
            model(**batch(tiny_tokenizer, [sentence]))
        gc.collect()
        before = _rss_bytes()
        outputs = [model(**batch(tiny_tokenizer, [s]), output_hidden_states=True) for s in sentences[10:]]
    gc.collect()
    after = _rss_bytes()
    assert after <= 1.1 * before + 50 * 2**20, (before / 2**20, after / 2**20)
    for out in outputs:
        tensors = [out.last_hidden_state, *out.hidden_states]
        assert not any(t.requires_grad or t.grad_fn is not None for t in tensors)


def test_nothing_in_a_saved_folder_refers_to_a_device(saved_model_dir):
    # The .py files are code (they handle devices); the data files must not name one.
    device_words = re.compile(rb"cuda|cpu|device", re.IGNORECASE)
    device_mentions = [
        (path.name, match.group(0))
        for path in saved_model_dir.iterdir()
        if path.is_file() and path.suffix != ".py"
        for match in device_words.finditer(path.read_bytes())
    ]
    assert {p.name for p in saved_model_dir.iterdir()} >= {"config.json", "model.safetensors", "tokenizer_config.json"}
    assert device_mentions == []
