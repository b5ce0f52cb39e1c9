"""`benchmarks.bench_train` in two checkouts, one process at a time, repeats interleaved.

`bench_train --paths old,new` compares the library with a frozen older step. This driver
compares two versions of the library instead: each repeat runs `bench_train --paths new
--repeats 1` once in each checkout, with that checkout's Python, so both meet fresh
batches and build their kernels afresh. It prints words/s per run, the load average around
each run, the medians and the median of the per-repeat ratios.

Usage (from the repository root; CHECKOUT=PYTHON pairs, the first is the baseline):

    python -m benchmarks.bench_train_trees ../base=../base/.venv/bin/python .=.venv/bin/python \\
        --repeats 5 -- --shapes wide --precisions bf16 --threads 2 --steps 8 --sentences 4000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import load_average, machine_line

RATE = re.compile(r"repeat 0: \S+ new \S+ ([\d,]+) words/s")


def run_once(checkout: Path, python: str, bench_args: list[str]) -> float:
    """words/s of one `bench_train` run in `checkout`, with `python`."""
    command = [python, "-m", "benchmarks.bench_train", "--paths", "new", "--repeats", "1", *bench_args]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, check=True)
    found = RATE.search(done.stdout)
    if found is None:
        raise RuntimeError(f"no words/s line in the output of {' '.join(command)}:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1).replace(",", ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs=2, help="CHECKOUT=PYTHON, the baseline first")
    parser.add_argument("--repeats", type=int, default=5)
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.bench_args = argv[split + 1 :]  # for bench_train
    trees = [(Path(c).resolve(), p) for c, p in (pair.split("=", 1) for pair in args.checkouts)]
    print("bench_train in two checkouts (python -m benchmarks.bench_train_trees)")
    print(machine_line())
    print(f"runs     bench_train --paths new --repeats 1 {' '.join(args.bench_args)}\n", flush=True)
    rates: list[list[float]] = [[], []]
    for repeat in range(args.repeats):
        for k, (checkout, python) in enumerate(trees):
            before = load_average()
            rates[k].append(run_once(checkout, python, args.bench_args))
            print(f"  repeat {repeat}: {checkout.name} {rates[k][-1]:,.0f} words/s (load {before} -> {load_average()})")
    ratios = [new / old for old, new in zip(*rates)]
    print()
    for (checkout, _), values in zip(trees, rates):
        print(f"{checkout.name}: median {statistics.median(values):,.0f} words/s")
    listed = ", ".join(f"{r:.2f}x" for r in ratios)
    print(f"{trees[1][0].name}/{trees[0][0].name} per repeat: {listed}; median {statistics.median(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
