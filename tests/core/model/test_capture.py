"""Capturing `Elmo` as a graph for deployment: torch.export and ONNX, with a dynamic batch and length."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from elmo_core import Elmo, words_to_char_ids
from elmo_core.model.capture import TORCHSCRIPT_REFUSAL
from elmo_core.model.recurrence.scan import scan_stacks
from elmo_core.runtime.parts import serving_parts

from ...conftest import make_tiny_elmo, make_tiny_options

EXAMPLE = [["hello", "my", "name"], ["a"]]
OTHER = [  # another batch and length, with padding and a long word
    ["The", "river", "bank", "was", "steep", "."],
    ["naïve", "😀", "x" * 80],
    ["a"],
    ["one", "more", "row", "of", "text"],
]
DIMS = {"batch": torch.export.Dim("batch"), "tokens": torch.export.Dim("tokens")}
DYNAMIC = {"char_ids": {0: DIMS["batch"], 1: DIMS["tokens"]}, "mask": {0: DIMS["batch"], 1: DIMS["tokens"]}}


def clipped_elmo(**kwargs) -> Elmo:
    """The tiny model with bilm-tf's cell and projection clips (the published models clip)."""
    elmo = make_tiny_elmo(**kwargs)
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=0.5, proj_clip=0.4))
    clipped = Elmo(options, **kwargs, **serving_parts())  # as the loaders build it
    clipped.load_state_dict(elmo.state_dict())
    return clipped.eval()


@pytest.mark.parametrize("model", ["tiny", "clipped", "boundaries"])
def test_exported_elmo_matches_eager_on_another_batch_and_length(model):
    elmo = {
        "tiny": lambda: make_tiny_elmo(dropout=0.0),
        "clipped": lambda: clipped_elmo(dropout=0.0),
        "boundaries": lambda: make_tiny_elmo(dropout=0.0, keep_sentence_boundaries=True),
    }[model]()
    ids, mask = words_to_char_ids(EXAMPLE)
    program = torch.export.export(elmo, (ids, mask), dynamic_shapes=DYNAMIC)
    other_ids, other_mask = words_to_char_ids(OTHER)
    with torch.no_grad():
        expected = elmo(other_ids, other_mask)
        got = program.module()(other_ids, other_mask)
    assert got.activations.shape == expected.activations.shape
    torch.testing.assert_close(got.activations, expected.activations, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.representations[0], expected.representations[0], atol=1e-5, rtol=0)
    assert torch.equal(got.mask, expected.mask)


def test_elmo_exported_to_onnx_runs_in_onnxruntime_within_1e4_of_eager_on_other_shapes(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")
    pytest.importorskip("onnxscript", reason="onnxscript is in the test extra")
    elmo = clipped_elmo(dropout=0.0)
    ids, mask = words_to_char_ids(EXAMPLE)
    names = {"input_names": ["char_ids", "mask"], "output_names": ["representation", "activations", "real"]}
    torch.onnx.export(elmo, (ids, mask), tmp_path / "elmo.onnx", dynamo=True, dynamic_shapes=DYNAMIC, **names)
    session = ort.InferenceSession(str(tmp_path / "elmo.onnx"), providers=["CPUExecutionProvider"])
    for sentences in (OTHER, OTHER[:1], [["x"] * 40, ["y"]]):
        other_ids, other_mask = words_to_char_ids(sentences)
        with torch.no_grad():
            expected = elmo(other_ids, other_mask)
        representation, activations, out_mask = session.run(
            None, {"char_ids": other_ids.numpy(), "mask": other_mask.numpy()}
        )
        torch.testing.assert_close(torch.from_numpy(representation), expected.representations[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.from_numpy(activations), expected.activations, atol=1e-4, rtol=0)
        assert torch.equal(torch.from_numpy(out_mask), expected.mask)


def test_an_exported_elmo_does_not_depend_on_its_batch_mates():
    elmo = make_tiny_elmo(dropout=0.0)
    ids, mask = words_to_char_ids(EXAMPLE)
    graph = torch.export.export(elmo, (ids, mask), dynamic_shapes=DYNAMIC).module()
    together = graph(*words_to_char_ids(OTHER)).activations
    for row, sentence in enumerate(OTHER):
        alone = graph(*words_to_char_ids([sentence])).activations
        torch.testing.assert_close(together[:, row, : len(sentence)], alone[:, 0], atol=1e-6, rtol=0)


def test_scan_stacks_equal_the_step_loop_in_batch_order():
    bilm = clipped_elmo(dropout=0.0).bilm
    tokens = torch.randn(3, 7, 8)
    lengths = torch.tensor([4, 7, 2])
    stacks = (bilm.forward_layers, bilm.backward_layers)
    with torch.no_grad():
        forward_sorted, backward_sorted, order = bilm.run_sorted(tokens, lengths)
        forward_out, backward_out = scan_stacks(stacks, tokens, lengths)
    assert len(forward_out) == len(forward_sorted) == 2
    for got, expected in zip(forward_out + backward_out, forward_sorted + backward_sorted):
        in_batch_order = torch.empty_like(expected)
        in_batch_order[:, order] = expected
        torch.testing.assert_close(got, in_batch_order, atol=1e-6, rtol=0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch 2.13 deprecates TorchScript and its ONNX exporter
@pytest.mark.parametrize("capture", ["jit.script", "jit.trace", "onnx dynamo=False"])
def test_torchscript_is_refused_at_once_in_the_products_words(capture, tmp_path):
    elmo = make_tiny_elmo(dropout=0.0)
    ids, mask = words_to_char_ids(EXAMPLE)
    run = {
        "jit.script": lambda: torch.jit.script(elmo),
        "jit.trace": lambda: torch.jit.trace(elmo, (ids, mask), strict=False),
        "onnx dynamo=False": lambda: torch.onnx.export(elmo, (ids, mask), tmp_path / "e.onnx", dynamo=False),
    }[capture]
    with pytest.raises(RuntimeError) as caught:
        run()
    assert TORCHSCRIPT_REFUSAL in str(caught.value)


def test_exporting_a_stateful_biLM_is_refused_in_one_line():
    elmo = make_tiny_elmo(dropout=0.0, stateful=True)
    ids, mask = words_to_char_ids(EXAMPLE)
    with pytest.raises(ValueError, match="export with stateful=False"):
        torch.export.export(elmo, (ids, mask), dynamic_shapes=DYNAMIC)
