"""spaCy's standard NER with and without ELMo, on CoNLL-format files given by path.

    python examples/ner/ner_benchmark.py --train train.txt --dev dev.txt \\
        --eval dev=dev.txt --eval wikigold=wikigold.conll.txt --seeds 0 1 2 --max-steps 2000 \\
        --out local/ner_conll

One command, four stages:

1. convert: every file to a `.spacy` DocBin with spaCy's own CoNLL converter
   (`conll_ner_to_docs`, the one behind `spacy convert --converter ner`, through
   `spacy_elmo.corpus.read_conll_ner`, which also reads WikiGold's and WNUT-17's
   separator lines);
2. configs: spaCy's standard NER config (`spacy init config --pipeline ner`, CPU,
   efficiency), and the same config with ELMo added: an `elmo` component (frozen biLM,
   `spacy-elmo.ElmoLayers.v2` with a feature cache) and `spacy-elmo.ElmoListener.v2`, a
   trainable scalar mix of the biLM's layers concatenated with the standard features
   (`--elmo-dropout` and `--mix-l2` set the paper's ELMo dropout and mix L2; without them,
   ElmoListener.v1 exactly). `--elmo-enters` says where: `input` (default) concatenates
   ELMo with the tok2vec's embeddings, before spaCy's CNN encoder (the paper's main
   recipe, section 3.3: [x_k; ELMo_k] into the task's contextual encoder); `output`
   concatenates it with the tok2vec's output, after the CNN encoder (the paper's "ELMo at
   the output of the task RNN"). Both read the files' own tokens and sentences (`gold_preproc =
   true`), as CoNLL is scored;
3. train: both configs for each seed, the same number of steps; or, with `--patience N`,
   each to convergence with spaCy's own early stopping (stop after N steps without a
   better dev score, `--max-steps` as the cap, 0 = none; the best model on dev is kept);
4. evaluate: the last model of each run (no selection on dev), or with `--patience` the
   best one on dev (`model-best`, as `spacy train` users ship it), on each `--eval` file:
   entity precision, recall and F1 (exact span and type, spaCy's NER scorer), per type
   and overall; mean +- standard deviation over the seeds.

`--variants` adds static vectors (`vectors`, `elmo+vectors`: `--vectors`, a folder made by
`spacy init vectors` or an installed pipeline, in `[initialize] vectors` with
`include_static_vectors = true`) and ELMo adapted to the training split's words first
(`adapted`, `adapted+vectors`: the paper's section 3.4, `elmo train --model ... --patience`
on the training sentences minus a held-out 5%, into OUT/adapted_elmo); examples/ner/README.md.

`--jobs N` trains N runs at once, each in its own process on one thread; `--keep-finished`
keeps the runs an earlier invocation finished with the same settings (a table stopped halfway
goes on where it stopped).

Everything is written under `--out`: data/, one VARIANT.cfg and one folder of runs per
variant (VARIANT/seedN/ with the trained pipelines, run.json and, with --jobs, train.log),
adapt_text/ and adapted_elmo/ (the adapted model) for the adapted variants, and results.json.
Converted data stays there (CoNLL-2003's licence forbids sharing it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import spacy
import torch
from spacy.cli.init_config import init_config
from spacy.scorer import get_ner_prf
from spacy.tokens import DocBin
from spacy.training import Corpus, Example
from spacy.training.initialize import init_nlp
from spacy.training.loop import train as train_nlp

from elmo_core import default_model_dir
from elmo_core.apps.training.commands import run_perplexity, run_training
from elmo_core.apps.training.corpus import hold_out
from elmo_core.apps.training.model import has_lm_head
from spacy_elmo.corpus import read_conll_ner
from spacy_elmo.layers.elmo_layers import feature_cache

VARIANTS = ("baseline", "vectors", "elmo", "elmo+vectors", "adapted", "adapted+vectors")
"""What each run adds to spaCy's NER: nothing, static vectors (`--vectors`), the ELMo model
(`--elmo-model`), both, the ELMo model adapted to the training split's words first (the
paper's section 3.4), and that with the static vectors."""
DEFAULT_VARIANTS = ("baseline", "elmo")
ELMO_ENTERS = ("output", "input", "both")
DEFAULT_CACHE_MB = 2048
ADAPTED_FOLDER = "adapted_elmo"  # not "adapted": that is the adapted variant's folder of runs


# ------------------------------------------------------------------ 1. convert
def convert(conll_path: Path, spacy_path: Path, n_sents: int = 10) -> int:
    """Write `conll_path` as a DocBin of one Doc per sentence; returns the number of sentences.

    One Doc per sentence because the models read sentences anyway (`gold_preproc`),
    and spaCy's corpus reader splits a long Doc into sentences in quadratic time on
    every epoch (a CoNLL-2003 article has ~15 sentences).
    """
    sentences = [sent.as_doc() for doc in read_conll_ner(conll_path, n_sents) for sent in doc.sents]
    spacy_path.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=sentences).to_disk(spacy_path)
    return len(sentences)


# ------------------------------------------------------------------ 2. configs
def make_configs(
    *,
    max_steps: int,
    eval_frequency: int,
    elmo_path: str = "",
    cache_bytes: int = DEFAULT_CACHE_MB << 20,
    patience: int = 0,
    elmo_dropout: float | None = None,
    mix_l2: float = 0.0,
    elmo_enters: str = "input",
    vectors: str = "",
    adapted_path: str = "",
) -> dict[str, spacy.util.Config]:
    """{"baseline": spaCy's NER config, "elmo": the same plus ELMo features}, and with
    `vectors` (a spaCy vectors folder or an installed pipeline's name) "vectors" and
    "elmo+vectors" (the same two with static vectors, `with_static_vectors`), with
    `adapted_path` (an adapted model folder) "adapted" (the "elmo" config reading it), and
    with both "adapted+vectors".

    `patience` 0 trains exactly `max_steps`; N > 0 stops after N steps without a better
    dev score (spaCy's `[training] patience`), with `max_steps` as a cap (0: none).
    `elmo_dropout` and `mix_l2` are `spacy-elmo.ElmoListener.v2`'s `dropout` and `mix_l2`
    (None and 0: the listener behaves as v1). `elmo_enters` is where the ELMo vectors join
    the standard features: "output" concatenates them with the tok2vec's output (after
    spaCy's CNN encoder; the paper's "ELMo at the output of the task RNN"); "input"
    concatenates them with the tok2vec's embeddings, projected back to the tok2vec's
    width, so that the CNN encoder reads them (the paper's main recipe, section 3.3);
    "both" does both, with a mix for each (the paper's input-and-output variant).
    """
    if elmo_enters not in ELMO_ENTERS:
        raise ValueError(f"elmo_enters must be one of {ELMO_ENTERS}; got {elmo_enters!r}.")
    base = init_config(lang="en", pipeline=["ner"], optimize="efficiency", gpu=False)
    for corpus in ("train", "dev"):
        # The files' tokens and sentences, as CoNLL is scored (and ELMo reads sentences).
        base["corpora"][corpus]["gold_preproc"] = True
    base["training"]["max_steps"] = max_steps
    base["training"]["eval_frequency"] = eval_frequency
    base["training"]["patience"] = patience  # 0: always train max_steps; the last model is scored

    elmo = spacy.util.Config().from_str(base.to_str(), interpolate=False)
    # "elmo" before "tok2vec": both write doc.tensor, and the NER's Tok2VecListener reads
    # doc.tensor at prediction time, so the standard tok2vec must write it last.
    elmo["nlp"]["pipeline"] = ["elmo", "tok2vec", "ner"]
    elmo["components"]["elmo"] = {
        "factory": "elmo",
        "model": {
            "@architectures": "spacy-elmo.ElmoLayers.v2",
            "path": elmo_path,
            "options": "",
            "weights": "",
            "max_batch_tokens": 4096,
            "per_sentence": True,
            "cache_bytes": cache_bytes,
        },
    }
    ner_model = elmo["components"]["ner"]["model"]

    def listener(**settings) -> dict:
        common = {"@architectures": "spacy-elmo.ElmoListener.v2", "upstream": "elmo"}
        return {**common, "dropout": elmo_dropout, "mix_l2": mix_l2, **settings}

    if elmo_enters in ("input", "both"):
        # The NER gets the standard tok2vec as its own (the same layers the shared one
        # had), with the ELMo vectors joining its embeddings before the CNN encoder.
        tok2vec = elmo["components"].pop("tok2vec")["model"]
        width = tok2vec["encode"]["width"]
        tok2vec["embed"]["width"] = width
        tok2vec["embed"] = listener(width=width, tok2vec=tok2vec["embed"])
        ner_model["tok2vec"] = tok2vec
        elmo["nlp"]["pipeline"] = ["elmo", "ner"]
    if elmo_enters in ("output", "both"):
        # A mix of its own joins the tok2vec's output (the NER's input layer projects it).
        ner_model["tok2vec"] = listener(width=None, tok2vec=ner_model["tok2vec"])
    # The biLM is frozen: "elmo" annotates each batch once, the listener reads it.
    elmo["training"]["annotating_components"] = ["elmo"]
    configs = {"baseline": base, "elmo": elmo}
    if adapted_path:
        configs["adapted"] = copy_config(elmo)
        configs["adapted"]["components"]["elmo"]["model"]["path"] = adapted_path
    if vectors:
        for name in list(configs):
            configs[f"{name}+vectors" if name != "baseline" else "vectors"] = with_static_vectors(
                configs[name], vectors
            )
    return configs


def copy_config(config: spacy.util.Config) -> spacy.util.Config:
    return spacy.util.Config().from_str(config.to_str(), interpolate=False)


def with_static_vectors(config: spacy.util.Config, vectors: str) -> spacy.util.Config:
    """A copy of `config` whose tok2vec embedding also reads static vectors: `[initialize]
    vectors` (through `[paths] vectors`) loads them from `vectors` (a folder made by `spacy
    init vectors`, or an installed pipeline such as en_core_web_md), and the embedding
    (`spacy.MultiHashEmbed.v2`, wherever ELMo's listener put it) gets `include_static_vectors =
    true`: spaCy's StaticVectors, projected to the embedding's width and concatenated with its
    hash embeddings before their maxout, as `spacy init config --optimize accuracy` does for
    a pipeline with vectors.
    """
    config = copy_config(config)
    config["paths"]["vectors"] = vectors
    embeddings = [
        node for node in _dicts(config["components"]) if node.get("@architectures") == "spacy.MultiHashEmbed.v2"
    ]
    assert len(embeddings) == 1, embeddings  # spaCy's NER config has one tok2vec, with one embedding
    embeddings[0]["include_static_vectors"] = True
    return config


def _dicts(node: object):
    """Every dict inside a config section, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _dicts(value)


def check_vectors(vectors: str) -> str | None:
    """None when `vectors` is a spaCy vectors folder or an installed pipeline; else the problem."""
    if Path(vectors).is_dir():
        if (Path(vectors) / "vocab" / "vectors").exists():
            return None
        return f"--vectors {vectors} is a folder without vocab/vectors; make one with: spacy init vectors en FILE OUT"
    if spacy.util.is_package(vectors):
        return None
    return (
        f"--vectors {vectors} is neither a folder (spacy init vectors en FILE OUT) nor an installed pipeline "
        "(e.g. pip install en_core_web_md, then --vectors en_core_web_md)."
    )


# ------------------------------------------------------------------ 2b. adapt
def sentence_words(spacy_path: Path) -> list[str]:
    """The tokens of each Doc (one per sentence, `convert`) of a DocBin, space-separated."""
    docs = DocBin().from_disk(spacy_path).get_docs(spacy.blank("en").vocab)
    return [" ".join(token.text for token in doc) for doc in docs]


def adapt(
    train_spacy: Path,
    dev_spacy: Path,
    out: Path,
    *,
    model: str = "",
    held_out: float = 0.05,
    epochs: int = 1,
    patience: int = 2,
    validate_every: int = 10,
    lr: float = 0.001,
    max_steps: int | None = None,
    seed: int = 0,
) -> dict:
    """Adapt the ELMo model to the training split's words (the paper, section 3.4: the biLM
    fine-tuned on the task's training text, labels ignored; bilm-tf's `restart.py`).

    The words of `train_spacy`'s sentences, one sentence per line, are split (`hold_out`,
    `held_out` of them, seeded) into `out/adapt_text/kept.txt` and `held_out.txt` (the dev
    set stays unseen), and `elmo train --model MODEL --max-epochs EPOCHS --patience PATIENCE`
    continues the model on the kept ones, validated on the held-out ones before the first
    step and every `validate_every` steps, into the model folder `out/adapted_elmo`, which holds
    the best-validated weights. Returns the held-out and dev-text perplexities before and
    after (before: None when the model has no language-model head, i.e. a new softmax),
    the steps, and the time.
    """
    text = out / "adapt_text"
    text.mkdir(parents=True, exist_ok=True)
    kept, held = hold_out(sentence_words(train_spacy), held_out, seed=seed)
    for name, lines in (("kept", kept), ("held_out", held), ("dev", sentence_words(dev_spacy))):
        (text / f"{name}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    start = model or str(default_model_dir())
    scored = [text / "held_out.txt", text / "dev.txt"]

    def perplexities(folder: str | Path) -> list[float]:
        return [round(p.average, 2) for _, p in run_perplexity(scored, model=folder, pretokenized=True)]

    before = perplexities(start) if has_lm_head(start) else [None, None]
    t0 = time.perf_counter()
    summary = run_training(
        train=[text / "kept.txt"],
        valid=text / "held_out.txt",
        out=out / ADAPTED_FOLDER,
        model=start,
        pretokenized=True,
        max_epochs=epochs,
        max_steps=max_steps,
        patience=patience,
        validate_every=validate_every,
        checkpoint_every=0,
        lr=lr,
        seed=seed,
        progress=False,
    )
    seconds = round(time.perf_counter() - t0, 1)
    after = perplexities(out / ADAPTED_FOLDER)
    return {
        "model": start,
        "folder": str(out / ADAPTED_FOLDER),
        "sentences": {"kept": len(kept), "held_out": len(held)},
        "settings": {"held_out": held_out, "epochs": epochs, "patience": patience, "lr": lr, "seed": seed},
        "steps": summary["step"],
        "best_step": summary["best_step"],
        "stopped_early": summary["stopped_early"],
        "train_seconds": seconds,
        "held_out_ppl": {"before": before[0], "after": after[0]},
        "dev_ppl": {"before": before[1], "after": after[1]},
    }


# ------------------------------------------------------------------ 4. evaluate
def entity_scores(examples: list[Example]) -> dict[str, dict[str, float]]:
    """Entity P, R, F (0..100) and the number of gold entities, per type and "ALL".

    P, R and F are spaCy's NER scores (`spacy.scorer.get_ner_prf`, what `spacy
    evaluate` prints): a predicted entity is right when its span and type equal a gold
    entity's. A type never predicted nor annotated does not appear.
    """
    prf = get_ner_prf(examples)
    support = Counter(ent.label_ for eg in examples for ent in eg.y.ents)
    per_type = prf["ents_per_type"] or {}
    scores = {
        label: {"p": 100 * s["p"], "r": 100 * s["r"], "f": 100 * s["f"], "n": support[label]}
        for label, s in sorted(per_type.items())
    }
    for label in sorted(set(support) - set(scores)):
        scores[label] = {"p": 0.0, "r": 0.0, "f": 0.0, "n": support[label]}
    overall = [prf[k] or 0.0 for k in ("ents_p", "ents_r", "ents_f")]
    scores["ALL"] = {"p": 100 * overall[0], "r": 100 * overall[1], "f": 100 * overall[2], "n": sum(support.values())}
    return scores


def evaluate(nlp: spacy.Language, spacy_path: Path) -> dict[str, dict[str, float]]:
    examples = list(Corpus(spacy_path, gold_preproc=True)(nlp))
    predicted = nlp.pipe([eg.predicted for eg in examples], batch_size=256)
    return entity_scores([Example(doc, eg.reference) for doc, eg in zip(predicted, examples)])


def summarize(values: list[float]) -> str:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:6.2f} ± {std:4.2f}"


def format_results(results: dict, eval_names: list[str], seeds: list[int], variants: list[str]) -> str:
    lines = []
    for name in eval_names:
        lines.append(f"\n{name} ({results['eval_files'][name]}); seeds {' '.join(map(str, seeds))}; mean ± std")
        lines.append(f"{'variant':15} {'type':16} {'gold':>6}  {'P':>13}  {'R':>13}  {'F1':>13}")
        for variant in variants:
            runs = [results["runs"][f"{variant}/seed{seed}"]["scores"][name] for seed in seeds]
            labels = [label for label in runs[0] if label != "ALL"] + ["ALL"]
            for label in labels:
                cells = [summarize([run.get(label, {}).get(k, 0.0) for run in runs]) for k in "prf"]
                lines.append(f"{variant:15} {label:16} {runs[0][label]['n']:6d}  " + "  ".join(cells))
    return "\n".join(lines)


# ------------------------------------------------------------------ 3-4. train and score
RUN_SETTINGS = (
    "train", "dev", "max_steps", "eval_frequency", "patience", "elmo_model", "elmo_dropout", "mix_l2", "elmo_enters",
    "cache_mb", "vectors", "adapted_model", "adapt_held_out", "adapt_epochs", "adapt_patience",
    "adapt_validate_every", "adapt_lr", "adapt_max_steps", "n_sents",
)  # fmt: skip
"""The arguments a run's numbers depend on: a run is kept (--keep-finished) only where all are the same."""
RUN_RECORD = "run.json"


def run_settings(args: argparse.Namespace) -> dict:
    settings = {name: getattr(args, name) for name in RUN_SETTINGS}
    settings["eval"] = [[name, path] for name, path in args.eval]
    return json.loads(json.dumps(settings, default=str))  # paths as text, as the record stores them


def machine() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else the platform's processor or machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_record_path(args: argparse.Namespace, variant: str, seed: int) -> Path:
    return args.out / variant / f"seed{seed}" / RUN_RECORD


def finished_run(args: argparse.Namespace, variant: str, seed: int) -> dict | None:
    """The record of an earlier invocation's finished run of `variant` and `seed`, if its settings are these."""
    path = run_record_path(args, variant, seed)
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("settings") != run_settings(args):
        differ = sorted(k for k, v in run_settings(args).items() if record.get("settings", {}).get(k) != v)
        sys.exit(
            f"{path} was trained with other settings ({', '.join(differ)} differ); give another --out, or delete "
            f"{path.parent} to train it again."
        )
    return record


def train_and_score(args: argparse.Namespace, variant: str, seed: int, spacy_files: dict, names: list[str]) -> dict:
    """Train one run (what `spacy train CONFIG --output RUN_DIR --paths.train ...` does, keeping the
    trained pipeline at hand to read its feature cache's counters), score it on every --eval file,
    and write its record into the run's folder (`run.json`)."""
    run_dir = args.out / variant / f"seed{seed}"
    scored = "model-best" if args.patience else "model-last"
    budget = f"patience {args.patience}, cap {args.max_steps or 'none'}" if args.patience else f"{args.max_steps} steps"
    print(f"\n=== training {variant}/seed{seed} ({budget}) ===", flush=True)
    t0 = time.perf_counter()
    overrides = {"paths.train": str(spacy_files["train"]), "paths.dev": str(spacy_files["dev"]), "system.seed": seed}
    config = spacy.util.load_config(args.out / f"{variant}.cfg", overrides=overrides, interpolate=False)
    trained = init_nlp(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    train_nlp(trained, run_dir, stdout=sys.stdout, stderr=sys.stderr)
    train_s = time.perf_counter() - t0
    train_cache = feature_cache(trained.get_pipe("elmo").model) if "elmo" in trained.pipe_names else None
    del trained
    t0 = time.perf_counter()
    nlp = spacy.load(run_dir / scored)
    scores = {name: evaluate(nlp, spacy_files[f"eval-{name}"]) for name in names}
    cache = feature_cache(nlp.get_pipe("elmo").model) if "elmo" in nlp.pipe_names else None
    record = {
        "scored": scored,
        "train_seconds": round(train_s, 1),
        "eval_seconds": round(time.perf_counter() - t0, 1),
        "cpu": machine(),
        "threads": torch.get_num_threads(),
        "train_cache": train_cache.stats._asdict() if train_cache else None,
        "eval_cache": cache.stats._asdict() if cache else None,
        "scores": scores,
        "settings": run_settings(args),
    }
    run_record_path(args, variant, seed).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def print_run(run: str, record: dict) -> None:
    line = "  ".join(f"{name} F1 {s['ALL']['f']:.2f}" for name, s in record["scores"].items())
    print(f"{run}: trained in {record['train_seconds']:.0f} s; {line}", flush=True)
    if record["train_cache"]:
        print(f"  feature cache, training: {record['train_cache']}; evaluation: {record['eval_cache']}", flush=True)


def run_side_by_side(argv: list[str], todo: list[tuple[str, int]], args: argparse.Namespace):  # noqa: ANN201
    """Train and score `todo`'s runs `args.jobs` at a time, each in its own process of this script
    (`--only-run VARIANT/SEED`) with one thread (OMP_NUM_THREADS, MKL_NUM_THREADS and
    ELMO_THREADS = 1) and its output in the run's folder (`train.log`); yield (run, record) as
    each finishes. A failed run stops the command, naming its log; the finished runs stay."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ELMO_THREADS": "1"}
    waiting, running = list(todo), {}
    while waiting or running:
        while waiting and len(running) < args.jobs:
            variant, seed = waiting.pop(0)
            log = run_record_path(args, variant, seed).with_name("train.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, __file__, *argv, "--only-run", f"{variant}/{seed}"]
            with log.open("w", encoding="utf-8") as f:
                running[(variant, seed)] = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)
            print(f"started {variant}/seed{seed} (output in {log})", flush=True)
        time.sleep(0.5)
        for (variant, seed), process in list(running.items()):
            if process.poll() is None:
                continue
            del running[(variant, seed)]
            record_path = run_record_path(args, variant, seed)
            if process.returncode != 0:
                for other in running.values():
                    other.terminate()
                log = record_path.with_name("train.log")
                sys.exit(f"{variant}/seed{seed} failed (exit {process.returncode}); its output: {log}")
            yield f"{variant}/seed{seed}", json.loads(record_path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ the command
def parse_eval(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    return (name, Path(path)) if sep else (Path(value).stem, Path(value))


def adapt_once(args: argparse.Namespace, train_spacy: Path, dev_spacy: Path) -> dict:
    """`adapt` into OUT/adapted_elmo, or, when an earlier run with the same settings did it, its record."""
    record = args.out / "adaptation.json"
    settings = {
        "model": args.elmo_model or str(default_model_dir()),
        "held_out": args.adapt_held_out,
        "epochs": args.adapt_epochs,
        "patience": args.adapt_patience,
        "validate_every": args.adapt_validate_every,
        "lr": args.adapt_lr,
        "max_steps": args.adapt_max_steps,
    }
    if record.is_file():
        earlier = json.loads(record.read_text(encoding="utf-8"))
        if earlier["given"] == settings:
            print(f"adapted model: {earlier['folder']} (from an earlier run; delete {record} to adapt again)")
            return earlier
        sys.exit(
            f"{args.out / ADAPTED_FOLDER} was adapted with other settings ({earlier['given']}); give another --out."
        )
    print(f"\n=== adapting {settings['model']} to the training split's words ===", flush=True)
    done = adapt(
        train_spacy,
        dev_spacy,
        args.out,
        model=args.elmo_model,
        held_out=args.adapt_held_out,
        epochs=args.adapt_epochs,
        patience=args.adapt_patience,
        validate_every=args.adapt_validate_every,
        lr=args.adapt_lr,
        max_steps=args.adapt_max_steps,
    )
    done["given"] = settings
    record.write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
    print(
        f"adapted in {done['train_seconds']:.0f} s ({done['steps']} steps, best at {done['best_step']}): held-out "
        f"perplexity {done['held_out_ppl']['before']} -> {done['held_out_ppl']['after']}, dev text "
        f"{done['dev_ppl']['before']} -> {done['dev_ppl']['after']}",
        flush=True,
    )
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--train", type=Path, required=True, help="CoNLL-format training file.")
    parser.add_argument(
        "--dev",
        type=Path,
        required=True,
        help="CoNLL-format file spaCy scores during training (logged; with --patience, early stopping and model-best).",
    )
    parser.add_argument(
        "--eval",
        action="append",
        type=parse_eval,
        required=True,
        metavar="[NAME=]PATH",
        help="CoNLL-format file to score the final models on; repeat for more.",
    )
    parser.add_argument("--out", type=Path, required=True, help="Folder for data, configs, models and results.json.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="spaCy seeds (default: 0).")
    parser.add_argument("--max-steps", type=int, default=2000, help="Training steps of every run (default 2000).")
    parser.add_argument(
        "--eval-frequency",
        type=int,
        default=None,
        help="Steps between dev scores (default: max-steps; 200 with --patience).",
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=0,
        help="Train to convergence: stop after N steps without a better dev score and score model-best "
        "(default 0: train --max-steps and score model-last).",
    )
    parser.add_argument("--elmo-model", default="", help="ELMo model folder (default: the default model).")
    parser.add_argument(
        "--elmo-dropout",
        type=float,
        default=None,
        help="Dropout on the mixed ELMo vectors (ElmoListener.v2 dropout; default: [training] dropout).",
    )
    parser.add_argument(
        "--mix-l2", type=float, default=0.0, help="L2 penalty on the scalar mix weights (ElmoListener.v2 mix_l2)."
    )
    parser.add_argument(
        "--elmo-enters",
        choices=ELMO_ENTERS,
        default="input",
        help="Where the ELMo vectors join the standard features: the tok2vec's embeddings, before spaCy's "
        "CNN encoder (input, the default: the paper's main recipe, section 3.3), its output (output), or both, "
        "with a mix for each.",
    )
    parser.add_argument(
        "--cache-mb", type=int, default=DEFAULT_CACHE_MB, help="ELMo feature cache budget in MiB (0 = off)."
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=list(DEFAULT_VARIANTS),
        help="Runs per seed (default: baseline elmo). vectors, elmo+vectors and adapted+vectors need --vectors; "
        "adapted and adapted+vectors first adapt --elmo-model to the training split's words.",
    )
    parser.add_argument(
        "--vectors",
        default="",
        metavar="PATH_OR_PIPELINE",
        help="Static vectors for the +vectors variants: a folder made by `spacy init vectors` "
        "(examples/vectors/train_vectors.py) or an installed pipeline's name (en_core_web_md).",
    )
    adapting = parser.add_argument_group("adaptation (the adapted variants; the paper's section 3.4)")
    adapting.add_argument(
        "--adapted-model", default="", help="Use this adapted model folder instead of adapting (into OUT/adapted_elmo)."
    )
    adapting.add_argument("--adapt-held-out", type=float, default=0.05, help="Training sentences held out (0.05).")
    adapting.add_argument("--adapt-epochs", type=int, default=1, help="Passes over the kept sentences (1).")
    adapting.add_argument(
        "--adapt-patience", type=int, default=2, help="Stop after N validations without a better held-out perplexity."
    )
    adapting.add_argument("--adapt-validate-every", type=int, default=10, help="Steps between validations (10).")
    adapting.add_argument(
        "--adapt-lr", type=float, default=0.001, help="Adam's learning rate (0.001, elmo train's default)."
    )
    adapting.add_argument("--adapt-max-steps", type=int, default=None, help="Cap on the adaptation's steps (none).")
    parser.add_argument("--n-sents", type=int, default=10, help="Sentences per Doc for files without -DOCSTART- lines.")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="Runs trained at once, each in its own process with one thread (default 1: one after another, "
        "in this process, with torch's threads). Compare rows made with the same --jobs on the same machine.",
    )
    parser.add_argument(
        "--keep-finished",
        action="store_true",
        help="Keep the runs an earlier invocation with the same settings finished (OUT/VARIANT/seedN/run.json) "
        "and train only the others: a table stopped halfway goes on where it stopped.",
    )
    parser.add_argument("--only-run", default="", help=argparse.SUPPRESS)  # VARIANT/SEED: one run (--jobs' workers)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1; got {args.jobs}.")
    logging.basicConfig(level=logging.WARNING)
    for path in [args.train, args.dev] + [p for _, p in args.eval]:
        if not path.is_file():
            parser.error(f"no such file: {path}")
    names = [name for name, _ in args.eval]
    if len(set(names)) != len(names):
        parser.error(f"--eval names must differ; got {names}. Name them: --eval NAME=PATH.")
    with_vectors = [v for v in args.variants if v.endswith("vectors")]
    if with_vectors and not args.vectors:
        parser.error(f"--variants {' '.join(with_vectors)} need --vectors PATH_OR_PIPELINE.")
    if args.vectors and (problem := check_vectors(args.vectors)):
        parser.error(problem)
    if args.patience < 0 or args.max_steps < 0 or (args.max_steps == 0 and not args.patience):
        parser.error("--max-steps must be > 0 (or 0 with --patience, for no cap) and --patience >= 0.")
    for flag, folder in (("--elmo-model", args.elmo_model), ("--adapted-model", args.adapted_model)):
        if folder and not (Path(folder) / "config.json").is_file():
            parser.error(f"{flag} {folder} is not a model folder (no config.json); give an ELMo model folder.")
    # ELMo next to static vectors is what the +vectors variants are for: the elmo component's
    # warning (token.vector reads the static vectors, not ELMo's) says nothing new here.
    warnings.filterwarnings("ignore", message="the vocab of the pipeline with 'elmo' has static word vectors")

    data = args.out / "data"
    started = time.perf_counter()
    spacy_files = {"train": data / "train.spacy", "dev": data / "dev.spacy"}
    spacy_files.update({f"eval-{name}": data / f"eval-{name}.spacy" for name in names})
    if args.only_run:  # a --jobs worker: the data, configs and adapted model are in OUT already
        variant, seed = args.only_run.rsplit("/", 1)
        train_and_score(args, variant, int(seed), spacy_files, names)
        return 0
    for key, path in [("train", args.train), ("dev", args.dev)] + [(f"eval-{n}", p) for n, p in args.eval]:
        n = convert(path, spacy_files[key], args.n_sents)
        print(f"converted {path} -> {spacy_files[key]} ({n} sentences)", flush=True)
    results: dict = {"eval_files": {name: str(path) for name, path in args.eval}, "runs": {}}
    results["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "eval"}
    adapted_path = args.adapted_model
    if any(v.startswith("adapted") for v in args.variants) and not adapted_path:
        adapted_path = str(args.out / ADAPTED_FOLDER)
        results["adaptation"] = adapt_once(args, spacy_files["train"], spacy_files["dev"])
    configs = make_configs(
        max_steps=args.max_steps,
        eval_frequency=args.eval_frequency or (200 if args.patience else args.max_steps),
        elmo_path=args.elmo_model,
        cache_bytes=args.cache_mb << 20,
        patience=args.patience,
        elmo_dropout=args.elmo_dropout,
        mix_l2=args.mix_l2,
        elmo_enters=args.elmo_enters,
        vectors=args.vectors,
        adapted_path=adapted_path,
    )
    for variant, config in configs.items():
        config.to_disk(args.out / f"{variant}.cfg")
    todo = [(variant, seed) for seed in args.seeds for variant in args.variants]
    if args.keep_finished:
        for variant, seed in list(todo):
            if (earlier := finished_run(args, variant, seed)) is not None:
                results["runs"][f"{variant}/seed{seed}"] = earlier
                todo.remove((variant, seed))
                print(f"{variant}/seed{seed}: kept from an earlier invocation ({run_record_path(args, variant, seed)})")
    finished = (
        run_side_by_side(argv, todo, args)
        if args.jobs > 1
        else ((f"{v}/seed{s}", train_and_score(args, v, s, spacy_files, names)) for v, s in todo)
    )
    for run, record in finished:
        results["runs"][run] = record
        print_run(run, record)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")

    results["total_seconds"] = round(time.perf_counter() - started, 1)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(format_results(results, names, args.seeds, args.variants))
    machines = sorted({(r["cpu"], r["threads"]) for r in results["runs"].values()})
    if len(machines) > 1:
        print(
            f"\nnote: the runs were made on {len(machines)} CPU/thread settings {machines}; compare rows of one only."
        )
    print(f"\nwall time {results['total_seconds']:.0f} s; results in {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
