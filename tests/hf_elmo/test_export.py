"""`ElmoModel` captured for deployment: torch.export and ONNX with a dynamic batch and length."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from elmo_core import words_to_char_ids

from .conftest import make_tiny_hf_model

EXAMPLE = [["Hello", "world", "."], ["a"]]
OTHER = [  # another batch and length, with padding
    ["The", "river", "bank", "was", "steep", "and", "muddy", "."],
    ["naïve", "😀"],
    ["a"],
]


class LastHiddenState(nn.Module):
    """What a deployment wraps: char ids and an attention mask in, the vectors out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, char_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(char_ids=char_ids, attention_mask=attention_mask)[0]


def dynamic_shapes() -> dict[str, dict[int, torch.export.Dim]]:
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens")
    return {"char_ids": {0: batch, 1: tokens}, "attention_mask": {0: batch, 1: tokens}}


def tokenized(tokenizer, sentences: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    return encoded["char_ids"], encoded["attention_mask"]  # int64 mask, as tokenizers give it


def test_the_default_model_exports_to_onnx_and_runs_in_onnxruntime_on_other_shapes(tmp_path):
    """The deployment of an AutoModel: dynamo export, then onnxruntime on other batch sizes and lengths."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")
    pytest.importorskip("onnxscript", reason="onnxscript is in the test extra")
    from transformers import AutoModel, AutoTokenizer

    from elmo_core.files.model_folder import default_model_dir

    model = AutoModel.from_pretrained(default_model_dir(), return_dict=False)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    wrapper = LastHiddenState(model).eval()
    path = tmp_path / "elmo.onnx"
    example = tokenized(tokenizer, EXAMPLE)
    torch.onnx.export(wrapper, example, path, dynamo=True, dynamic_shapes=dynamic_shapes())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["char_ids", "attention_mask"]
    for sentences in (OTHER, OTHER[1:2], [["word"] * 30] * 5):
        char_ids, attention_mask = tokenized(tokenizer, sentences)
        with torch.no_grad():
            expected = wrapper(char_ids, attention_mask)
        (got,) = session.run(None, {"char_ids": char_ids.numpy(), "attention_mask": attention_mask.numpy()})
        assert got.shape == tuple(expected.shape)
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("output_hidden_states", [False, True])
def test_exported_elmo_model_matches_eager_on_another_batch_and_length(output_hidden_states):
    model = make_tiny_hf_model()
    ids, mask = words_to_char_ids(EXAMPLE)

    class Outputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, char_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
            kwargs = {"output_hidden_states": output_hidden_states, "return_dict": False}
            return self.model(char_ids=char_ids, attention_mask=attention_mask, **kwargs)

    wrapper = Outputs().eval()
    graph = torch.export.export(wrapper, (ids, mask.long()), dynamic_shapes=dynamic_shapes()).module()
    other_ids, other_mask = words_to_char_ids(OTHER)
    with torch.no_grad():
        expected = wrapper(other_ids, other_mask.long())
        got = graph(other_ids, other_mask.long())
    assert len(got) == len(expected) == (2 if output_hidden_states else 1)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=0)
    if output_hidden_states:
        torch.testing.assert_close(torch.stack(got[1]), torch.stack(expected[1]), atol=1e-5, rtol=0)


def test_an_exported_elmo_model_reads_a_row_longer_than_the_window_whole():
    """No windows in a graph: the caller cuts long inputs (the deployment guide says how)."""
    windowed, whole = make_tiny_hf_model(), make_tiny_hf_model()
    windowed.config.window_tokens, windowed.config.window_context = 4, 1
    whole.config.window_tokens = None
    ids, mask = words_to_char_ids(EXAMPLE)
    graph = torch.export.export(
        LastHiddenState(windowed).eval(), (ids, mask.long()), dynamic_shapes=dynamic_shapes()
    ).module()
    other_ids, other_mask = words_to_char_ids(OTHER)  # a row of 8 tokens: two windows of 4 in eager
    with torch.no_grad():
        expected = whole(char_ids=other_ids, attention_mask=other_mask).last_hidden_state
        in_windows = windowed(char_ids=other_ids, attention_mask=other_mask).last_hidden_state
        got = graph(other_ids, other_mask.long())
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (in_windows - expected).abs().max() > 1e-3  # eager reads it in windows: other vectors


def test_a_saved_folders_own_code_exports_too(saved_model_dir):
    """The code a saved folder carries (what trust_remote_code runs) takes the same graph path."""
    from hf_elmo.remote_code import modeling_elmo  # the generated file, which imports nothing of elmo-bilm

    model = modeling_elmo.ElmoModel.from_pretrained(saved_model_dir, return_dict=False)
    assert "elmo_core" not in type(model.bilm).__module__
    ids, mask = words_to_char_ids(EXAMPLE)
    wrapper = LastHiddenState(model).eval()
    graph = torch.export.export(wrapper, (ids, mask.long()), dynamic_shapes=dynamic_shapes()).module()
    other_ids, other_mask = words_to_char_ids(OTHER)
    with torch.no_grad():
        expected = wrapper(other_ids, other_mask.long())
    torch.testing.assert_close(graph(other_ids, other_mask.long()), expected, atol=1e-5, rtol=0)
