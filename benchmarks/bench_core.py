"""CPU inference throughput of the ELMo biLM, against the machine's own GEMM rate.

What is measured, per (published shape, batch size):

- tokens/s through the public inference path, `embed_sentences(model, sentences,
  layers="all", batch_size=B, batch_tokens=<large>)`, so the number is what a user gets:
  char ids, sorting, both LSTM stacks, the numpy copies. Only real tokens count; the
  `<S>`/`</S>` positions the biLM adds are work, not output.
- achieved GFLOP/s, from the forward FLOPs of docs/bilm_tf.md §11 (`flops_per_position`),
  counted per position *including* the two boundary positions of each sentence. Our char
  CNN runs on real positions only, so padding costs nothing in this count. It runs once
  per distinct word of a batch, so the model does less char CNN work than this count,
  and more so in larger batches: the rate is "spec FLOPs per second".
- that rate divided by the fp32 `torch.mm` rate of large square matrices measured in the
  same process with the same thread count: the fraction of the machine the model uses.
  A batch-32-shaped recurrent product ([32, P] x [P, 4D] of the original shape) is
  reported beside it, because the per-step recurrent matmuls are the part that cannot be
  batched over time.
- peak RSS (`ru_maxrss`) of a fresh subprocess per configuration, so it belongs to that
  configuration alone (it includes the Python + torch baseline and the weight import).
- the time of `model.bilm.char_cnn` alone on the distinct words of each batch (what the
  biLM feeds it), which splits the run into char CNN and "LSTMs + rest".

The weights are random, written in the original bilm-tf hdf5 layout with `save_bilm_tf`
to a temporary file and read back with `load_bilm_tf` into a fresh model, so the import
path is exercised too. Random weights cost the same FLOPs as trained ones.

Input is real text (sentences of the enwiki2015 validation split, 5..60 whitespace
tokens) when the file is present, otherwise synthetic sentences with a fixed seed. Every
configuration sees the same sentences. Nothing is downloaded; nothing is asserted about
speed.

Usage (from the repository root):

    .venv/bin/python -m benchmarks.bench_core
    .venv/bin/python -m benchmarks.bench_core --shapes small --batch-sizes 32 --sentences 256
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.common import (
    DEFAULT_DATA,
    best_of,
    build_model,
    check_flops_formula,
    child_env,
    current_rss_mb,
    flops_per_position,
    format_table,
    gemm_gflops,
    int8_gemm_gflops,
    load_average,
    load_sentences,
    machine_line,
    peak_rss_mb,
    rebuilt,
    shape_options,
    token_layer_flops,
)
from elmo_core import PUBLISHED_OPTIONS, Elmo, embed_sentences, quantize_int8
from elmo_core.model.characters import BOS_TOKEN, EOS_TOKEN, word_to_char_ids
from elmo_core.runtime.batching import batches_by_token_budget

WARMUP_SENTENCES = 32
RESULT_PREFIX = "RESULT "

MODES = {
    "fp32": "float32, token cache off",
    "fp32-cache": "float32, token cache on (the default; starts empty)",
    "fp32-warm": "float32, token cache on and warm (every word seen before: a long run's steady state)",
    "int8": "int8 dynamic quantisation (quantize_int8), token cache on",
    "fp32-fused": "as fp32-cache, with recurrence 'fused' (one torch.lstm call per layer and direction; "
    "clip-free shapes only, e.g. default-noclip)",
}


# ---------------------------------------------------------------------------- one configuration
def char_cnn_inputs(
    model: Elmo, sentences: Sequence[Sequence[str]], batch_size: int, batch_tokens: int
) -> list[torch.Tensor]:
    """The char CNN's inputs in a run of `embed_sentences`, one tensor per batch.

    Same batches as `embed_sentences`. As in `BiLM._token_embedding`, a batch's real
    positions (`<S>` and `</S>` included, padding never) are reduced to their distinct
    words, which form one [distinct words, chars] tensor.
    """
    C = model.options.char_cnn.max_characters_per_token
    batches = batches_by_token_budget([len(s) for s in sentences], batch_tokens, max_batch_size=batch_size)
    return [
        torch.unique(
            torch.tensor(
                [word_to_char_ids(w, C) for i in batch for w in (BOS_TOKEN, *sentences[i], EOS_TOKEN)],
                dtype=torch.long,
            ),
            dim=0,
        )
        for batch in batches
    ]


def run_one(shape: str, batch_size: int, mode: str, sentences: list[list[str]], repeats: int = 1) -> dict[str, object]:
    """Measure one (shape, batch size, mode) in this process; meant for a fresh subprocess."""
    options = shape_options(shape)
    with tempfile.TemporaryDirectory(prefix="bench_core_") as workdir:
        model, load_s = build_model(options, Path(workdir))
    if mode == "fp32":
        model = rebuilt(model, token_cache_words=0)
    elif mode == "int8":
        model = quantize_int8(model)
    elif mode == "fp32-fused":
        model = rebuilt(model, "fused")
    warm = mode == "fp32-warm"
    cache = model.bilm.token_cache
    rss_loaded = current_rss_mb()
    # A budget that never binds: batch_size alone decides the batches.
    batch_tokens = batch_size * (max(len(s) for s in sentences) + 2)

    def embed(batch: Sequence[Sequence[str]]) -> None:
        embed_sentences(model, batch, layers="all", batch_size=batch_size, batch_tokens=batch_tokens)

    def char_cnn_only() -> None:
        with torch.inference_mode():
            for char_ids in char_cnn_ids:
                model.bilm.char_cnn(char_ids)

    def embed_timed() -> None:  # every timed run starts with an empty (or a warm) token cache
        if cache is not None and not warm:
            cache.clear()
        if cache is not None:
            cache.reset_stats()
        embed(sentences)

    embed(sentences[:WARMUP_SENTENCES])  # thread pool, oneDNN kernels, allocator; not timed
    gemm = gemm_gflops(2048, 2048, 2048)
    recurrent_gemm = gemm_gflops(32, 512, 16384, transpose_b=True)
    int8_gemm = int8_gemm_gflops(2048, 2048, 2048) if mode == "int8" else None
    if warm:
        embed(sentences)  # untimed: every word of the timed run is then in the cache
    seconds, others_load = best_of(repeats, embed_timed)
    hit_rate = cache.hit_rate if cache is not None else None
    char_cnn_ids = char_cnn_inputs(model, sentences, batch_size, batch_tokens)
    char_cnn_seconds, _ = best_of(repeats, char_cnn_only)

    tokens = sum(len(s) for s in sentences)
    positions = tokens + 2 * len(sentences)
    return {
        "shape": shape,
        "batch": batch_size,
        "mode": mode,
        "hit_rate": hit_rate,
        "int8_gemm_gflops": int8_gemm,
        "sentences": len(sentences),
        "tokens": tokens,
        "positions": positions,
        "seconds": seconds,
        "others_load": others_load,
        "char_cnn_seconds": char_cnn_seconds,
        "flops": flops_per_position(options) * positions,
        "char_cnn_words": sum(len(ids) for ids in char_cnn_ids),
        "token_layer_flops": token_layer_flops(options),
        "gemm_gflops": gemm,
        "recurrent_gemm_gflops": recurrent_gemm,
        "load_seconds": load_s,
        "rss_loaded_mb": rss_loaded,
        "peak_rss_mb": peak_rss_mb(),
        "threads": torch.get_num_threads(),
    }


def run_in_subprocess(shape: str, batch_size: int, mode: str, args: argparse.Namespace) -> dict[str, object] | None:
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_core",
        "--one",
        f"{shape}:{batch_size}:{mode}",
        "--sentences",
        str(args.sentences),
        "--data",
        str(args.data),
        "--threads",
        str(args.threads),
        "--repeats",
        str(args.repeats),
    ]
    # stderr passes through, so a failing child shows its traceback.
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, env=child_env())
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    print(f"  {shape} batch {batch_size} {mode}: the subprocess failed (exit status {done.returncode})")
    return None


# ---------------------------------------------------------------------------- report
def main_table(results: Sequence[dict]) -> str:
    rows = []
    for r in results:
        achieved = r["flops"] / r["seconds"] / 1e9
        hit = r.get("hit_rate")
        int8 = r.get("int8_gemm_gflops")
        rows.append(
            [
                r["shape"],
                str(r["batch"]),
                r.get("mode", "fp32-cache"),
                f"{r['tokens'] / r['seconds']:.0f}",
                f"{r['flops'] / r['tokens'] / 1e6:.1f}",
                f"{achieved:.1f}",
                f"{r['gemm_gflops']:.1f}",
                f"{achieved / r['gemm_gflops']:.3f}",
                "-" if hit is None else f"{100 * hit:.0f}%",
                "-" if int8 is None else f"{int8:.1f}",
                f"{r['peak_rss_mb']:.0f}",
            ]
        )
    header = [
        "shape",
        "batch",
        "mode",
        "tokens/s",
        "MFLOP/token",
        "GFLOP/s",
        "GEMM GFLOP/s",
        "ratio",
        "cache hits",
        "int8 GEMM GFLOP/s",
        "peak RSS MB",
    ]
    return format_table(header, rows)


def split_table(results: Sequence[dict]) -> str:
    rows = []
    for r in results:
        cnn_s = r["char_cnn_seconds"]
        rest_s = r["seconds"] - cnn_s
        rest_flops = r["flops"] - r["token_layer_flops"] * r["positions"]
        loaded, others = r["rss_loaded_mb"], r["others_load"]
        rows.append(
            [
                r["shape"],
                str(r["batch"]),
                r.get("mode", "fp32-cache"),
                f"{r['seconds']:.1f}",
                f"{cnn_s:.1f} ({100 * cnn_s / r['seconds']:.0f}%)",
                f"{100 * r['char_cnn_words'] / r['positions']:.0f}%",
                f"{r['token_layer_flops'] * r['char_cnn_words'] / cnn_s / 1e9:.1f}",
                f"{rest_flops / rest_s / 1e9:.1f}" if rest_s > 0 else "-",
                f"{r['recurrent_gemm_gflops']:.1f}",
                f"{r['load_seconds']:.1f}",
                "-" if loaded is None else f"{loaded:.0f}",
                "-" if others is None else f"{100 * others:.0f}%",
            ]
        )
    header = [
        "shape",
        "batch",
        "mode",
        "run s",
        "char CNN s",
        "distinct",
        "char CNN GFLOP/s",
        "LSTMs+rest GFLOP/s",
        "rec GEMM GFLOP/s",
        "import s",
        "RSS loaded MB",
        "others' load",
    ]
    return format_table(header, rows)


LEGEND = """\
Columns: tokens/s = real tokens (no <S>/</S>) per second of embed_sentences(layers="all");
MFLOP/token = flops_per_position x (tokens + 2 per sentence) / tokens; GFLOP/s = those
FLOPs / run time (spec-counted: the char CNN really runs once per distinct word of a batch,
so this can exceed the work done); GEMM GFLOP/s = fp32 torch.mm 2048^3 in the same process;
ratio = GFLOP/s / GEMM GFLOP/s (for int8 too: the fraction of the fp32 matmul rate);
cache hits = distinct words per batch answered by the token cache (cold at the start of the run);
int8 GEMM = the same 2048^3 product through an int8 dynamically quantised Linear;
peak RSS MB = ru_maxrss of the configuration's own subprocess.
Modes: fp32 = token cache off; fp32-cache = the default (cache on, starting empty);
fp32-warm = cache on and already holding every word (a long run's steady state);
int8 = quantize_int8(model), cache on, starting empty.
Split: char CNN s = model.bilm.char_cnn alone (char CNN + highway + projection) on the
distinct words of each batch, as the biLM runs it; distinct = those words / positions;
char CNN GFLOP/s counts the work really done; LSTMs+rest = LSTM FLOPs / (run - char CNN s),
the rest being char ids, torch.unique, batching and copies;
rec GEMM = [32, 512] x [512, 16384] fp32 torch.mm; import s = random init + save_bilm_tf +
fresh model + load_bilm_tf; RSS loaded MB = current RSS after the import; others' load =
share of all CPUs used by other processes during the timed run (a few % already slows it).
With --repeats R, run s and char CNN s are the fastest of R runs."""


# ---------------------------------------------------------------------------- entry point
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=512, help="sentences per configuration (default 512)")
    parser.add_argument(
        "--shapes",
        default="original,default",
        help="comma-separated PUBLISHED_OPTIONS names, or 'default' (the shipped model's shape)",
    )
    parser.add_argument("--batch-sizes", default="32,256", help="comma-separated sentences per batch")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {list(MODES)}")
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="enwiki2015 valid.txt.xz; relative paths are from the repository root (synthetic sentences when missing)",
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="time each run this many times and keep the fastest (default 1; raise it on a busy machine)",
    )
    parser.add_argument("--one", metavar="SHAPE:BATCH", help=argparse.SUPPRESS)  # internal: one config
    args = parser.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    unknown = [
        s
        for s in args.shapes
        if s.removesuffix("-noclip") not in PUBLISHED_OPTIONS and s.removesuffix("-noclip") != "default"
    ]
    if unknown or not args.shapes:
        parser.error(
            f"--shapes must name PUBLISHED_OPTIONS entries {sorted(PUBLISHED_OPTIONS)} or 'default', each "
            f"optionally with '-noclip'; got {unknown}"
        )
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or any(m not in MODES for m in args.modes):
        parser.error(f"--modes must be a comma-separated subset of {list(MODES)}; got {args.modes}")
    try:
        args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    except ValueError:
        parser.error(f"--batch-sizes must be comma-separated integers; got {args.batch_sizes!r}")
    if not args.batch_sizes or min(args.batch_sizes) <= 0 or min(args.sentences, args.threads, args.repeats) <= 0:
        parser.error("--batch-sizes, --sentences, --threads and --repeats must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sentences, source = load_sentences(args.data, args.sentences)

    if args.one:
        shape, batch, mode = args.one.split(":")
        print(RESULT_PREFIX + json.dumps(run_one(shape, int(batch), mode, sentences, args.repeats)), flush=True)
        return 0

    started = time.perf_counter()
    lengths = [len(s) for s in sentences]
    print("ELMo biLM CPU benchmark (python -m benchmarks.bench_core)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"input    {source}")
    print(
        f"         {len(sentences)} sentences, {sum(lengths)} tokens, "
        f"mean {sum(lengths) / len(lengths):.1f}, min {min(lengths)}, max {max(lengths)} tokens"
    )
    mflops = check_flops_formula()
    print(
        "MFLOP per position (docs/bilm_tf.md §11, checked): "
        + ", ".join(f"{shape} {value:.1f}" for shape, value in mflops.items())
    )
    print(flush=True)

    results = []
    for shape in args.shapes:
        for batch_size in args.batch_sizes:
            for mode in args.modes:
                result = run_in_subprocess(shape, batch_size, mode, args)
                if result is not None:
                    results.append(result)
                    print(
                        f"  {shape} batch {batch_size} {mode}: {result['tokens'] / result['seconds']:.0f} "
                        f"tokens/s ({result['seconds']:.1f} s)",
                        flush=True,
                    )
    print()
    if results:
        print(main_table(results))
        print()
        print(split_table(results))
        print()
        print(LEGEND)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s; load average at the end {load_average()}")
    expected = len(args.shapes) * len(args.batch_sizes) * len(args.modes)
    return 0 if len(results) == expected else 1


if __name__ == "__main__":
    sys.exit(main())
