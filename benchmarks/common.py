"""What the benchmark scripts share: input text, shapes, the spec's FLOP count, timing loops, the machine.

Each helper is defined here once and imported as `from benchmarks.common import ...`; the
scripts run as modules from the repository root (`python -m benchmarks.bench_core`). A
child process a script starts gets the repository root on its path from `child_env()`.
"""

from __future__ import annotations

import dataclasses
import gc
import lzma
import math
import os
import platform
import random
import re
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from elmo_core import PUBLISHED_OPTIONS, BiLM, BiLMOptions, Elmo, load_bilm_tf, save_bilm_tf
from elmo_core.apps.training.model import BiLMLanguageModel
from elmo_core.files.model_folder import _elmo_settings, default_model_dir, read_model_config
from elmo_core.runtime.parts import serving_parts
from elmo_core.runtime.quantization import quantize_linear_layers

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path("../shared/data/lm/enwiki2015/valid.txt.xz")  # relative to REPO_ROOT
WIKIGOLD = Path("../shared/data/ner/wikigold/wikigold.conll.txt")  # relative to REPO_ROOT; CC BY
SEED = 0
MIN_TOKENS, MAX_TOKENS = 5, 60  # sentence lengths load_sentences keeps
GEMM_SECONDS = 0.5

# docs/bilm_tf.md §11: MFLOP per position of the published shapes.
SPEC_MFLOP_PER_POSITION = {"original": 204.3, "medium": 73.2, "small": 44.4}


def from_repo(path: Path) -> Path:
    """`path` as given when absolute, else relative to the repository root (how every `--data` reads)."""
    return path if path.is_absolute() else (REPO_ROOT / path).resolve()


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment plus `overrides`, with the repository root first on PYTHONPATH.

    So that a child process (`python -c CODE`, `python -m benchmarks.x`) imports `benchmarks`
    wherever it starts.
    """
    env = {**os.environ, **overrides}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


# ---------------------------------------------------------------------------- shapes and FLOPs
def shape_options(shape: str) -> BiLMOptions:
    """A `PUBLISHED_OPTIONS` shape, "default" (the shipped default model's shape) or "wide"
    (the default shape with LSTM cell 1024 and projection 256, the char CNN projecting to 256).

    A "-noclip" suffix switches `cell_clip` and `proj_clip` off (such cells run as fused
    `torch.lstm` calls; see `elmo_core.model.recurrence`).
    """
    if shape.endswith("-noclip"):
        options = shape_options(shape.removesuffix("-noclip"))
        return dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    if shape == "default":
        return read_model_config(default_model_dir())[0]
    if shape == "wide":
        options = shape_options("default")
        return dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, dim=1024, projection_dim=256))
    return PUBLISHED_OPTIONS[shape]


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
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")  # naive: also splits after "Dr." or "U.S."


def enwiki_sentences(path: Path, min_tokens: int = MIN_TOKENS, max_tokens: int = MAX_TOKENS) -> Iterator[list[str]]:
    """Sentences of `min_tokens..max_tokens` whitespace tokens of an xz text, in file order (naive split)."""
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            for piece in _SENTENCE_END.split(line.strip()):
                tokens = piece.split()
                if min_tokens <= len(tokens) <= max_tokens:
                    yield tokens


def conll_sentences(path: Path) -> Iterator[list[tuple[str, str]]]:
    """Sentences of a CoNLL file as (token, tag) pairs: first and last column, blank lines between."""
    sentence: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if sentence:
                    yield sentence
                sentence = []
            else:
                sentence.append((fields[0], fields[-1]))
    if sentence:
        yield sentence


def load_sentences(
    data: Path, count: int, min_tokens: int = MIN_TOKENS, max_tokens: int = MAX_TOKENS
) -> tuple[list[list[str]], str]:
    """`count` sentences of `min_tokens..max_tokens` tokens, the same on every call.

    Sampled with SEED from the enwiki text at `data` (relative: from the repository root),
    or synthetic where it is missing or too small. Returns the sentences and a description
    of where they came from, naming `data` as given (no machine's folders in a report).
    """
    rng = random.Random(SEED)
    if from_repo(data).is_file():
        pool = list(enwiki_sentences(from_repo(data), min_tokens, max_tokens))
        if len(pool) >= count:
            return rng.sample(pool, count), f"{data} ({len(pool)} sentences of {min_tokens}..{max_tokens} tokens)"
    sentences = synthetic_sentences(rng, count, min_tokens, max_tokens)
    return sentences, f"synthetic (seed {SEED}; {data} not found or too small)"


def synthetic_sentences(
    rng: random.Random, count: int, min_tokens: int = MIN_TOKENS, max_tokens: int = MAX_TOKENS
) -> list[list[str]]:
    """Zipf-distributed made-up words; gamma-distributed lengths with mean about 25."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=min(1 + int(rng.expovariate(0.25)), 20))) for _ in range(5000)]
    weights = [1.0 / rank for rank in range(1, len(vocab) + 1)]
    sentences = []
    while len(sentences) < count:
        length = round(rng.gammavariate(4.0, 6.25))
        if min_tokens <= length <= max_tokens:
            sentences.append(rng.choices(vocab, weights, k=length))
    return sentences


# ---------------------------------------------------------------------------- timing
def seconds_per_call(run: Callable[[], object], *, seconds: float, sync: Callable[[], None] = lambda: None) -> float:
    """Mean wall seconds of `run()`, over enough calls (after one warm-up) to last at least `seconds`.

    `sync` waits for queued device work (`torch.cuda.synchronize` on a GPU).
    """
    run()
    sync()
    start = time.perf_counter()
    run()
    sync()
    reps = max(1, math.ceil(1.2 * seconds / max(time.perf_counter() - start, 1e-6)))
    while True:
        start = time.perf_counter()
        for _ in range(reps):
            run()
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / reps
        reps *= 2


def gemm_gflops(
    m: int,
    k: int,
    n: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    transpose_b: bool = False,
    seconds: float = GEMM_SECONDS,
) -> float:
    """`torch.mm` rate of an [m, k] x [k, n] product of `dtype` on `device`, in GFLOP/s (2 m k n per product).

    With `transpose_b`, B is stored [n, k] and passed as a transposed view, which is how
    `F.linear` multiplies by a `Linear` weight. TF32 follows torch's settings.
    """
    generator = torch.Generator().manual_seed(SEED)
    a = torch.randn(m, k, generator=generator).to(device, dtype)
    b = torch.randn(n, k, generator=generator).to(device, dtype).t() if transpose_b else None
    b = torch.randn(k, n, generator=generator).to(device, dtype) if b is None else b
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    return 2 * m * k * n / seconds_per_call(lambda: torch.mm(a, b), seconds=seconds, sync=sync) / 1e9


def int8_gemm_gflops(m: int, k: int, n: int, *, seconds: float = GEMM_SECONDS) -> float:
    """Rate of an [m, k] x [k, n] product through an int8 dynamically quantised Linear, in GFLOP/s.

    The kernel `quantize_int8` gives the LSTMs. Counted as 2 m k n operations per product,
    like `gemm_gflops`; includes quantising the input on the fly, as the model does.
    """
    torch.manual_seed(SEED)
    linear = quantize_linear_layers(torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)))
    x = torch.randn(m, k)
    with torch.inference_mode():
        return 2 * m * k * n / seconds_per_call(lambda: linear(x), seconds=seconds) / 1e9


def machine_busy_seconds() -> float | None:
    """CPU seconds all processes have used since boot (steal included; /proc/stat), or None without it."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and of its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(run: Callable[[], T]) -> tuple[T, float, float | None]:
    """`run()` once: its result, its wall seconds, and the CPUs' worth of work other processes did meanwhile.

    The last is CPU seconds of the whole machine (/proc/stat) minus this process's and its
    waited-for children's, over the wall seconds (None where /proc is missing). With
    OpenMP threads on every core, a few percent of other work can slow a run a lot.
    """
    busy, own = machine_busy_seconds(), _own_cpu_seconds()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    busy_after = machine_busy_seconds()
    if busy is None or busy_after is None:
        return result, seconds, None
    return result, seconds, max(0.0, (busy_after - busy) - (_own_cpu_seconds() - own)) / seconds


def best_of(repeats: int, run: Callable[[], object]) -> tuple[float, float | None]:
    """Time `run` `repeats` times; the fastest wall seconds, and the share of all CPUs others used then."""
    timings = [timed(run)[1:] for _ in range(repeats)]
    seconds, others = min(timings, key=lambda timing: timing[0])
    return seconds, None if others is None else others / (os.cpu_count() or 1)


# ---------------------------------------------------------------------------- the machine
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def simd_flags() -> list[str]:
    """The CPU's AVX, FMA and AMX flags, sorted (what decides the GEMM rates); empty without /proc/cpuinfo."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return sorted({f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "fma", "amx"))})
    except OSError:
        pass
    return []


def load_average() -> str:
    """1/5/15-minute load: other work on the machine shows up here, not in the tables."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_line() -> str:
    """One line for a report's header: CPU model, CPUs, SIMD flags, torch and its threads, load average."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"cpu      {cpu_model()} ({os.cpu_count()} logical CPUs, {usable} usable); "
        f"flags {' '.join(simd_flags()) or 'unknown'}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"Python {platform.python_version()}; load average {load_average()}"
    )


def current_rss_mb() -> float | None:
    """This process's resident memory now (/proc/self/statm), in MiB; None elsewhere."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def own_peak_rss_mb() -> float | None:
    """Peak resident memory of this process's own address space (VmHWM), in MiB; None without /proc.

    Unlike `ru_maxrss` (`peak_rss_mb`), which Linux keeps across exec, it starts afresh in a
    child process, so a child does not report its parent's peak.
    """
    try:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_mb() -> float:
    """This process's peak resident memory (`ru_maxrss`), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


# ---------------------------------------------------------------------------- report
def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain text: first column left-aligned, the others right-aligned."""
    widths = [max(len(row[k]) for row in (header, *rows)) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def token_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each pair of vectors along the last axis of two [..., dim] arrays."""
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def build_model(options: BiLMOptions, workdir: Path) -> tuple[Elmo, float]:
    """A fresh `Elmo` (no runtime parts) filled from a random bilm-tf hdf5 file in `workdir`; also the seconds it took.

    The weights go through the published layout (`save_bilm_tf`, `load_bilm_tf`), so the
    import path is exercised too. Random weights cost the same FLOPs as trained ones.
    """
    start = time.perf_counter()
    torch.manual_seed(SEED)
    weight_file = workdir / "weights.hdf5"
    source = Elmo(options, dropout=0.0)
    save_bilm_tf(source, weight_file)
    del source  # so that two models never count together in a peak RSS
    gc.collect()
    model = Elmo(options, dropout=0.0)
    load_bilm_tf(model, weight_file)
    return model.eval(), time.perf_counter() - start


def rebuilt(
    model: Any, recurrence: Any = "auto", token_cache_words: int | None = None, *, share_cache: bool = False
) -> Any:
    """The same `Elmo`, `BiLM` or `BiLMLanguageModel` (weights, settings, device, mode), built
    with the runtime's parts of `recurrence` (a mode or a `Recurrence`; None: no parts, the
    reference) and its own cache size unless given (`share_cache`: the model's very cache)."""
    bilm = model if isinstance(model, BiLM) else model.bilm
    if token_cache_words is None:
        token_cache_words = bilm.token_cache.max_words if bilm.token_cache is not None else 0
    parts = serving_parts(
        recurrence=recurrence if isinstance(recurrence, str) else "auto", token_cache_words=token_cache_words
    )
    if recurrence is None:
        parts = {}
    elif not isinstance(recurrence, str):
        parts["recurrence"] = recurrence
    if share_cache and parts:
        parts["token_cache"] = bilm.token_cache
    device = next(model.parameters()).device
    new: torch.nn.Module
    with torch.random.fork_rng(devices=[]):  # building draws weights: leave the caller's random stream as it was
        if isinstance(model, Elmo):
            new = Elmo(model.options, **_elmo_settings(model), **parts)
        elif isinstance(model, BiLMLanguageModel):
            cutoffs = model.softmax.cutoffs[:-1]
            new = BiLMLanguageModel(
                model.options,
                model.vocab_size,
                dropout=model.dropout,
                cutoffs=cutoffs,
                div_value=model.softmax.div_value,
                recurrence=recurrence,
            )
        else:
            new = BiLM(
                bilm.options,
                stateful=bilm.stateful,
                keep_sentence_boundaries=bilm.keep_sentence_boundaries,
                dropout=bilm.forward_layers.dropout,
                **parts,
            )
    new.load_state_dict(model.state_dict())
    for mine, theirs in zip(new.parameters(), model.parameters()):
        mine.requires_grad_(theirs.requires_grad)
    return new.to(device).train(model.training)


def make_step(lm: BiLMLanguageModel, optimizer: torch.optim.Optimizer, precision: str, device: torch.device):
    """One training step as `Trainer.train_step` takes it (mean of both directions' losses)."""
    dtype = {"bf16": torch.bfloat16, "fp32": None}[precision]

    def step(batch) -> float:  # noqa: ANN001
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = lm(batch.char_ids, batch.mask, batch.targets)
        optimizer.zero_grad(set_to_none=True)
        loss = (out.forward_loss + out.backward_loss) / 2
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 10.0)
        optimizer.step()
        return loss.item()

    return step
