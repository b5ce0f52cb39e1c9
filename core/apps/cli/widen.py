"""`elmo widen`: grow a trained biLM to a wider shape that computes the same function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...model.checks import check_int
from ...model.errors import ElmoError

__all__ = ["widen"]


def widen(
    out: Annotated[
        Path, typer.Option(metavar="DIR", help="The model folder to write (with vocab.txt and lm_head.safetensors).")
    ],
    lstm_dim: Annotated[int, typer.Option(help="The new lstm.dim: a whole multiple of the model's.")],
    projection_dim: Annotated[int, typer.Option(help="The new lstm.projection_dim: a whole multiple of the model's.")],
    model: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Model folder with a language-model head (default: the default model)."),
    ] = None,
    noise: Annotated[
        float,
        typer.Option(help="Relative std of the noise that lets copied units learn apart (0: the exact function)."),
    ] = 0.01,
    seed: Annotated[int, typer.Option(help="Seed of that noise.")] = 0,
) -> None:
    """Grow a trained biLM to LSTM cell LSTM_DIM and projection PROJECTION_DIM, same function.

    Net2WiderNet (Chen et al. 2016): every cell unit and projection feature is copied, and
    the weights that read copies are divided by their number. The perplexity stays the old
    one. Then train the wider model on: elmo train --model OUT ...
    """
    from ...files.model_folder import MODEL_FOLDER_FILES, resolve_model_source
    from ...files.text_files import check_output_is_new, check_output_spares_inputs
    from ..training.model import LM_HEAD_NAME, VOCAB_NAME, load_language_model, save_language_model
    from ..training.widen import widen_language_model

    check_int("--lstm-dim", lstm_dim, error=ElmoError)
    check_int("--projection-dim", projection_dim, error=ElmoError)
    if not noise >= 0:
        raise ElmoError(f"--noise is a relative std >= 0; got {noise}.")
    folder = resolve_model_source(model).folder
    assert folder is not None  # one path (or none: the default model) always names a folder
    reads = [("--model", path) for path in sorted(folder.iterdir()) if path.is_file()]
    written = (VOCAB_NAME, LM_HEAD_NAME, *MODEL_FOLDER_FILES)
    check_output_spares_inputs([], reads, folders=[("--out", out, written)])
    fix = "Give a fresh --out (a new or empty folder), or delete the old model first."
    check_output_is_new("--out", out, fix, patterns=written, what="a model folder's files")
    lm, vocab, settings = load_language_model(folder)
    try:
        wide = widen_language_model(lm, dim=lstm_dim, projection_dim=projection_dim, noise=noise, seed=seed)
    except ValueError as err:
        raise ElmoError(str(err)) from None
    save_language_model(wide, vocab, out, elmo_settings=settings)
    old, new = lm.options.lstm, wide.options.lstm
    typer.echo(
        f"wrote {out}: LSTM {old.dim}/{old.projection_dim} -> {new.dim}/{new.projection_dim}, "
        f"{sum(p.numel() for p in lm.bilm.parameters()):,} -> {sum(p.numel() for p in wide.bilm.parameters()):,} "
        "biLM parameters",
        err=True,
    )
