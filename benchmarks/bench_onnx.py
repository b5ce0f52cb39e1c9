"""ONNX Runtime against the eager model on the CPU: tokens/s of the same batches, in one run.

The shipped default model as `AutoModel` (`ElmoModel`, its `last_hidden_state`) is exported
with `torch.onnx.export(..., dynamo=True)` and a dynamic batch and length, as
docs/guides/deployment.md shows, and run by ONNX Runtime's CPU provider. It is compared with:

- "eager": the model itself, with its runtime (the step loop on columns, a token cache that
  starts empty at each pass, the thread rule);
- "torch.export": the exported program run by PyTorch (the graph's masked scan, in torch).

All three read the same batches: `--sentences` enwiki sentences sorted by length, cut into
batches of `--batch-size`, tokenised once beforehand. ONNX Runtime gets torch's thread count.
The three take turns, `--repeats` times; the table lists each pass, and the summary the median
ratios to eager and the largest difference from eager's vectors. Nothing is asserted.

Usage (from the repository root; about a minute on 2 CPU cores):

    .venv/bin/python -m benchmarks.bench_onnx
    .venv/bin/python -m benchmarks.bench_onnx --sentences 1024 --batch-size 64
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from benchmarks.common import DEFAULT_DATA, format_table, load_average, load_sentences, machine_line, timed

WAYS = ("eager", "torch.export", "onnxruntime")


class LastHiddenState(torch.nn.Module):
    """Char ids and an attention mask in, `last_hidden_state` out: what the graph holds."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, char_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(char_ids=char_ids, attention_mask=attention_mask)[0]


Run = Callable[[torch.Tensor, torch.Tensor], np.ndarray]


def runners(batches: list[tuple[torch.Tensor, torch.Tensor]], folder: Path) -> tuple[dict[str, Run], Callable]:
    """One callable per way, each mapping (char_ids, attention_mask) to the vectors as numpy; and
    a callable that gives the eager model an empty token cache."""
    from transformers import AutoModel

    import hf_elmo  # noqa: F401  (registers the Auto classes)
    from elmo_core import default_model_dir

    model = AutoModel.from_pretrained(default_model_dir(), return_dict=False)
    wrapper = LastHiddenState(model).eval()
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens")
    shapes = {"char_ids": {0: batch, 1: tokens}, "attention_mask": {0: batch, 1: tokens}}
    graph = torch.export.export(wrapper, batches[0], dynamic_shapes=shapes).module()
    path = folder / "elmo.onnx"
    torch.onnx.export(wrapper, batches[0], path, dynamo=True, dynamic_shapes=shapes, verbose=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def eager(char_ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            return wrapper(char_ids, mask).numpy()

    def exported(char_ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        with torch.inference_mode():
            return graph(char_ids, mask).numpy()

    def onnxruntime(char_ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        return session.run(None, {"char_ids": char_ids.numpy(), "attention_mask": mask.numpy()})[0]

    ways = {"eager": eager, "torch.export": exported, "onnxruntime": onnxruntime}
    return ways, model.bilm.token_cache.clear


def make_batches(sentences: list[list[str]], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from transformers import AutoTokenizer

    import hf_elmo  # noqa: F401
    from elmo_core import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    ordered = sorted(sentences, key=len)
    batches = []
    for start in range(0, len(ordered), batch_size):
        encoded = tokenizer(
            ordered[start : start + batch_size], is_split_into_words=True, padding=True, return_tensors="pt"
        )
        batches.append((encoded["char_ids"], encoded["attention_mask"]))
    return batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=512, help="enwiki sentences (default 512)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="passes of each way (default 3)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="xz text (relative: from the repository root)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    sentences, source = load_sentences(args.data, args.sentences)
    n_tokens = sum(len(s) for s in sentences)
    print("ONNX Runtime against the eager model (python -m benchmarks.bench_onnx)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"onnx     onnxruntime {ort.__version__}, CPUExecutionProvider, {torch.get_num_threads()} threads")
    print(f"input    {source}; {len(sentences)} sentences, {n_tokens:,} tokens, sorted, batches of {args.batch_size}")
    print("model    the shipped default model as AutoModel, last_hidden_state, float32")
    batches = make_batches(sentences, args.batch_size)
    with tempfile.TemporaryDirectory() as folder:
        run, fresh_cache = runners(batches, Path(folder))
        expected = [run["eager"](*b) for b in batches]  # also the warm-up of every way
        largest = {way: max(float(np.abs(run[way](*b) - e).max()) for b, e in zip(batches, expected)) for way in WAYS}
        rows, seconds = [], {way: [] for way in WAYS}
        for repeat in range(args.repeats):  # the ways in turn: each sees the same machine
            for way in WAYS:
                if way == "eager":
                    fresh_cache()
                _, wall, others = timed(lambda: [run[way](*b) for b in batches])  # noqa: B023
                seconds[way].append(wall)
                load = "" if others is None else f"{others:.2f}"
                rows.append([way, str(repeat + 1), f"{wall:.2f}", f"{n_tokens / wall:,.0f}", load])
                print(f"  #{repeat + 1} {way}: {wall:.2f} s", flush=True)
    print()
    print(format_table(["way", "pass", "seconds", "tokens/s", "others' CPUs"], rows))
    print()
    eager = statistics.median(seconds["eager"])
    for way in WAYS:
        median = statistics.median(seconds[way])
        print(
            f"{way}: median {n_tokens / median:,.0f} tokens/s, {eager / median:.2f}x eager's rate; "
            f"largest difference from eager {largest[way]:.1e}"
        )
    print("\nothers' CPUs = CPUs' worth of other processes' work during the pass.")
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s; load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
