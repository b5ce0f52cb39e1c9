"""The biLM's recurrence paths (step, fused, paired, captured) compute the same values."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from elmo_core import BiLM, Elmo, embed_sentences, quantize_int8
from elmo_core.model.recurrence import resolve_recurrence
from elmo_core.model.recurrence.lstm import LSTMCellWithProjection, reverse_index
from elmo_core.model.recurrence.paired import bucket_shape
from elmo_core.runtime.parts import serving_parts
from tests.conftest import make_tiny_elmo, make_tiny_options, rebuilt

TEXT = [["the", "cat", "sat", "on", "the", "mat", "."], ["a"], [f"w{k}" for k in range(23)], [], ["x", "y"]]


def _clip_free_elmo(**kwargs) -> Elmo:
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    torch.manual_seed(0)
    elmo = Elmo(options, **kwargs, **serving_parts(token_cache_words=0)).eval()
    with torch.no_grad():
        for p in elmo.bilm.parameters():
            p.normal_(0.0, 0.5)
    return elmo


def _cell(cell_clip=None, proj_clip=None) -> LSTMCellWithProjection:
    torch.manual_seed(0)
    cell = LSTMCellWithProjection(6, 16, 8, cell_clip, proj_clip)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0.0, 0.5)
    return cell


def _run_cell(cell, fused, x, batch_sizes, state, final_state=True):
    cell.zero_grad()
    out, final = cell(x, batch_sizes, state, fused=fused, final_state=final_state)
    assert (final is None) == (not final_state)
    # A loss that reads outputs and both final states, so every gradient path counts.
    loss = out.square().sum() + (final[0].sum() + 0.5 * final[1].sum() if final_state else 0.0)
    loss.backward()
    return (
        [out.detach().clone()] + [t.detach().clone() for t in final or ()] + [p.grad.clone() for p in cell.parameters()]
    )


@pytest.mark.parametrize(("with_state", "final_state"), [(False, True), (True, True), (False, False), (True, False)])
def test_fused_cell_equals_the_step_loop_with_gradients(with_state, final_state):
    cell = _cell()
    assert cell.can_fuse
    torch.manual_seed(1)
    lengths = [9, 9, 6, 3, 1]
    batch_sizes = [sum(n > t for n in lengths) for t in range(9)]
    x = torch.randn(9, 5, 6)
    state = (torch.randn(5, 8), torch.randn(5, 16)) if with_state else None
    step = _run_cell(cell, False, x, batch_sizes, state, final_state)
    fused = _run_cell(cell, True, x, batch_sizes, state, final_state)
    for a, b in zip(fused, step):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
    assert step[0][3:, 3].abs().max() == 0 and fused[0][3:, 3].abs().max() == 0  # ended rows hold zeros


def test_clipped_and_int8_cells_cannot_fuse_and_say_why():
    assert not _cell(cell_clip=3.0).can_fuse and not _cell(proj_clip=3.0).can_fuse
    with pytest.raises(ValueError, match="cannot clip"):
        _cell(cell_clip=3.0)(torch.randn(2, 1, 6), [1, 1], fused=True)
    quantised = quantize_int8(_clip_free_elmo())
    cells = [m for m in quantised.modules() if isinstance(m, LSTMCellWithProjection)]
    assert len(cells) == 4 and not any(c.can_fuse for c in cells)
    stacks = (quantised.bilm.forward_layers, quantised.bilm.backward_layers)
    assert resolve_recurrence("auto", stacks, torch.device("cpu"), False, False) == "step"
    for mode in ("fused", "paired", "captured"):
        with pytest.raises(ValueError, match=mode):
            resolve_recurrence(mode, stacks, torch.device("cpu"), False, False)


def test_auto_keeps_every_model_on_the_step_loop_on_the_cpu_except_clip_free_training():
    elmo = make_tiny_elmo()  # clips 3 by default, as the published models
    stacks = (elmo.bilm.forward_layers, elmo.bilm.backward_layers)
    assert resolve_recurrence("auto", stacks, torch.device("cpu"), False, False) == "step"
    assert resolve_recurrence("auto", stacks, torch.device("cpu"), True, False) == "step"
    clip_free = _clip_free_elmo()
    stacks = (clip_free.bilm.forward_layers, clip_free.bilm.backward_layers)
    assert resolve_recurrence("auto", stacks, torch.device("cpu"), False, False) == "step"
    # Training a clip-free biLM: the paired recurrence with its written-out backward.
    assert resolve_recurrence("auto", stacks, torch.device("cpu"), True, False) == "paired"
    assert resolve_recurrence("fused", stacks, torch.device("cpu"), True, False) == "fused"
    with pytest.raises(ValueError, match="CUDA"):
        resolve_recurrence("captured", stacks, torch.device("cpu"), False, False)
    with pytest.raises(ValueError, match="recurrence must be one of"):
        serving_parts(recurrence="cudnn")


@pytest.mark.parametrize("clips", [True, False])
@pytest.mark.parametrize("mode", ["fused", "paired"])
def test_every_path_gives_the_step_loops_vectors(clips, mode):
    if clips and mode == "fused":
        pytest.skip("fused cannot clip (tested above)")
    elmo = make_tiny_elmo(token_cache_words=0) if clips else _clip_free_elmo()
    elmo = rebuilt(elmo, "step")
    expected = embed_sentences(elmo, TEXT, layers="all")
    elmo = rebuilt(elmo, mode)
    for batch_size in (None, 1, 2):  # batch mates and padding must not matter on any path
        got = embed_sentences(elmo, TEXT, layers="all", batch_size=batch_size)
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, atol=2e-6, rtol=0)


def test_paired_path_trains_like_the_step_loop():
    torch.manual_seed(3)
    elmo = make_tiny_elmo(token_cache_words=0)
    bilm = elmo.bilm.train().requires_grad_(True)
    bilm.forward_layers.dropout = bilm.backward_layers.dropout = 0.0
    char_ids = torch.randint(1, 200, (3, 6, 50))
    char_ids[1, 4:] = 0
    char_ids[2, 1:] = 0
    grads = {}
    for mode in ("step", "paired"):
        bilm = rebuilt(bilm, mode)
        out = bilm(char_ids).activations
        (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        grads[mode] = [p.grad.clone() for p in bilm.parameters()]
    for a, b in zip(grads["paired"], grads["step"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_stateful_biLM_refuses_the_paired_path_and_auto_keeps_its_carry_over():
    elmo = make_tiny_elmo(stateful=True)
    elmo = rebuilt(elmo, "paired")
    with pytest.raises(ValueError, match="stateful"):
        embed_sentences(elmo, TEXT[:1])


def test_reverse_index_reverses_each_row_over_its_length_and_is_its_own_inverse():
    index = reverse_index(torch.tensor([3, 0, 5]), 5)
    assert index[:, 0].tolist() == [2, 1, 0, 3, 4]
    assert index[:, 1].tolist() == [0, 1, 2, 3, 4]
    assert index[:, 2].tolist() == [4, 3, 2, 1, 0]
    x = torch.randn(5, 3)
    assert torch.equal(x.gather(0, index).gather(0, index), x)


@pytest.mark.parametrize(
    ("shape", "bucket"),
    [
        ((1, 1), (1, 8)),
        ((3, 9), (4, 16)),
        ((256, 64), (256, 64)),
        ((257, 65), (512, 80)),
        ((1025, 300), (1280, 320)),
        ((2000, 257), (2048, 320)),
    ],
)
def test_bucket_shapes_cover_the_batch_within_bounded_waste(shape, bucket):
    assert bucket_shape(*shape) == bucket
    rows, steps = bucket
    assert rows >= shape[0] and steps >= shape[1]
    with pytest.raises(ValueError, match=">= 1"):
        bucket_shape(0, 5)


def test_number_of_buckets_over_many_batch_shapes_stays_small():
    shapes = {bucket_shape(b, s) for b in range(1, 1025) for s in range(1, 257)}
    assert len(shapes) == 11 * 20  # 11 row sizes (1..1024) x 20 step sizes (8..256)


@pytest.mark.gpu
@pytest.mark.parametrize("clips", [True, False])
def test_captured_recurrence_on_gpu_equals_the_cpu_step_loop(clips):
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    elmo = make_tiny_elmo(token_cache_words=0) if clips else _clip_free_elmo()
    elmo = rebuilt(elmo, "step")
    expected = embed_sentences(elmo, TEXT, layers="all")
    elmo.to("cuda")
    elmo = rebuilt(elmo, "captured" if clips else "auto")
    for batch_size in (None, 1, 2):
        for g, e in zip(embed_sentences(elmo, TEXT, layers="all", batch_size=batch_size), expected):
            np.testing.assert_allclose(g, e, atol=1e-4, rtol=0)
    if clips:
        assert 0 < len(elmo.bilm.recurrence.captured) <= 3


def _gpu_against_cpu(model: Elmo, sentences: list[list[str]], atol: float) -> None:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = rebuilt(model, "step")
    expected = embed_sentences(model, sentences, layers="all")
    model = rebuilt(model.to("cuda"), "auto")
    for g, e in zip(embed_sentences(model, sentences, layers="all"), expected):
        np.testing.assert_allclose(g, e, atol=atol, rtol=0)


@pytest.mark.gpu
def test_gpu_default_path_equals_the_cpu_on_the_fixture_model(fixture_dir):
    import json

    from elmo_core import load_bilm_tf, read_options

    model = Elmo(read_options(fixture_dir / "options.json"), dropout=0.0).eval()
    load_bilm_tf(model, fixture_dir / "lm_weights.hdf5")
    grid = json.loads((fixture_dir / "sentences.json").read_text())
    sentences = [s.split() for batch in grid for s in batch]
    _gpu_against_cpu(model, sentences, atol=1e-4)


@pytest.mark.gpu
def test_gpu_default_path_equals_the_cpu_on_the_shipped_model():
    from elmo_core import load_model_folder
    from elmo_core.files.model_folder import default_model_dir

    _gpu_against_cpu(load_model_folder(default_model_dir()), TEXT * 3, atol=1e-4)


@pytest.mark.gpu
def test_bf16_on_the_gpu_keeps_cosine_0999_per_layer_on_2000_real_sentences():
    import lzma

    from elmo_core import load_model_folder
    from elmo_core.files.model_folder import default_model_dir
    from tests.conftest import data_file, missing_data

    valid = data_file("lm/enwiki2015/valid.txt.xz")
    if not valid.is_file():
        pytest.skip(missing_data("lm/enwiki2015/valid.txt.xz"))
    with lzma.open(valid, "rt", encoding="utf-8") as f:
        sentences = [line.split()[:60] for line, _ in zip(f, range(2000)) if line.strip()]
    model = load_model_folder(default_model_dir()).to("cuda")
    fp32 = np.concatenate(embed_sentences(model, sentences, layers="all"), axis=1)
    bf16 = np.concatenate(embed_sentences(model, sentences, layers="all", autocast_dtype=torch.bfloat16), axis=1)
    for k in range(fp32.shape[0]):
        a, b = fp32[k], bf16[k]
        cos = (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
        assert cos.mean() >= 0.999, (k, cos.mean())


def test_paired_path_under_bf16_autocast_keeps_float32_state_and_stays_close(monkeypatch):
    from elmo_core.model import precision

    # The numbers of the path, on any CPU: bf16 is refused without native support (slower than fp32).
    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: "avx512_bf16")
    elmo = make_tiny_elmo(token_cache_words=0)
    elmo = rebuilt(elmo, "step")
    expected = np.concatenate(embed_sentences(elmo, TEXT, layers="all"), axis=1)
    elmo = rebuilt(elmo, "paired")
    got = np.concatenate(embed_sentences(elmo, TEXT, layers="all", autocast_dtype=torch.bfloat16), axis=1)
    assert got.dtype == np.float32 and got.shape == expected.shape
    for k in range(1, expected.shape[0]):  # the LSTM layers (layer 0 is the char CNN)
        a, b = expected[k], got[k]
        cos = (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
        assert cos.mean() > 0.99, (k, cos.mean())


@pytest.mark.parametrize(
    ("argument", "value", "hint"),
    [
        ("recurrence", "step", r"recurrence must be an object with a plan method.*load_elmo\(\.\.\., recurrence="),
        ("token_cache", 50000, r"token_cache must be an object with a lookup method.*token_cache_words=n"),
        ("char_cnn_training", "fast", r"char_cnn_training must be an object with a __call__ method"),
    ],
)
def test_a_biLM_refuses_a_runtime_part_given_by_name_or_size(argument, value, hint):
    # A BiLM is built with objects; a mode name or a size is a loader's setting.
    # A string or a number must be refused when built, not fail at the first forward.
    with pytest.raises(TypeError, match=hint):
        BiLM(make_tiny_options(), **{argument: value})
