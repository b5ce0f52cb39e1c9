"""Users' files read the same with a byte-order mark and Windows line endings, everywhere."""

from __future__ import annotations

import lzma

import numpy as np
import pytest

from elmo_core import ElmoError, read_options
from elmo_core.apps.probe import read_conll_column
from elmo_core.apps.training.corpus import iter_sentences
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.files.text_files import check_input_file, iter_lines, read_text
from tests.conftest import make_tiny_options

BOM = b"\xef\xbb\xbf"


def variants(tmp_path, name: str, text: str):
    """The same text as plain UTF-8, with a BOM, and with a BOM and CRLF line endings."""
    paths = []
    for kind, data in (
        ("plain", text.encode("utf-8")),
        ("bom", BOM + text.encode("utf-8")),
        ("crlf", BOM + text.replace("\n", "\r\n").encode("utf-8")),
    ):
        path = tmp_path / f"{kind}_{name}"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_read_text_and_iter_lines_drop_the_bom_and_read_crlf_as_lf(tmp_path):
    text = "The cat sat .\n\nA \r stray carriage return stays .\n"
    for path in variants(tmp_path, "a.txt", text):
        assert read_text(path) == text  # the lone \r inside a line is kept
        assert list(iter_lines(path)) == ["The cat sat .", "", "A \r stray carriage return stays ."]
    xz = tmp_path / "a.txt.xz"
    with lzma.open(xz, "wb") as f:
        f.write(BOM + text.replace("\n", "\r\n").encode("utf-8"))
    assert list(iter_lines(xz)) == ["The cat sat .", "", "A \r stray carriage return stays ."]


def test_training_text_conll_vocabulary_and_options_files_ignore_bom_and_crlf(tmp_path):
    sentences = [list(iter_sentences([p])) for p in variants(tmp_path, "train.txt", "The cat sat .\nA dog .\n")]
    assert sentences[0] == sentences[1] == sentences[2] == [["The", "cat", "sat", "."], ["A", "dog", "."]]
    conll = [read_conll_column(p, -1) for p in variants(tmp_path, "a.conll", "-DOCSTART- O\n\nJohn B-PER\nran O\n")]
    assert conll[0] == conll[1] == conll[2] == ([["John", "ran"]], [["B-PER", "O"]])
    vocabs = [Vocabulary.load(p).tokens for p in variants(tmp_path, "vocab.txt", "<S>\n</S>\n<UNK>\nthe\n")]
    assert vocabs[0] == vocabs[1] == vocabs[2] and vocabs[0][0] == "<S>"
    import json

    options = json.dumps(make_tiny_options().to_dict(), indent=1)
    loaded = [read_options(p) for p in variants(tmp_path, "options.json", options)]
    assert loaded[0] == loaded[1] == loaded[2] == make_tiny_options()


def test_input_file_checks_are_one_clear_line(tmp_path):
    with pytest.raises(ElmoError, match=r"^INPUT .* is a folder; give the path of a file\.$"):
        check_input_file(tmp_path, "INPUT")
    with pytest.raises(ElmoError, match=r"^INPUT .*missing.txt does not exist\.$"):
        check_input_file(tmp_path / "missing.txt", "INPUT")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ElmoError, match=r"is not UTF-8 text \(line 1"):
        read_text(tmp_path / "latin1.txt")


@pytest.mark.parametrize("suffix", ["", ".xz", ".gz", ".bz2"])
def test_every_reader_names_the_file_and_line_of_bytes_that_are_not_utf8(tmp_path, suffix):
    import bz2
    import gzip

    data = b"<S>\t1\nthe\t2\ncaf\xe9\t3\n"
    compress = {"": bytes, ".xz": lzma.compress, ".gz": gzip.compress, ".bz2": bz2.compress}[suffix]
    path = tmp_path / f"bad.txt{suffix}"
    path.write_bytes(compress(data))
    readers = [
        lambda: list(iter_lines(path)),
        lambda: read_text(path),
        lambda: list(iter_sentences([path])),
        lambda: Vocabulary.load(path),
        lambda: read_conll_column(path, 1),
    ]
    for read in readers:
        with pytest.raises(ElmoError, match=rf"{path} is not UTF-8 text \(line 3: invalid continuation byte\)\. "):
            read()
    good = tmp_path / f"good.txt{suffix}"
    good.write_bytes(compress(b"\xef\xbb\xbfa b\r\nc\n"))
    assert list(iter_lines(good)) == ["a b", "c"]


@pytest.mark.parametrize(
    "encoding, says, fix",
    [
        ("utf-16", "is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8", "iconv -f UTF-16 -t UTF-8"),
        ("utf-32", "is UTF-32 text (it starts with a UTF-32 byte-order mark), not UTF-8", "iconv -f UTF-32 -t UTF-8"),
        ("utf-16-le", "a NUL byte in every other byte: it looks like UTF-16", "iconv -f UTF-16LE -t UTF-8"),
        ("utf-16-be", "a NUL byte in every other byte: it looks like UTF-16", "iconv -f UTF-16BE -t UTF-8"),
        ("cp1252", "is not UTF-8 text (line 2: invalid continuation byte)", "iconv -f CP1252 -t UTF-8"),
    ],
)
def test_text_in_another_encoding_is_named_with_the_command_that_converts_it(tmp_path, encoding, says, fix):
    from elmo_core.apps.pieces import plan_pieces

    path = tmp_path / "in file.txt"
    path.write_bytes("the river\ncafé au lait\n".encode(encoding))
    for read in (lambda: list(iter_lines(path)), lambda: read_text(path), lambda: plan_pieces(path, 100)):
        with pytest.raises(ElmoError) as err:
            read()
        message = str(err.value)
        assert str(path) in message and says in message, message
        assert f"{fix} '{path}' > '{tmp_path / 'in file.utf8.txt'}'" in message, message


@pytest.mark.parametrize("suffix", [".xz", ".gz", ".bz2"])
@pytest.mark.parametrize("damage", ["cut short", "garbled"])
def test_a_cut_short_or_damaged_archive_is_one_error_naming_the_file_in_every_reader(tmp_path, suffix, damage):
    import bz2
    import gzip

    from elmo_core.apps.pieces import plan_pieces

    rng = np.random.default_rng(0)
    text = "".join(" ".join(rng.choice(["a", "bb", "ccc", "dddd"], 12)) + "\n" for _ in range(3000)).encode()
    compress = {".xz": lzma.compress, ".gz": gzip.compress, ".bz2": bz2.compress}[suffix]
    packed = compress(text)
    if damage == "cut short":
        packed = packed[: len(packed) // 2]
    else:  # bytes in the middle overwritten
        middle = len(packed) // 2
        packed = packed[:middle] + bytes(64) + packed[middle + 64 :]
    path = tmp_path / f"in.txt{suffix}"
    path.write_bytes(packed)
    readers = [lambda: list(iter_lines(path)), lambda: read_text(path), lambda: plan_pieces(path)]
    for read in readers:
        with pytest.raises(ElmoError, match=rf"{path} is a damaged or cut-short \{suffix} file \(after line \d+: "):
            read()


def _bomb(path, megabytes: int, head: bytes = b"") -> None:
    """An .xz file of `megabytes` MiB of letters with no newline (after `head`), written in
    chunks: a few kB on disk."""
    with lzma.open(path, "wb", preset=0) as f:
        f.write(head)
        for _ in range(megabytes):
            f.write(b"a" * (1 << 20))


def test_every_reader_refuses_a_line_longer_than_the_limit_naming_the_line_and_the_limit(tmp_path, monkeypatch):
    # R63: a decompression bomb's one line was read whole; now no reader reads past the limit.
    from elmo_core.apps.pieces import plan_pieces

    monkeypatch.setenv("ELMO_MAX_LINE_BYTES", "1000")
    bomb = tmp_path / "bomb.txt.xz"
    _bomb(bomb, 2, head=b"a b\nfine line\n")
    message = (
        f"{bomb} line 3 holds more than 1,000 bytes, the longest line elmo-bilm reads (its end was not read). "
        "Split the text into shorter lines, or raise the limit: ELMO_MAX_LINE_BYTES=10000."
    )
    for read in (lambda: list(iter_lines(bomb)), lambda: read_text(bomb), lambda: plan_pieces(bomb)):
        with pytest.raises(ElmoError) as caught:
            read()
        assert str(caught.value).endswith(message)
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"x" * 1000 + b"\n" + b"y" * 1000)  # lines of exactly the limit are read
    assert [len(line) for line in iter_lines(exact)] == [1000, 1000]
    monkeypatch.setenv("ELMO_MAX_LINE_BYTES", "")
    assert [len(line) for line in iter_lines(exact)] == [1000, 1000]  # empty: the default, 10 MB
