"""GPU inference throughput of the ELMo biLM, per recurrence path and dtype.

For each (shape, batch size, mode) this times `embed_sentences(model, sentences,
layers="all", batch_size=B)` on the GPU, with the numpy copies included (what a user
gets), and prints tokens/s and the achieved spec GFLOP/s (`benchmarks.common.flops_per_position`)
over the GEMM rate of the same dtype measured in the same process (8192^3 `torch.mm`,
fp32 without TF32, and bf16). A mode is RECURRENCE-DTYPE[-compiled]:

- RECURRENCE: "step" (the per-step loop every earlier version ran), "paired", "auto"
  (the default: "captured" CUDA graphs for models with clips, cuDNN's fused LSTM for
  clip-free ones); see `elmo_core.model.recurrence`;
- DTYPE: fp32 (TF32 off) or bf16 (`autocast_dtype=torch.bfloat16`);
- -compiled: after `compile_recurrence(model)` (the step loop's element-wise part fused
  by torch.compile; compiled once, before timing).

Shapes: "original", "small" (published), "default" (the shipped model's shape, with the
clips its config.json has: on until issue 15, off since) and "default-noclip" (the same
without clips). It also prints the agreement of each
path and of bf16 with the CPU float32 step loop (per layer cosine and max |diff|) on the
shipped default model's trained weights. The token cache is on in every mode, cleared
before each timed run. Random weights elsewhere (FLOPs do not depend on values).

Usage (from the repository root, on a machine with CUDA):

    python -m benchmarks.bench_gpu --data local/bench_data/valid.txt.xz
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    DEFAULT_DATA,
    flops_per_position,
    format_table,
    gemm_gflops,
    load_sentences,
    machine_line,
    rebuilt,
    shape_options,
    token_cosines,
)
from elmo_core import Elmo, embed_sentences, load_model_folder
from elmo_core.files.model_folder import default_model_dir
from elmo_core.model.recurrence.lstm import compile_recurrence

MODES = ("step-fp32", "step-bf16", "auto-fp32", "auto-bf16")
GEMM_DTYPES = (torch.float32, torch.bfloat16)


def run(model: Elmo, sentences: list[list[str]], batch: int, mode: str) -> float:
    """Seconds of one embed_sentences call (cache cleared first)."""
    autocast = torch.bfloat16 if "bf16" in mode else None
    longest = max(len(s) for s in sentences) + 2
    if model.bilm.token_cache is not None:
        model.bilm.token_cache.clear()
    torch.cuda.synchronize()
    start = time.perf_counter()
    embed_sentences(
        model, sentences, layers="all", batch_size=batch, batch_tokens=batch * longest, autocast_dtype=autocast
    )
    torch.cuda.synchronize()
    return time.perf_counter() - start


def agreement(sentences: list[list[str]]) -> list[list[str]]:
    """Per layer cosine and max |diff| of each GPU path against the CPU float32 step loop."""
    model = load_model_folder(default_model_dir())
    model = rebuilt(model, "step")
    ref = np.concatenate(embed_sentences(model, sentences, layers="all", batch_size=256), axis=1)
    model.to("cuda")
    rows = []
    for mode in ("step-fp32", "auto-fp32", "auto-bf16"):
        model = rebuilt(model, mode.split("-")[0])
        autocast = torch.bfloat16 if "bf16" in mode else None
        got = np.concatenate(
            embed_sentences(model, sentences, layers="all", batch_size=256, autocast_dtype=autocast), axis=1
        )
        for k in range(ref.shape[0]):
            a, b = ref[k], got[k]
            cos = token_cosines(a, b)
            rows.append([mode, f"layer {k}", f"{cos.mean():.5f}", f"{cos.min():.5f}", f"{np.abs(a - b).max():.2e}"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sentences", type=int, default=4096)
    parser.add_argument("--shapes", default="original,default")
    parser.add_argument("--batch-sizes", default="256,1024")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 1
    sentences, source = load_sentences(args.data, args.sentences)
    tokens = sum(map(len, sentences))
    positions = tokens + 2 * len(sentences)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    fp32_rate, bf16_rate = (gemm_gflops(8192, 8192, 8192, dtype=d, device="cuda") / 1e3 for d in GEMM_DTYPES)
    print("ELMo biLM GPU benchmark (python -m benchmarks.bench_gpu)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"device   {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(machine_line())
    print(f"input    {source}; {len(sentences)} sentences, {tokens} tokens")
    print(
        f"GEMM     fp32 {fp32_rate:.1f} TFLOP/s (no TF32), bf16 {bf16_rate:.1f} TFLOP/s (8192^3 torch.mm)\n", flush=True
    )

    rows = []
    for shape in args.shapes.split(","):
        options = shape_options(shape)
        torch.manual_seed(0)
        model = Elmo(options, dropout=0.0).to("cuda").eval()
        flops = flops_per_position(options) * positions
        for mode in args.modes.split(","):
            model = rebuilt(model, mode.split("-")[0])
            compile_recurrence(model, enabled=mode.endswith("compiled"))
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                run(model, sentences[: 4 * batch], batch, mode)  # warm-up (and compilation)
                seconds = min(run(model, sentences, batch, mode) for _ in range(2))
                rate = flops / seconds / 1e12
                peak = bf16_rate if "bf16" in mode else fp32_rate
                rows.append(
                    [
                        shape,
                        str(batch),
                        mode,
                        f"{tokens / seconds:,.0f}",
                        f"{rate:.2f}",
                        f"{rate / peak:.4f}",
                    ]
                )
                print("  " + " ".join(rows[-1]), flush=True)
    print()
    print(format_table(["shape", "batch", "mode", "tokens/s", "TFLOP/s", "ratio to GEMM of its dtype"], rows))
    print("\nAgainst the CPU float32 step loop, shipped default model, first 2,048 sentences:")
    print(format_table(["mode", "layer", "mean cos", "min cos", "max |diff|"], agreement(sentences[:2048])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
