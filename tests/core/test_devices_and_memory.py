"""The core under odd tokens, devices and large inputs.

Odd and huge tokens (memory of a 10,000-character token), the model on any device, one
huge call cut into bounded batches, and no memory growth or autograd graphs across calls.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import torch

from elmo_core import embed_sentences, words_to_char_ids
from elmo_core.runtime.embedding import DEFAULT_BATCH_TOKENS
from tests.conftest import DEVICES, REPO, make_tiny_elmo

ODD_TOKENS = ["中华人民共和国", "中" * 16, "中" * 17, "😀" * 13, "a" * 48, "a" * 49, "naïve", "x" * 10000]


# ---------------------------------------------------------------- odd and huge tokens
def test_all_listed_tokens_run_together_with_finite_outputs():
    elmo = make_tiny_elmo()
    out = embed_sentences(elmo, [ODD_TOKENS], layers="all")[0]
    assert out.shape == (3, len(ODD_TOKENS), 16) and np.isfinite(out).all()
    alone = [embed_sentences(elmo, [[t]], layers="all")[0][:, 0] for t in ODD_TOKENS]
    np.testing.assert_allclose(out[0], np.stack([a[0] for a in alone]), atol=1e-6, rtol=0)  # layer 0: token alone
    np.testing.assert_array_equal(out[0, 4], out[0, 5])  # "a" * 48 and "a" * 49 collide, as documented


def _peak_python_memory(word: str) -> int:
    elmo = make_tiny_elmo()
    embed_sentences(elmo, [["warm", "up"]])
    gc.collect()
    tracemalloc.start()
    try:
        words_to_char_ids([[word]])
        embed_sentences(elmo, [[word]], layers="all")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_10000_character_token_costs_no_more_memory_than_a_50_character_one():
    # The token is cut to 48 characters before it is encoded, so nothing of size 10,000
    # (or 40,000 bytes of UTF-8) is ever built. Seen: about 13 KB for both.
    small, huge = _peak_python_memory("y" * 50), _peak_python_memory("z" * 10000)
    assert huge <= small + 1024, (small, huge)


# ---------------------------------------------------------------- devices
@pytest.mark.parametrize("device", DEVICES)
def test_cpu_inputs_with_the_model_on_any_device(device):
    elmo = make_tiny_elmo()
    expected = embed_sentences(elmo, [["a", "b"]], layers="all")[0]
    elmo.to(device)
    out = embed_sentences(elmo, [["a", "b"]], layers="all")[0]  # (1) CPU float32 numpy, whatever the device
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    char_ids, mask = words_to_char_ids([["a", "b"]])  # (2) CPU ids: moved to the model's device
    with torch.no_grad():
        activations = elmo(char_ids, mask).activations
    assert activations.device.type == device
    np.testing.assert_allclose(activations[:, 0].cpu().numpy(), expected, atol=1e-4, rtol=1e-3)


@pytest.mark.gpu
def test_an_explicit_device_string_is_honoured():
    elmo = make_tiny_elmo()
    expected = embed_sentences(elmo, [["a", "b", "c"]], layers="mix")[0]
    out = embed_sentences(elmo, [["a", "b", "c"]], layers="mix", device="cuda:0")[0]
    assert all(p.device == torch.device("cuda:0") for p in elmo.parameters())
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    with torch.no_grad():
        assert elmo(*words_to_char_ids([["a"]])).representations[0].device == torch.device("cuda:0")


# ---------------------------------------------------------------- one huge call
MANY_SENTENCES_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    sys.path.insert(0, sys.argv[1])
    from tests.conftest import make_tiny_elmo
    from elmo_core import embed_sentences

    torch.set_num_threads(1)
    elmo = make_tiny_elmo()
    sentences = [[f"w{(i * 7 + j) % 997}" for j in range(10)] for i in range(12_000)]
    first = embed_sentences(elmo, sentences[:64])
    peak_64 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = embed_sentences(elmo, sentences)
    peak_all = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_64": peak_64, "peak_all": peak_all, "returned": sum(o.nbytes for o in out),
                      "count": len(out), "shapes": sorted({o.shape for o in out})}))
    """
)


def test_twelve_thousand_sentences_in_one_call_use_bounded_memory(tmp_path):
    # RSS high-water mark of a fresh process: unlike tracemalloc, it sees torch's own
    # allocations, which is where an unbatched call would blow up.
    script = tmp_path / "r14.py"
    script.write_text(MANY_SENTENCES_CHILD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["count"] == 12_000 and report["shapes"] == [[3, 10, 16]]
    assert report["peak_all"] <= 1.5 * report["peak_64"] + report["returned"], report


def test_one_huge_call_is_cut_into_batches_of_the_default_budget():
    elmo = make_tiny_elmo()
    sizes = []
    elmo.bilm.register_forward_hook(lambda module, args, out: sizes.append(tuple(out.activations.shape[1:3])))
    sentences = [[f"w{j}" for j in range(10)]] * 12_000
    out = embed_sentences(elmo, sentences, layers="mix")
    assert len(out) == 12_000 and all(o.shape == (10, 16) for o in out)
    per_batch = DEFAULT_BATCH_TOKENS // 12  # 10 tokens + <S> + </S>
    assert all(rows * (tokens + 2) <= DEFAULT_BATCH_TOKENS for rows, tokens in sizes)
    assert len(sizes) == -(-12_000 // per_batch)


# ---------------------------------------------------------------- no growth, no graphs
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _reachable_tensors(obj) -> list[torch.Tensor]:
    found, stack, seen = [], [obj], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, np.ndarray):
            if item.base is not None:
                stack.append(item.base)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for RSS")
def test_embed_does_not_grow_memory_and_returns_no_graphs():
    elmo = make_tiny_elmo(dropout=0.5)
    elmo.train()  # even in training mode, embed() runs without autograd
    rng = np.random.default_rng(0)
    texts = [[f"w{j % 50}" for j in range(int(rng.integers(50, 201)))] for _ in range(210)]
    for sentence in texts[:10]:
        embed_sentences(elmo, [sentence])
    gc.collect()
    before = _rss_bytes()
    outputs = [embed_sentences(elmo, [sentence], layers=layers) for sentence in texts[10:] for layers in ("mix",)]
    gc.collect()
    after = _rss_bytes()
    assert after <= 1.1 * before + 50 * 2**20, (before / 2**20, after / 2**20)
    for out in outputs:
        assert _reachable_tensors(out) == []
        assert all(isinstance(o, np.ndarray) and o.base is None for o in out)  # owns its data, keeps no batch alive
