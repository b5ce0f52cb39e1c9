"""`benchmarks.bench_train` against two installs of the library, one process at a time, interleaved.

`bench_train --paths old,new` compares the library with a frozen older step. This driver
compares two versions of the library: each repeat runs this checkout's `bench_train
--paths new --repeats 1` once with each Python (a virtual environment with its own
`elmo_core` installed), so both meet fresh batches and build their kernels afresh. It
prints words/s per run, the load average around it, the medians and the per-repeat ratios.

Usage (from the repository root; the baseline's Python first):

    python -m benchmarks.bench_train_trees ../base/.venv/bin/python .venv/bin/python \\
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

from benchmarks.common import REPO_ROOT, load_average, machine_line

RATE = re.compile(r"repeat 0: \S+ new \S+ ([\d,]+) words/s")
WHERE = "import elmo_core, os; print(os.path.dirname(elmo_core.__file__))"


def run_once(python: str, bench_args: list[str]) -> float:
    """words/s of one `bench_train` run with `python`'s `elmo_core`."""
    command = [python, "-m", "benchmarks.bench_train", "--paths", "new", "--repeats", "1", *bench_args]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
    found = RATE.search(done.stdout)
    if found is None:
        raise RuntimeError(f"no words/s line in the output of {' '.join(command)}:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1).replace(",", ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pythons", nargs=2, help="two Python interpreters, the baseline's first")
    parser.add_argument("--repeats", type=int, default=5)
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    bench_args = argv[split + 1 :]
    names = []
    for python in args.pythons:
        where = subprocess.run([python, "-c", WHERE], capture_output=True, text=True, check=True).stdout.strip()
        names.append(where)
    print("bench_train against two installs (python -m benchmarks.bench_train_trees)")
    print(machine_line())
    print(f"runs     bench_train --paths new --repeats 1 {' '.join(bench_args)}")
    for k, (python, where) in enumerate(zip(args.pythons, names)):
        print(f"lib {k}    {python}: elmo_core from {where}")
    print(flush=True)
    rates: list[list[float]] = [[], []]
    for repeat in range(args.repeats):
        for k, python in enumerate(args.pythons):
            before = load_average()
            rates[k].append(run_once(python, bench_args))
            print(
                f"  repeat {repeat}: lib {k} {rates[k][-1]:,.0f} words/s (load {before} -> {load_average()})",
                flush=True,
            )
    ratios = [new / old for old, new in zip(*rates)]
    print()
    for k, values in enumerate(rates):
        print(f"lib {k}: median {statistics.median(values):,.0f} words/s")
    listed = ", ".join(f"{r:.2f}x" for r in ratios)
    print(f"lib 1 / lib 0 per repeat: {listed}; median {statistics.median(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
