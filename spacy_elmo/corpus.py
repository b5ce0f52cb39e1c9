"""A training corpus read straight from a CoNLL NER file or a `.spacy` DocBin.

`spacy train` then needs no `spacy convert` step. Docs are cut at sentence boundaries: spaCy's
converter makes one Doc of each `-DOCSTART-` document, and the NER then trains slowly.
"""

# No `from __future__ import annotations` here: spaCy builds the registered functions' arguments from their
# annotations, and confection before 1.0 (spaCy 3.7's) cannot resolve them as strings.

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from spacy.language import Language
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.training.converters import conll_ner_to_docs
from spacy.util import registry

from elmo_core import ElmoError
from elmo_core.face_api import check_input_file, iter_conll_rows, read_text

__all__ = ["ConllNerCorpus", "read_conll_ner", "read_docbin", "split_into_sentence_groups"]

# The document separator spaCy's converter looks for.
_DOC_DELIMITER = "-DOCSTART- -X- O O"
_DOCSTART_LINE = re.compile(r"^-DOCSTART-.*$", re.MULTILINE)
_BLANK_LINE = re.compile(r"^[ \t\r]+$", re.MULTILINE)


def read_conll_ner(path: str | Path, n_sents: int = 10) -> list[Doc]:
    """A CoNLL NER file as Docs of at most `n_sents` sentences, with entities and sentence starts.

    A token per line with its IOB tag last, blank lines between sentences.

    Args:
        path: The file.
        n_sents: Most sentences per Doc, within a `-DOCSTART-` document. 0: whole documents.

    Raises:
        ValueError: if the file is missing, not CoNLL or empty, or `n_sents` is not an int >= 0.
    """
    _check_n_sents(n_sents)
    try:
        text = read_text(path, "CoNLL file")  # BOM dropped, CRLF read as LF
        for _ in iter_conll_rows(text.split("\n"), path):  # prose is refused, not read as tags
            pass
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
    return split_into_sentence_groups(docs, n_sents)


def split_into_sentence_groups(docs: list[Doc], n_sents: int) -> list[Doc]:
    """Each Doc cut into Docs of at most `n_sents` sentences (0: unchanged).

    A cut is never made inside an entity. A Doc without sentence starts stays whole.
    """
    if not n_sents:
        return docs
    pieces = []
    for doc in docs:
        if not len(doc) or not doc.has_annotation("SENT_START"):
            pieces.append(doc)
            continue
        inside = {i for ent in doc.ents for i in range(ent.start + 1, ent.end)}
        starts = [t.i for t in doc if t.i == 0 or (t.is_sent_start and t.i not in inside)]
        cuts = starts[::n_sents] + [len(doc)]
        if len(cuts) == 2:  # already small enough
            pieces.append(doc)
            continue
        pieces.extend(doc[start:end].as_doc() for start, end in zip(cuts, cuts[1:]))
    return pieces


def _check_n_sents(n_sents: object) -> None:
    if isinstance(n_sents, bool) or not isinstance(n_sents, int) or n_sents < 0:
        raise ValueError(
            f"n_sents must be an integer >= 0 (sentences per Doc; 1 = one Doc per sentence, 0 = whole "
            f"documents); got {n_sents!r}."
        )


def read_docbin(path: str | Path, nlp: Language, n_sents: int = 0) -> list[Doc]:
    """The documents of a `.spacy` file (spaCy's `DocBin`), cut into at most `n_sents` sentences.

    Args:
        path: The file.
        nlp: Its vocab receives the Docs.
        n_sents: As `read_conll_ner`.

    Raises:
        ValueError: if the file does not exist, is not a DocBin, or holds no tokens.
    """
    _check_n_sents(n_sents)
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
    return split_into_sentence_groups(docs, n_sents)


@registry.readers("spacy-elmo.ConllNerCorpus.v1")
def ConllNerCorpus(path: Path | None, n_sents: int = 10, limit: int = 0) -> Callable[[Language], Iterator[Example]]:
    """Examples from a CoNLL NER file or a `.spacy` DocBin, with the file's tokens.

    path (Path): A CoNLL file, or a file ending in `.spacy` (read as a DocBin).
    n_sents (int): Most sentences per Doc. 1 trains fastest, 10 keeps a little document
        context. 0 keeps whole documents, which slows the NER.
    limit (int): Use only the first `limit` Docs, after the cutting (0 = all).
    """
    _check_n_sents(n_sents)

    parsed: list[Doc] = []  # the file is converted once; spaCy reads a corpus many times

    def read(nlp: Language) -> Iterator[Example]:
        if path is None:
            raise ValueError("no CoNLL file given: set --paths.train and --paths.dev.")
        if not parsed:
            if Path(path).suffix == ".spacy":
                docs = read_docbin(path, nlp, n_sents)
            else:
                docs = read_conll_ner(path, n_sents)
            parsed.extend(docs[: limit or None])
        for doc in parsed:
            reference = Doc(nlp.vocab).from_bytes(doc.to_bytes())
            words = [t.text for t in reference]
            spaces = [bool(t.whitespace_) for t in reference]
            yield Example(Doc(nlp.vocab, words=words, spaces=spaces), reference)

    return read
