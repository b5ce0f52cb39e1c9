"""Tokenised sentences in, batches of whole sentences out: shuffled, sharded, resumable.

Every row is one sentence, `<S> w1 .. wn </S>`, and starts from the zero LSTM state, as
inference does. (bilm-tf carried the LSTM state across windows of one token stream.)

    rank r of W reads lines r, r + W, r + 2W, ... of every file
      -> splitter -> sentences (cut to max_sentence_tokens pieces)
      -> a buffer of `buffer_sentences` sentences, shuffled
      -> sorted longest first, cut greedily so rows * (longest + 2) <= batch_tokens
      -> the buffer's batches in shuffled order

A buffer's shuffle depends only on `(seed, rank, epoch, buffer number)`, so a resumed
stream re-reads its buffer and skips the batches already trained on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, TextIO

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ...files.text_files import open_text
from ...model.characters import words_to_char_ids
from ...model.checks import check_int
from ...runtime.batching import batches_by_token_budget
from .corpus import Splitter, line_sentences
from .vocab import Vocabulary

PAD_TARGET = -100  # target id at padded positions; never used (the model masks them)


class Batch(NamedTuple):
    """One training or evaluation batch of whole sentences.

    Attributes:
        char_ids: Character ids of the words, without `<S>`/`</S>` (the biLM adds them).
        mask: True = real word.
        targets: Vocabulary ids of `<S> w1 .. wn </S>` per row, then `PAD_TARGET`.
        num_words: Real words in the batch, boundaries not counted.

    Shape:
        char_ids: [batch, tokens, chars] int64
        mask: [batch, tokens] bool
        targets: [batch, tokens + 2] int64
    """

    char_ids: torch.Tensor
    mask: torch.Tensor
    targets: torch.Tensor
    num_words: int

    def to(self, device: str | torch.device) -> Batch:
        return Batch(self.char_ids.to(device), self.mask.to(device), self.targets.to(device), self.num_words)


def make_batch(sentences: Sequence[Sequence[str]], vocab: Vocabulary, max_characters_per_token: int = 50) -> Batch:
    """CPU tensors for tokenised `sentences`, given without boundaries."""
    char_ids, mask = words_to_char_ids(sentences, max_characters_per_token)
    num_tokens = char_ids.shape[1]
    targets = torch.full((len(sentences), num_tokens + 2), PAD_TARGET, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        ids = [vocab.bos_id, *vocab.encode(sentence), vocab.eos_id]
        targets[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return Batch(char_ids, mask, targets, sum(len(s) for s in sentences))


def eval_batches(
    sentences: Sequence[Sequence[str]],
    vocab: Vocabulary,
    batch_tokens: int,
    max_characters_per_token: int = 50,
) -> Iterator[Batch]:
    """Batches for evaluation: each sentence once, sorted by length, not shuffled."""
    lengths = [len(s) for s in sentences]
    for indices in batches_by_token_budget(lengths, batch_tokens):
        yield make_batch([sentences[i] for i in indices], vocab, max_characters_per_token)


@dataclass
class _Position:
    """Where the next sentence comes from: file slot in the epoch's order, line, sentence."""

    slot: int = 0
    line: int = 0
    sentence: int = 0


class TrainingStream:
    """Shuffled, token-budget batches of whole sentences, resumable and sharded by rank.

    Yields `Batch`es for `epochs` epochs. A `state_dict()` taken between two batches, loaded
    into a stream built with the same arguments, continues with exactly the next batch.

    Args:
        paths: Training files: raw paragraphs with a `splitter`, else pre-tokenised.
        vocab: The softmax vocabulary.
        batch_tokens: Padded positions per batch, `<S>`/`</S>` included. 4096 is a good
            start. Larger batches use the hardware better but take fewer steps per epoch.
        splitter: Paragraph -> sentences. None: pre-tokenised input.
        max_sentence_tokens: Cut longer sentences into pieces of this many tokens. This
            bounds the sequential LSTM steps per batch. None: never cut.
        buffer_sentences: Sentences shuffled and sorted together. Larger mixes better and
            pads less, but takes more memory. 1: file order.
        seed: Seed of the file order per epoch, and of sentences and batches per buffer.
        rank, world_size: This process's share: lines `rank, rank + world_size, ...`.
        shuffle: Shuffle files, sentences and batches. Off: file order.
        epochs: Stop after this many passes. None: never.
        max_characters_per_token: From the model's options (50).
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        vocab: Vocabulary,
        batch_tokens: int,
        *,
        splitter: Splitter | None = None,
        max_sentence_tokens: int | None = 100,
        buffer_sentences: int = 20_000,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        epochs: int | None = None,
        max_characters_per_token: int = 50,
    ) -> None:
        if not paths:
            raise ValueError("TrainingStream needs at least one training file; got none.")
        missing = [str(p) for p in paths if not Path(p).is_file()]
        if missing:
            raise FileNotFoundError(f"training files not found: {missing}.")
        batch_tokens = check_int("batch_tokens", batch_tokens)
        buffer_sentences = check_int("buffer_sentences", buffer_sentences)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size); got rank {rank}, world_size {world_size}.")
        seed = check_int("seed", seed, minimum=0)
        max_sentence_tokens = check_int("max_sentence_tokens", max_sentence_tokens, none_ok=True)
        self.paths = [Path(p) for p in paths]
        self.vocab = vocab
        self.batch_tokens = batch_tokens
        self.splitter = splitter
        self.max_sentence_tokens = max_sentence_tokens
        self.buffer_sentences = buffer_sentences
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.epochs = epochs
        self.max_characters_per_token = max_characters_per_token
        # The position of the next batch (see state_dict).
        self._epoch = 0
        self._buffer = 0  # buffer number within the epoch
        self._start = _Position()  # first sentence of the current buffer
        self._taken = 0  # batches of the current buffer already yielded
        # Caches, rebuilt from the position when missing.
        self._pending: list[list[list[str]]] | None = None
        self._end: _Position | None = None
        self._reader: _Reader | None = None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The position of the next batch, in plain ints."""
        return {
            "epoch": self._epoch,
            "buffer": self._buffer,
            "slot": self._start.slot,
            "line": self._start.line,
            "sentence": self._start.sentence,
            "taken": self._taken,
            "rank": self.rank,
            "world_size": self.world_size,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()` of a stream built with the same arguments.

        Raises:
            ValueError: If the state belongs to another rank, world size or seed.
        """
        for key in ("rank", "world_size", "seed"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"this data position was saved with {key}={state[key]}, but the stream has "
                    f"{key}={getattr(self, key)}; resume with the same {key} to see the same batches."
                )
        self._epoch = state["epoch"]
        self._buffer = state["buffer"]
        self._start = _Position(state["slot"], state["line"], state["sentence"])
        self._taken = state["taken"]
        self._pending = None
        self._end = None
        self._reader = None

    @property
    def epoch(self) -> int:
        """Epochs completed so far. The next batch belongs to epoch `epoch`."""
        return self._epoch

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Batch]:
        while self.epochs is None or self._epoch < self.epochs:
            if self._pending is None:
                sentences, end = self._read_buffer()
                if not sentences:  # the epoch is over
                    if self._buffer == 0:
                        share = f" for rank {self.rank} of {self.world_size}" if self.world_size > 1 else ""
                        raise ValueError(
                            f"the training files hold no sentences{share}: {[str(p) for p in self.paths]}."
                        )
                    self._epoch += 1
                    self._buffer = 0
                    self._start = _Position()
                    self._taken = 0
                    self._reader = None
                    continue
                self._pending = self._layout(sentences)
                self._end = end
            while self._taken < len(self._pending):
                sentences = self._pending[self._taken]
                self._taken += 1
                yield make_batch(sentences, self.vocab, self.max_characters_per_token)
            assert self._end is not None
            self._start = self._end
            self._buffer += 1
            self._taken = 0
            self._pending = None
            self._end = None

    def _file_order(self) -> list[Path]:
        if not self.shuffle:
            return list(self.paths)
        rng = np.random.default_rng([self.seed, self._epoch])  # same on every rank
        return [self.paths[i] for i in rng.permutation(len(self.paths))]

    def _read_buffer(self) -> tuple[list[list[str]], _Position]:
        reader = self._reader
        if reader is None or reader.epoch != self._epoch or reader.position != self._start:
            reader = _Reader(self._file_order(), self._epoch, self)
            reader.seek(self._start)
            self._reader = reader
        sentences = reader.read(self.buffer_sentences)
        return sentences, replace(reader.position)  # a copy: the reader moves on in place

    def _layout(self, sentences: list[list[str]]) -> list[list[list[str]]]:
        """The buffer's batches in training order: shuffled, sorted, cut by token budget."""
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.rank, self._epoch, self._buffer])
            sentences = [sentences[i] for i in rng.permutation(len(sentences))]
        batches = batches_by_token_budget([len(s) for s in sentences], self.batch_tokens)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return [[sentences[i] for i in batch] for batch in batches]


class _Reader:
    """Sentences of one epoch from a `_Position` on, for one rank. Keeps its file open."""

    def __init__(self, files: list[Path], epoch: int, stream: TrainingStream) -> None:
        self.files = files
        self.epoch = epoch
        self.stream = stream
        self.position = _Position()
        self._file: TextIO | None = None
        self._line_sentences: list[list[str]] = []  # the current line's sentences, if any left

    def seek(self, position: _Position) -> None:
        self.position = _Position(position.slot, 0, 0)
        self._open()
        # Skip whole lines without tokenising them, then the sentences of a partly used line.
        while self._file is not None and self.position.line < position.line:
            if not self._file.readline():
                break
            self.position.line += 1
        if position.sentence:
            self._fill()
            self._line_sentences = self._line_sentences[position.sentence :]
            self.position.sentence = position.sentence

    def read(self, n: int) -> list[list[str]]:
        out: list[list[str]] = []
        while len(out) < n:
            if not self._line_sentences:
                if not self._fill():
                    break
                continue
            take = self._line_sentences[: n - len(out)]
            out.extend(take)
            self._line_sentences = self._line_sentences[len(take) :]
            self.position.sentence += len(take)
            if not self._line_sentences:
                self.position = _Position(self.position.slot, self.position.line + 1, 0)
        return out

    def _open(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = open_text(self.files[self.position.slot]) if self.position.slot < len(self.files) else None

    def _fill(self) -> bool:
        """Load this rank's next non-empty line into `_line_sentences`. False at the epoch's end."""
        stream = self.stream
        while self._file is not None:
            line = self._file.readline()
            if not line:
                self._file.close()
                self.position = _Position(self.position.slot + 1, 0, 0)
                self._open()
                continue
            if self.position.line % stream.world_size == stream.rank:
                sentences = line_sentences(line, stream.splitter, stream.max_sentence_tokens)
                if sentences:
                    self._line_sentences = sentences
                    return True
            self.position.line += 1
        return False

    def __del__(self) -> None:
        if self._file is not None:
            self._file.close()


class PrefetchingStream:
    """A `TrainingStream` run `depth` batches ahead in a `DataLoader` worker, for GPU training.

    The batches are exactly the wrapped stream's. `state_dict()` is the position after the
    last batch handed out, not the last one built, so checkpoints resume exactly.

    Args:
        stream: The stream to run in the worker. It is forked, so a splitter need not pickle.
        depth: Batches built ahead, 2-16. Each holds its tensors in shared memory.
    """

    def __init__(self, stream: TrainingStream, depth: int = 8) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1; got {depth}.")
        self.stream = stream
        self.depth = depth
        self._state = stream.state_dict()

    def __iter__(self) -> Iterator[Batch]:
        # The worker gets a copy of the stream: start it where the last batch handed out ended.
        self.stream.load_state_dict(self._state)
        # A generator of its own: by default a DataLoader draws its worker seed from the
        # global torch RNG, which would shift every later dropout mask.
        loader = DataLoader(
            _WithState(self.stream),
            batch_size=None,
            num_workers=1,
            prefetch_factor=self.depth,
            generator=torch.Generator().manual_seed(0),
        )
        for batch, state in loader:
            self._state = state
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return dict(self._state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state)
        self._state = self.stream.state_dict()


class _WithState(IterableDataset):
    """Each batch of a stream with the stream's position after it. Runs in the worker."""

    def __init__(self, stream: TrainingStream) -> None:
        self.stream = stream

    def __iter__(self) -> Iterator[tuple[Batch, dict[str, Any]]]:
        for batch in self.stream:
            yield batch, self.stream.state_dict()
