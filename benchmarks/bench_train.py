"""Pretraining throughput of the biLM language model, per recurrence path, on the CPU or a GPU.

For each (shape, recurrence, precision) this times full training steps of
`BiLMLanguageModel` (forward of both directions, the shared adaptive softmax, backward,
gradient clipping at 10 and an Adam update, as `Trainer.train_step` does) on batches of
real sentences, and prints words/s (the trainer's "tokens": words, without <S>/</S>)
and the achieved rate of the biLM's spec FLOPs (3 x the forward count of
`bench_core.flops_per_position`, softmax excluded) over the same-process GEMM rate of
that dtype.

Shapes: "default" (the shipped model's shape and clips as its config.json says: on until
issue 15, off since, so that it now equals "default-noclip"), "default-noclip" (the same
without cell_clip/proj_clip, which the fused `torch.lstm` path computes exactly) and any
`PUBLISHED_OPTIONS` name ("small": the published small shape, clips on). Recurrences:
"step" (the loop every version before had), "paired", "auto" (see
`elmo_core.recurrence`). Random weights, a 50,000-word vocabulary built from the input.

Usage (from the repository root):

    python benchmarks/bench_train.py                       # CPU, default shapes
    python benchmarks/bench_train.py --device cuda --precisions fp32,bf16 --batch-tokens 65536
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import (  # noqa: E402
    DEFAULT_DATA,
    REPO_ROOT,
    cpu_model,
    flops_per_position,
    format_table,
    load_sentences,
    shape_options,
)
from bench_memory import simd_flags  # noqa: E402

from elmo_core import BiLMOptions, batches_by_token_budget, set_recurrence  # noqa: E402
from elmo_core.memory import (  # noqa: E402
    MMAP_THRESHOLD,
    TRAIN_MMAP_THRESHOLD,
    release_free_memory,
    use_mmap_for_large_blocks,
)
from elmo_core.training.data import make_batch  # noqa: E402
from elmo_core.training.model import BiLMLanguageModel  # noqa: E402
from elmo_core.training.trainer import RELEASE_EVERY  # noqa: E402
from elmo_core.training.vocab import Vocabulary  # noqa: E402


def gemm_tflops(device: torch.device, dtype: torch.dtype, seconds: float = 1.0) -> float:
    n = 8192 if device.type == "cuda" else 2048
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        reps += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def batches(sentences: list[list[str]], vocab: Vocabulary, batch_tokens: int) -> list:
    """Training batches of at most `batch_tokens` padded positions (the core's batching)."""
    groups = batches_by_token_budget([len(s) for s in sentences], batch_tokens)
    return [make_batch([sentences[i] for i in group], vocab) for group in groups]


def run(
    options: BiLMOptions,
    vocab_size: int,
    recurrence: str,
    precision: str,
    data: list,
    device: torch.device,
    steps: int,
    release_every: int | None = None,
) -> float:
    """Words per second over `steps` timed training steps (after 2 warm-up steps), with
    `release_free_memory()` after every `release_every`-th step (None: never)."""
    torch.manual_seed(0)
    lm = BiLMLanguageModel(options, vocab_size, dropout=0.1).to(device).train()
    set_recurrence(lm, recurrence)
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-3)
    dtype = {"bf16": torch.bfloat16, "fp32": None}[precision]

    def step(batch) -> None:  # noqa: ANN001
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = lm(batch.char_ids, batch.mask, batch.targets)
        optimizer.zero_grad(set_to_none=True)
        ((out.forward_loss + out.backward_loss) / 2).backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 10.0)
        optimizer.step()

    for batch in data[:2]:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    words, start = 0, time.perf_counter()
    for k in range(steps):
        batch = data[k % len(data)]
        step(batch)
        words += batch.num_words
        if release_every and (k + 1) % release_every == 0:
            release_free_memory()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return words / (time.perf_counter() - start)


ALLOCATORS = {  # name: (glibc mmap threshold or None for glibc's own, release_free_memory every N steps)
    "elmo-train": (TRAIN_MMAP_THRESHOLD, RELEASE_EVERY),
    "every-step": (MMAP_THRESHOLD, 1),
    "glibc": (None, None),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sentences", type=int, default=2048)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shapes", default="default,default-noclip,small")
    parser.add_argument("--recurrences", default="step,auto")
    parser.add_argument("--precisions", default="fp32")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats; the best of each is kept")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--allocator",
        choices=tuple(ALLOCATORS),
        default="elmo-train",
        help="glibc's settings, once per process (so one per run): elmo-train (what `elmo train` sets), "
        "every-step (what it set before 2026-12-01) or glibc (glibc's defaults, no trimming)",
    )
    args = parser.parse_args(argv)
    threshold, release_every = ALLOCATORS[args.allocator]
    if threshold is not None:
        use_mmap_for_large_blocks(threshold)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data_path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    sentences, source = load_sentences(data_path, args.sentences)
    source = source.replace(str(data_path), str(args.data))  # as given: no machine's folders in results
    counts = Counter(w for s in sentences for w in s)
    vocab = Vocabulary(["<S>", "</S>", "<UNK>"] + [w for w, _ in counts.most_common(49_997)])
    data = batches(sentences, vocab, args.batch_tokens)
    rates = {
        p: gemm_tflops(device, torch.bfloat16 if p == "bf16" else torch.float32) for p in args.precisions.split(",")
    }
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{cpu_model()}, {torch.get_num_threads()} threads"
    )
    print("biLM pretraining benchmark (benchmarks/bench_train.py)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"device   {where}; torch {torch.__version__}; {platform.machine()}")
    print(f"input    {source}; {len(sentences)} sentences in {len(data)} batches of <= {args.batch_tokens} positions")
    if device.type == "cpu":
        print("flags    " + " ".join(simd_flags()))
    trims = args.steps // release_every if release_every else 0
    print(
        f"memory   --allocator {args.allocator}: mmap threshold {threshold}, malloc_trim every {release_every} "
        f"steps ({trims} in each configuration's {args.steps} timed steps)"
    )
    print("GEMM     " + ", ".join(f"{p} {r:.2f} TFLOP/s" for p, r in rates.items()) + "\n", flush=True)
    configs = [
        (shape, precision, recurrence)
        for shape in args.shapes.split(",")
        for precision in args.precisions.split(",")
        for recurrence in args.recurrences.split(",")
    ]
    best: dict[tuple[str, str, str], float] = {}
    for repeat in range(args.repeats):  # interleaved, so that load from elsewhere hits every row alike
        for shape, precision, recurrence in configs:
            words_per_s = run(
                shape_options(shape), len(vocab), recurrence, precision, data, device, args.steps, release_every
            )
            best[shape, precision, recurrence] = max(best.get((shape, precision, recurrence), 0.0), words_per_s)
            print(f"  repeat {repeat}: {shape} {recurrence} {precision} {words_per_s:,.0f} words/s", flush=True)
    words = sum(map(len, sentences))
    rows = []
    for (shape, precision, recurrence), words_per_s in best.items():
        flops_per_word = 3 * flops_per_position(shape_options(shape)) * (words + 2 * len(sentences)) / words
        rate = words_per_s * flops_per_word / 1e12
        rows.append([shape, recurrence, precision, f"{words_per_s:,.0f}", f"{rate / rates[precision]:.4f}"])
    print()
    print(format_table(["shape", "recurrence", "precision", "words/s", "ratio to GEMM of its dtype"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
