"""`elmo probe`: a linear probe of each biLM layer on a CoNLL file's token labels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ...files.text_files import check_input_file, check_output_spares_inputs
from ...model.checks import check_int
from ...model.errors import ElmoError
from ...runtime.embedding import DEFAULT_BATCH_TOKENS
from .shared import BatchTokensOption, DeviceOption, ModelOption, OptionsOption, WeightsOption, load_model

__all__ = ["probe"]

ProgressOption = Annotated[
    bool, typer.Option(help="Show progress bars on stderr: the biLM's tokens, then the probes' steps.")
]


def probe(
    train_file: Annotated[
        Path, typer.Argument(metavar="TRAIN", help="CoNLL-format file to fit the probes on (- = standard input).")
    ],
    eval_file: Annotated[Path, typer.Argument(metavar="EVAL", help="CoNLL-format file to score them on.")],
    column: Annotated[
        int, typer.Option(help="Label column, Python style: 1 = second (CoNLL-2003 POS), -1 = last (NER).")
    ] = 1,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Save a bar plot of the accuracies here (.png unless another suffix; needs matplotlib).",
        ),
    ] = None,
    title: Annotated[str, typer.Option(help="Title of the plot (default: the column and file names).")] = "",
    model: ModelOption = None,
    options: OptionsOption = None,
    weights: WeightsOption = None,
    epochs: Annotated[int, typer.Option(help="Passes over the training tokens.")] = 5,
    batch_size: Annotated[int, typer.Option(help="Tokens per Adam step.")] = 256,
    lr: Annotated[float, typer.Option(help="Adam learning rate (features are standardised).")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed for the probes' init and token order.")] = 0,
    batch_tokens: BatchTokensOption = DEFAULT_BATCH_TOKENS,
    device: DeviceOption = "cpu",
    progress: ProgressOption = True,
) -> None:
    """Linear probe of each biLM layer (0 = char CNN) and their average on token labels.

    Fits a softmax regression per layer on the frozen vectors of TRAIN's tokens, to the
    labels in --column. Prints the accuracy on EVAL's tokens, with the majority-label
    baseline. Labels never seen in TRAIN count as wrong. Peters et al. (2018) found the
    first LSTM layer best for POS tags.
    """
    from ..probe import plot_probe, read_conll_column, run_probe

    if column == 0:
        raise ElmoError("--column 0 is the token itself; give the label column (1 = second, -1 = last).")
    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    for path, what in ((train_file, "TRAIN"), (eval_file, "EVAL")):
        check_input_file(path, what)
    if plot is not None:
        plot = _checked_plot(
            plot, [("TRAIN", train_file), ("EVAL", eval_file), ("--options", options), ("--weights", weights)]
        )
    train_data, eval_data = read_conll_column(train_file, column), read_conll_column(eval_file, column)
    _warn_if_no_label_is_shared(train_data[1], eval_data[1], column)
    elmo = load_model(model, options, weights, device)
    numbers = {"epochs": epochs, "batch_size": batch_size, "seed": seed, "batch_tokens": batch_tokens}
    result = run_probe(elmo, train_data, eval_data, lr=lr, progress=progress, **numbers)
    _print_table(result)
    if plot is not None:
        written = plot_probe(
            result, plot, title=title or f"linear probe, column {column}: {train_file.name} -> {eval_file.name}"
        )
        typer.echo(f"wrote the plot to {written}", err=True)


def _checked_plot(plot: Path, inputs: list[tuple[str, Path | None]]) -> Path:
    # Refused now rather than after the probe.
    from ..probe import plot_path

    plot = plot_path(plot)
    if not plot.parent.is_dir():
        raise ElmoError(f"the folder of --plot ({plot.parent}) does not exist; create it first.")
    check_output_spares_inputs([("--plot", plot)], inputs)
    return plot


def _warn_if_no_label_is_shared(train_tags: list[list[str]], eval_tags: list[list[str]], column: int) -> None:
    train_labels = {tag for tags in train_tags for tag in tags}
    eval_labels = {tag for tags in eval_tags for tag in tags}
    if not train_labels & eval_labels:
        seen = ", ".join(sorted(eval_labels)[:5]) + (", ..." if len(eval_labels) > 5 else "")
        typer.echo(
            f"warning: no label of EVAL occurs in TRAIN (column {column}; EVAL has {seen}), so every "
            "accuracy will be 0. Check --column and that both files label tokens the same way.",
            err=True,
        )


def _print_table(result: Any) -> None:
    typer.echo("representation\taccuracy\tcorrect\ttokens")
    for name, accuracy, correct in zip(result.names, result.accuracy, result.correct):
        typer.echo(f"{name}\t{accuracy:.4f}\t{correct}\t{result.num_tokens}")
    typer.echo(f"majority label\t{result.majority_accuracy:.4f}\t\t{result.num_tokens}")
