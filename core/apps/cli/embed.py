"""`elmo embed`: ELMo vectors for every line of a text file, into one hdf5 or Parquet file."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from ...files.hdf5_files import import_h5py
from ...files.parquet_files import STORE_DTYPES, import_pyarrow
from ...files.tokenizers import get_tokenizer
from ...model.checks import check_int
from ...model.elmo import Elmo
from ...model.environment import environment_value
from ...model.errors import ElmoError
from ...model.precision import check_cpu_precision
from ...runtime.embedding import EmbedSettings, check_layers
from ...runtime.quantization import quantize_int8
from ...runtime.token_cache import DEFAULT_TOKEN_CACHE_WORDS
from ..embed_file import EmbedFileResult, check_embed_paths, embed_file
from ..embed_job import PARQUET_SUFFIXES, is_parquet, job_folder
from ..pieces import DEFAULT_PIECE_TOKENS
from .shared import (
    BatchTokensOption,
    ModelOption,
    OptionsOption,
    TorchrunDeviceOption,
    WeightsOption,
    check_device,
    load_model,
    plural,
    process_group,
    setting_option,
)

__all__ = ["embed"]

OUTPUT_SUFFIXES = {".hdf5": "hdf5", ".h5": "hdf5", **dict.fromkeys(PARQUET_SUFFIXES, "parquet")}
"""OUTPUT's suffix -> the format written. Another suffix gets hdf5 and a warning."""
PRECISIONS = ("fp32", "int8", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# The options that are `EmbedSettings` fields take their help and default from the field.
LayersOption = Annotated[str, setting_option(EmbedSettings, "layers", metavar="LAYERS")]
BatchSizeOption = Annotated[int | None, setting_option(EmbedSettings, "batch_size")]
WindowTokensOption = Annotated[int, setting_option(EmbedSettings, "window_tokens")]
WindowContextOption = Annotated[int | None, setting_option(EmbedSettings, "window_context")]
# The others are the command's own.
TokenizeOption = Annotated[
    bool, typer.Option(help="Tokenise raw lines (spaCy English rules) instead of splitting on whitespace.")
]
ProgressOption = Annotated[
    bool, typer.Option(help="Show a progress bar (once, from the first process, under torchrun).")
]
PrecisionOption = Annotated[
    str,
    typer.Option(
        metavar=f"[{'|'.join(PRECISIONS)}]",
        help="fp32 (exact), int8 (CPU: int8 LSTMs, cosine about 0.9998; faster for large LSTMs, not for the "
        "default model: measured per shape in benchmarks/README.md), bf16 (GPUs, and CPUs with AVX512-BF16 or "
        "AMX: bf16 products, float32 state) or fp16 (GPUs); on a CPU where bf16 or fp16 would run slower than fp32, "
        "they are refused.",
    ),
]
TokenCacheOption = Annotated[  # named as the setting it is (`token_cache_words`), so errors name --token-cache
    int, typer.Option("--token-cache", help="Word types kept in the layer-0 cache (0 = off); changes no value.")
]
OverwriteOption = Annotated[
    bool, typer.Option(help="Replace an OUTPUT that holds another run's vectors (else such an OUTPUT is refused).")
]
PieceTokensOption = Annotated[
    int,
    typer.Option(
        help="Lines are embedded and saved in pieces of about this many tokens: what a resumed run "
        "redoes at most, and the unit torchrun processes share."
    ),
]
StoreDtypeOption = Annotated[
    str,
    typer.Option(
        help="float32 or float16: the dtype the vectors are stored in. float16 halves the bytes "
        "(about 3 significant digits)."
    ),
]
DEFAULT = EmbedSettings()


def embed(
    input_file: Annotated[
        Path,
        typer.Argument(metavar="INPUT", help="Text file, one sentence per line (.xz, .gz, .bz2; - = standard input)."),
    ],
    output_file: Annotated[
        Path, typer.Argument(metavar="OUTPUT", help="File to write: .parquet (or .pq) for Parquet, else hdf5.")
    ],
    layers: LayersOption = str(DEFAULT.layers),
    model: ModelOption = None,
    options: OptionsOption = None,
    weights: WeightsOption = None,
    batch_tokens: BatchTokensOption = DEFAULT.batch_tokens,
    batch_size: BatchSizeOption = DEFAULT.batch_size,
    device: TorchrunDeviceOption = "cpu",
    tokenize: TokenizeOption = False,
    progress: ProgressOption = True,
    window_tokens: WindowTokensOption = DEFAULT.window_tokens or 0,
    window_context: WindowContextOption = DEFAULT.window_context,
    precision: PrecisionOption = "fp32",
    token_cache_words: TokenCacheOption = DEFAULT_TOKEN_CACHE_WORDS,
    piece_tokens: PieceTokensOption = DEFAULT_PIECE_TOKENS,
    overwrite: OverwriteOption = False,
    store_dtype: StoreDtypeOption = "float32",
) -> None:
    """Write ELMo vectors for every line of INPUT to OUTPUT, an hdf5 or a Parquet file.

    OUTPUT.parquet: one row per line (tokens, character offsets, vectors). hdf5: one dataset per
    line, named by its 0-based number, of shape (layers, tokens, dim) for --layers all, else
    (tokens, dim). Its attribute "tokens" holds the line's tokens. A blank line has 0 tokens.

    An existing OUTPUT is never replaced without --overwrite. When it holds this very job, the
    command does nothing. Otherwise it refuses.

    Work in progress lives in OUTPUT.partial/, and OUTPUT appears only when complete. Run the
    same command again to resume. For several processes or machines, launch with torchrun:
    `torchrun --nproc-per-node 4 -m elmo_core embed INPUT OUTPUT ...`.

    A line longer than --window-tokens is read in overlapping windows, so memory does not grow
    with its length. Each token keeps the vector of a window with --window-context tokens of
    context on each side.
    """
    layer_choice: str | int = int(layers) if layers.lstrip("-").isdigit() else layers
    _check_options(precision, batch_tokens, window_tokens, piece_tokens, device, input_file, output_file, store_dtype)
    with _resumable_on_interrupt(output_file) as stopped, process_group(device) as (rank, device):
        elmo = _embedding_model(model, options, weights, device, layer_choice, token_cache_words, precision)
        settings = _settings(layer_choice, batch_tokens, batch_size, precision, window_tokens, window_context)
        result = embed_file(
            elmo,
            input_file,
            output_file,
            settings,
            device=device,
            piece_tokens=piece_tokens,
            store_dtype=store_dtype,
            tokenize=get_tokenizer() if tokenize else None,
            progress=progress,
            record={"tokenize": "spacy-en" if tokenize else None, "precision": precision},
            stop_requested=stopped,
            overwrite=overwrite,
        )
    if rank == 0:
        _report(result, input_file, output_file)


def _warn_of_an_unknown_suffix(output_file: Path) -> None:
    if output_file.suffix.lower() not in OUTPUT_SUFFIXES and environment_value("RANK") == 0:
        known = ", ".join(OUTPUT_SUFFIXES)
        typer.echo(
            f"warning: OUTPUT {output_file} is written as hdf5 whatever its suffix; elmo embed knows {known}. "
            f"Name it {output_file.with_suffix('.hdf5').name} so that readers know what it holds.",
            err=True,
        )


def _check_options(
    precision: str,
    batch_tokens: int,
    window_tokens: int,
    piece_tokens: int,
    device: str,
    input_file: Path,
    output_file: Path,
    store_dtype: str,
) -> None:
    if store_dtype not in STORE_DTYPES:
        raise ElmoError(f"--store-dtype must be one of {', '.join(STORE_DTYPES)}; got {store_dtype!r}.")
    if precision not in PRECISIONS:
        raise ElmoError(f"--precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    check_int("--window-tokens", window_tokens, minimum=0, meaning="0 = no windows", error=ElmoError)
    check_int("--piece-tokens", piece_tokens, meaning="tokens", error=ElmoError)
    check_device(device)
    if torch.device(device).type == "cpu":
        check_cpu_precision(AUTOCAST_DTYPES.get(precision))  # a precision slower than fp32 here is refused
    check_embed_paths(input_file, output_file)
    _warn_of_an_unknown_suffix(output_file)
    try:
        if is_parquet(output_file):
            import_pyarrow("elmo embed (its OUTPUT is Parquet)")
        else:
            import_h5py("elmo embed (its OUTPUT is hdf5)")
    except ImportError as err:
        raise ElmoError(str(err)) from None


def _settings(
    layers: str | int,
    batch_tokens: int,
    batch_size: int | None,
    precision: str,
    window_tokens: int,
    window_context: int | None,
) -> EmbedSettings:
    return EmbedSettings(
        layers=layers,
        batch_tokens=batch_tokens,
        batch_size=batch_size,
        autocast_dtype=AUTOCAST_DTYPES.get(precision),
        window_tokens=window_tokens or None,
        window_context=window_context if window_tokens else None,
    )


@contextmanager
def _resumable_on_interrupt(output_file: Path) -> Iterator[Callable[[], bool]]:
    """Ctrl-C and SIGTERM end `elmo embed` with one line saying how to resume (exit status 130 or 143).

    Yields `embed_file`'s `stop_requested`. The handler raises KeyboardInterrupt and records
    the signal, so the job stops at its next line even where Python drops the interrupt (in a
    finalizer). Such a dropped interrupt is then not printed as "Exception ignored".
    """
    received: list[int] = []
    unraisable_hook = sys.unraisablehook

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    def drop_recorded_interrupts(unraisable: Any) -> None:
        if not (received and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            unraisable_hook(unraisable)

    sys.unraisablehook = drop_recorded_interrupts
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, stop)
        except ValueError:  # not the main thread (embed called from a thread): leave the signals alone
            break
    try:
        yield lambda: bool(received)
    except KeyboardInterrupt:
        if environment_value("RANK") == 0:
            folder = job_folder(output_file)
            kept = f"the finished pieces are kept in {folder}; " if folder.is_dir() else ""
            typer.echo(f"interrupted: {output_file} was not written; {kept}run the same command to resume.", err=True)
        raise SystemExit(128 + (received[0] if received else int(signal.SIGINT))) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = unraisable_hook


def _embedding_model(
    model: Path | None,
    options: Path | None,
    weights: Path | None,
    device: str,
    layer_choice: str | int,
    token_cache: int,
    precision: str,
) -> Elmo:
    elmo = load_model(model, options, weights, device, token_cache_words=token_cache)
    check_layers(layer_choice, elmo.n_outputs, len(elmo.scalar_mixes))
    if precision == "int8":
        elmo = quantize_int8(elmo)  # refuses a model on a GPU with a one-line ValueError
    return elmo


def _report(result: EmbedFileResult, input_file: Path, output_file: Path) -> None:
    if result.already_complete:
        typer.echo(
            f"{output_file} is already complete: it holds the vectors of this input with these settings "
            f"({plural(result.lines, 'line')}, {plural(result.tokens, 'token')}); nothing to do.",
            err=True,
        )
        return
    if result.lines == 0:
        typer.echo(f"warning: INPUT {input_file} is empty; OUTPUT holds no sentences.", err=True)
    done = result.pieces_resumed
    verb = "was" if done == 1 else "were"
    resumed = f"; {done} of {plural(result.pieces, 'piece')} {verb} already done" if done else ""
    typer.echo(
        f"wrote {plural(result.lines, 'line')} ({plural(result.tokens, 'token')}) to {output_file}{resumed}", err=True
    )
