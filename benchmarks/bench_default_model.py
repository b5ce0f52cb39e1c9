"""Load time and CPU inference speed of model folders, e.g. a new default model against the old one.

What is measured, per model folder, each in a fresh process:

- load s: `import elmo_core` + `load_model_folder(folder)`, as a user's first call pays it
  (interpreter start-up excluded);
- tokens/s: `embed_sentences(model, sentences, layers="all", batch_size=B)` on real enwiki2015
  validation sentences (the sample `benchmarks.common.load_sentences` takes), real tokens only, after one
  warm-up batch;
- the ratio of the model's spec GFLOP/s (docs/bilm_tf.md section 11, `benchmarks.common.flops_per_position`)
  to the fp32 GEMM rate measured in the same process, so that runs on busy or different
  machines compare.

Folders run interleaved, `--repeats` times, and the best of each is kept, so that load from
other processes hits every folder alike. Nothing is asserted about speed.

    .venv/bin/python -m benchmarks.bench_default_model [FOLDER ...] --threads 2 --batch-size 32

Without FOLDER: the shipped default model. To compare with the previous one:
`mkdir -p OLD && git archive 50d1767 core/default_model | tar -x -C OLD` (50d1767: the last
commit with the previous model) and pass OLD/core/default_model too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.common import DEFAULT_DATA, REPO_ROOT, child_env, from_repo, load_average, machine_line
from elmo_core.files.model_folder import default_model_dir

CHILD = """
import json, sys, time
start = time.perf_counter()
import elmo_core
model = elmo_core.load_model_folder({folder!r}, dropout=0.0)
load_s = time.perf_counter() - start
from pathlib import Path
from benchmarks.common import flops_per_position, gemm_gflops, load_sentences
sentences, _ = load_sentences(Path({data!r}), {count})
elmo_core.embed_sentences(model, sentences[:{batch}], batch_size={batch})
start = time.perf_counter()
elmo_core.embed_sentences(model, sentences, batch_size={batch})
seconds = time.perf_counter() - start
tokens = sum(len(s) for s in sentences)
gflops = flops_per_position(model.options) * (tokens + 2 * len(sentences)) / seconds / 1e9
print(json.dumps({{"load_s": load_s, "tokens_per_s": tokens / seconds, "gflops": gflops,
                  "gemm_gflops": gemm_gflops(2048, 2048, 2048)}}))
"""


def measure(folder: Path, args: argparse.Namespace) -> dict:
    """One fresh process: load time, tokens/s and GEMM rate for `folder` (see the module docstring)."""
    code = CHILD.format(
        folder=str(folder),
        data=str(args.data),
        count=args.sentences,
        batch=args.batch_size,
    )
    env = {"OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1", "PATH": ""}
    env["PYTHONPATH"] = child_env()["PYTHONPATH"]  # a bare environment, but one that imports `benchmarks`
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {folder} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="model folders (default: the shipped default model)")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the measured processes")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per embed batch")
    parser.add_argument("--sentences", type=int, default=512, help="sentences timed per run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per folder; the best is kept")
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="enwiki2015 valid.txt.xz (synthetic if missing)"
    )
    args = parser.parse_args(argv)
    args.data = from_repo(args.data)
    folders = args.folders or [default_model_dir()]
    print(machine_line())
    print(f"threads  OMP_NUM_THREADS={args.threads} in the measured processes")
    print(f"{args.sentences} sentences of {args.data.name}, batch {args.batch_size}; best of {args.repeats} runs")
    best: dict[Path, dict] = {}
    for _ in range(args.repeats):
        for folder in folders:
            run = measure(folder, args)
            keep = best.setdefault(folder, run)
            keep["load_s"] = min(keep["load_s"], run["load_s"])
            if run["tokens_per_s"] > keep["tokens_per_s"]:
                keep.update({k: run[k] for k in ("tokens_per_s", "gflops", "gemm_gflops")})
    print("| folder | load s | tokens/s | GFLOP/s | GEMM GFLOP/s | ratio |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for folder, r in best.items():
        name = folder.resolve().relative_to(REPO_ROOT) if folder.resolve().is_relative_to(REPO_ROOT) else folder
        print(
            f"| {name} | {r['load_s']:.2f} | {r['tokens_per_s']:,.0f} "
            f"| {r['gflops']:.1f} | {r['gemm_gflops']:.1f} | {r['gflops'] / r['gemm_gflops']:.3f} |"
        )
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
