"""Peak memory of one training step of the default model: frozen biLM against fine-tuning it.

For each mode, a fresh process loads the shipped default model (`load_elmo(dropout=0.0)`),
records its peak RSS, runs one step on a batch of `--sentences` sentences of `--tokens`
distinct words each, and records the peak again. Modes:

- `inference`: `torch.no_grad()`, eval mode (what `embed` does);
- `mix`: the scalar mix trains over the frozen biLM (the default): forward + backward;
- `char_cnn`: `elmo.bilm.char_cnn.requires_grad_(True)`: forward + backward;
- `all`: `elmo.bilm.requires_grad_(True)`: forward + backward.

Printed: the peak RSS above the loaded model (MiB) and per token (KiB), the machine's
CPU model and SIMD flags. Nothing is asserted. One thread.

Usage (from the repository root):

    .venv/bin/python -m benchmarks.bench_finetune_memory
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys

from benchmarks.common import machine_line

MODES = ("inference", "mix", "char_cnn", "all")

CHILD = """
import resource, sys, torch
from elmo_core import load_elmo, words_to_char_ids
torch.set_num_threads(1)
mode, sentences, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
elmo = load_elmo(dropout=0.0)
char_ids, mask = words_to_char_ids([[f"w{i}x{j}" for j in range(tokens)] for i in range(sentences)])
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if mode == "inference":
    with torch.no_grad():
        elmo.eval()(char_ids, mask)
else:
    if mode == "all":
        elmo.bilm.requires_grad_(True)
    elif mode == "char_cnn":
        elmo.bilm.char_cnn.requires_grad_(True)
    elmo.train()
    elmo(char_ids, mask).representations[0].sum().backward()
print(loaded, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=40)
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    num_tokens = args.sentences * args.tokens
    print(
        f"# bench_finetune_memory {datetime.date.today()}: default model, one step of {args.sentences} x "
        f"{args.tokens} = {num_tokens} tokens, one thread, fresh process per mode"
    )
    print(f"# {platform.platform()}")
    print(f"# {machine_line()}")
    print(f"{'mode':<10} {'loaded MiB':>10} {'step peak above loaded MiB':>27} {'KiB per token':>14}")
    for mode in MODES:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(args.sentences), str(args.tokens)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        loaded, peak = (int(x) for x in done.stdout.split())  # KiB (Linux ru_maxrss)
        print(
            f"{mode:<10} {loaded / 1024:>10.0f} {(peak - loaded) / 1024:>27.0f} {(peak - loaded) / num_tokens:>14.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
