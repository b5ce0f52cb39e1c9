"""Ray Data: `ElmoEmbedder` under `map_batches` on a local Ray equals `embed_sentences`, also when an actor dies."""

from __future__ import annotations

import os

import numpy as np
import pytest

from elmo_core import ElmoError, embed_sentences, load_elmo, save_model_folder
from elmo_core.apps.engines.ray_data import ElmoEmbedder
from tests.conftest import make_tiny_elmo

ray = pytest.importorskip("ray", reason="Ray Data is the extra elmo-bilm[ray]")


LINES = [f"line {i} : " + " ".join(["word"] * (i % 7)) + (" ." if i % 3 else "") for i in range(40)] + ["", "  "]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    save_model_folder(make_tiny_elmo(), folder)
    return folder


def reference(model_folder, lines=LINES):
    return embed_sentences(load_elmo(model_folder), [text.split() for text in lines])


def embed_with_ray(embedder, model_folder, **kwargs):
    ds = ray.data.from_items([{"line": i, "text": text} for i, text in enumerate(LINES)], override_num_blocks=4)
    ds = ds.map_batches(
        embedder, fn_constructor_kwargs={"model": str(model_folder), **kwargs}, concurrency=1, num_cpus=1, batch_size=8
    )
    return sorted(ds.take_all(), key=lambda row: row["line"])


@pytest.mark.parametrize("store_dtype", ["float32", "float16"])
def test_ray_rows_equal_embed_sentences(local_ray, model_folder, store_dtype):
    rows = embed_with_ray(ElmoEmbedder, model_folder, store_dtype=store_dtype)
    assert [row["line"] for row in rows] == list(range(len(LINES)))
    for row, text, vectors in zip(rows, LINES, reference(model_folder)):
        assert list(row["tokens"]) == text.split()
        assert [text[a:b] for a, b in row["offsets"]] == text.split()
        got = np.array([np.stack(layer) if len(layer) else np.zeros((0, 16)) for layer in row["vectors"]])
        if store_dtype == "float32":
            np.testing.assert_allclose(got, vectors, atol=1e-6, rtol=0)
        else:
            np.testing.assert_allclose(got, vectors, atol=0, rtol=2**-11)  # float16 rounding: half an ulp


def test_a_killed_actor_is_retried_and_every_line_comes_once(local_ray, model_folder, tmp_path):
    marker = tmp_path / "killed"

    class DiesOnce(ElmoEmbedder):  # defined here, so Ray ships it by value
        def __call__(self, batch):
            if 20 in list(batch["line"]) and not marker.exists():
                marker.touch()
                os._exit(1)  # the actor's process dies mid-job
            return super().__call__(batch)

    rows = embed_with_ray(DiesOnce, model_folder)
    assert marker.exists()
    assert [row["line"] for row in rows] == list(range(len(LINES)))
    for row, vectors in zip(rows, reference(model_folder)):
        got = np.array([np.stack(layer) if len(layer) else np.zeros((0, 16)) for layer in row["vectors"]])
        np.testing.assert_allclose(got, vectors, atol=1e-6, rtol=0)


def test_the_actor_runs_with_the_cpus_ray_gave_it(local_ray, model_folder):
    @ray.remote(num_cpus=2)
    def threads():
        return ElmoEmbedder(str(model_folder)).threads

    assert ray.get(threads.remote()) == 2


def test_outside_a_ray_worker_the_processs_thread_policy_is_left_alone(model_folder):
    from elmo_core.runtime.threads import thread_policy

    before = thread_policy()
    assert ElmoEmbedder(str(model_folder), threads=1).threads == 1
    assert thread_policy() == before


def test_a_batch_without_text_or_tokens_is_refused_and_bad_bytes_name_the_line(model_folder):
    embedder = ElmoEmbedder(str(model_folder), threads=1)
    with pytest.raises(ValueError, match="'text' column"):
        embedder({"value": np.array(["a b"])})
    with pytest.raises(ElmoError, match="line 3 is not UTF-8"):
        embedder({"line": np.array([3]), "text": np.array([b"\xff\xfe a"], dtype=object)})
    table = embedder({"tokens": np.array([np.array(["a", "b"]), np.array([], dtype=str)], dtype=object)})
    assert table.column("offsets").to_pylist() == [None, None]
    assert table.column("tokens").to_pylist() == [["a", "b"], []]
