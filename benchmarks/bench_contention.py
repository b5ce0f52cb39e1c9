"""Speed when another process holds a core, and fp32 against bf16 on the CPU, in one run.

Contention part: every face, each in a fresh process, on the same enwiki text: the library
(`embed_sentences(load_elmo(), sentences)`, the shipped model), `elmo embed` (the whole command,
`python -m elmo_core embed IN OUT`: start, load, embed, write), the spaCy component
(`spacy.blank("en")` + `nlp.add_pipe("elmo")`, `list(nlp.pipe(docs))` over Docs of the same
tokens, one sentence each), the Hugging Face model (`AutoModel` + `AutoTokenizer` from a
folder saved from the shipped model, feature extraction in batches of 32 sentences sorted by
length, `is_split_into_words=True`), and `spacy train` of `examples/spacy_elmo/ner_elmo.cfg`
for a fixed number of steps (`--train-steps`, the whole command; steps/s) on the first
sentences of WikiGold (`--ner-data`; CC BY) or, where that is missing, on generated
sentences; first on the machine as it is
("idle") and then with one busy-looping process (`while True: pass`) pinned to the last
usable CPU ("busy"). The ratio busy / idle is what a user keeps of their speed when, say,
a browser holds a core. Each face runs with the thread policy in force (`ELMO_THREADS`,
default "auto", `elmo_core.runtime.threads`), and, on a shorter text, with `ELMO_THREADS=torch`
(torch's own thread count, the behaviour before `elmo_core.runtime.threads`) for comparison.

Precision part (`--precision-shapes`): for each shape, a random model (original: the
published layout's shape) runs `embed(..., layers="all", batch_size=32)` with the token
cache off, in fp32 and with `autocast_dtype=torch.bfloat16`; tokens/s of both, their
ratio, and each layer's mean and least cosine between the bf16 and fp32 vectors (per
token). Also the same-process fp32 and bf16 GEMM rates (2048^3), and the CPU flags.

Nothing is asserted; run it on an otherwise idle machine (the idle rows need one).

    .venv/bin/python -m benchmarks.bench_contention
    .venv/bin/python -m benchmarks.bench_contention --faces spacy,hf,train
    .venv/bin/python -m benchmarks.bench_contention --skip-contention --precision-shapes original
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    DEFAULT_DATA,
    REPO_ROOT,
    WIKIGOLD,
    child_env,
    conll_sentences,
    from_repo,
    load_sentences,
    machine_line,
    timed,
)

# One measurement of the library face, in a fresh process: sentences (JSON) on stdin.
_LIBRARY = """
import json, sys, time
import torch
from elmo_core import embed_sentences, load_elmo
sentences = json.load(sys.stdin)
model = load_elmo()
embed_sentences(model, sentences[:32])  # warm-up (also fills part of the token cache, as a user's run would)
start = time.perf_counter()
embed_sentences(model, sentences)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "torch_threads": torch.get_num_threads()}))
"""

# One measurement of the spaCy component, in a fresh process: sentences (JSON) on stdin.
_SPACY = """
import json, sys, time
import spacy, torch
from spacy.tokens import Doc
sentences = json.load(sys.stdin)
nlp = spacy.blank("en")
nlp.add_pipe("elmo")
nlp.initialize()
def docs(part):
    return [Doc(nlp.vocab, words=s, sent_starts=[True] + [False] * (len(s) - 1)) for s in part]
list(nlp.pipe(docs(sentences[:32])))  # warm-up
start = time.perf_counter()
list(nlp.pipe(docs(sentences)))
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "torch_threads": torch.get_num_threads()}))
"""

# One measurement of the Hugging Face model, in a fresh process: argv = folder, sentences on stdin.
_HF = """
import json, sys, time
import torch
import hf_elmo
from transformers import AutoModel, AutoTokenizer
sentences = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModel.from_pretrained(sys.argv[1]).eval()
ordered = sorted(sentences, key=len)
def extract(part):
    with torch.no_grad():
        for i in range(0, len(part), 32):
            batch = tokenizer(part[i : i + 32], is_split_into_words=True, padding=True, return_tensors="pt")
            model(**batch).last_hidden_state
extract(ordered[:32])  # warm-up
start = time.perf_counter()
extract(ordered)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "torch_threads": torch.get_num_threads()}))
"""

# A folder saved from the shipped model (as a user's save_pretrained writes it): argv = folder.
_SAVE_HF = """
import sys
import hf_elmo
from transformers import AutoModel, AutoTokenizer
from elmo_core.files.model_folder import default_model_dir
AutoModel.from_pretrained(default_model_dir()).save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(default_model_dir()).save_pretrained(sys.argv[1])
"""

# One precision comparison, in a fresh process: argv = shape, sentences file.
_PRECISION = """
import json, sys, time
import numpy as np
import torch
from benchmarks.common import gemm_gflops, shape_options, token_cosines
from elmo_core import Elmo, embed_sentences
from elmo_core.runtime.parts import serving_parts
from elmo_core.model.precision import cpu_bf16_support
shape, path = sys.argv[1], sys.argv[2]
sentences = json.load(open(path))
torch.manual_seed(0)
model = Elmo(shape_options(shape), dropout=0.0, **serving_parts(token_cache_words=0)).eval()
def run(dtype):
    embed_sentences(model, sentences[:32], batch_size=32, autocast_dtype=dtype)  # warm-up
    best, out = None, None
    for _ in range(2):
        start = time.perf_counter()
        out = embed_sentences(model, sentences, batch_size=32, batch_tokens=10**9, autocast_dtype=dtype)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best, out
tokens = sum(len(s) for s in sentences)
fp32_s, fp32 = run(None)
bf16_s, bf16 = run(torch.bfloat16)
layers = []
for k in range(fp32[0].shape[0]):
    cos = token_cosines(np.concatenate([v[k] for v in fp32]), np.concatenate([v[k] for v in bf16]))
    layers.append({"layer": k, "mean_cos": float(cos.mean()), "min_cos": float(cos.min())})
print(json.dumps({
    "shape": shape, "tokens": tokens, "fp32_tok_s": tokens / fp32_s, "bf16_tok_s": tokens / bf16_s,
    "layers": layers, "gemm_fp32": gemm_gflops(2048, 2048, 2048),
    "gemm_bf16": gemm_gflops(2048, 2048, 2048, dtype=torch.bfloat16),
    "bf16_support": cpu_bf16_support(), "threads": torch.get_num_threads(),
}))
"""


def _env(policy: str) -> dict[str, str]:
    return child_env(ELMO_THREADS=policy)


def run_library(sentences: list[list[str]], policy: str) -> float:
    """Tokens/s of `embed_sentences(load_elmo(), sentences)` in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY], input=json.dumps(sentences), capture_output=True, text=True, env=_env(policy)
    )
    if done.returncode:
        raise RuntimeError(f"library face failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return sum(map(len, sentences)) / result["seconds"]


def run_command(sentences: list[list[str]], policy: str, workdir: Path) -> float:
    """Tokens/s of the whole `elmo embed IN OUT` command (start to exit)."""
    source, output = workdir / "input.txt", workdir / "vectors.hdf5"
    source.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    command = [sys.executable, "-m", "elmo_core", "embed", str(source), str(output), "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(policy))
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"elmo embed failed:\n{done.stderr}")
    return sum(map(len, sentences)) / seconds


def run_spacy(sentences: list[list[str]], policy: str) -> float:
    """Tokens/s of `list(nlp.pipe(docs))` with `nlp.add_pipe("elmo")`, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _SPACY], input=json.dumps(sentences), capture_output=True, text=True, env=_env(policy)
    )
    if done.returncode:
        raise RuntimeError(f"spaCy face failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return sum(map(len, sentences)) / result["seconds"]


def run_hf(sentences: list[list[str]], policy: str, folder: Path) -> float:
    """Tokens/s of `AutoModel` feature extraction from a saved folder, in a fresh process."""
    if not (folder / "config.json").is_file():
        done = subprocess.run([sys.executable, "-c", _SAVE_HF, str(folder)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"saving the Hugging Face folder failed:\n{done.stderr}")
    done = subprocess.run(
        [sys.executable, "-c", _HF, str(folder)],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        env=_env(policy),
    )
    if done.returncode:
        raise RuntimeError(f"Hugging Face face failed:\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return sum(map(len, sentences)) / result["seconds"]


def ner_sentences(path: Path, count: int) -> list[list[tuple[str, str]]]:
    """The first `count` sentences (token, tag) of a CoNLL file; generated ones where it is missing."""
    sentences: list[list[tuple[str, str]]] = []
    if path.is_file():
        for sentence in conll_sentences(path):
            sentences.append(sentence)
            if len(sentences) == count:
                return sentences
    words = ["Anna", "met", "Bob", "in", "Paris", "on", "Monday", "with", "the", "Acme", "team", "."]
    tags = ["I-PER", "O", "I-PER", "O", "I-LOC", "O", "O", "O", "O", "I-ORG", "O", "O"]
    while len(sentences) < count:
        shift = len(sentences) % 5
        sentences.append(list(zip(words[shift:] + words[:shift], tags[shift:] + tags[:shift], strict=True)))
    return sentences[:count]


def run_train(steps: int, policy: str, workdir: Path, ner_data: Path) -> float:
    """Steps/s of the whole `spacy train examples/spacy_elmo/ner_elmo.cfg` command (start to exit)."""
    train, dev = workdir / "train.conll", workdir / "dev.conll"
    if not train.is_file():
        sentences = ner_sentences(ner_data, 340)
        for path, part in ((train, sentences[:300]), (dev, sentences[300:])):
            path.write_text("".join("".join(f"{w} {t}\n" for w, t in s) + "\n" for s in part), encoding="utf-8")
    command = [
        sys.executable, "-m", "spacy", "train", str(REPO_ROOT / "examples" / "spacy_elmo" / "ner_elmo.cfg"),
        "--output", str(workdir / "out"), "--paths.train", str(train), "--paths.dev", str(dev),
        "--training.max_steps", str(steps), "--training.eval_frequency", str(steps),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=_env(policy))
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"spacy train failed:\n{done.stderr[-4000:]}")
    return steps / seconds


FACES = ("library", "cli", "spacy", "hf", "train")


def measured(run, *args) -> tuple[float, float]:  # noqa: ANN001
    """`run(*args)` (tokens/s) and the CPUs' worth of work others did meanwhile (not its process)."""
    rate, _, others = timed(lambda: run(*args))
    return rate, others if others is not None else float("nan")


class BusyLoop:
    """A `while True: pass` process pinned to one CPU, for the length of a `with` block."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu

    def __enter__(self) -> BusyLoop:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        os.sched_setaffinity(self.process.pid, {self.cpu})
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def contention(
    sentences: list[list[str]], before: list[list[str]], policy: str, args: argparse.Namespace
) -> list[dict]:
    cpu = max(os.sched_getaffinity(0))
    rows = []
    ner_data = from_repo(args.ner_data)
    with tempfile.TemporaryDirectory() as workdir:
        faces = {
            "library": ("embed_sentences(load_elmo())", lambda t, r: run_library(t, r), "tok/s"),
            "cli": ("elmo embed", lambda t, r: run_command(t, r, Path(workdir)), "tok/s"),
            "spacy": ("nlp.pipe (elmo)", lambda t, r: run_spacy(t, r), "tok/s"),
            "hf": ("AutoModel (HF)", lambda t, r: run_hf(t, r, Path(workdir) / "hf"), "tok/s"),
            "train": ("spacy train", lambda t, r: run_train(args.train_steps, r, Path(workdir), ner_data), "steps/s"),
        }
        chosen = [faces[f] for f in args.faces.split(",") if f]
        for name, text, rule in (("main", sentences, policy), ("before", before, "torch")):
            if name == "before" and args.before_sentences == 0:
                continue
            for face, run, unit in chosen:
                idle, others_idle = measured(run, text, rule)
                with BusyLoop(cpu):
                    busy, others_busy = measured(run, text, rule)
                rows.append(
                    {
                        "text": name,
                        "tokens": args.train_steps if unit == "steps/s" else sum(map(len, text)),
                        "unit": unit,
                        "policy": rule,
                        "face": face,
                        "idle": idle,
                        "busy": busy,
                        "ratio": busy / idle,
                        "others_idle": others_idle,
                        "others_busy": others_busy,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def precision(shapes: Sequence[str], sentences: list[list[str]]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "sentences.json"
        path.write_text(json.dumps(sentences))
        for shape in shapes:
            done = subprocess.run(
                [sys.executable, "-c", _PRECISION, shape, str(path)], capture_output=True, text=True, env=_env("auto")
            )
            if done.returncode:
                raise RuntimeError(f"precision run for {shape} failed:\n{done.stderr}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def report(args: argparse.Namespace, source: str, rows: list[dict], prec: list[dict]) -> str:
    lines = [
        f"bench_contention {datetime.date.today().isoformat()}",
        machine_line(),
        f"text: {source}",
        "",
    ]
    if rows:
        lines += [
            "Contention: tokens/s on the machine as it is (idle) and with a busy-looping process pinned to one "
            "CPU (busy); fresh process per cell; shipped model, default settings; spacy train: steps/s of the "
            "whole command, 'tokens' = steps",
            f"{'face':<20} {'threads policy':<15} {'tokens':>7} {'idle':>9} {'busy':>9} {'busy/idle':>9}  "
            "others' CPUs (idle, busy)",
        ]
        for r in rows:
            policy = f"{r['policy']}" + (" (before)" if r["text"] == "before" else "")
            digits = 3 if r.get("unit") == "steps/s" else 0
            rates = f"{r['idle']:>9.{digits}f} {r['busy']:>9.{digits}f} {r['ratio']:>9.2f}"
            others = f"{r['others_idle']:.2f}, {r['others_busy']:.2f}"
            lines.append(f"{r['face']:<20} {policy:<15} {r['tokens']:>7} {rates}  {others}")
        lines += [
            "others' CPUs: CPU time of other processes during the cell (/proc/stat minus the measured process), "
            "in CPUs; the busy loop is 1.0 of it",
            "",
        ]
    if prec:
        lines += [
            "Precision: embed(layers='all', batch_size=32), token cache off, random weights; best of 2 runs",
            f"{'shape':<10} {'tokens':>7} {'fp32 tok/s':>10} {'bf16 tok/s':>10} {'bf16/fp32':>9} "
            f"{'GEMM fp32':>9} {'GEMM bf16':>9}  bf16 path / per layer cosine to fp32 (mean, least)",
        ]
        for r in prec:
            cos = "; ".join(f"L{x['layer']} {x['mean_cos']:.6f}, {x['min_cos']:.5f}" for x in r["layers"])
            lines.append(
                f"{r['shape']:<10} {r['tokens']:>7} {r['fp32_tok_s']:>10.0f} {r['bf16_tok_s']:>10.0f} "
                f"{r['bf16_tok_s'] / r['fp32_tok_s']:>9.2f} {r['gemm_fp32']:>9.0f} {r['gemm_bf16']:>9.0f}  "
                f"{r['bf16_support']}; {cos}"
            )
        lines.append("(GEMM: GFLOP/s of 2048^3 torch.mm in the same process, fp32 and bf16)")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=550, help="sentences of the contention text (~12k tokens)")
    parser.add_argument("--before-sentences", type=int, default=60, help="sentences for the ELMO_THREADS=torch rows")
    parser.add_argument("--policy", default="auto", help="ELMO_THREADS for the main rows (default auto)")
    parser.add_argument("--faces", default=",".join(FACES), help=f"comma-separated, of {','.join(FACES)}")
    parser.add_argument("--train-steps", type=int, default=30, help="steps of the spacy train face")
    parser.add_argument(
        "--ner-data", type=Path, default=WIKIGOLD,
        help="CoNLL file for the spacy train face (generated sentences where missing)",
    )  # fmt: skip
    parser.add_argument("--skip-contention", action="store_true")
    parser.add_argument("--precision-shapes", default="", help="comma-separated shapes, e.g. original,default")
    parser.add_argument("--precision-sentences", type=int, default=128)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    sentences, source = load_sentences(args.data, max(args.sentences, args.precision_sentences))
    rows = (
        []
        if args.skip_contention
        else contention(sentences[: args.sentences], sentences[: args.before_sentences], args.policy, args)
    )
    shapes = [s for s in args.precision_shapes.split(",") if s]
    prec = precision(shapes, sentences[: args.precision_sentences]) if shapes else []
    text = report(args, source, rows, prec)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
