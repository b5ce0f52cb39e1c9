"""Spark: `elmo_udf` on a local SparkSession equals `embed_sentences`, also when a task is retried."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from elmo_core import embed_sentences, load_elmo, save_model_folder
from tests.conftest import make_tiny_elmo

pyspark = pytest.importorskip("pyspark", reason="Spark is the extra elmo-bilm[spark]")

from elmo_core.apps.engines.spark import elmo_udf, make_predict_fn, spark_schema  # noqa: E402

LINES = ["Hello  world .", "", None, "naïve 😀 中华人民共和国\tend", "The river bank , by the bank ."] * 4


@pytest.fixture(scope="module")
def spark():
    """local[2, 3]: two cores, and a failed task is tried up to 3 times (as on a cluster)."""
    from pyspark.sql import SparkSession

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers run this environment's Python
    session = (
        SparkSession.builder.master("local[2, 3]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # The JVM outlives stop(): end it and wait, so that its exit does not load the CPUs while later
    # tests compare runs whose thread counts follow the load.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.stdin.close()  # the JVM exits when its stdin closes
            proc.wait(timeout=60)
        SparkContext._gateway = SparkContext._jvm = None
    if before is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = before


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    save_model_folder(make_tiny_elmo(), folder)
    return folder


def collect(spark, udf):
    df = spark.createDataFrame(list(enumerate(LINES)), "line long, text string").repartition(2)
    rows = df.withColumn("elmo", udf("line", "text")).select("elmo.*").collect()
    return sorted(rows, key=lambda row: row.line)


def assert_rows_equal_embed_sentences(rows, model_folder):
    reference = embed_sentences(load_elmo(model_folder), [(text or "").split() for text in LINES])
    assert [row.line for row in rows] == list(range(len(LINES)))
    for row, text, vectors in zip(rows, LINES, reference):
        text = text or ""
        assert row.tokens == text.split()
        assert [text[a:b] for a, b in row.offsets] == text.split()
        got = np.array([np.array(layer, dtype=np.float32).reshape(-1, 16) for layer in row.vectors])
        np.testing.assert_allclose(got, vectors, atol=1e-6, rtol=0)


def test_spark_rows_equal_embed_sentences(spark, model_folder):
    assert_rows_equal_embed_sentences(collect(spark, elmo_udf(str(model_folder), batch_size=4)), model_folder)


def test_a_retried_spark_task_gives_the_rows_of_an_undisturbed_run(spark, model_folder, tmp_path):
    from pyspark.ml.functions import predict_batch_udf

    marker = str(tmp_path / "failed")

    def make_failing_once():
        predict = make_predict_fn(str(model_folder))

        def fails_once(lines, texts):
            if 7 in lines.tolist() and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("a lost executor")  # the task fails once; Spark runs it again
            return predict(lines, texts)

        return fails_once

    udf = predict_batch_udf(make_failing_once, return_type=spark_schema(), batch_size=4)
    rows = collect(spark, udf)
    assert os.path.exists(marker)
    assert_rows_equal_embed_sentences(rows, model_folder)
