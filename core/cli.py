"""The `elmo` command line.

    elmo embed INPUT OUTPUT [--layers all|top|average|mix|K] [--model DIR |
               --options FILE --weights FILE] [--batch-tokens N] [--device cpu] [--tokenize]
"""

from __future__ import annotations

import logging
import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from .elmo import Elmo
from .embedding import DEFAULT_BATCH_TOKENS, check_layers, iter_embeddings
from .errors import ElmoError
from .tokenizers import get_tokenizer

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="ELMo contextual word vectors.",
)
logger = logging.getLogger(__name__)


@app.callback()
def _commands() -> None:
    """ELMo contextual word vectors (elmo-bilm)."""

def load_model(
    model: Path | None, options: Path | None, weights: Path | None, device: str = "cpu"
) -> Elmo:
    """The model named on the command line: a model folder, an options/hdf5 pair, or
    else the default model that ships with the package.

    Dropout is 0: this is for inference.

    Raises:
        ElmoError: when the arguments do not name exactly one model.
    """
    from .model_folder import default_model_dir, load_model_folder

    if model is not None and (options is not None or weights is not None):
        raise ElmoError("give either --model DIR or --options FILE --weights FILE, not both.")
    if model is not None:
        return load_model_folder(model, map_location=device, dropout=0.0)
    if options is not None or weights is not None:
        if options is None or weights is None:
            raise ElmoError("--options and --weights go together: give both (options.json and the hdf5 file).")
        from .options import BiLMOptions
        from .weights import load_bilm_tf

        elmo = Elmo(BiLMOptions.from_json(options), dropout=0.0)
        load_bilm_tf(elmo, weights)
        return elmo.to(device)
    return load_model_folder(default_model_dir(), map_location=device, dropout=0.0)


class Layers(str, Enum):
    all = "all"
    top = "top"
    average = "average"
    mix = "mix"


def _read_sentences(path: Path, tokenize: Callable[[str], list[str]] | None) -> list[list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ElmoError(f"input file {path} does not exist.") from None
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ElmoError(f"{path} is not UTF-8 text (line {line}: {err.reason}).") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it is not a blank sentence
    lines = [line.rstrip("\r") for line in lines]
    if tokenize is not None:
        return [tokenize(line) if line.strip() else [] for line in lines]
    return [line.split() for line in lines]


@app.command()
def embed(
    input_file: Annotated[Path, typer.Argument(metavar="INPUT", help="Text file, one sentence per line.")],
    output_file: Annotated[Path, typer.Argument(metavar="OUTPUT", help="hdf5 file to write.")],
    layers: Annotated[str, typer.Option(help="all | top | average | mix | a layer index 0..n_layers.")] = "all",
    model: Annotated[Optional[Path], typer.Option(help="Model folder.")] = None,
    options: Annotated[Optional[Path], typer.Option(help="bilm-tf options.json (with --weights).")] = None,
    weights: Annotated[Optional[Path], typer.Option(help="bilm-tf hdf5 weights (with --options).")] = None,
    batch_tokens: Annotated[int, typer.Option(help="Padded positions per batch.")] = DEFAULT_BATCH_TOKENS,
    device: Annotated[str, typer.Option(help="torch device, e.g. cpu or cuda.")] = "cpu",
    tokenize: Annotated[bool, typer.Option(help="Tokenise raw lines (spaCy English rules) instead of splitting on whitespace.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Write ELMo vectors for every line of INPUT to the hdf5 file OUTPUT.

    One dataset per input line, named by its 0-based line number: [layers, tokens, dim]
    for --layers all, [tokens, dim] otherwise. A blank line gives a dataset with 0
    tokens. OUTPUT is written under a temporary name and appears only when complete.
    """
    import h5py
    from tqdm import tqdm

    layer_choice: str | int = int(layers) if layers.lstrip("-").isdigit() else layers
    elmo = load_model(model, options, weights, device)
    check_layers(layer_choice, elmo.num_layers, len(elmo.scalar_mixes))
    sentences = _read_sentences(input_file, get_tokenizer() if tokenize else None)
    tmp = output_file.with_name(output_file.name + ".partial")
    try:
        with h5py.File(tmp, "w") as out, tqdm(
            total=sum(len(s) for s in sentences), unit="tok", disable=not progress
        ) as bar:
            out.attrs["layers"] = str(layer_choice)
            out.attrs["dim"] = elmo.output_dim
            for i, vectors in iter_embeddings(
                elmo, sentences, layers=layer_choice, batch_tokens=batch_tokens, device=device
            ):
                out.create_dataset(str(i), data=vectors)
                bar.update(len(sentences[i]))
        os.replace(tmp, output_file)
    finally:
        tmp.unlink(missing_ok=True)
    typer.echo(f"wrote {len(sentences)} sentences to {output_file}", err=True)


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks."""
    try:
        app()
    except (ElmoError, TypeError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
