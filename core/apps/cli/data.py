"""`elmo data pretokenize|vocab|hold-out`: data preparation for `elmo train`.

    elmo data pretokenize RAW_FILES... --out CACHE [--jobs N]
    elmo data vocab FILES... --out vocab.txt [--vocab-size N | --min-count N] [--pretokenized]
    elmo data hold-out FILE --out-kept KEPT --out-held-out HELD [--fraction 0.05] [--seed 0]

`pretokenize` splits and tokenises raw paragraphs once, as `elmo train` would on every
epoch. Train on the cache with `elmo train --pretokenized --train CACHE`. `hold-out` sets
sentences aside for `elmo train --valid`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import typer

from ...files.text_files import check_output_is_new, check_output_spares_inputs
from ...model.errors import ElmoError
from ..training.corpus import DEFAULT_SPLITTER
from ..training.settings import TrainingSettings
from .shared import command_group, plural, setting_option

app = command_group("Prepare biLM training data: pretokenize raw text once, count the vocabulary, hold sentences out.")


# elmo train has no --splitter (the settings' `splitter` is for Python callers), so it is declared here.
SplitterOption = Annotated[
    str,
    typer.Option(metavar="NAME", help="Entry point in elmo_core.tokenizers that splits raw paragraphs into sentences."),
]


_NEW_FILE = "Give a new path, or delete the old file first."
"""The way out when an output of `elmo data` exists. No command writes over earlier work."""

ProgressOption = Annotated[bool, typer.Option(help="Show a progress bar on stderr.")]


@app.callback()
def _data() -> None:
    """Prepare biLM training data."""


@app.command(short_help="Split raw paragraphs into tokenised sentences, once, into a cache.")
def pretokenize(
    inputs: Annotated[
        list[str],
        typer.Argument(metavar="FILES...", help="Raw text, one paragraph per line (.txt or .txt.xz; globs allowed)."),
    ],
    out: Annotated[
        Path,
        typer.Option(metavar="FILE", help="The cache to write: one sentence per line (.txt, or .txt.xz to compress)."),
    ],
    jobs: Annotated[int, typer.Option(help="Worker processes (one input file each at a time).")] = 1,
    splitter: SplitterOption = DEFAULT_SPLITTER,
    progress: ProgressOption = True,
) -> None:
    """Split raw paragraphs into tokenised sentences once, into one cache file."""
    from ..training.corpus import expand_files, pretokenize_files

    started = time.monotonic()
    files = expand_files(inputs)
    check_output_spares_inputs([("--out", out)], [("FILES", f) for f in files])
    check_output_is_new("--out", out, _NEW_FILE)
    sentences, tokens = pretokenize_files(files, out, splitter, jobs=jobs, progress=progress)
    seconds = time.monotonic() - started
    if sentences == 0:
        typer.echo(f"warning: FILES hold no sentences ({', '.join(map(str, files))}).", err=True)
    typer.echo(
        f"wrote {plural(sentences, 'sentence')}, {plural(tokens, 'token')} from {plural(len(files), 'file')} "
        f"to {out} in {seconds:.1f} s ({tokens / max(seconds, 1e-9):.0f} tokens/s)",
        err=True,
    )


@app.command(short_help="Count the training text's words; write the softmax vocabulary.")
def vocab(
    inputs: Annotated[list[str], typer.Argument(metavar="FILES...", help="Training text (globs allowed).")],
    out: Annotated[Path, typer.Option(metavar="FILE", help="vocab.txt to write (token<TAB>count per line).")],
    vocab_size: Annotated[int | None, setting_option(TrainingSettings, "vocab_size")] = TrainingSettings.vocab_size,
    min_count: Annotated[int | None, setting_option(TrainingSettings, "min_count")] = TrainingSettings.min_count,
    pretokenized: Annotated[bool, setting_option(TrainingSettings, "pretokenized")] = TrainingSettings.pretokenized,
    splitter: SplitterOption = DEFAULT_SPLITTER,
    progress: ProgressOption = True,
) -> None:
    """Count the words of the training text and write the softmax vocabulary."""
    from ..training.corpus import expand_files, get_sentence_splitter
    from ..training.vocab import build_vocabulary

    if vocab_size is not None and min_count is not None:
        raise ElmoError("give --vocab-size or --min-count, not both.")
    split = None if pretokenized else get_sentence_splitter(splitter)
    files = expand_files(inputs)
    check_output_spares_inputs([("--out", out)], [("FILES", f) for f in files])
    check_output_is_new("--out", out, _NEW_FILE)
    vocabulary = build_vocabulary(files, split, vocab_size=vocab_size, min_count=min_count, progress=progress)
    vocabulary.save(out)
    assert vocabulary.counts is not None
    if len(vocabulary) == 3 and vocabulary.counts[2] == 0:  # the specials alone, and no unknown word
        typer.echo(
            f"warning: FILES hold no words ({', '.join(map(str, files))}); {out} holds only the 3 special tokens.",
            err=True,
        )
    covered = sum(vocabulary.counts[3:]) / max(sum(vocabulary.counts[2:]), 1)
    typer.echo(
        f"wrote {plural(len(vocabulary), 'token')} to {out}; they cover {covered:.2%} of the running words", err=True
    )


@app.command("hold-out", short_help="Set a random share of the sentences aside as held-out text for --valid.")
def hold_out_command(
    input_file: Annotated[Path, typer.Argument(metavar="FILE", help="One sentence per line (.txt or .txt.xz).")],
    out_kept: Annotated[Path, typer.Option(metavar="FILE", help="The sentences kept, for elmo train --train.")],
    out_held_out: Annotated[Path, typer.Option(metavar="FILE", help="The sentences held out, for elmo train --valid.")],
    fraction: Annotated[float, typer.Option(help="The share held out, in (0, 1).")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seeds the choice: the same file and seed give the same split.")] = 0,
) -> None:
    """Split FILE's lines into kept and held-out sentences (seeded, in input order, blank lines dropped)."""
    from ...files.atomic_files import atomic_path
    from ...files.text_files import check_input_file, iter_lines, open_text
    from ..training.corpus import hold_out

    if not 0.0 < fraction < 1.0:  # before FILE is read
        raise ElmoError(f"--fraction must be in (0, 1), e.g. 0.05 (the share of sentences held out); got {fraction}.")
    check_input_file(input_file, "FILE")
    outputs = [("--out-kept", out_kept), ("--out-held-out", out_held_out)]
    check_output_spares_inputs(outputs, [("FILE", input_file)])
    if out_kept.resolve() == out_held_out.resolve():
        raise ElmoError(f"--out-kept and --out-held-out are both {out_kept}; give two files.")
    for flag, path in outputs:
        check_output_is_new(flag, path, _NEW_FILE)
    for flag, path in outputs:
        if not path.parent.is_dir():
            raise ElmoError(f"the folder of {flag} ({path.parent}) does not exist; create it first.")
    try:
        kept, held = hold_out(list(iter_lines(input_file)), fraction, seed=seed)
    except ValueError as err:
        raise ElmoError(f"FILE {input_file}: {err}") from None
    with contextlib.ExitStack() as both:  # both files appear, or neither
        for path, lines in ((out_kept, kept), (out_held_out, held)):
            with open_text(both.enter_context(atomic_path(path)), "wt") as f:
                f.writelines(line + "\n" for line in lines)
    typer.echo(f"kept {plural(len(kept), 'sentence')} in {out_kept}, held {len(held)} out in {out_held_out}", err=True)
