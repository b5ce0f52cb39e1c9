"""The softmax's word vocabulary. The biLM reads characters, so only its output needs one.

The file is bilm-tf's `vocab.txt`: one token per line in id order, `<S>`, `</S>`, `<UNK>`
first. An optional tab-separated second column holds counts. Ids follow descending count,
as the adaptive softmax's cutoffs need.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ...files.atomic_files import atomic_write
from ...files.text_files import iter_lines
from ...model.checks import check_int
from ..console import progress_bar
from .corpus import Splitter, iter_sentences

__all__ = ["Vocabulary"]

BOS = "<S>"
EOS = "</S>"
UNK = "<UNK>"
SPECIAL_TOKENS = (BOS, EOS, UNK)  # ids 0, 1, 2, in bilm-tf's vocab-file order

DEFAULT_VOCAB_SIZE = 100_000

logger = logging.getLogger(__name__)


class Vocabulary:
    """Token strings <-> ids, with `<S>` = 0, `</S>` = 1, `<UNK>` = 2.

    Make one with `Vocabulary.build` or `Vocabulary.load`.

    Args:
        tokens: Every token in id order, the three special tokens first.
        counts: Optional training count per token, kept for the file.

    Raises:
        ValueError: If the special tokens are not at ids 0..2, a token repeats, or a
            token is empty or holds a tab or newline.
    """

    def __init__(self, tokens: Sequence[str], counts: Sequence[int] | None = None) -> None:
        tokens = list(tokens)
        if tuple(tokens[:3]) != SPECIAL_TOKENS:
            raise ValueError(
                f"a vocabulary must start with {list(SPECIAL_TOKENS)} (ids 0, 1, 2, bilm-tf's "
                f"order); got {tokens[:3]}. Build one with Vocabulary.build() or put those three "
                "lines at the top of the vocabulary file."
            )
        for token in tokens:
            if not token or "\t" in token or "\n" in token or "\r" in token:
                raise ValueError(f"vocabulary tokens must be non-empty and hold no tab or newline; got {token!r}.")
        self._ids = {token: i for i, token in enumerate(tokens)}
        if len(self._ids) != len(tokens):
            repeated = [t for t, n in Counter(tokens).items() if n > 1][:5]
            raise ValueError(f"vocabulary tokens must be unique; repeated: {repeated}.")
        if counts is not None and len(counts) != len(tokens):
            raise ValueError(f"got {len(counts)} counts for {len(tokens)} tokens.")
        self.tokens = tokens
        self.counts = list(counts) if counts is not None else None

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        *,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Count the words of `sentences` and keep the frequent ones.

        Args:
            sentences: Tokenised sentences, without `<S>`/`</S>`.
            min_count: Keep words seen at least this often. bilm-tf's 1B-word vocabulary
                used 3.
            max_size: Keep at most this many entries, the three specials included. None:
                no limit.

        `<S>` and `</S>` count the sentences. `<UNK>` counts the dropped words.
        """
        counter: Counter[str] = Counter()
        num_sentences = 0
        for sentence in sentences:
            counter.update(sentence)
            num_sentences += 1
        return cls.from_counts(counter, num_sentences=num_sentences, min_count=min_count, max_size=max_size)

    @classmethod
    def from_counts(
        cls,
        counts: dict[str, int],
        *,
        num_sentences: int = 0,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Like `build`, from word counts already made, e.g. merged over shards."""
        check_int("min_count", min_count)
        check_int("max_size", max_size, minimum=4, none_ok=True, meaning="three special tokens and one word")
        words = [(w, n) for w, n in counts.items() if n >= min_count and w not in SPECIAL_TOKENS]
        words.sort(key=lambda item: (-item[1], item[0]))  # most frequent first; ties by string
        if max_size is not None:
            words = words[: max_size - len(SPECIAL_TOKENS)]
        kept = sum(n for _, n in words)
        total = sum(n for w, n in counts.items() if w not in SPECIAL_TOKENS)
        special_counts = [num_sentences, num_sentences, total - kept]
        return cls(
            [*SPECIAL_TOKENS, *(w for w, _ in words)],
            special_counts + [n for _, n in words],
        )

    # ------------------------------------------------------------------ lookups
    @property
    def bos_id(self) -> int:
        return 0

    @property
    def eos_id(self) -> int:
        return 1

    @property
    def unk_id(self) -> int:
        return 2

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.tokens == other.tokens

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens: {self.tokens[3:8]}...)"

    def id(self, token: str) -> int:
        """The id of `token`, or `unk_id` when it is not in the vocabulary."""
        return self._ids.get(token, 2)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Ids of `tokens`, unknown words as `<UNK>`. Adds no `<S>`/`</S>`."""
        get = self._ids.get
        return [get(token, 2) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Token strings of `ids`."""
        return [self.tokens[i] for i in ids]

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write bilm-tf's `vocab.txt`, with counts when known. The file appears whole or not at all."""
        if self.counts is None:
            lines = [f"{t}\n" for t in self.tokens]
        else:
            lines = [f"{t}\t{n}\n" for t, n in zip(self.tokens, self.counts)]
        atomic_write(path, lambda tmp: tmp.write_text("".join(lines), encoding="utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a `vocab.txt` written by `save` or by bilm-tf.

        Raises:
            FileNotFoundError: If the file does not exist.
            ValueError: If it is not a vocabulary file. Names the file and the line.
        """
        path = Path(path)
        tokens: list[str] = []
        counts: list[int] | None = []
        for number, line in enumerate(iter_lines(path), start=1):  # BOM and CRLF as LF
            token, tab, count = line.partition("\t")
            if not token:
                raise ValueError(f"{path}, line {number}: empty token. A vocabulary file has one token per line.")
            tokens.append(token)
            if counts is not None and tab and count.isdigit():
                counts.append(int(count))
            elif counts is not None:
                if tab:
                    raise ValueError(f"{path}, line {number}: the count {count!r} is not a whole number.")
                counts = None
        try:
            return cls(tokens, counts)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


def build_vocabulary(
    files: Sequence[Path],
    splitter: Splitter | None,
    *,
    vocab_size: int | None,
    min_count: int | None,
    progress: bool = False,
) -> Vocabulary:
    """Count the words of `files` in one pass and keep the frequent ones."""
    if vocab_size is None and min_count is None:
        vocab_size = DEFAULT_VOCAB_SIZE
    logger.info("building the vocabulary from %d file%s", len(files), "" if len(files) == 1 else "s")
    sentences = iter_sentences(files, splitter)
    with progress_bar(None, unit=" sentences", desc="counting words", show=progress, items=sentences) as bar:
        return Vocabulary.build(bar, min_count=min_count or 1, max_size=vocab_size)
