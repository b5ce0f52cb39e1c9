"""Peak memory of loading a model and of `elmo embed`, each in a fresh process.

Part 1, load and embed (issue 16): for the original shape (93.6M parameters, random
weights in the published bilm-tf layout, written with `save_bilm_tf` as options.json +
weights.hdf5, and the same weights as a model folder) and the shipped default model:

- the peak RSS of a process that imports the `elmo` command, h5py and safetensors and
  stops (the baseline), and of one that also builds the model (which holds each weight
  once, by construction);
- the peak RSS of a process that loads the model the way `elmo embed` does
  (`elmo_core.apps.cli.shared.load_model`), and how much more than the built model that is;
- the peak RSS and wall time of `elmo embed` (all layers, 512 sentences of enwiki2015
  validation text, 5..60 tokens, as `benchmarks.common.load_sentences` samples them) at
  `--batch-size 32` and `--batch-size 256`.

Part 2, flat in the input size: the peak RSS of `elmo embed --layers top` with the
default model on the first 100k and the first 1M whitespace tokens of enwiki2015 train
shard 01 (whole lines: paragraphs), and their ratio.

Peaks are `ru_maxrss` of the measured child alone (`os.wait4`), in MiB. Nothing is
asserted; the script prints a report with the machine's CPU model, flags and load.

Usage (from the repository root):

    .venv/bin/python -m benchmarks.bench_memory
    .venv/bin/python -m benchmarks.bench_memory --skip-flat        # part 1 only (about 3 min)
"""

from __future__ import annotations

import argparse
import datetime
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import format_table, from_repo, load_average, load_sentences, machine_line
from elmo_core import PUBLISHED_OPTIONS, Elmo, load_model_folder, save_bilm_tf, save_model_folder
from elmo_core.files.model_folder import default_model_dir

DEFAULT_DATA_DIR = Path("../shared/data/lm/enwiki2015")  # relative to the repository root
BIN = Path(sys.executable).parent


# Runs the command and prints its own peak RSS and wall time. It must be a fresh, small
# process: a process started straight from this one (vfork + exec) inherits this
# process's peak as its ru_maxrss, which would hide the measured command's own.
_MEASURE = (
    "import os, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "err = p.stderr.read()\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "p.returncode = os.waitstatus_to_exitcode(status)\n"
    "sys.stderr.buffer.write(err)\n"
    "print(p.returncode, usage.ru_maxrss, time.perf_counter() - start)\n"
)


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run `command` in a fresh process; its own peak RSS in MiB, wall seconds, last stderr line."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, env=env)
    if not done.stdout.strip():
        raise RuntimeError(f"{' '.join(command)}: the measuring process failed:\n{done.stderr}")
    returncode, peak, seconds = done.stdout.split()
    if returncode != "0":
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return int(peak) / (2**20 if sys.platform == "darwin" else 2**10), float(seconds), last


def write_original(folder: Path) -> tuple[list[str], list[str]]:
    """Random original-shape weights as bilm-tf files and as a model folder; their CLI arguments."""
    torch.manual_seed(0)
    options = PUBLISHED_OPTIONS["original"]
    elmo = Elmo(options, dropout=0.0)
    save_bilm_tf(elmo, folder / "weights.hdf5")
    data = options.to_dict()
    (folder / "options.json").write_text(json.dumps({k: data[k] for k in ("lstm", "char_cnn")}), encoding="utf-8")
    save_model_folder(elmo, folder / "model")
    return (
        ["--options", str(folder / "options.json"), "--weights", str(folder / "weights.hdf5")],
        ["--model", str(folder / "model")],
    )


def load_command(model_args: list[str]) -> list[str]:
    """A fresh process that loads the model as `elmo embed` does, then exits."""
    values = dict(zip(model_args[::2], model_args[1::2]))
    code = (
        "import sys; from pathlib import Path; from elmo_core.apps.cli.shared import load_model; "
        "a = [None if x == '-' else Path(x) for x in sys.argv[1:]]; load_model(*a)"
    )
    return [
        sys.executable,
        "-c",
        code,
        values.get("--model", "-"),
        values.get("--options", "-"),
        values.get("--weights", "-"),
    ]


def first_tokens(path: Path, count: int, out: Path) -> int:
    """Write the first lines of an xz text holding `count` whitespace tokens; the tokens written."""
    total = 0
    with lzma.open(path, "rt", encoding="utf-8") as lines, open(out, "w", encoding="utf-8") as target:
        for line in lines:
            if total >= count:
                break
            target.write(line if line.endswith("\n") else line + "\n")
            total += len(line.split())
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="enwiki2015 folder (relative paths: from the repository root)",
    )
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the measured processes (default 1)")
    parser.add_argument("--batch-sizes", default="32,256")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--flat-tokens", default="100000,1000000", help="input sizes of part 2, in tokens")
    parser.add_argument("--skip-flat", action="store_true", help="part 1 only")
    parser.add_argument(
        "--skip-original", action="store_true", help="no original-shape rows (they need 2 GB of disk and ~3 min)"
    )
    args = parser.parse_args(argv)
    data_dir = from_repo(args.data_dir)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    elmo = str(BIN / "elmo")

    print("Peak memory benchmark (python -m benchmarks.bench_memory)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"threads  OMP_NUM_THREADS={args.threads} in the measured processes")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        work = Path(tmp)
        sentences, source = load_sentences(args.data_dir / "valid.txt.xz", args.sentences)
        text = work / "sentences.txt"
        text.write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
        print(f"input    {source}: {len(sentences)} sentences, {sum(map(len, sentences))} tokens")
        print()

        models: list[tuple[str, str, list[str], int]] = []
        if not args.skip_original:
            hdf5_args, folder_args = write_original(work)
            models += [("original", "hdf5", hdf5_args, 93_600_848), ("original", "folder", folder_args, 93_600_848)]
        default_params = sum(p.numel() for p in load_model_folder(default_model_dir()).parameters())
        models.append(("default", "folder", ["--model", str(default_model_dir())], default_params))

        imports = "import elmo_core.apps.cli, h5py, safetensors.torch"
        base, _, _ = measure([sys.executable, "-c", imports], env)
        rows = []
        for shape, source_kind, model_args, params in models:
            weights_mib = params * 4 / 2**20
            options = (
                "PUBLISHED_OPTIONS['original']" if shape == "original" else "read_model_config(default_model_dir())[0]"
            )
            built, _, _ = measure(
                [
                    sys.executable,
                    "-c",
                    (
                        f"{imports}; from elmo_core import Elmo, PUBLISHED_OPTIONS, read_model_config; "
                        f"from elmo_core.files import default_model_dir; Elmo({options})"
                    ),
                ],
                env,
            )
            load, load_s, _ = measure(load_command(model_args), env)
            row = [
                shape,
                source_kind,
                f"{weights_mib:.0f}",
                f"{base:.0f}",
                f"{built:.0f}",
                f"{load:.0f}",
                f"{load - built:.0f}",
            ]
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                peak, seconds, last = measure(
                    [
                        elmo,
                        "embed",
                        str(text),
                        str(work / "out.hdf5"),
                        *model_args,
                        "--batch-size",
                        str(batch),
                        "--no-progress",
                    ],
                    env,
                )
                row += [f"{peak:.0f}", f"{seconds:.1f}"]
                print(f"  {shape} {source_kind} batch {batch}: peak {peak:.0f} MiB, {seconds:.1f} s", flush=True)
            rows.append(row)
        header = ["shape", "from", "weights MiB", "baseline MiB", "built MiB", "load peak MiB", "load - built"]
        for batch in args.batch_sizes.split(","):
            header += [f"embed b{batch} MiB", f"b{batch} s"]
        print()
        print(format_table(header, rows))
        print(
            "\nbaseline = a process that imports the elmo command, h5py and safetensors; built = that + the model "
            "built (each weight once, by construction);\nload = baseline + the model loaded as elmo embed loads it "
            "(load - built = what loading holds beyond the weights);\nembed = elmo embed (all layers) on the input "
            "above, in a fresh process, --batch-size B."
        )

        if not args.skip_flat:
            print()
            shard = data_dir / "train" / "train-01.txt.xz"
            if not shard.is_file():
                print(f"part 2 skipped: {shard} not found")
            else:
                results = []
                for count in (int(c) for c in args.flat_tokens.split(",")):
                    path = work / f"first_{count}.txt"
                    tokens = first_tokens(shard, count, path)
                    out = work / "flat.hdf5"
                    peak, seconds, last = measure(
                        [elmo, "embed", str(path), str(out), "--layers", "top", "--no-progress"], env
                    )
                    out.unlink()
                    results.append((tokens, peak, seconds))
                    print(
                        f"  default model, --layers top, {tokens} tokens: peak {peak:.0f} MiB, {seconds:.0f} s",
                        flush=True,
                    )
                print()
                print(
                    format_table(
                        ["input tokens", "peak RSS MiB", "seconds", "peak / first"],
                        [[str(t), f"{p:.0f}", f"{s:.0f}", f"{p / results[0][1]:.3f}"] for t, p, s in results],
                    )
                )
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s; load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
