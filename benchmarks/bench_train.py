"""Pretraining throughput of the biLM language model, old and new training step, on the CPU or a GPU.

For each (shape, precision, path) this times full training steps of `BiLMLanguageModel`
(both directions, the shared adaptive softmax, backward, clipping at 10 and Adam, as
`Trainer.train_step`) on batches of real sentences. It prints words/s (the trainer's
"tokens") and the rate of the biLM's spec FLOPs (3 x `benchmarks.common.flops_per_position`,
softmax excluded) over the same-process GEMM rate of that dtype.

Paths: "new" is the library as it is. "old" is the step of 2026-12-01 (issue 25), kept
here frozen: the step loop, the char CNN over all 50 slots with `amax`, and torch's
adaptive softmax. `--perplexity-steps N` also trains both from one seed and scores
held-out text. To compare two versions of the library, see `benchmarks.bench_train_trees`.

Batches: real sentences cut by the core's token budget and shuffled (seed 0). Each repeat
runs on batches no earlier repeat ran, so every batch brings shapes the process has not
met (bf16 products create a oneDNN kernel per new shape). `--reuse-batches` reuses them.
Room is made for 4,096 oneDNN kernels first, as `elmo train` does.

Shapes: "default" (the shipped model's), "default-noclip", "wide" (LSTM 1024, projection
256) and any `PUBLISHED_OPTIONS` name. Random weights, a vocabulary of up to 50,000 words.

Usage (from the repository root):

    python -m benchmarks.bench_train --precisions fp32,bf16 --threads 2 --steps 16 --repeats 4 --sentences 12000
    python -m benchmarks.bench_train --precisions bf16 --threads 2 --perplexity-steps 60
    python -m benchmarks.bench_train --device cuda --precisions fp32,bf16 --batch-tokens 65536
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import platform
import random
import statistics
import sys
import time
import types
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import (
    DEFAULT_DATA,
    MAX_TOKENS,
    MIN_TOKENS,
    flops_per_position,
    format_table,
    gemm_gflops,
    load_sentences,
    machine_line,
    make_step,
    rebuilt,
    shape_options,
)
from elmo_core import BiLMOptions, release_free_memory
from elmo_core.apps.cli.process import reserve_kernel_cache
from elmo_core.apps.training.config import TrainConfig
from elmo_core.apps.training.data import make_batch
from elmo_core.apps.training.model import BiLMLanguageModel, LMOutput
from elmo_core.apps.training.optimizer import make_optimizer
from elmo_core.apps.training.perplexity import evaluate
from elmo_core.apps.training.softmax import adaptive_log_prob
from elmo_core.apps.training.trainer import RELEASE_EVERY
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.runtime.batching import batches_by_token_budget
from elmo_core.runtime.memory import MMAP_THRESHOLD, use_heap_for_every_block, use_mmap_for_large_blocks

TRAIN_MMAP_THRESHOLD = 32 * 1024 * 1024  # the glibc mmap threshold `elmo train` set on 2026-12-01


@functools.cache
def _log_softmax_dtype(device: torch.device, autocast_dtype: torch.dtype) -> torch.dtype:
    with torch.autocast(device.type, dtype=autocast_dtype):
        return torch.log_softmax(torch.zeros(1, 2, device=device, dtype=autocast_dtype), dim=-1).dtype


def autocast_log_softmax_dtype(device: torch.device) -> torch.dtype:
    """The dtype `log_softmax` gives under `device`'s autocast: its dtype on the CPU, float32 on CUDA."""
    return _log_softmax_dtype(device, torch.get_autocast_dtype(device.type))


OLD_BLOCK_TOKENS = 32  # the frozen char CNN's block of tokens (the library's BLOCK_TOKENS then)


def batches(sentences: list[list[str]], vocab: Vocabulary, batch_tokens: int) -> list:
    """Training batches of at most `batch_tokens` padded positions (the core's batching)."""
    groups = batches_by_token_budget([len(s) for s in sentences], batch_tokens)
    return [make_batch([sentences[i] for i in group], vocab) for group in groups]


# ------------------------------------------------------------------ the old step, frozen
def _old_char_cnn_forward(self, char_ids: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """`CharCNN.forward` as of 2026-12-01: all 50 slots, blocks of 32 tokens, `amax`."""
    table = self.embedding_table()

    def encode(ids: torch.Tensor) -> torch.Tensor:
        x = F.embedding(ids, table).transpose(1, 2)  # [tokens, E, chars]
        pooled = []
        for conv in self.convolutions:
            y = conv(x).amax(dim=2)  # [tokens, count]
            pooled.append(torch.relu(y) if self.activation == "relu" else torch.tanh(y))
        return self.projection(self.highway(torch.cat(pooled, dim=1)))  # [tokens, P]

    if char_ids.shape[0] <= OLD_BLOCK_TOKENS:
        return encode(char_ids)
    return torch.cat([encode(block) for block in char_ids.split(OLD_BLOCK_TOKENS)])


def _old_lm_forward(self, char_ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> LMOutput:  # noqa: ANN001
    """`BiLMLanguageModel.forward` as of 2026-12-01: the module's own adaptive softmax."""
    out = self.bilm(char_ids, mask)
    full_mask = out.mask
    targets = targets.to(full_mask.device)
    P = self.options.lstm.projection_dim
    top = F.dropout(out.activations[-1], self.dropout, self.training)
    has_next = full_mask[:, 1:]
    forward_hidden, forward_targets = top[:, :-1, :P][has_next], targets[:, 1:][has_next]
    backward_hidden, backward_targets = top[:, 1:, P:][has_next], targets[:, :-1][has_next]
    n = forward_targets.shape[0]
    hidden = torch.cat([forward_hidden, backward_hidden])
    if torch.is_autocast_enabled(hidden.device.type):
        hidden = hidden.to(autocast_log_softmax_dtype(hidden.device))
    log_probs = self.softmax(hidden, torch.cat([forward_targets, backward_targets])).output.float()
    return LMOutput(-log_probs[:n].mean(), -log_probs[n:].mean(), n, n)


def use_path(lm: BiLMLanguageModel, path: str, recurrence: str = "auto") -> BiLMLanguageModel:
    """Switch `lm` to the "old" (frozen 2026-12-01) or the "new" (library) training step."""
    for module, name in ((lm, "forward"), (lm.bilm.char_cnn, "forward")):
        module.__dict__.pop(name, None)  # back to the class's method
    if path == "old":
        lm = rebuilt(lm, "step")
        lm.bilm.char_cnn.forward = types.MethodType(_old_char_cnn_forward, lm.bilm.char_cnn)
        lm.forward = types.MethodType(_old_lm_forward, lm)
    else:
        lm = rebuilt(lm, recurrence)
    return lm


# ------------------------------------------------------------------ timing
def optimizer_for(lm: BiLMLanguageModel, path: str) -> torch.optim.Optimizer:
    """Adam at 1e-3 as `elmo train` made it: torch's loop over the parameters on the old
    path (2026-12-01), the trainer's `make_optimizer` (fused) on the new one."""
    if path == "old":
        return torch.optim.Adam(lm.parameters(), lr=1e-3)
    return make_optimizer(list(lm.parameters()), TrainConfig(max_steps=1, lr=1e-3))


def run(
    options: BiLMOptions,
    vocab_size: int,
    path: str,
    recurrence: str,
    precision: str,
    data: list,
    device: torch.device,
    steps: int,
    allocator: str = "elmo-train",
    clock=time.perf_counter,  # noqa: ANN001
) -> float:
    """Words per second of `clock` over `steps` timed training steps, `data[2:]` (after 2 warm-up
    steps on `data[:2]`), under ALLOCATORS[allocator] for the new path and OLD_ALLOCATOR for the old one."""
    release_every = set_allocator(OLD_ALLOCATOR if path == "old" else allocator)
    torch.manual_seed(0)
    lm = use_path(BiLMLanguageModel(options, vocab_size, dropout=0.1).to(device).train(), path, recurrence)
    step = make_step(lm, optimizer_for(lm, path), precision, device)
    for batch in data[:2]:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    words, start = 0, clock()
    for k in range(steps):
        batch = data[2 + k]
        step(batch)
        words += batch.num_words
        if release_every and (k + 1) % release_every == 0:
            release_free_memory()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return words / (clock() - start)


def train_and_score(
    options: BiLMOptions,
    vocab: Vocabulary,
    path: str,
    precision: str,
    data: list,
    heldout: list[list[str]],
    device: torch.device,
    steps: int,
) -> tuple[float, float]:
    """Train from seed 0 for `steps` steps over `data` in order; (last training loss,
    held-out average perplexity). Both paths are scored by the library's `evaluate` in
    float32, so only the training differs."""
    torch.manual_seed(0)
    lm = use_path(BiLMLanguageModel(options, len(vocab), dropout=0.1).to(device).train(), path)
    step = make_step(lm, optimizer_for(lm, path), precision, device)
    loss = math.nan
    for k in range(steps):
        loss = step(data[k % len(data)])
    lm = use_path(lm, "new")
    return loss, evaluate(lm, heldout, vocab, batch_tokens=4096, device=device, precision="fp32").average


def breakdown(
    options: BiLMOptions, vocab_size: int, path: str, precision: str, data: list, device: torch.device, steps: int
) -> dict[str, float]:
    """Milliseconds per batch of each part of a training step, forward + backward, each part
    timed on its own over the first `steps` batches: the char CNN (distinct words of the
    batch), both LSTM stacks, the softmax, the clip + Adam update, and the whole step."""
    set_allocator(OLD_ALLOCATOR if path == "old" else "elmo-train")
    torch.manual_seed(0)
    lm = use_path(BiLMLanguageModel(options, vocab_size, dropout=0.1).to(device).train(), path)
    optimizer = optimizer_for(lm, path)
    step = make_step(lm, optimizer, precision, device)
    dtype = {"bf16": torch.bfloat16, "fp32": None}[precision]
    bilm = lm.bilm
    times = dict.fromkeys(("char CNN", "LSTMs", "softmax", "clip + Adam", "whole step"), 0.0)
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        times[name] += (now - clock[0]) * 1e3 / steps
        clock[0] = now

    for batch in data[:2]:  # warm-up: two shapes, so that the fused kernels are compiled (static, then dynamic)
        step(batch.to(device))
    for k in range(steps):
        batch = data[k % len(data)].to(device)
        ids, lengths, full_mask = bilm._add_sentence_boundaries(batch.char_ids, batch.mask)
        targets = batch.targets[:, 1:][full_mask[:, 1:]].repeat(2)  # as many as the step predicts
        hidden = torch.randn(targets.shape[0], options.lstm.projection_dim, requires_grad=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            tokens = bilm._token_embedding(ids, full_mask).detach().requires_grad_(True)
            clock[0] = time.perf_counter()
            bilm._token_embedding(ids, full_mask).float().sum().backward()
            lap("char CNN")
            sum(y.float().sum() for y in bilm._run_stacks(tokens, lengths)[1]).backward()
            lap("LSTMs")
            if path == "old":
                log_probs = lm.softmax(hidden.to(autocast_log_softmax_dtype(device)) if dtype else hidden, targets)
                (-log_probs.output.float().mean()).backward()
            else:
                (-adaptive_log_prob(lm.softmax, hidden, targets).mean()).backward()
            lap("softmax")
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 10.0)
        optimizer.step()
        lap("clip + Adam")
        step(batch)
        lap("whole step")
    return times


ALLOCATORS = {  # name: (glibc mmap threshold or None for glibc's own, every block in the heap, trim every N steps)
    "elmo-train": (None, True, RELEASE_EVERY),  # what `elmo train` sets (no threshold: nothing is mapped alone)
    "elmo-train-2026-12-01": (TRAIN_MMAP_THRESHOLD, False, RELEASE_EVERY),  # what it set then: the old path's
    "every-step": (MMAP_THRESHOLD, False, 1),  # what it set before 2026-12-01
    "glibc": (None, False, None),  # glibc's defaults, no trimming (only before any other setting in the process)
}
OLD_ALLOCATOR = "elmo-train-2026-12-01"


def paired_ratios(each: dict[tuple[str, str, str], list[float]]) -> dict[tuple[str, str], list[float]]:
    """new/old words/s of each repeat, per (shape, precision) that ran both paths."""
    return {
        (shape, precision): [new / old for new, old in zip(rates, each[shape, precision, "old"])]
        for (shape, precision, path), rates in each.items()
        if path == "new" and (shape, precision, "old") in each
    }


def repeat_batches(data: list, repeat: int, steps: int, reuse: bool) -> list:
    """The 2 warm-up and `steps` timed batches of repeat `repeat`: its own slice of `data`
    (wrapping around when `data` is too short), or with `reuse` the first ones, every repeat."""
    first = 0 if reuse else repeat * (steps + 2)
    return [data[(first + k) % len(data)] for k in range(steps + 2)]


def set_allocator(name: str) -> int | None:
    """Apply glibc's settings of ALLOCATORS[name] to this process; the trim period."""
    threshold, heap_only, release_every = ALLOCATORS[name]
    if threshold is not None:
        use_mmap_for_large_blocks(threshold)
    use_heap_for_every_block(heap_only)
    return release_every


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sentences", type=int, default=2048)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shapes", default="default")
    parser.add_argument("--paths", default="old,new", help="old (the frozen 2026-12-01 step), new (the library)")
    parser.add_argument("--recurrence", default="auto", help="the new path's recurrence (elmo_core.model.recurrence)")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats; the best of each is kept")
    parser.add_argument(
        "--reuse-batches",
        action="store_true",
        help="run every repeat on the same first batches (their oneDNN kernels then made once: unlike training)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cpu-time", action="store_true", help="words per CPU-second of this process, not wall")
    parser.add_argument(
        "--perplexity-steps",
        type=int,
        default=0,
        help="also train old and new for this many steps (same seed, same batches) and score held-out text",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="also print ms per batch of each part of the step, per path"
    )
    parser.add_argument("--heldout", type=Path, default=Path("../shared/data/lm/enwiki2015/test.txt.xz"))
    parser.add_argument("--heldout-sentences", type=int, default=1000)
    parser.add_argument(
        "--allocator",
        choices=tuple(ALLOCATORS),
        default="elmo-train",
        help="glibc's settings for the new path (the old path always runs under elmo-train-2026-12-01, "
        "what `elmo train` set then): elmo-train (what it sets now: every block in the heap), "
        "every-step (before 2026-12-01) or glibc (glibc's defaults, no trimming; only with --paths new)",
    )
    args = parser.parse_args(argv)
    reserve_kernel_cache()  # as `elmo train`, before the first product (old and new alike)
    threshold, heap_only, release_every = ALLOCATORS[args.allocator]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sentences, source = load_sentences(args.data, args.sentences)
    counts = Counter(w for s in sentences for w in s)
    vocab = Vocabulary(["<S>", "</S>", "<UNK>"] + [w for w, _ in counts.most_common(49_997)])
    data = batches(sentences, vocab, args.batch_tokens)
    random.Random(0).shuffle(data)  # as the trainer's batches come: lengths mixed, each batch its own shape
    n = 8192 if device.type == "cuda" else 2048  # TFLOP/s of an n^3 torch.mm per precision
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    rates = {
        p: gemm_gflops(n, n, n, dtype=dtypes[p], device=device, seconds=1.0) / 1e3 for p in args.precisions.split(",")
    }
    print("biLM pretraining benchmark (python -m benchmarks.bench_train)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    if device.type == "cuda":
        print(f"device   {torch.cuda.get_device_name(device)}; {platform.machine()}")
    print(machine_line())
    print(f"input    {source}; {len(sentences)} sentences in {len(data)} batches of <= {args.batch_tokens} positions")
    per_repeat, needed = args.steps + 2, args.repeats * (args.steps + 2)
    if args.reuse_batches:
        print(f"batches  every repeat on the same {per_repeat} (--reuse-batches: their shapes' oneDNN kernels reused)")
    elif needed > len(data):
        print(f"batches  each repeat on its own {per_repeat}, repeating after {len(data)} (more --sentences: fresh)")
    else:
        print(f"batches  each repeat on its own {per_repeat}, none seen before: fresh shapes, as in training")
    trims = args.steps // release_every if release_every else 0
    print(
        f"memory   new path --allocator {args.allocator}: mmap threshold {threshold}, every block in the heap "
        f"{heap_only}, malloc_trim every {release_every} steps ({trims} in each configuration's {args.steps} timed "
        f"steps); old path {OLD_ALLOCATOR}: {ALLOCATORS[OLD_ALLOCATOR]}"
    )
    print("clock    " + ("CPU time of this process (--cpu-time)" if args.cpu_time else "wall"))
    print("GEMM     " + ", ".join(f"{p} {r:.2f} TFLOP/s" for p, r in rates.items()) + "\n", flush=True)
    configs = [
        (shape, precision, path)
        for shape in args.shapes.split(",")
        for precision in args.precisions.split(",")
        for path in args.paths.split(",")
    ]
    best: dict[tuple[str, str, str], float] = {}
    each: dict[tuple[str, str, str], list[float]] = {}
    for repeat in range(args.repeats):  # interleaved, so that load from elsewhere hits every row alike
        for shape, precision, path in configs:
            words_per_s = run(
                shape_options(shape),
                len(vocab),
                path,
                args.recurrence,
                precision,
                repeat_batches(data, repeat, args.steps, args.reuse_batches),
                device,
                args.steps,
                args.allocator,
                time.process_time if args.cpu_time else time.perf_counter,
            )
            best[shape, precision, path] = max(best.get((shape, precision, path), 0.0), words_per_s)
            each.setdefault((shape, precision, path), []).append(words_per_s)
            print(f"  repeat {repeat}: {shape} {path} {precision} {words_per_s:,.0f} words/s", flush=True)
    words = sum(map(len, sentences))
    rows = []
    for (shape, precision, path), words_per_s in best.items():
        flops_per_word = 3 * flops_per_position(shape_options(shape)) * (words + 2 * len(sentences)) / words
        rate = words_per_s * flops_per_word / 1e12
        old = best.get((shape, precision, "old"))
        speedup = f"{words_per_s / old:.2f}x" if old else "-"
        recurrence = "step (frozen)" if path == "old" else args.recurrence
        rows.append(
            [shape, path, recurrence, precision, f"{words_per_s:,.0f}", f"{rate / rates[precision]:.4f}", speedup]
        )
    print()
    headers = ["shape", "path", "recurrence", "precision", "words/s", "ratio to GEMM of its dtype", "vs old"]
    print(format_table(headers, rows))
    paired = paired_ratios(each)
    if paired:
        # A shared machine's speed drifts by tens of percent within minutes; old and new of
        # one repeat run back to back, so their ratio is steadier than the ratio of the bests.
        print("\nnew/old per repeat (each repeat's two runs back to back), and their median:")
        for (shape, precision), ratios in paired.items():
            listed = ", ".join(f"{r:.2f}x" for r in ratios)
            print(f"  {shape} {precision}: {listed}; median {statistics.median(ratios):.2f}x")
    if args.breakdown:
        print("\nms per batch, forward + backward, each part timed on its own (first --steps batches)")
        parts_rows = []
        for shape, precision, path in configs:
            parts = breakdown(shape_options(shape), len(vocab), path, precision, data, device, args.steps)
            parts_rows.append([shape, path, precision, *(f"{v:.0f}" for v in parts.values())])
        print(format_table(["shape", "path", "precision", *parts], parts_rows))
    if args.perplexity_steps:
        heldout, heldout_source = load_sentences(args.heldout, args.heldout_sentences)
        print(
            f"\nperplexity: {args.perplexity_steps} steps from seed 0 over the batches above in order, "
            f"dropout 0.1, Adam 1e-3; held-out {heldout_source}: {len(heldout)} sentences "
            f"({MIN_TOKENS}..{MAX_TOKENS} tokens), scored in fp32 by elmo_core.apps.training.perplexity.evaluate"
        )
        ppl_rows = []
        for shape, precision, _ in [c for c in configs if c[2] == "old"]:
            scores = {
                path: train_and_score(
                    shape_options(shape), vocab, path, precision, data, heldout, device, args.perplexity_steps
                )
                for path in ("old", "new")
            }
            (old_loss, old_ppl), (new_loss, new_ppl) = scores["old"], scores["new"]
            ppl_rows.append(
                [
                    shape,
                    precision,
                    f"{old_loss:.4f}",
                    f"{new_loss:.4f}",
                    f"{old_ppl:.2f}",
                    f"{new_ppl:.2f}",
                    f"{100 * (new_ppl / old_ppl - 1):+.2f}%",
                ]
            )
            print(f"  {shape} {precision}: old {old_ppl:.2f}, new {new_ppl:.2f}", flush=True)
        print()
        headers = ["shape", "precision", "last loss old", "last loss new", "ppl old", "ppl new", "new vs old"]
        print(format_table(headers, ppl_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
