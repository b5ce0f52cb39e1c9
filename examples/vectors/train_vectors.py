"""Static word vectors (word2vec) trained on the biLM's own text, as a spaCy vectors folder.

    elmo data pretokenize 'enwiki2015/train/*.txt.xz' --out tokens.txt --jobs 2
    python examples/vectors/train_vectors.py tokens.txt --pretokenized --out vectors/

The static-vectors rows of the README's NER table need vectors trained on the same text as
the biLM (enwiki2015), so that "+vectors" and "+ELMo" differ in the model, not the data.
Three steps:

1. sentences: the input's tokenised sentences, one per line, in a plain text file (gensim's
   `corpus_file` format): a pre-tokenised `.txt` file is read as it is; anything else (raw
   paragraphs, split by `elmo_core`'s sentence splitter, or a compressed file) is written
   to `OUT/sentences.txt` first, through `elmo_core.apps.training.iter_sentences`, the
   reader `elmo train` uses;
2. word2vec: gensim's `Word2Vec` (CBOW with negative sampling, gensim's defaults unless
   given), `--dim` wide (300, as GloVe and en_core_web_md), words seen at least
   `--min-count` times, `--epochs` passes; written as `OUT/vectors.w2v.txt`, the word2vec
   text format (a header "rows width", then one word and its numbers per line);
3. spaCy: `spacy init vectors en OUT/vectors.w2v.txt OUT/spacy`, a pipeline folder holding
   only the vectors: give it as `[initialize] vectors` (`ner_benchmark.py --vectors
   OUT/spacy`), with `include_static_vectors = true` in the tok2vec's embedding.

`OUT/train_vectors.json` records the settings, the vocabulary size, the number of tokens
and the time of each step. Needs `pip install -e ".[vectors,spacy]"` (gensim).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from elmo_core.apps.training.corpus import get_sentence_splitter, iter_sentences

SPACY_FOLDER = "spacy"
WORD2VEC_FILE = "vectors.w2v.txt"
SENTENCES_FILE = "sentences.txt"


def sentences_file(inputs: list[Path], out: Path, *, pretokenized: bool) -> tuple[Path, int]:
    """The plain one-sentence-per-line file gensim reads, and its number of tokens.

    A single pre-tokenised plain `.txt` input is that file already; otherwise the sentences
    are written to `out / SENTENCES_FILE` (raw paragraphs split by spaCy's English rules,
    as `elmo train` reads them).
    """
    if pretokenized and len(inputs) == 1 and inputs[0].suffix == ".txt":
        with open(inputs[0], encoding="utf-8") as f:
            return inputs[0], sum(len(line.split()) for line in f)
    splitter = None if pretokenized else get_sentence_splitter()
    path, tokens = out / SENTENCES_FILE, 0
    with open(path, "w", encoding="utf-8") as f:
        for sentence in iter_sentences(inputs, splitter):
            f.write(" ".join(sentence) + "\n")
            tokens += len(sentence)
    return path, tokens


def train_word2vec(corpus_file: Path, *, dim: int, min_count: int, epochs: int, window: int, workers: int, seed: int):
    """gensim's `Word2Vec` over `corpus_file`; returns its `KeyedVectors` (most frequent word first).

    Raises:
        SystemExit: if gensim is not installed (`pip install -e ".[vectors]"`), or if no word
            is seen `min_count` times (gensim would stop with "you must first build vocabulary").
    """
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise SystemExit('train_vectors.py needs gensim: pip install -e ".[vectors]"') from None
    # What Word2Vec(corpus_file=...) does, with a look at the vocabulary between its two steps.
    model = Word2Vec(vector_size=dim, window=window, min_count=min_count, epochs=epochs, workers=workers, seed=seed)
    model.build_vocab(corpus_file=str(corpus_file))
    if not model.wv.index_to_key:
        raise SystemExit(
            f"no word of the {model.corpus_total_words} tokens of the input is seen --min-count {min_count} "
            "times, so there is nothing to train; give a lower --min-count or more text."
        )
    model.train(
        corpus_file=str(corpus_file),
        total_examples=model.corpus_count,
        total_words=model.corpus_total_words,
        epochs=model.epochs,
    )
    return model.wv


def init_spacy_vectors(word2vec_file: Path, folder: Path, lang: str = "en") -> None:
    """`spacy init vectors LANG WORD2VEC_FILE FOLDER`, spaCy's own command, in a child process."""
    command = [sys.executable, "-m", "spacy", "init", "vectors", lang, str(word2vec_file), str(folder)]
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("inputs", type=Path, nargs="+", help="Text files (.txt or .txt.xz).")
    parser.add_argument("--out", type=Path, required=True, help="Folder for the vectors (created).")
    parser.add_argument(
        "--pretokenized",
        action="store_true",
        help="Inputs are one tokenised sentence per line (elmo data pretokenize).",
    )
    parser.add_argument("--dim", type=int, default=300, help="Vector width (default 300).")
    parser.add_argument("--min-count", type=int, default=10, help="Keep words seen at least N times (default 10).")
    parser.add_argument("--epochs", type=int, default=5, help="Passes over the text (default 5, gensim's).")
    parser.add_argument("--window", type=int, default=5, help="Context words each side (default 5, gensim's).")
    parser.add_argument("--workers", type=int, default=2, help="Training threads (default 2).")
    parser.add_argument("--seed", type=int, default=0, help="gensim's seed (default 0).")
    parser.add_argument("--lang", default="en", help="spaCy language of the vectors folder (default en).")
    args = parser.parse_args(argv)
    for path in args.inputs:
        if not path.is_file():
            parser.error(f"no such file: {path}")
    for name in ("dim", "min_count", "epochs", "window", "workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer; got {getattr(args, name)}.")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    seconds = {}

    started = time.perf_counter()
    corpus, tokens = sentences_file(args.inputs, args.out, pretokenized=args.pretokenized)
    seconds["sentences"] = time.perf_counter() - started
    started = time.perf_counter()
    settings = {k: getattr(args, k) for k in ("dim", "min_count", "epochs", "window", "workers", "seed")}
    try:
        vectors = train_word2vec(corpus, **settings)
    except SystemExit:
        if corpus == args.out / SENTENCES_FILE:  # written by this run: no half-made folder is left
            corpus.unlink()
        raise
    seconds["word2vec"] = time.perf_counter() - started
    started = time.perf_counter()
    vectors.save_word2vec_format(str(args.out / WORD2VEC_FILE))
    seconds["write"] = time.perf_counter() - started
    started = time.perf_counter()
    init_spacy_vectors(args.out / WORD2VEC_FILE, args.out / SPACY_FOLDER, args.lang)
    seconds["spacy_init_vectors"] = time.perf_counter() - started

    info = {
        "inputs": [str(p) for p in args.inputs],
        "tokens": tokens,
        "vocabulary": len(vectors.index_to_key),
        **settings,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    (args.out / "train_vectors.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    print(
        f"{info['vocabulary']} words x {args.dim} from {tokens} tokens in {sum(seconds.values()):.0f} s; "
        f"spaCy vectors folder: {args.out / SPACY_FOLDER}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
