"""`elmo perplexity`: forward, backward and average perplexity of text files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...files.text_files import check_input_file
from ...model.checks import check_int
from ...model.errors import ElmoError
from ...runtime.embedding import DEFAULT_BATCH_TOKENS
from .shared import BatchTokensOption, DeviceOption

__all__ = ["perplexity"]


def perplexity(
    files: Annotated[
        list[str], typer.Argument(metavar="FILE...", help="Text files (.xz, .gz, .bz2; - = standard input).")
    ],
    model: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Model folder with a language-model head (default: the default model)."),
    ] = None,
    pretokenized: Annotated[
        bool, typer.Option(help="One tokenised sentence per line instead of raw paragraphs.")
    ] = False,
    batch_tokens: BatchTokensOption = DEFAULT_BATCH_TOKENS,
    device: DeviceOption = "cpu",
    progress: Annotated[bool, typer.Option(help="Show a progress bar per file, on stderr.")] = True,
) -> None:
    """Print forward, backward and average perplexity over each FILE's sentences.

    average = exp((forward loss + backward loss) / 2), bilm-tf's "average perplexity".
    Raw text is split and tokenised with spaCy's English rules, as for training. Output:
    one tab-separated row per file. A file without sentences gets a warning instead.
    """
    from ..training.commands import run_perplexity

    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    for file in files:
        check_input_file(file, "FILE")
    results = run_perplexity(
        files, model=model, pretokenized=pretokenized, batch_tokens=batch_tokens, device=device, progress=progress
    )
    typer.echo("file\tforward_ppl\tbackward_ppl\taverage_ppl\tpredictions\tsentences\tunknown_words")
    for path, p in results:
        if p.sentences == 0:
            typer.echo(f"warning: FILE {path} holds no sentences, so it has no perplexity (no row).", err=True)
            continue
        typer.echo(
            f"{path}\t{p.forward:.3f}\t{p.backward:.3f}\t{p.average:.3f}\t{p.tokens}\t{p.sentences}\t{p.unknown}"
        )
