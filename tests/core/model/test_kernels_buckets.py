"""Bucketed row counts of the training step's products (`elmo_core.model.kernels`)."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from elmo_core.apps.cli.process import reserve_kernel_cache
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model import kernels as shapes
from elmo_core.model.kernels import bucket_rows, pad_rows
from tests.conftest import make_tiny_options


def test_bucket_rows_rounds_up_to_one_of_16_sizes_per_power_of_two():
    assert [bucket_rows(n) for n in (0, 1, 31, 32, 33, 141, 4095, 4096, 4097, 7060)] == [
        0, 1, 31, 32, 34, 144, 4096, 4096, 4352, 7168,
    ]  # fmt: skip
    for n in range(1, 20_000):
        b = bucket_rows(n)
        unit = max(1, 2 ** (n.bit_length() - 1 - 4))
        assert b >= n and b % unit == 0 and b - n < unit, n
        assert (b - n) / n < 1 / 16, n  # at most 6.25% of the rows are padding
    for octave in range(5, 14):  # from 32 on, [2**k, 2**(k+1)) rounds to 16 sizes below 2**(k+1), and to it
        sizes = {bucket_rows(n) for n in range(2**octave, 2 ** (octave + 1))}
        assert len(sizes - {2 ** (octave + 1)}) == 16 and max(sizes) == 2 ** (octave + 1)
    with pytest.raises(ValueError, match=">= 0"):
        bucket_rows(-1)


def test_pad_rows_appends_the_value_and_drops_the_padding_gradient():
    x = torch.arange(6.0).view(3, 2).requires_grad_(True)
    padded = pad_rows(x, 5, value=-1)
    assert padded.tolist() == [[0, 1], [2, 3], [4, 5], [-1, -1], [-1, -1]]
    (padded * torch.arange(10.0).view(5, 2)).sum().backward()
    assert x.grad.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert pad_rows(x, 3) is x
    with pytest.raises(ValueError, match="cannot pad 3 rows to 2"):
        pad_rows(x, 2)


def test_reserve_kernel_cache_keeps_a_users_setting(monkeypatch):
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "77")
    assert reserve_kernel_cache() is False
    assert shapes.os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "77"
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    assert reserve_kernel_cache(1234) is True
    assert shapes.os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1234"


PRODUCTS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.mm.out,
    torch.ops.aten.bmm.default,
    torch.ops.aten.bmm.out,
    torch.ops.aten.addmm.default,
    torch.ops.aten.baddbmm.default,
}


class _ProductShapes(TorchDispatchMode):
    """Records the shapes of every matrix product's two matrix operands."""

    def __init__(self) -> None:
        super().__init__()
        self.dims: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if func in PRODUCTS:
            operands = args[1:3] if func in (torch.ops.aten.addmm.default, torch.ops.aten.baddbmm.default) else args[:2]
            for operand in operands:
                self.dims.update(operand.shape)
        return func(*args, **(kwargs or {}))


def test_a_training_step_runs_its_large_products_on_bucketed_row_counts():
    """Positions (steps * rows), predictions (both directions) and distinct words of a batch
    are none of them a bucket size here; every product sees only their bucketed counts."""
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    words = [f"word{k}" for k in range(61)]
    sentences = [words[k : k + 3 + k % 9] for k in range(0, 60, 3)]  # 20 sentences of 3 .. 11 words
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", *words])
    batch = make_batch(sentences, vocab)
    num_steps, num_rows = max(map(len, sentences)) + 2, len(sentences)
    positions = num_steps * num_rows  # the LSTMs' products over all steps
    predictions = 2 * sum(len(s) + 1 for s in sentences)  # the softmax's
    distinct = len({w for s in sentences for w in s}) + 2  # the char CNN's, <S> and </S> included
    counts = (positions, predictions, distinct)
    assert all(n != bucket_rows(n) for n in counts), counts  # so that the test can fail
    torch.manual_seed(0)
    lm = BiLMLanguageModel(options, len(vocab), dropout=0.1).train()
    recorded = _ProductShapes()
    with recorded:
        out = lm(batch.char_ids, batch.mask, batch.targets)
        out.loss.backward()
    for n in counts:
        assert n not in recorded.dims, (n, sorted(recorded.dims))
        assert bucket_rows(n) in recorded.dims, (n, sorted(recorded.dims))


def test_elmo_train_makes_room_for_the_kernels_before_any_work_and_other_commands_do_not(monkeypatch):
    import elmo_core.apps.cli as cli

    monkeypatch.setattr(cli, "app", lambda: None)
    monkeypatch.setattr(cli, "use_heap_for_every_block", lambda: None)
    monkeypatch.setattr(cli, "use_mmap_for_large_blocks", lambda threshold: None)
    for argv, expected in ((["elmo", "embed", "in.txt", "out.hdf5"], None), (["elmo", "train"], "4096")):
        monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
        monkeypatch.setattr(sys, "argv", argv)
        cli.main()
        assert shapes.os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == expected, argv
