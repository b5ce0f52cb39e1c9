"""A training corpus read straight from a CoNLL-format NER file.

So that `python -m spacy train` runs on CoNLL files given by path, without a separate
`spacy convert` step:

    [corpora.train]
    @readers = "spacy-elmo.ConllNerCorpus.v1"
    path = ${paths.train}

The file is converted with spaCy's own converter (`conll_ner_to_docs`, the one behind
`spacy convert --converter ner`). Its format: one token per line, the token in the first
column and the IOB tag in the last (IOB1 or IOB2), a blank line between sentences, and
`-DOCSTART-` lines between documents (as in CoNLL-2003 and WikiGold, whichever columns
follow the `-DOCSTART-`). Lines of only whitespace count as blank (WNUT-17's train file
has some).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.training.converters import conll_ner_to_docs
from spacy.util import registry

__all__ = ["ConllNerCorpus", "read_conll_ner"]

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
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"CoNLL file {path} does not exist. Give it with --paths.train / --paths.dev.")
    text = path.read_text(encoding="utf-8")
    # WikiGold writes "-DOCSTART- O", CoNLL-2003 "-DOCSTART- -X- -X- O": both become the
    # converter's delimiter, followed by a blank line so that it is never read as a token.
    text = _DOCSTART_LINE.sub(_DOC_DELIMITER + "\n", text)
    # WNUT-17's train file ends some sentences with a line holding only a tab; the
    # converter splits sentences on empty lines only, so make such lines empty.
    text = _BLANK_LINE.sub("", text.replace("\r\n", "\n"))
    docs = list(conll_ner_to_docs(text, n_sents=n_sents, no_print=True))
    if not docs:
        raise ValueError(f"no sentences found in {path}; expected 'token ... TAG' lines.")
    return docs


@registry.readers("spacy-elmo.ConllNerCorpus.v1")
def ConllNerCorpus(path: Path | None, n_sents: int = 10, limit: int = 0) -> Callable[[Language], Iterator[Example]]:
    """Examples from a CoNLL NER file; the Docs to predict keep the file's tokens.

    path (Path): The CoNLL file.
    n_sents (int): Sentences per Doc when the file has no -DOCSTART- lines.
    limit (int): Use only the first `limit` documents (0 = all).
    """

    parsed: list[Doc] = []  # the file is converted once; spaCy reads a corpus many times

    def read(nlp: Language) -> Iterator[Example]:
        if path is None:
            raise ValueError("no CoNLL file given: set --paths.train and --paths.dev.")
        if not parsed:
            parsed.extend(read_conll_ner(path, n_sents)[: limit or None])
        for doc in parsed:
            reference = Doc(nlp.vocab).from_bytes(doc.to_bytes())
            words = [t.text for t in reference]
            spaces = [bool(t.whitespace_) for t in reference]
            yield Example(Doc(nlp.vocab, words=words, spaces=spaces), reference)

    return read
