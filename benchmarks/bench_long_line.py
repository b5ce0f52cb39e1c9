"""One very long line against the same text in short lines, through `elmo embed`'s embedding path.

`elmo embed` reads each input line as one sequence; a line longer than `window_tokens`
(1024) is cut into overlapping windows (`elmo_core.runtime.windows`) and its windows are
batched by the same budget of padded positions as short lines, each window counting 256
positions: the biLM steps them 256 steps at a time (`elmo_core.model.recurrence.time_chunks`). This script embeds the
same tokens twice with the shipped default model, `--layers top`, each time in a fresh
process:

- "long": all tokens as one line (no newline);
- "split": the same tokens as lines of `--line-tokens` tokens (25 by default),

at each `--batch-tokens` budget, through `iter_embeddings` (what `elmo embed` runs on
every piece of its input; the vectors are dropped as they come, as `elmo embed` writes
them out). It reports wall seconds, tokens per second, windows reported to the progress
callback, the resident memory after loading and a warm-up, and the peak resident memory
(VmHWM of the measured process alone), and per budget the ratios long / split of the
time, of the time per position the biLM reads (the long line's windows read their context
twice), and of the peak memory.

Input: the first `--tokens` whitespace tokens of enwiki2015 validation text when it is
present (`../shared/data/lm/enwiki2015/valid.txt.xz`), else Zipf-distributed made-up words
(`benchmarks.common`, seed 0); the header says which. Nothing is asserted.

Usage (from the repository root; about 3 minutes on 2 CPU cores):

    .venv/bin/python -m benchmarks.bench_long_line
    .venv/bin/python -m benchmarks.bench_long_line --tokens 100000 --batch-tokens 4096,32768
"""

from __future__ import annotations

import argparse
import datetime
import json
import lzma
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    DEFAULT_DATA,
    SEED,
    child_env,
    current_rss_mb,
    format_table,
    from_repo,
    load_average,
    machine_line,
    own_peak_rss_mb,
    synthetic_sentences,
    timed,
)

LAYOUTS = ("long", "split")


def input_tokens(data: Path, count: int) -> tuple[list[str], str]:
    """The first `count` whitespace tokens of the xz text at `data`, else made-up words; and their source."""
    if from_repo(data).is_file():
        tokens: list[str] = []
        with lzma.open(from_repo(data), "rt", encoding="utf-8") as lines:
            for line in lines:
                tokens += line.split()
                if len(tokens) >= count:
                    return tokens[:count], f"{data} (first {count} tokens)"
    words = [w for sentence in synthetic_sentences(random.Random(SEED), count // 20 + 1) for w in sentence]
    while len(words) < count:
        words += words
    return words[:count], f"synthetic (seed {SEED}; {data} not found or too small)"


def positions_read(count: int, line_tokens: int) -> dict[str, int]:
    """Positions the biLM reads for each layout: the long line's windows (with their context)
    and the split lines, each with its `<S>` and `</S>`."""
    from elmo_core.runtime.windows import plan_windows

    lines = [min(line_tokens, count - i) for i in range(0, count, line_tokens)]
    return {
        "long": sum(w.end - w.start + 2 for w in plan_windows(count)),
        "split": sum(n + 2 for n in lines),
    }


def measure(layout: str, budget: int, data: Path, count: int, line_tokens: int) -> dict[str, object]:
    """Run one measurement in this process (the child's side): load, warm up, embed, report."""
    from elmo_core import load_elmo
    from elmo_core.runtime.embedding import iter_embeddings

    tokens, _ = input_tokens(data, count)
    lines = [tokens] if layout == "long" else [tokens[i : i + line_tokens] for i in range(0, len(tokens), line_tokens)]
    model = load_elmo()
    warm = tokens[:3000]
    for _ in iter_embeddings(model, [warm, *[warm[i : i + line_tokens] for i in range(0, 3000, line_tokens)]]):
        pass  # one-time costs (first products, allocator) out of the timing
    windows = [0]

    def on_window(index: int, kept: int) -> None:
        windows[0] += 1

    def run() -> int:
        done = 0
        for _, vectors in iter_embeddings(model, lines, layers="top", batch_tokens=budget, on_window=on_window):
            done += vectors.shape[0]
        return done

    rss_before = current_rss_mb()
    done, seconds, others = timed(run)
    if done != len(tokens):
        raise AssertionError(f"embedded {done} tokens of {len(tokens)}")
    return {
        "seconds": seconds,
        "others": others,
        "windows": windows[0],
        "rss_before": rss_before,
        "peak": own_peak_rss_mb(),
    }


def run_child(layout: str, budget: int, args: argparse.Namespace) -> dict[str, object]:
    """`measure` in a fresh process (its own peak memory); its result."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_long_line",
        "--child",
        layout,
        "--batch-tokens",
        str(budget),
        "--tokens",
        str(args.tokens),
        "--line-tokens",
        str(args.line_tokens),
        "--data",
        str(args.data),
    ]
    done = subprocess.run(command, env=child_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{layout} at {budget} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(budget: int, repeat: int, layout: str, r: dict[str, object], tokens: int) -> list[str]:
    """One table row: a measurement of `run_child`."""
    others, seconds, rss, peak = r["others"], float(r["seconds"]), r["rss_before"], r["peak"]  # type: ignore[arg-type]
    return [
        str(budget),
        str(repeat + 1),
        layout,
        f"{seconds:.1f}",
        f"{tokens / seconds:.0f}",
        str(r["windows"]),
        f"{rss:.0f}" if rss is not None else "?",
        f"{peak:.0f}" if peak is not None else "?",
        f"{others:.2f}" if others is not None else "?",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=50_000, help="tokens of input (default 50000)")
    parser.add_argument("--line-tokens", type=int, default=25, help="tokens per line of the split input (default 25)")
    parser.add_argument("--batch-tokens", default="4096,32768", help="budgets to compare (default 4096,32768)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="xz text (relative: from the repository root)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each layout per budget (default 3)")
    parser.add_argument("--child", choices=LAYOUTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.batch_tokens.split(",")]
    if args.child:
        print(json.dumps(measure(args.child, budgets[0], args.data, args.tokens, args.line_tokens)))
        return 0

    started = time.perf_counter()
    _, source = input_tokens(args.data, args.tokens)
    print("Long line against split text (python -m benchmarks.bench_long_line)")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(machine_line())
    print(f"input    {source}; long = one line, split = lines of {args.line_tokens} tokens")
    print("model    the shipped default model, layers top, window_tokens 1024 (context 128); thread policy auto")
    read = positions_read(args.tokens, args.line_tokens)
    print(f"read     long {read['long']:,} positions (windows with <S> and </S>), split {read['split']:,}")
    print()
    header = [
        "budget",
        "repeat",
        "layout",
        "seconds",
        "tokens/s",
        "windows",
        "RSS before MiB",
        "peak MiB",
        "others' CPUs",
    ]
    rows, ratios = [], []
    for budget in budgets:
        time_ratios, peak_ratios = [], []
        for repeat in range(args.repeats):  # long and split in turn: both see the same machine
            results = {layout: run_child(layout, budget, args) for layout in LAYOUTS}
            for layout, r in results.items():
                rows.append(_row(budget, repeat, layout, r, args.tokens))
                print(f"  {budget} #{repeat + 1} {layout}: {r['seconds']:.1f} s, peak {r['peak']} MiB", flush=True)
            time_ratios.append(results["long"]["seconds"] / results["split"]["seconds"])  # type: ignore[operator]
            peak_ratios.append(results["long"]["peak"] / results["split"]["peak"])  # type: ignore[operator]
        time_ratio = statistics.median(time_ratios)
        each = ", ".join(f"{t:.2f}" for t in time_ratios)
        ratios.append(
            f"budget {budget}: long / split time {time_ratio:.2f} (repeats {each}), "
            f"per position read {time_ratio * read['split'] / read['long']:.2f}, "
            f"peak {statistics.median(peak_ratios):.2f} (medians)"
        )
    print()
    print(format_table(header, rows))
    print()
    print("\n".join(ratios))
    print(
        "\nwindows = calls of the progress callback (one per window of the long line); RSS before = after loading "
        "and a warm-up;\npeak = VmHWM of the measured process; others' CPUs = CPUs' worth of other processes' "
        "work during the run."
    )
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s; load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
