"""The spaCy `elmo` component against the core, on the same WikiGold sentences.

What is measured, in one process, on the same sentences and the same model:

- core tokens/s: `embed_sentences(model, sentences, layers="all", batch_tokens=B)`, the
  core's convenience path (sorting, batching, char ids, both LSTM stacks, numpy copies).
- spaCy tokens/s: `nlp.pipe(docs)` with `spacy.blank("en")` + `elmo` (same budget B),
  over Docs built beforehand from the same tokens, so both sides get identical tokens
  and neither pays for tokenisation. The component writes every layer to
  `doc._.elmo_layers`, the mix to `doc.tensor`, and the similarity hooks.
- the ratio spaCy / core (the issue asks for at least 0.9).
- RSS growth after the first 200 Docs: in a fresh process, one `nlp.pipe` over all the
  Docs; the current RSS when Doc 200 has been yielded against the RSS after the last.
  Docs are dropped as they come, so growth would be a leak (or heap fragmentation, see
  `spacy_elmo.pipeline_component.release_free_memory`). The core's `iter_embeddings`
  is measured the same way, for comparison.
- for information, `nlp.pipe(texts)` from raw text (spaCy's tokeniser included; its
  tokens may differ slightly from WikiGold's).

The sides take turns on chunks of `--chunk` sentences (rotating who goes first), so
that a shared machine's changing load falls on all of them alike; each side sorts and
batches within a chunk the same way. The model has random weights in a published
shape (`--shape`, default "small"), or is a model folder (`--model`). WikiGold has
1,696 sentences; they are cycled to reach `--sentences` (default 2,000). Only ratios are
printed; there are no thresholds.

    .venv/bin/python -m benchmarks.bench_spacy --threads 1
    .venv/bin/python -m benchmarks.bench_spacy --shape original --sentences 500

With --threads 1 the default run takes about 3 minutes on a 2-core CPU. On a machine
that other jobs keep busy, torch's multithreaded kernels can be several times slower
than one thread and vary from minute to minute; compare the ratios, not the rates.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import spacy
import torch
from spacy.tokens import Doc

from benchmarks.common import (
    WIKIGOLD,
    child_env,
    conll_sentences,
    current_rss_mb,
    from_repo,
    load_average,
    machine_line,
)
from elmo_core import PUBLISHED_OPTIONS, Elmo, embed_sentences, iter_embeddings, load_model_folder, save_model_folder

DEFAULT_DATA = WIKIGOLD
WARMUP_SENTENCES = 32
RSS_AFTER_DOCS = 200
RESULT_PREFIX = "RESULT "


def read_wikigold(path: Path, count: int) -> list[list[str]]:
    """`count` tokenised sentences from a CoNLL file (cycled if it has fewer)."""
    sentences = [[token for token, _ in sentence] for sentence in conll_sentences(path)]
    if not sentences:
        raise SystemExit(f"no sentences in {path}")
    return [sentences[i % len(sentences)] for i in range(count)]


class Side:
    """One way of embedding the sentences, timed chunk by chunk."""

    def __init__(self, name: str, run) -> None:  # noqa: ANN001 - run(chunk_indices) -> tokens
        self.name, self.run = name, run
        self.seconds, self.tokens = 0.0, 0

    def time_chunk(self, chunk: range) -> None:
        start = time.perf_counter()
        self.tokens += self.run(chunk)
        self.seconds += time.perf_counter() - start

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def compare(sides: list[Side], num_sentences: int, chunk_size: int) -> None:
    """Run the sides on the same chunks in turn, rotating who goes first.

    On a shared machine the load changes over minutes; taking turns chunk by chunk gives
    every side the same conditions, which one long run per side would not.
    """
    chunks = [range(i, min(i + chunk_size, num_sentences)) for i in range(0, num_sentences, chunk_size)]
    for k, chunk in enumerate(chunks):
        for side in sides[k % len(sides) :] + sides[: k % len(sides)]:
            side.time_chunk(chunk)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="small", help=f"random weights of this shape: {sorted(PUBLISHED_OPTIONS)}")
    parser.add_argument("--model", type=Path, help="a model folder instead of random weights")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-tokens", type=int, default=4096, help="padded positions per biLM batch, both sides")
    parser.add_argument("--batch-size", type=int, default=1000, help="Docs per nlp.pipe batch (spaCy's default)")
    parser.add_argument("--chunk", type=int, default=250, help="sentences per turn (the sides take turns)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rss-only", choices=("spacy", "core"), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    if args.model is None and args.shape not in PUBLISHED_OPTIONS:
        parser.error(f"--shape must be one of {sorted(PUBLISHED_OPTIONS)}")
    args.data = from_repo(args.data)
    if not args.data.is_file():
        parser.error(f"WikiGold not found at {args.data}; pass --data")
    return args


def build_nlp(folder: Path, batch_tokens: int):  # noqa: ANN201
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(folder), "max_batch_tokens": batch_tokens}})
    nlp.initialize()
    return nlp


def measure_rss(side: str, folder: Path, sentences: list[list[str]], args: argparse.Namespace) -> dict:
    """RSS after the 200th and the last output of one side, in this (fresh) process."""
    marks: dict[str, float | None] = {}
    if side == "core":
        model = load_model_folder(folder, dropout=0.0).eval()
        outputs = iter_embeddings(model, sentences, layers="all", batch_tokens=args.batch_tokens)
    else:
        nlp = build_nlp(folder, args.batch_tokens)
        # Docs made lazily, so that nothing but nlp.pipe's current batch holds them.
        outputs = nlp.pipe((Doc(nlp.vocab, words=words) for words in sentences), batch_size=args.batch_size)
    for i, _ in enumerate(outputs, 1):  # each output is dropped at once
        if i == RSS_AFTER_DOCS:
            marks["early"] = current_rss_mb()
    marks["end"] = current_rss_mb()
    return marks


def rss_in_subprocess(side: str, folder: Path, args: argparse.Namespace) -> dict | None:
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_spacy",
        "--rss-only",
        side,
        "--model",
        str(folder),
        "--sentences",
        str(args.sentences),
        "--batch-tokens",
        str(args.batch_tokens),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--data",
        str(args.data),
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, env=child_env())
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    print(f"  the RSS run of {side} failed (exit status {done.returncode})")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sentences = read_wikigold(args.data, args.sentences)
    if args.rss_only:
        print(RESULT_PREFIX + json.dumps(measure_rss(args.rss_only, args.model, sentences, args)), flush=True)
        return 0
    num_tokens = sum(len(s) for s in sentences)
    print("spaCy `elmo` component against the core (python -m benchmarks.bench_spacy)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"versions spaCy {spacy.__version__}")
    print(f"input    {args.data.name}: {len(sentences)} sentences, {num_tokens} tokens")

    with tempfile.TemporaryDirectory(prefix="bench_spacy_") as workdir:
        folder = args.model
        if folder is None:
            folder = Path(workdir) / "model"
            torch.manual_seed(0)
            save_model_folder(Elmo(PUBLISHED_OPTIONS[args.shape]), folder)
            print(f"model    random weights, shape {args.shape!r}")
        else:
            print(f"model    {folder}")
        print(
            f"budget   {args.batch_tokens} padded positions per biLM batch; nlp.pipe batch_size "
            f"{args.batch_size}; turns of {args.chunk} sentences\n",
            flush=True,
        )

        core_model = load_model_folder(folder, dropout=0.0).eval()
        nlp = build_nlp(folder, args.batch_tokens)
        docs = [Doc(nlp.vocab, words=words) for words in sentences]
        texts = [" ".join(words) for words in sentences]

        def run_core(chunk: range) -> int:
            batch = [sentences[i] for i in chunk]
            embed_sentences(core_model, batch, layers="all", batch_tokens=args.batch_tokens)
            return sum(len(s) for s in batch)

        def run_spacy(inputs: list):  # noqa: ANN202
            def run(chunk: range) -> int:
                # Each Doc is dropped as soon as it has been counted.
                return sum(len(doc) for doc in nlp.pipe([inputs[i] for i in chunk], batch_size=args.batch_size))

            return run

        run_core(range(WARMUP_SENTENCES))
        list(nlp.pipe(docs[:WARMUP_SENTENCES]))
        sides = [Side("core", run_core), Side("spacy_docs", run_spacy(docs)), Side("spacy_texts", run_spacy(texts))]
        compare(sides, len(sentences), args.chunk)
        core, spacy_docs, spacy_texts = sides
        print(f"  core  embed_sentences(layers='all')  {core.rate:8.0f} tokens/s  ({core.seconds:.1f} s)")
        print(f"  spaCy nlp.pipe(Docs)                 {spacy_docs.rate:8.0f} tokens/s  ({spacy_docs.seconds:.1f} s)")
        print(
            f"  spaCy nlp.pipe(texts)                {spacy_texts.rate:8.0f} tokens/s  ({spacy_texts.seconds:.1f} s, "
            f"{spacy_texts.tokens} spaCy tokens)\n"
        )
        print(f"ratio spaCy(Docs) / core tokens/s      {spacy_docs.rate / core.rate:.3f}")
        print(f"ratio spaCy(texts) / core tokens/s     {spacy_texts.rate / core.rate:.3f}\n", flush=True)

        for side, label in (("spacy", "spaCy nlp.pipe(Docs)"), ("core", "core iter_embeddings")):
            marks = rss_in_subprocess(side, folder, args)
            if marks and marks.get("early") and marks.get("end"):
                growth = (marks["end"] - marks["early"]) / marks["early"]
                print(
                    f"RSS {label:<21} after {RSS_AFTER_DOCS}: {marks['early']:.0f} MB, after "
                    f"{len(sentences)}: {marks['end']:.0f} MB, growth {100 * growth:+.1f}%  (fresh process)"
                )
    print(f"load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
