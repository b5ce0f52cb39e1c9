"""This project's biLM against AllenNLP's `_ElmoBiLm`, side by side in one process (fp32, CPU).

AllenNLP 2.10.1 pins an old torch, so it is not installed: its plain-torch ELMo modules
(`modules/elmo.py`, `elmo_lstm.py`, `lstm_cell_with_projection.py`, `encoder_base.py`,
`highway.py`, `scalar_mix.py`, `nn/util.py`, `nn/initializers.py`, `common/checks.py`,
`data/token_indexers/elmo_indexer.py`) are read from its wheel into a temporary folder,
beside small stand-ins for the framework parts those files import but `_ElmoBiLm` never
calls (registries, file caching, the data pipeline). Get the wheel with
`pip download allennlp==2.10.1 --no-deps -d DIR`.

Both models read the same random weights, written in the published bilm-tf layout
(`save_bilm_tf`) with the original shape's options; the script first checks that their
activations agree (max difference printed). Both get the same length-sorted batches of 32
sentences of enwiki text: AllenNLP as `_ElmoBiLm(char_ids)` under `torch.no_grad`, this
project as `embed_sentences(model, sentences, layers="all", batch_size=32)` (the numpy
copies included), with the token cache on (the default) and off. They alternate, and the
best of `--repeats` runs counts. Then each model runs once more alone in a fresh process
(`--only`, the same weights file and batches, token cache on for ours) whose peak resident
memory (`VmHWM`: loading, weights and the run) is reported beside its rate.

    .venv/bin/python -m benchmarks.bench_allennlp --wheel DIR/allennlp-2.10.1-py3-none-any.whl
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
import zipfile
from pathlib import Path

import torch

from benchmarks.common import (
    DEFAULT_DATA,
    child_env,
    from_repo,
    load_sentences,
    machine_line,
    own_peak_rss_mb,
    rebuilt,
    shape_options,
)
from elmo_core import Elmo, embed_sentences, load_bilm_tf, save_bilm_tf, words_to_char_ids

FILES = [
    "allennlp/modules/elmo.py",
    "allennlp/modules/elmo_lstm.py",
    "allennlp/modules/lstm_cell_with_projection.py",
    "allennlp/modules/encoder_base.py",
    "allennlp/modules/highway.py",
    "allennlp/modules/scalar_mix.py",
    "allennlp/nn/util.py",
    "allennlp/nn/initializers.py",
    "allennlp/common/checks.py",
    "allennlp/data/token_indexers/elmo_indexer.py",
]

# Stand-ins for what those files import but the biLM never runs.
STUBS = {
    "allennlp/__init__.py": "",
    "allennlp/modules/__init__.py": "",
    "allennlp/nn/__init__.py": "",
    "allennlp/data/__init__.py": "",
    "allennlp/data/fields/__init__.py": "class TextField: pass\n",
    "allennlp/data/instance.py": "class Instance: pass\n",
    "allennlp/data/vocabulary.py": "class Vocabulary: pass\n",
    "allennlp/data/batch.py": "class Batch: pass\n",
    "allennlp/data/tokenizers/__init__.py": "class Token: pass\n",
    "allennlp/data/tokenizers/token_class.py": "class Token: pass\n",
    "allennlp/data/token_indexers/__init__.py": "",
    "allennlp/data/token_indexers/token_indexer.py": (
        "IndexedTokenList = dict\n"
        "class TokenIndexer:\n"
        "    @classmethod\n"
        "    def register(cls, *a, **k): return lambda c: c\n"
    ),
    "allennlp/common/__init__.py": (
        "class FromParams: pass\n"
        "class Registrable(FromParams):\n"
        "    @classmethod\n"
        "    def register(cls, *a, **k): return lambda c: c\n"
    ),
    "allennlp/common/file_utils.py": "def cached_path(p, *a, **k): return p\n",
    "allennlp/common/util.py": (
        "def lazy_groups_of(iterable, n): raise NotImplementedError\n"
        "def pad_sequence_to_length(*a, **k): raise NotImplementedError\n"
        "def int_to_device(d): return d\n"
        "def is_distributed(): return False\n"
        "def is_global_primary(): return True\n"
    ),
}


def unpack(wheel: Path, folder: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in FILES:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(archive.read(name))
    for name, text in STUBS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, required=True, help="allennlp-2.10.1-py3-none-any.whl")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--only", choices=["allennlp", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only:
        return alone(args)
    data = from_repo(args.data)
    sentences, source = load_sentences(args.data, args.sentences)
    tokens = sum(map(len, sentences))
    options = shape_options("original")
    workdir = tempfile.TemporaryDirectory()
    folder = Path(workdir.name)
    unpack(args.wheel, folder / "lib")
    sys.path.insert(0, str(folder / "lib"))
    from allennlp.modules.elmo import _ElmoBiLm

    torch.manual_seed(0)
    source_model = Elmo(options, dropout=0.0)
    save_bilm_tf(source_model, folder / "weights.hdf5")
    del source_model
    options.to_json(folder / "options.json")
    ours = Elmo(options, dropout=0.0).eval()
    load_bilm_tf(ours, folder / "weights.hdf5")
    allen = _ElmoBiLm(str(folder / "options.json"), str(folder / "weights.hdf5"), requires_grad=False).eval()

    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    batches = [[sentences[i] for i in order[k : k + 32]] for k in range(0, len(order), 32)]
    char_ids, mask = words_to_char_ids(batches[0], options.char_cnn.max_characters_per_token)
    with torch.no_grad():
        theirs = allen(char_ids)["activations"]
    with torch.inference_mode():
        mine = ours.bilm(char_ids, mask).activations
    real = mask[..., None].float()
    max_diff = max(float(((theirs[k][:, 1:-1] - mine[k]) * real).abs().max()) for k in range(len(theirs)))

    def run_allennlp() -> None:
        with torch.no_grad():
            for batch in batches:
                allen(words_to_char_ids(batch, options.char_cnn.max_characters_per_token)[0])

    cached, uncached = rebuilt(ours, token_cache_words=50_000), rebuilt(ours, token_cache_words=0)

    def run_ours(model: Elmo) -> None:
        if model.bilm.token_cache is not None:
            model.bilm.token_cache.clear()  # every run starts from an empty cache
        embed_sentences(model, sentences, layers="all", batch_size=32, batch_tokens=10**9)

    runs = {"AllenNLP _ElmoBiLm": run_allennlp, "ours, token cache on": lambda: run_ours(cached)}
    runs["ours, token cache off"] = lambda: run_ours(uncached)
    best = dict.fromkeys(runs, 0.0)
    for run in runs.values():
        run()  # warm-up
    for _ in range(args.repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = max(best[name], tokens / (time.perf_counter() - start))
    lines = [
        f"bench_allennlp {datetime.date.today().isoformat()}: original shape, fp32, batch 32, "
        f"{torch.get_num_threads()} threads, best of {args.repeats} alternating runs",
        machine_line(),
        f"ELMO_THREADS={os.environ.get('ELMO_THREADS', 'auto')}",
        f"text: {source}; {len(sentences)} sentences, {tokens} tokens",
        f"max |difference| of the activations (first batch, real tokens): {max_diff:.2e}",
        f"{'run':<24} {'tokens/s':>9} {'vs AllenNLP':>11}",
    ]
    for name, rate in best.items():
        lines.append(f"{name:<24} {rate:>9.0f} {rate / best['AllenNLP _ElmoBiLm']:>10.2f}x")
    lines.append(f"alone, fresh process each: {'tokens/s':>9} {'peak RSS MiB':>12}")
    for which in ("allennlp", "ours"):
        command = [sys.executable, "-m", "benchmarks.bench_allennlp", "--wheel", str(args.wheel)]
        command += ["--sentences", str(args.sentences), "--data", str(data), "--only", which, "--folder", str(folder)]
        done = subprocess.run(command, capture_output=True, text=True, env=child_env())
        if done.returncode:
            raise RuntimeError(f"the {which} process failed:\n{done.stderr}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        lines.append(f"{which:<26} {result['tok_s']:>9.0f} {result['peak_rss_mib']:>12.0f}")
    workdir.cleanup()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    print(json.dumps(best), file=sys.stderr)
    return 0


def alone(args: argparse.Namespace) -> int:
    """One model, alone in this process, from `--folder`: tokens/s of one run and the peak RSS."""
    sentences, _ = load_sentences(args.data, args.sentences)
    folder = args.folder
    options = shape_options("original")
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    batches = [[sentences[i] for i in order[k : k + 32]] for k in range(0, len(order), 32)]
    if args.only == "allennlp":
        sys.path.insert(0, str(folder / "lib"))
        from allennlp.modules.elmo import _ElmoBiLm

        allen = _ElmoBiLm(str(folder / "options.json"), str(folder / "weights.hdf5"), requires_grad=False).eval()

        def run() -> None:
            with torch.no_grad():
                for batch in batches:
                    allen(words_to_char_ids(batch, options.char_cnn.max_characters_per_token)[0])
    else:
        ours = Elmo(options, dropout=0.0).eval()
        load_bilm_tf(ours, folder / "weights.hdf5")

        def run() -> None:
            embed_sentences(ours, sentences, layers="all", batch_size=32, batch_tokens=10**9)

    start = time.perf_counter()
    run()
    rate = sum(map(len, sentences)) / (time.perf_counter() - start)
    print(json.dumps({"tok_s": rate, "peak_rss_mib": own_peak_rss_mb()}))  # VmHWM: this process's own peak
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
