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

    .venv/bin/python benchmarks/bench_core.py
    .venv/bin/python benchmarks/bench_core.py --shapes small --batch-sizes 32 --sentences 256
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import lzma
import math
import os
import platform
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from elmo_core import (
    PUBLISHED_OPTIONS,
    BiLMOptions,
    Elmo,
    batches_by_token_budget,
    embed_sentences,
    load_bilm_tf,
    quantize_int8,
    read_model_config,
    save_bilm_tf,
    set_recurrence,
    set_token_cache,
    word_to_char_ids,
)
from elmo_core.files.model_folder import default_model_dir
from elmo_core.model.characters import BOS_TOKEN, EOS_TOKEN
from elmo_core.runtime.quantization import quantize_linear_layers

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path("../shared/data/lm/enwiki2015/valid.txt.xz")  # relative to REPO_ROOT
SEED = 0
MIN_TOKENS, MAX_TOKENS = 5, 60  # sentence lengths kept from the data
WARMUP_SENTENCES = 32
GEMM_SECONDS = 0.5

# docs/bilm_tf.md §11: MFLOP per position of the published shapes.
SPEC_MFLOP_PER_POSITION = {"original": 204.3, "medium": 73.2, "small": 44.4}

RESULT_PREFIX = "RESULT "

MODES = {
    "fp32": "float32, token cache off",
    "fp32-cache": "float32, token cache on (the default; starts empty)",
    "fp32-warm": "float32, token cache on and warm (every word seen before: a long run's steady state)",
    "int8": "int8 dynamic quantisation (quantize_int8), token cache on",
    "fp32-fused": "as fp32-cache, with recurrence 'fused' (one torch.lstm call per layer and direction; "
    "clip-free shapes only, e.g. default-noclip)",
}


def shape_options(shape: str) -> BiLMOptions:
    """A `PUBLISHED_OPTIONS` shape, or "default": the shipped default model's shape.

    A "-noclip" suffix switches `cell_clip` and `proj_clip` off (such cells run as fused
    `torch.lstm` calls; see `elmo_core.runtime.recurrence`).
    """
    if shape.endswith("-noclip"):
        options = shape_options(shape.removesuffix("-noclip"))
        return dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    if shape == "default":
        return read_model_config(default_model_dir())[0]
    return PUBLISHED_OPTIONS[shape]


# ---------------------------------------------------------------------------- FLOPs
def flops_breakdown(options: BiLMOptions) -> dict[str, int]:
    """Forward FLOPs per position (word or boundary token), by part; docs/bilm_tf.md §11.

    Multiply-accumulates of the matrix and convolution work only, times 2. Element-wise
    gates, clips and the max-pool are O(width) and ignored. With C characters per token,
    embedding size E, F filters, projection P, cell size D and L layers per direction:

        char CNN          sum over banks (C - w + 1) * w * E * n
        highway           n_highway * F * 2F      (transform and gate halves)
        projection        F * P                   (absent when F == P)
        LSTM input        2L * P * 4D             (every layer reads a P-wide input)
        LSTM recurrent    2L * P * 4D
        LSTM projection   2L * D * P
    """
    cc, lstm = options.char_cnn, options.lstm
    C, E, F, P, D = cc.max_characters_per_token, cc.embedding_dim, cc.n_filters, lstm.projection_dim, lstm.dim
    cells = 2 * lstm.n_layers  # layers x directions
    macs = {
        "char_cnn": sum((C - width + 1) * width * E * count for width, count in cc.filters),
        "highway": cc.n_highway * F * 2 * F,
        "projection": F * P if F != P else 0,
        "lstm_input": cells * P * 4 * D,
        "lstm_recurrent": cells * P * 4 * D,
        "lstm_projection": cells * D * P,
    }
    return {part: 2 * mac for part, mac in macs.items()}


def flops_per_position(options: BiLMOptions) -> int:
    """Total forward FLOPs per position (see `flops_breakdown`)."""
    return sum(flops_breakdown(options).values())


def token_layer_flops(options: BiLMOptions) -> int:
    """FLOPs per position of `model.bilm.char_cnn` (char CNN + highway + projection)."""
    parts = flops_breakdown(options)
    return parts["char_cnn"] + parts["highway"] + parts["projection"]


def check_flops_formula() -> dict[str, float]:
    """MFLOP per position of each published shape; raise if one disagrees with the spec."""
    mflops = {}
    for shape, expected in SPEC_MFLOP_PER_POSITION.items():
        got = flops_per_position(PUBLISHED_OPTIONS[shape]) / 1e6
        if abs(got - expected) > 0.1:
            raise AssertionError(
                f"flops_per_position({shape}) = {got:.2f} MFLOP, but docs/bilm_tf.md §11 says {expected}."
            )
        mflops[shape] = got
    return mflops


# ---------------------------------------------------------------------------- input
def load_sentences(data: Path, count: int) -> tuple[list[list[str]], str]:
    """`count` sentences of MIN_TOKENS..MAX_TOKENS tokens, the same on every call.

    Returns the sentences and a description of where they came from.
    """
    rng = random.Random(SEED)
    if data.is_file():
        pool = list(_read_sentences(data))
        if len(pool) >= count:
            return rng.sample(pool, count), f"{data} ({len(pool)} sentences of {MIN_TOKENS}..{MAX_TOKENS} tokens)"
    return _synthetic_sentences(rng, count), f"synthetic (seed {SEED}; {data} not found or too small)"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")  # naive: also splits after "Dr." or "U.S."


def _read_sentences(path: Path):  # noqa: ANN202
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            for piece in _SENTENCE_END.split(line.strip()):
                tokens = piece.split()
                if MIN_TOKENS <= len(tokens) <= MAX_TOKENS:
                    yield tokens


def _synthetic_sentences(rng: random.Random, count: int) -> list[list[str]]:
    """Zipf-distributed made-up words; gamma-distributed lengths with mean about 25."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=min(1 + int(rng.expovariate(0.25)), 20))) for _ in range(5000)]
    weights = [1.0 / rank for rank in range(1, len(vocab) + 1)]
    sentences = []
    while len(sentences) < count:
        length = round(rng.gammavariate(4.0, 6.25))
        if MIN_TOKENS <= length <= MAX_TOKENS:
            sentences.append(rng.choices(vocab, weights, k=length))
    return sentences


# ---------------------------------------------------------------------------- machine
def gemm_gflops(m: int, k: int, n: int, *, transpose_b: bool = False, seconds: float = GEMM_SECONDS) -> float:
    """fp32 `torch.mm` rate of an [m, k] x [k, n] product, timed for at least `seconds`.

    With `transpose_b`, B is stored [n, k] and passed as a transposed view, which is how
    `F.linear` multiplies by a `Linear` weight.
    """
    generator = torch.Generator().manual_seed(SEED)
    a = torch.randn(m, k, generator=generator)
    b = torch.randn(n, k, generator=generator).t() if transpose_b else torch.randn(k, n, generator=generator)
    torch.mm(a, b)  # warm-up
    start = time.perf_counter()
    torch.mm(a, b)
    reps = max(1, math.ceil(1.2 * seconds / max(time.perf_counter() - start, 1e-6)))
    while True:
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2 * m * k * n * reps / elapsed / 1e9
        reps *= 2


def int8_gemm_gflops(m: int, k: int, n: int, *, seconds: float = GEMM_SECONDS) -> float:
    """Rate of an [m, k] x [k, n] product through an int8 dynamically quantised Linear.

    Counted as 2 m k n operations per product, like the fp32 rate; includes quantising
    the input on the fly, as the model does.
    """
    torch.manual_seed(SEED)
    linear = quantize_linear_layers(torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)))
    x = torch.randn(m, k)
    with torch.inference_mode():
        linear(x)
        reps = 1
        while True:
            start = time.perf_counter()
            for _ in range(reps):
                linear(x)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return 2 * m * k * n * reps / elapsed / 1e9
            reps *= 2


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """1/5/15-minute load: other work on the machine shows up here, not in the table."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def current_rss_mb() -> float | None:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


# ---------------------------------------------------------------------------- one configuration
def build_model(options: BiLMOptions, workdir: Path) -> tuple[Elmo, float]:
    """A fresh `Elmo` filled from a random bilm-tf hdf5 file; also the seconds it took."""
    start = time.perf_counter()
    torch.manual_seed(SEED)
    weight_file = workdir / "weights.hdf5"
    source = Elmo(options, dropout=0.0)
    save_bilm_tf(source, weight_file)
    del source  # so that two models never count together in the peak RSS
    gc.collect()
    model = Elmo(options, dropout=0.0)
    load_bilm_tf(model, weight_file)
    return model.eval(), time.perf_counter() - start


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


def best_of(repeats: int, run: Callable[[], object]) -> tuple[float, float | None]:
    """Time `run` `repeats` times; the fastest wall seconds and the others' load then.

    The load is the share of all CPUs that *other* processes used while it ran (from
    /proc/stat minus this process's CPU time; None where /proc is missing). With
    OpenMP threads on every core, a few percent of other work can slow a run a lot.
    """
    timings = []
    for _ in range(repeats):
        busy, own = _machine_busy_seconds(), time.process_time()
        start = time.perf_counter()
        run()
        seconds = time.perf_counter() - start
        others = None
        if busy is not None:
            busy_after = _machine_busy_seconds()
            used = (busy_after - busy) - (time.process_time() - own)  # type: ignore[operator]
            others = max(0.0, used) / (seconds * (os.cpu_count() or 1))
        timings.append((seconds, others))
    return min(timings, key=lambda timing: timing[0])


def _machine_busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (steal included), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def run_one(shape: str, batch_size: int, mode: str, sentences: list[list[str]], repeats: int = 1) -> dict[str, object]:
    """Measure one (shape, batch size, mode) in this process; meant for a fresh subprocess."""
    options = shape_options(shape)
    with tempfile.TemporaryDirectory(prefix="bench_core_") as workdir:
        model, load_s = build_model(options, Path(workdir))
    if mode == "fp32":
        set_token_cache(model, 0)
    elif mode == "int8":
        model = quantize_int8(model)
    elif mode == "fp32-fused":
        set_recurrence(model, "fused")
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
        str(Path(__file__).resolve()),
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
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    print(f"  {shape} batch {batch_size} {mode}: the subprocess failed (exit status {done.returncode})")
    return None


# ---------------------------------------------------------------------------- report
def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain text: first column left-aligned, the others right-aligned."""
    widths = [max(len(row[k]) for row in (header, *rows)) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])


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
    if not args.data.is_absolute():
        args.data = (REPO_ROOT / args.data).resolve()
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
    print("ELMo biLM CPU benchmark (benchmarks/bench_core.py)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch    {torch.__version__}, {args.threads} threads; Python {platform.python_version()}")
    print(f"cpu      {cpu_model()} ({os.cpu_count()} logical CPUs); load average {load_average()}")
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
