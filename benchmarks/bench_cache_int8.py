"""Token-cache hit rates on real text, and int8 against float32 on the shipped model.

Two measurements with the shipped default model (`elmo_core/default_model`), all in
one process:

1. Token cache: the share of distinct words per batch that the layer-0 cache answers,
   streaming a corpus through `embed_sentences` at batch 32 from an empty cache with the
   default bound (50,000 word types), on WikiGold (CoNLL format, one token per line) and
   on the enwiki2015 validation text. The hit rate is per distinct word of a batch, which
   is what the char CNN would otherwise compute.
2. int8: `quantize_int8(model)` against the float32 model on N real sentences (default
   2,000 enwiki2015 validation sentences): per layer (0 = char CNN, 1..L = LSTM layers)
   and for the scalar mix, the mean and minimum cosine similarity per token and the
   maximum absolute difference; and the speed of both, timed in this run (tokens/s, with
   the token cache on for both, as users run them).

Nothing is asserted; nothing is downloaded. Usage (from the repository root):

    .venv/bin/python -m benchmarks.bench_cache_int8
    .venv/bin/python -m benchmarks.bench_cache_int8 --sentences 500
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    DEFAULT_DATA,
    SEED,
    WIKIGOLD,
    conll_sentences,
    enwiki_sentences,
    format_table,
    from_repo,
    machine_line,
    token_cosines,
)
from elmo_core import embed_sentences, load_model_folder, quantize_int8
from elmo_core.files.model_folder import default_model_dir

ENWIKI_VALID = from_repo(DEFAULT_DATA)
BATCH = 32


def conll_tokens(path: Path) -> list[list[str]]:
    """The tokens of each sentence of a CoNLL file."""
    return [[token for token, _ in sentence] for sentence in conll_sentences(path)]


def enwiki_all(path: Path) -> list[list[str]]:
    """Every sentence of 1..100 whitespace tokens of the enwiki text, in file order."""
    return list(enwiki_sentences(path, 1, 100))


def hit_rate(model: torch.nn.Module, sentences: Sequence[Sequence[str]]) -> tuple[float, int]:
    """Hit rate of a cold cache over `sentences` at batch 32, and the words it ends with."""
    cache = model.bilm.token_cache
    cache.clear()
    embed_sentences(model, sentences, layers=0, batch_size=BATCH)
    return cache.hit_rate, len(cache)


def timed_embed(model: torch.nn.Module, sentences: Sequence[Sequence[str]]) -> tuple[list[np.ndarray], float]:
    if model.bilm.token_cache is not None:
        model.bilm.token_cache.clear()
    start = time.perf_counter()
    vectors = embed_sentences(model, sentences, layers="all", batch_size=BATCH)
    return vectors, time.perf_counter() - start


def compare(reference: list[np.ndarray], other: list[np.ndarray], model: torch.nn.Module) -> list[list[str]]:
    """Rows of (layer, mean cosine, min cosine, max |diff|, max |reference|)."""
    ref = np.concatenate(reference, axis=1)  # [layers, tokens, dim]
    got = np.concatenate(other, axis=1)
    mix = model.scalar_mixes[0]  # the same (float32) mix for both: not quantised
    weights = mix.normalized_weights.float().numpy()
    gamma = float(mix.gamma.detach())
    named = [(f"layer {k}", ref[k], got[k]) for k in range(ref.shape[0])]
    named.append(("mix", gamma * np.tensordot(weights, ref, 1), gamma * np.tensordot(weights, got, 1)))
    rows = []
    for name, a, b in named:
        cos = token_cosines(a, b)
        rows.append(
            [
                name,
                f"{cos.mean():.5f}",
                f"{cos.min():.5f}",
                f"{np.abs(a - b).max():.4f}",
                f"{np.abs(a).max():.2f}",
            ]
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2000, help="sentences for the int8 comparison")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print("Token cache and int8 (python -m benchmarks.bench_cache_int8)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    model = load_model_folder(default_model_dir())
    print("model    elmo_core/default_model (shipped default)\n")

    rows = []
    for name, path, reader in (
        ("WikiGold", from_repo(WIKIGOLD), conll_tokens),
        ("enwiki2015 valid", ENWIKI_VALID, enwiki_all),
    ):
        if not path.is_file():
            print(f"{name}: {path} not found, skipped")
            continue
        sentences = list(reader(path))
        rate, words = hit_rate(model, sentences)
        tokens = sum(map(len, sentences))
        rows.append([name, f"{len(sentences):,}", f"{tokens:,}", f"{100 * rate:.1f}%", f"{words:,}"])
    if rows:
        print("Token cache hit rate (cold start, batch 32, default bound 50,000 word types):")
        print(format_table(["corpus", "sentences", "tokens", "hit rate", "words cached"], rows))
        print("hit rate = distinct words per batch answered by the cache / all distinct words per batch\n")

    if not ENWIKI_VALID.is_file():
        print(f"{ENWIKI_VALID} not found: no int8 comparison")
        return 0
    pool = enwiki_all(ENWIKI_VALID)
    sentences = random.Random(SEED).sample(pool, min(args.sentences, len(pool)))
    tokens = sum(map(len, sentences))
    quantized = quantize_int8(model)
    timed_embed(model, sentences[:BATCH]), timed_embed(quantized, sentences[:BATCH])  # warm-up
    fp32, fp32_s = timed_embed(model, sentences)
    int8, int8_s = timed_embed(quantized, sentences)
    print(
        f"int8 against float32 on {len(sentences):,} enwiki2015 validation sentences "
        f"({tokens:,} tokens), batch {BATCH}:"
    )
    print(format_table(["layer", "mean cos", "min cos", "max |diff|", "max |fp32|"], compare(fp32, int8, model)))
    print(
        f"\nspeed: float32 {tokens / fp32_s:,.0f} tokens/s, int8 {tokens / int8_s:,.0f} tokens/s, "
        f"int8 / float32 = {fp32_s / int8_s:.2f}x (token cache on for both, cold at the start)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
