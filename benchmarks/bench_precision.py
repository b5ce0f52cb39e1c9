"""How close each precision runs to the machine's own matrix rate: fp32, bf16 and int8 on the CPU.

For each precision, the biLM's tokens/s through `embed_sentences(model, sentences,
layers="top", batch_tokens=B)` and the fraction of the machine's square-GEMM rate of
the same dtype it reaches. The GEMM (2048^3) is timed right before and right after each
biLM run in this process, so a busy machine slows both alike. The precisions take turns
in every round. The forward runs on exactly `--threads` threads (`set_thread_policy`).

- fp32: the model as loaded.
- bf16: the same model with `autocast_dtype=torch.bfloat16` (`elmo embed --precision bf16`);
  its GEMM is a bf16 `torch.mm`.
- int8: `quantize_int8(model)`; its GEMM is the same product through an int8 dynamically
  quantised Linear, the kernel the int8 LSTMs run.

The biLM's FLOPs are `flops_per_position(options)` (docs/bilm_tf.md §11) times the
positions run, `<S>` and `</S>` included. The model is the published shape with random
weights read from the published hdf5 layout, built with the runtime's parts and no token
cache: each batch encodes its own distinct words. `--profile MODE` prints where that mode's
time goes instead.

    .venv/bin/python -m benchmarks.bench_precision
    .venv/bin/python -m benchmarks.bench_precision --profile bf16 --sentences 300
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    DEFAULT_DATA,
    build_model,
    check_flops_formula,
    flops_per_position,
    format_table,
    gemm_gflops,
    int8_gemm_gflops,
    load_average,
    load_sentences,
    machine_line,
    rebuilt,
    shape_options,
    token_cosines,
)
from elmo_core import Elmo, embed_sentences, quantize_int8, set_thread_policy
from elmo_core.model.precision import cpu_bf16_support

PRECISIONS = ("fp32", "bf16", "int8")
GEMM_SIZE = 2048


@dataclass(frozen=True)
class Run:
    """One timed biLM run of one precision, between two GEMM timings of its dtype."""

    precision: str
    tokens: int
    positions: int
    seconds: float
    gemm_before: float  # GFLOP/s
    gemm_after: float
    flops_per_position: int

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def gflops(self) -> float:
        return self.flops_per_position * self.positions / self.seconds / 1e9

    @property
    def fraction(self) -> float:
        """The biLM's rate over the mean of the two GEMM rates around it."""
        return self.gflops / ((self.gemm_before + self.gemm_after) / 2)


def gemm_rate(precision: str, size: int = GEMM_SIZE, seconds: float = 0.5) -> float:
    """GFLOP/s of a square product in `precision`'s dtype, as the model's products run it."""
    if precision == "int8":
        return int8_gemm_gflops(size, size, size, seconds=seconds)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return gemm_gflops(size, size, size, dtype=dtype, seconds=seconds)


def models_for(model: Elmo, precisions: Sequence[str]) -> dict[str, Elmo]:
    """The model each precision runs: fp32 and bf16 share `model`; int8 is its quantised copy."""
    return {p: quantize_int8(model) if p == "int8" else model for p in precisions}


def embed(
    model: Elmo, precision: str, sentences: Sequence[Sequence[str]], batch_tokens: int, layers: str = "top"
) -> list:
    """`embed_sentences` as the benchmark runs it, with an empty token cache."""
    if model.bilm.token_cache is not None:
        model.bilm.token_cache.clear()
    dtype = torch.bfloat16 if precision == "bf16" else None
    return embed_sentences(model, sentences, layers=layers, batch_tokens=batch_tokens, autocast_dtype=dtype)


def timed_run(
    model: Elmo, precision: str, sentences: Sequence[Sequence[str]], batch_tokens: int, gemm: tuple[int, float]
) -> Run:
    """One `Run`: GEMM rate (`gemm`: size and seconds), the biLM over `sentences`, GEMM rate again."""
    before = gemm_rate(precision, *gemm)
    start = time.perf_counter()
    embed(model, precision, sentences, batch_tokens)
    seconds = time.perf_counter() - start
    after = gemm_rate(precision, *gemm)
    tokens = sum(map(len, sentences))
    return Run(
        precision, tokens, tokens + 2 * len(sentences), seconds, before, after, flops_per_position(model.options)
    )


def rounds(
    models: dict[str, Elmo],
    sentences: Sequence[Sequence[str]],
    batch_tokens: int,
    count: int,
    gemm: tuple[int, float] = (GEMM_SIZE, 0.5),
) -> list[Run]:
    """`count` rounds; in each, every precision runs once, in turn (after one untimed warm-up each)."""
    for precision, model in models.items():
        embed(model, precision, sentences[:32], batch_tokens)
    return [timed_run(m, p, sentences, batch_tokens, gemm) for _ in range(count) for p, m in models.items()]


def summary_table(runs: Sequence[Run]) -> str:
    """Per precision: median and range of tokens/s, the GEMM rate and the fraction."""
    rows = []
    for precision in dict.fromkeys(r.precision for r in runs):
        mine = [r for r in runs if r.precision == precision]

        def spread(values: list[float], fmt: str) -> str:
            return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

        rows.append(
            [
                precision,
                spread([r.tokens_per_second for r in mine], ",.0f"),
                spread([r.gflops for r in mine], ",.0f"),
                spread([g for r in mine for g in (r.gemm_before, r.gemm_after)], ",.0f"),
                spread([r.fraction for r in mine], ".3f"),
            ]
        )
    header = ["precision", "tokens/s", "biLM GFLOP/s", "GEMM GFLOP/s", "fraction of GEMM"]
    return format_table(header, rows)


def cosine_table(models: dict[str, Elmo], sentences: Sequence[Sequence[str]], batch_tokens: int) -> str:
    """Per reduced precision and layer, the mean and least cosine of each token's vector to fp32's."""
    vectors = {}
    for precision, model in models.items():  # each from an empty token cache: each runs its own layer 0
        vectors[precision] = np.concatenate(embed(model, precision, sentences, batch_tokens, "all"), axis=1)
    rows = []
    for precision in [p for p in models if p != "fp32"]:
        cos = token_cosines(vectors["fp32"], vectors[precision])  # [layers, tokens]
        rows += [[precision, str(k), f"{c.mean():.5f}", f"{c.min():.5f}"] for k, c in enumerate(cos)]
        rows.append([precision, "all", f"{cos.mean():.5f}", f"{cos.min():.5f}"])
    return format_table(["precision", "layer", "mean cosine", "least cosine"], rows)


def profile(model: Elmo, precision: str, sentences: Sequence[Sequence[str]], batch_tokens: int, rows: int) -> str:
    """torch.profiler's operators of one run, by self CPU time (after a warm-up run)."""
    embed(model, precision, sentences, batch_tokens)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        embed(model, precision, sentences, batch_tokens)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="original", help="a published shape, 'default' or 'wide' (default original)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated, from fp32,bf16,int8")
    parser.add_argument("--sentences", type=int, default=768)
    parser.add_argument("--min-tokens", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="each precision runs once per round")
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="enwiki2015 valid.txt.xz (synthetic if missing)"
    )
    parser.add_argument("--cosine-sentences", type=int, default=200, help="sentences for the cosines to fp32 (0: none)")
    parser.add_argument("--profile", choices=PRECISIONS, help="print one run's operators by self CPU time instead")
    parser.add_argument("--profile-rows", type=int, default=30)
    args = parser.parse_args(argv)
    args.precisions = [p for p in args.precisions.split(",") if p]
    if not args.precisions or any(p not in PRECISIONS for p in args.precisions):
        parser.error(f"--precisions must be a comma-separated subset of {list(PRECISIONS)}; got {args.precisions}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    # Exactly --threads: the default policy ("auto") drops a thread when the machine looks busy.
    set_thread_policy(args.threads)
    wanted = [args.profile] if args.profile else args.precisions
    if "bf16" in wanted and cpu_bf16_support() is None:
        print("This CPU has no native bf16 (AMX-BF16 or AVX512-BF16): bf16 is left out.")
        wanted = [p for p in wanted if p != "bf16"]
        if not wanted:
            return 0
    sentences, source = load_sentences(args.data, args.sentences, args.min_tokens, args.max_tokens)
    options = shape_options(args.shape)
    print("Precision against the machine's GEMM rate (python -m benchmarks.bench_precision)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"bf16     {cpu_bf16_support() or 'not native'}")
    print(f"input    {source}: {len(sentences)} sentences, {sum(map(len, sentences))} tokens")
    check_flops_formula()
    print(
        f"shape    {args.shape}: {flops_per_position(options) / 1e6:.1f} MFLOP per position "
        f"(flops_per_position, checked against docs/bilm_tf.md §11); layers='top', "
        f"batch_tokens={args.batch_tokens}"
    )
    with tempfile.TemporaryDirectory(prefix="bench_precision_") as workdir:
        reference, _ = build_model(options, Path(workdir))
    models = models_for(rebuilt(reference), wanted)
    del reference
    if args.profile:
        print(f"\nprofile of {args.profile}, self CPU time, one run after one warm-up run:")
        print(profile(models[args.profile], args.profile, sentences, args.batch_tokens, args.profile_rows))
        return 0
    runs = rounds(models, sentences, args.batch_tokens, args.rounds)
    print(f"\n{args.rounds} rounds; median (min-max):")
    print(summary_table(runs))
    print(
        f"\nGEMM = {GEMM_SIZE}^3 torch.mm of the precision's dtype right before and after each run "
        "(int8: an int8 dynamically quantised Linear); fraction = biLM GFLOP/s over the mean of those two."
    )
    if args.cosine_sentences and "fp32" in models and len(models) > 1:
        print(f"\ncosine of each token's vector to fp32's, {args.cosine_sentences} of the sentences, layers='all':")
        print(cosine_table(models, sentences[: args.cosine_sentences], args.batch_tokens))
    print(f"load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
