"""`elmo embed` to hdf5 and Parquet, Ray Data and Spark, on the same text and the same 2 cores.

Each run embeds the lines of the first `--tokens` whitespace tokens of enwiki2015 validation
text (`../shared/data/lm/enwiki2015/valid.txt.xz`; the script stops with a message
without it) with the shipped default model, all layers, in a fresh process:

- `embed-hdf5`, `embed-parquet`, `embed-parquet-f16`: `embed_file` (what `elmo embed` runs),
  one process, the thread rule's threads (2 on an idle 2-core machine);
- `ray`: `read_text -> map_batches(ElmoEmbedder) -> write_parquet`, 2 actors x 1 CPU, on
  `ray.init(num_cpus=3)` (the third logical CPU lets the read and write tasks run beside
  the actors, which hold the 2 cores);
- `spark`: `spark.read.text -> withColumn(elmo_udf) -> write.parquet` on `local[2]`.

Timed: from the model load (or the engine's job start, its session already up) to the
output written. Reported: words/s, the ratio to `embed-hdf5`, output bytes per token, and
the peak resident memory of each worker (VmHWM; the engine's own processes not counted).
The load average and the machine's other work are in the header: the machine is shared.

Usage (from the repository root; about 5 minutes on 2 CPU cores):

    .venv/bin/python -m benchmarks.bench_engines
    .venv/bin/python -m benchmarks.bench_engines --tokens 20000 --runs embed-hdf5,ray
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

from benchmarks.common import DEFAULT_DATA, child_env, format_table, from_repo, load_average, machine_line, timed

RUNS = ("embed-hdf5", "embed-parquet", "embed-parquet-f16", "ray", "spark")


def write_input(data: Path, count: int, path: Path) -> int:
    """The whole lines holding the first `count` tokens of `data`, into `path`; returns their tokens."""
    tokens, lines = 0, []
    with lzma.open(data, "rt", encoding="utf-8") as source:
        for line in source:
            lines.append(line.rstrip("\n"))
            tokens += len(line.split())
            if tokens >= count:
                break
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokens


def peak_mb() -> float:
    return int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) / 1024


def record_peak(folder: str) -> None:
    """Write this worker's peak memory to `folder/<pid>` (the driver reads them all)."""
    Path(folder, str(os.getpid())).write_text(f"{peak_mb():.0f}")


def run_embed(text: Path, out: Path, store_dtype: str) -> None:
    from elmo_core import load_elmo
    from elmo_core.apps.embed_file import embed_file

    embed_file(load_elmo(dropout=0.0), text, out, store_dtype=store_dtype)


def run_ray(text: Path, out: Path, peaks: str) -> None:
    import ray

    from elmo_core.apps.engines.ray_data import ElmoEmbedder

    class Measured(ElmoEmbedder):
        def __call__(self, batch):  # noqa: ANN001, ANN204
            table = super().__call__(batch)
            record_peak(peaks)
            return table

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False

    def job() -> None:
        ds = ray.data.read_text(str(text), drop_empty_lines=False)
        ds = ds.map_batches(Measured, concurrency=2, num_cpus=1, batch_size=256)
        ds.write_parquet(str(out))

    print(json.dumps({"seconds": timed(job)[1]}))
    ray.shutdown()


def run_spark(text: Path, out: Path, peaks: str) -> None:
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from elmo_core.apps.engines.spark import make_predict_fn, spark_schema

    def make():  # noqa: ANN202
        predict = make_predict_fn()

        def measured(lines, texts):  # noqa: ANN001, ANN202
            rows = predict(lines, texts)
            record_peak(peaks)
            return rows

        return measured

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    udf = predict_batch_udf(make, return_type=spark_schema(), batch_size=256)

    def job() -> None:
        df = spark.read.text(str(text)).withColumn("line", F.monotonically_increasing_id()).repartition(2)
        df.withColumn("elmo", udf("line", "value")).select("elmo.*").write.parquet(str(out))

    print(json.dumps({"seconds": timed(job)[1]}))
    spark.stop()


def child(run: str, text: Path, out: Path, peaks: str) -> None:
    if run == "ray":
        return run_ray(text, out, peaks)
    if run == "spark":
        return run_spark(text, out, peaks)
    dtype = "float16" if run.endswith("f16") else "float32"
    _, seconds, _ = timed(lambda: run_embed(text, out, dtype))
    record_peak(peaks)
    print(json.dumps({"seconds": seconds}))


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*.parquet"))


def measure(run: str, text: Path, work: Path) -> dict:
    out = work / {"embed-hdf5": "out.hdf5", "ray": "ray", "spark": "spark"}.get(run, f"{run}.parquet")
    peaks = work / f"peaks-{run}"
    peaks.mkdir()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_engines", "--child", run, str(text), str(out), str(peaks)],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    if done.returncode != 0:
        raise SystemExit(f"{run} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    workers = sorted(float(p.read_text()) for p in peaks.iterdir())
    return {
        **result,
        "process_seconds": time.perf_counter() - started,
        "bytes": size(out),
        "peak_mb": workers,
    }


def float16_error(float32: Path, float16: Path) -> str:
    """The largest error of the float16 store against the float32 one, absolute and relative to max |v|."""
    if not (float32.is_file() and float16.is_file()):
        return "not measured (needs the runs embed-parquet and embed-parquet-f16)"
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def values(path: Path) -> np.ndarray:
        column = pq.read_table(path, columns=["vectors"]).column("vectors")
        return pc.list_flatten(pc.list_flatten(pc.list_flatten(column))).to_numpy().astype(np.float32)

    exact, half = values(float32), values(float16)
    worst = float(np.abs(exact - half).max())
    return f"largest |error| {worst:.2g} over {exact.size} values, largest |v| {np.abs(exact).max():.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--tokens", type=int, default=50_000)
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run, text, out, peaks = args.child
        return child(run, Path(text), Path(out), peaks)
    data = from_repo(args.data)
    if not data.is_file():
        raise SystemExit(f"{args.data} not found: this benchmark needs enwiki2015's validation text (../shared).")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        tokens = write_input(data, args.tokens, work / "input.txt")
        load_before = load_average()
        results = {run: measure(run, work / "input.txt", work) for run in args.runs.split(",")}
        f16 = float16_error(work / "embed-parquet.parquet", work / "embed-parquet-f16.parquet")
    base = results.get("embed-hdf5")
    rows = [
        [
            run,
            f"{tokens / r['seconds']:.0f}",
            f"{base['seconds'] / r['seconds']:.2f}" if base else "-",
            f"{r['bytes'] / tokens:.0f}",
            f"{r['bytes'] / base['bytes']:.2f}" if base else "-",
            " ".join(f"{p:.0f}" for p in r["peak_mb"]),
            f"{r['process_seconds']:.0f}",
        ]
        for run, r in results.items()
    ]
    header = ["run", "words/s", "x embed-hdf5", "bytes/token", "bytes x hdf5", "peak MiB per worker", "process s"]
    report = "\n".join(
        [
            f"bench_engines  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            machine_line(),
            f"input    {tokens} tokens of {args.data}; default model, all layers; load average before {load_before}, "
            f"after {load_average()}",
            "",
            format_table(header, rows),
            "",
            f"float16 store: {f16}",
        ]
    )
    print(report)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
