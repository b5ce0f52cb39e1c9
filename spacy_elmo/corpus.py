"""A training corpus read straight from a CoNLL-format NER file or a `.spacy` DocBin.

So that `python -m spacy train` runs on CoNLL files given by path, without a separate
`spacy convert` step, and on spaCy's own corpus files (`.spacy`, as `spacy convert`
writes them) with the same config:

    [corpora.train]
    @readers = "spacy-elmo.ConllNerCorpus.v1"
    path = ${paths.train}

The file is converted with spaCy's own converter (`conll_ner_to_docs`, the one behind
`spacy convert --converter ner`). Its format: one token per line, the token in the first
column and the IOB tag in the last (IOB1 or IOB2), a blank line between sentences, and
`-DOCSTART-` lines between documents (as in CoNLL-2003 and WikiGold, whichever columns
follow the `-DOCSTART-`). Lines of only whitespace count as blank (WNUT-17's train file
has some). A leading byte-order mark and Windows line endings change nothing
(`elmo_core.text_files`). A file whose name ends in `.spacy` is read as a `DocBin`
(entities, sentence starts and tokens as stored); anything else as CoNLL text. A file
that is neither gives one `ValueError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.training.converters import conll_ner_to_docs
from spacy.util import registry

from elmo_core.errors import ElmoError
from elmo_core.text_files import check_input_file, read_text

__all__ = ["ConllNerCorpus", "read_conll_ner", "read_docbin"]

# The document separator spaCy's converter looks for.
_DOC_DELIMITER = "-DOCSTART- -X- O O"
_DOCSTART_LINE = re.compile(r"^-DOCSTART-.*$", re.MULTILINE)
_BLANK_LINE = re.compile(r"^[ \t\r]+$", re.MULTILINE)


def read_conll_ner(path: str | Path, n_sents: int = 10) -> list[Doc]:
    """The documents of a CoNLL NER file, with entities and sentence starts.

    Args:
        path: The file.
        n_sents: Sentences per Doc when the file has no `-DOCSTART-` lines (ignored when
            it has them: each document is one Doc).

    Raises:
        ValueError: if the file does not exist or has no tokens.
    """
    try:
        text = read_text(path, "CoNLL file")  # BOM dropped, CRLF read as LF
    except ElmoError as err:
        raise ValueError(f"{err} Give a CoNLL text file or a .spacy DocBin with --paths.train / --paths.dev.") from None
    # WikiGold writes "-DOCSTART- O", CoNLL-2003 "-DOCSTART- -X- -X- O": both become the
    # converter's delimiter, followed by a blank line so that it is never read as a token.
    text = _DOCSTART_LINE.sub(_DOC_DELIMITER + "\n", text)
    # WNUT-17's train file ends some sentences with a line holding only a tab; the
    # converter splits sentences on empty lines only, so make such lines empty.
    text = _BLANK_LINE.sub("", text.replace("\r\n", "\n"))
    try:
        docs = list(conll_ner_to_docs(text, n_sents=n_sents, no_print=True))
    except ValueError as err:  # spaCy's E903 and the like name no file
        raise ValueError(
            f"{path} is not a CoNLL NER file (spaCy's converter: {err}). Expected 'token ... TAG' lines, "
            "sentences separated by blank lines; or give a .spacy DocBin."
        ) from None
    if not docs:
        raise ValueError(f"no sentences found in {path}; expected 'token ... TAG' lines.")
    return docs


def read_docbin(path: str | Path, nlp: Language) -> list[Doc]:
    """The documents of a `.spacy` file (spaCy's `DocBin`).

    Raises:
        ValueError: if the file does not exist, is not a DocBin, or holds no tokens.
    """
    try:
        path = check_input_file(path, ".spacy file")
        docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    except ElmoError as err:
        raise ValueError(f"{err} Give it with --paths.train / --paths.dev.") from None
    except Exception as err:  # msgpack/zlib errors: not a DocBin
        raise ValueError(
            f"{path} is not a spaCy DocBin ({type(err).__name__}: {err}); a .spacy file is written by "
            "`python -m spacy convert` or DocBin.to_disk. For a CoNLL text file, give it a name that "
            "does not end in .spacy."
        ) from None
    if not any(len(doc) for doc in docs):
        raise ValueError(f"no tokens found in {path}; the DocBin holds no documents with tokens.")
    return docs


@registry.readers("spacy-elmo.ConllNerCorpus.v1")
def ConllNerCorpus(path: Path | None, n_sents: int = 10, limit: int = 0) -> Callable[[Language], Iterator[Example]]:
    """Examples from a CoNLL NER file or a `.spacy` DocBin; the Docs to predict keep the file's tokens.

    path (Path): The CoNLL file, or a `.spacy` file written by `spacy convert` / `DocBin.to_disk`.
    n_sents (int): Sentences per Doc when a CoNLL file has no -DOCSTART- lines (unused for `.spacy`).
    limit (int): Use only the first `limit` documents (0 = all).
    """

    parsed: list[Doc] = []  # the file is converted once; spaCy reads a corpus many times

    def read(nlp: Language) -> Iterator[Example]:
        if path is None:
            raise ValueError("no CoNLL file given: set --paths.train and --paths.dev.")
        if not parsed:
            docs = read_docbin(path, nlp) if Path(path).suffix == ".spacy" else read_conll_ner(path, n_sents)
            parsed.extend(docs[: limit or None])
        for doc in parsed:
            reference = Doc(nlp.vocab).from_bytes(doc.to_bytes())
            words = [t.text for t in reference]
            spaces = [bool(t.whitespace_) for t in reference]
            yield Example(Doc(nlp.vocab, words=words, spaces=spaces), reference)

    return read
