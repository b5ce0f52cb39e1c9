"""Text files in, tokenised sentences out.

Input files are UTF-8 `.txt` or `.txt.xz`, in one of two forms:

- raw text, one paragraph per line. A `Splitter` (`paragraph -> sentences of tokens`) cuts
  each line. The core imports no tokenizer: `get_sentence_splitter()` loads one through the
  `elmo_core.tokenizers` entry points (`spacy_elmo` registers `spacy-en-sentences`).
- pre-tokenised text (`splitter=None`): one sentence per line, tokens separated by
  whitespace. `pretokenize_files` writes it once, so epochs do not re-run the tokenizer.

Line numbers count every line. Data-parallel ranks take lines `rank::world_size`.
"""

from __future__ import annotations

import glob
import io
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ...files.atomic_files import atomic_path
from ...files.text_files import is_stream, open_text
from ...files.tokenizers import get_tokenizer
from ...model.errors import ElmoError
from ..console import progress_bar

__all__ = ["get_sentence_splitter", "hold_out", "iter_sentences"]

Splitter = Callable[[str], list[list[str]]]
"""A paragraph of raw text -> its sentences, each a list of token strings."""

DEFAULT_SPLITTER = "spacy-en-sentences"


def get_sentence_splitter(name: str = DEFAULT_SPLITTER) -> Splitter:
    """A sentence splitter + tokenizer registered under the `elmo_core.tokenizers` entry points.

    Raises:
        ElmoError: If none of that name is installed, or its library (spaCy) is missing.
    """
    return get_tokenizer(name)  # this entry point's tokenizer returns sentences


def cut_sentence(tokens: list[str], max_tokens: int | None) -> list[list[str]]:
    """`tokens` cut into consecutive pieces of at most `max_tokens`. None: no cut.

    Each piece becomes its own `<S> ... </S>` row, adding boundaries the text does not have.
    """
    if max_tokens is None or len(tokens) <= max_tokens:
        return [tokens]
    return [tokens[i : i + max_tokens] for i in range(0, len(tokens), max_tokens)]


def line_sentences(line: str, splitter: Splitter | None, max_tokens: int | None = None) -> list[list[str]]:
    """The sentences of one input line: split (or whitespace-tokenised), cleaned, cut.

    Tokens are re-split on whitespace, so a pre-tokenised cache reads back identically.
    """
    if splitter is None:
        raw = [line.split()]
    else:
        raw = [[piece for token in sentence for piece in token.split()] for sentence in splitter(line)]
    out: list[list[str]] = []
    for tokens in raw:
        if tokens:
            out.extend(cut_sentence(tokens, max_tokens))
    return out


def iter_sentences(
    paths: Sequence[str | Path],
    splitter: Splitter | None = None,
    *,
    max_tokens: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[list[str]]:
    """Every sentence of lines `rank::world_size` of `paths`, in file order."""
    for path in paths:
        with open_text(path) as f:
            for number, line in enumerate(f):
                if number % world_size == rank and line.strip():
                    yield from line_sentences(line, splitter, max_tokens)


def hold_out(lines: Sequence[str], fraction: float, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """Split sentences into (kept, held out), for a validation perplexity.

    Adapting a biLM to a task's text (the paper, section 3.4) watches the held-out
    perplexity and leaves the task's dev set unseen. Both parts keep the input order.

    Args:
        lines: The sentences, one string each. Blank ones are dropped first.
        fraction: The share held out, in (0, 1), e.g. 0.05. At least one, never all.
        seed: Seeds the choice.

    Raises:
        ValueError: If `fraction` is not in (0, 1), or there are fewer than 2 non-blank lines.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the held-out fraction must be in (0, 1), e.g. 0.05; got {fraction}.")
    lines = [line for line in lines if line.strip()]
    if len(lines) < 2:
        raise ValueError(f"holding some sentences out needs at least 2 of them; got {len(lines)}.")
    n_held = min(max(1, round(fraction * len(lines))), len(lines) - 1)
    held = set(random.Random(seed).sample(range(len(lines)), n_held))
    kept = [line for i, line in enumerate(lines) if i not in held]
    return kept, [line for i, line in enumerate(lines) if i in held]


def pretokenize_files(
    inputs: Sequence[str | Path],
    output: str | Path,
    splitter: Splitter | str = DEFAULT_SPLITTER,
    *,
    jobs: int = 1,
    progress: bool = False,
) -> tuple[int, int]:
    """Split and tokenise raw text files once, into one pre-tokenised file.

    The output has one sentence per line, tokens separated by spaces, in input order. It
    is xz-compressed when its name ends in `.xz`, and appears only when complete.

    Args:
        inputs: Raw text files, one paragraph per line.
        output: The cache file to write.
        splitter: A `Splitter`, or its entry-point name (needed for `jobs > 1`).
        jobs: Worker processes, one input file at a time each.
        progress: Show a bar of the sentences written on stderr.

    Returns:
        `(sentences, tokens)` written.
    """
    if jobs > 1 and not isinstance(splitter, str):
        raise ValueError("pretokenize_files with jobs > 1 needs the splitter's entry-point name, not a function.")
    num_sentences = num_tokens = 0
    bar = progress_bar(None, unit=" sentences", desc="pretokenizing", show=progress)
    with bar, atomic_path(output) as tmp, open_text(tmp, "wt") as out:
        if jobs > 1:
            import multiprocessing

            assert isinstance(splitter, str)  # checked above: workers load the splitter by its name
            with multiprocessing.get_context("spawn").Pool(jobs) as pool:
                chunks = pool.imap(_pretokenize_one, [(str(p), splitter) for p in inputs])
                for text, n_sentences, n_tokens in chunks:
                    out.write(text)
                    num_sentences += n_sentences
                    num_tokens += n_tokens
                    bar.update(n_sentences)
        else:
            split = get_sentence_splitter(splitter) if isinstance(splitter, str) else splitter
            for sentence in iter_sentences(inputs, split):
                out.write(" ".join(sentence) + "\n")
                num_sentences += 1
                num_tokens += len(sentence)
                bar.update(1)
    return num_sentences, num_tokens


def _pretokenize_one(args: tuple[str, str]) -> tuple[str, int, int]:
    path, name = args
    buffer = io.StringIO()
    num_sentences = num_tokens = 0
    for sentence in iter_sentences([path], get_sentence_splitter(name)):
        buffer.write(" ".join(sentence) + "\n")
        num_sentences += 1
        num_tokens += len(sentence)
    return buffer.getvalue(), num_sentences, num_tokens


def expand_files(patterns: Sequence[str | Path]) -> list[Path]:
    """Paths, with glob patterns (`train/*.txt.xz`) expanded in sorted order. Streams (`-`) stay.

    Raises:
        ElmoError: If a pattern matches nothing or a named file does not exist.
    """
    files: list[Path] = []
    for pattern in patterns:
        text = str(pattern)
        if is_stream(text):
            files.append(Path(text))
        elif any(c in text for c in "*?["):
            matches = sorted(glob.glob(text))
            if not matches:
                raise ElmoError(f"no file matches {text!r}.")
            files.extend(Path(m) for m in matches)
        elif not Path(text).is_file():
            raise ElmoError(f"file {text} does not exist.")
        else:
            files.append(Path(text))
    return files
