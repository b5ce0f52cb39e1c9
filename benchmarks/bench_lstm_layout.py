"""The LSTM step loop on columns against the row loop, float32 inference on the CPU, in one run.

Float32 inference on the CPU runs each cell's steps on columns (`LSTMCellWithProjection.
_forward_columns`, see `elmo_core.model.recurrence.lstm`); the row loop is what it ran before, and what
autograd, autocast and int8 still run. This script times both on the same biLM (random
weights of the chosen shape) and the same batch: `--batch` rows of random lengths in
[8, 32) over `--steps` steps, both stacks through the biLM's recurrence as inference runs
them (the two directions side by side with two threads). The variants alternate; the best
of `--repeats` runs counts, and the largest difference between their outputs is printed.
The row loop is forced by making `_takes_columns` answer False for the run.

    .venv/bin/python -m benchmarks.bench_lstm_layout                # 2 threads, then 1
    .venv/bin/python -m benchmarks.bench_lstm_layout --threads 2 --shape default
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import time
from unittest import mock

import torch

from benchmarks.common import machine_line, shape_options
from elmo_core import Elmo, set_thread_policy
from elmo_core.model.recurrence.lstm import LSTMCellWithProjection
from elmo_core.runtime.parts import serving_parts


def _no(self: LSTMCellWithProjection, inputs: torch.Tensor) -> bool:
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="original", help="a PUBLISHED_OPTIONS shape or 'default'")
    parser.add_argument("--threads", default="2,1", help="thread counts to run, one after the other")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    options = shape_options(args.shape)
    torch.manual_seed(0)
    bilm = Elmo(options, dropout=0.0, **serving_parts()).eval().bilm
    lengths = torch.randint(8, 32, (args.batch,)).sort(descending=True).values
    tokens = torch.randn(args.batch, int(lengths.max()), options.lstm.projection_dim)
    print(f"bench_lstm_layout {datetime.date.today().isoformat()}: {args.shape} shape, float32, batch {args.batch}")
    print(machine_line())
    print(f"{'threads':>7} {'rows ms':>8} {'columns ms':>10} {'columns/rows':>12} {'max |diff|':>10}")
    for threads in (int(t) for t in args.threads.split(",")):
        set_thread_policy(threads)

        def run(columns: bool) -> list[torch.Tensor]:
            loop = (
                contextlib.nullcontext()
                if columns
                else mock.patch.object(LSTMCellWithProjection, "_takes_columns", _no)
            )
            with torch.inference_mode(), bilm.recurrence.threads(tokens.device), loop:
                forward, backward, _ = bilm._run_stacks(tokens, lengths)
            return forward + backward

        diff = max(float((a - b).abs().max()) for a, b in zip(run(False), run(True)))
        best = {False: float("inf"), True: float("inf")}
        for _ in range(args.repeats):
            for columns in (False, True):
                start = time.perf_counter()
                run(columns)
                best[columns] = min(best[columns], time.perf_counter() - start)
        ratio = best[True] / best[False]
        print(f"{threads:>7} {best[False] * 1e3:>8.1f} {best[True] * 1e3:>10.1f} {ratio:>11.3f}x {diff:>10.1e}")
    set_thread_policy("auto")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
