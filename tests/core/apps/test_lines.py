"""The columnar output: `elmo embed OUTPUT.parquet` and the one batch path under every engine."""

from __future__ import annotations

import sys

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from elmo_core import ElmoError, embed_sentences, save_model_folder
from elmo_core.apps.embed_file import embed_file
from elmo_core.apps.embed_job import job_folder
from elmo_core.apps.lines import LineEmbedder, embed_lines
from tests.conftest import make_tiny_elmo
from tests.core.apps.test_embed_file import BIN, _free_port, run

LINES = ["Hello  world .", "", "naïve 😀 中华人民共和国\tend", "   ", "The river bank , by the bank ."] * 3


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    save_model_folder(make_tiny_elmo(), folder)
    return folder


def write_input(path, lines=LINES):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def parquet_rows(path):
    return {row["line"]: row for row in pq.read_table(path).to_pylist()}


def test_offsets_slice_each_token_out_of_its_line():
    elmo = make_tiny_elmo()
    rows = {row.index: row for row in embed_lines(elmo, LINES)}
    for i, text in enumerate(LINES):
        assert rows[i].tokens == text.split()
        assert [text[a:b] for a, b in rows[i].offsets] == text.split()


def test_embed_lines_equals_embed_sentences_in_both_store_dtypes():
    elmo = make_tiny_elmo()
    reference = embed_sentences(elmo, [text.split() for text in LINES])
    for row in embed_lines(elmo, LINES, store_dtype="float32"):
        assert row.vectors.dtype == np.float32
        np.testing.assert_allclose(row.vectors, reference[row.index], atol=1e-6, rtol=0)
    for row in embed_lines(elmo, LINES, store_dtype="float16"):
        assert row.vectors.dtype == np.float16
        np.testing.assert_array_equal(row.vectors, reference[row.index].astype(np.float16))


def test_pre_split_tokens_have_no_offsets_and_one_layer_choices_have_one_layer():
    elmo = make_tiny_elmo()
    tokens = [["a", "b"], [], None]
    rows = sorted(embed_lines(elmo, tokens=tokens, settings=None), key=lambda r: r.index)
    assert [r.offsets for r in rows] == [None, None, None]
    assert [r.vectors.shape for r in rows] == [(3, 2, 16), (3, 0, 16), (3, 0, 16)]
    from elmo_core import EmbedSettings

    top = sorted(embed_lines(elmo, tokens=tokens, settings=EmbedSettings(layers="top")), key=lambda r: r.index)
    assert top[0].vectors.shape == (1, 2, 16)
    np.testing.assert_allclose(top[0].vectors[0], embed_sentences(elmo, [["a", "b"]], layers="top")[0], atol=1e-6)


def test_a_line_that_is_not_utf8_is_an_error_naming_it(model_folder):
    embedder = LineEmbedder(model_folder)
    with pytest.raises(ElmoError, match=r"line 7 is not UTF-8"):
        embedder.table([b"fine", b"caf\xe9"], lines=[6, 7])


def test_elmo_embed_parquet_equals_elmo_embed_hdf5(model_folder, tmp_path):
    text = write_input(tmp_path / "in.txt")
    common = ["--model", model_folder, "--piece-tokens", 8, "--batch-tokens", 40, "--no-progress"]
    for out in ("out.hdf5", "out.parquet", "half.parquet"):
        extra = ["--store-dtype", "float16"] if out.startswith("half") else []
        done = run(BIN / "elmo", "embed", text, tmp_path / out, *common, *extra)
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stderr  # .parquet is a suffix elmo embed knows
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("line").to_pylist() == list(range(len(LINES)))  # every line once, in order
    rows, half = parquet_rows(tmp_path / "out.parquet"), parquet_rows(tmp_path / "half.parquet")
    with h5py.File(tmp_path / "out.hdf5", "r") as hdf5:
        assert sorted(hdf5, key=int) == [str(i) for i in range(len(LINES))]
        for i, text_line in enumerate(LINES):
            vectors = hdf5[str(i)][()]
            assert rows[i]["tokens"] == list(hdf5[str(i)].attrs["tokens"]) == text_line.split()
            assert [text_line[a:b] for a, b in rows[i]["offsets"]] == text_line.split()
            got = np.array(rows[i]["vectors"], dtype=np.float32).reshape(vectors.shape)
            np.testing.assert_array_equal(got, vectors)
            got16 = np.array(half[i]["vectors"], dtype=np.float16).reshape(vectors.shape)
            np.testing.assert_array_equal(got16, vectors.astype(np.float16))


def test_parquet_output_resumes_and_refuses_another_store_dtype(tmp_path):
    elmo = make_tiny_elmo()
    text = write_input(tmp_path / "in.txt")
    out = tmp_path / "out.parquet"
    calls = [0]

    def stop_after_two_lines():
        calls[0] += 1
        return calls[0] == 8  # mid-job: some pieces done, one being written

    with pytest.raises(KeyboardInterrupt):
        embed_file(elmo, text, out, piece_tokens=8, stop_requested=stop_after_two_lines)
    assert not out.exists() and any(job_folder(out).glob("piece-*.parquet"))
    with pytest.raises(ElmoError, match="store_dtype"):
        embed_file(elmo, text, out, piece_tokens=8, store_dtype="float16")
    result = embed_file(elmo, text, out, piece_tokens=8)
    assert result.pieces_resumed > 0 and not job_folder(out).exists()
    reference = embed_sentences(elmo, [t.split() for t in LINES])
    rows = parquet_rows(out)
    assert sorted(rows) == list(range(len(LINES)))
    for i, vectors in enumerate(reference):
        got = np.array(rows[i]["vectors"], dtype=np.float32).reshape(vectors.shape)
        np.testing.assert_allclose(got, vectors, atol=1e-6, rtol=0)


def test_two_torchrun_processes_write_the_single_process_parquet(model_folder, tmp_path):
    text = write_input(tmp_path / "in.txt")
    common = ["--model", model_folder, "--piece-tokens", 8, "--batch-tokens", 40, "--no-progress"]
    single = run(BIN / "elmo", "embed", text, tmp_path / "one.parquet", *common)
    assert single.returncode == 0, single.stderr
    two = run(
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
        "-m", "elmo_core", "embed", text, tmp_path / "two.parquet", *common,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr
    one, other = pq.read_table(tmp_path / "one.parquet"), pq.read_table(tmp_path / "two.parquet")
    assert one.column("line").to_pylist() == other.column("line").to_pylist() == list(range(len(LINES)))
    assert one.column("tokens").equals(other.column("tokens")) and one.column("offsets").equals(other.column("offsets"))
    a = np.concatenate([np.array(v, dtype=np.float32).ravel() for v in one.column("vectors").to_pylist()])
    b = np.concatenate([np.array(v, dtype=np.float32).ravel() for v in other.column("vectors").to_pylist()])
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
