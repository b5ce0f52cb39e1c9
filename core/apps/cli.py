"""The `elmo` command line.

elmo --version
elmo embed INPUT|- OUTPUT [--layers all|top|average|mix|K] [--model DIR |
             --options FILE --weights FILE] [--batch-tokens N] [--batch-size N] [--device cpu]
             [--tokenize] [--window-tokens N] [--window-context N] [--piece-tokens N]
torchrun --nproc-per-node N -m elmo_core embed INPUT OUTPUT ...   (several processes)
elmo probe TRAIN EVAL [--column 1] [--plot probe.png] [--title T] [--model DIR] [--epochs 5] [--seed 0]
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import torch
import typer

from ..files.text_files import check_input_file, check_output_spares_inputs
from ..files.tokenizers import get_tokenizer
from ..model.checks import check_int
from ..model.elmo import Elmo
from ..model.errors import ElmoError
from ..model.precision import check_cpu_bf16
from ..model.windows import DEFAULT_WINDOW_TOKENS
from ..runtime.attach import set_token_cache
from ..runtime.embedding import DEFAULT_BATCH_TOKENS, check_layers
from ..runtime.memory import MMAP_THRESHOLD, TRAIN_MMAP_THRESHOLD, use_mmap_for_large_blocks
from ..runtime.quantization import quantize_int8
from ..runtime.threads import thread_policy
from ..runtime.token_cache import DEFAULT_TOKEN_CACHE_WORDS
from .embed_file import DEFAULT_PIECE_TOKENS, EmbedFileResult, check_embed_paths, embed_file, job_folder

if TYPE_CHECKING:
    from .training.commands import TrainingSettings

PRECISIONS = ("fp32", "int8", "bf16", "fp16")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# Options shared by several commands, each declared (and its help written) once.
ModelOption = Annotated[Path | None, typer.Option(help="Model folder.")]
OptionsOption = Annotated[Path | None, typer.Option(help="bilm-tf options.json (with --weights).")]
WeightsOption = Annotated[Path | None, typer.Option(help="bilm-tf hdf5 weights (with --options).")]
BatchTokensOption = Annotated[int, typer.Option(help="Padded positions per biLM batch.")]
DeviceOption = Annotated[str, typer.Option(help="torch device, e.g. cpu or cuda.")]
TorchrunDeviceOption = Annotated[
    str, typer.Option(help="torch device, e.g. cpu or cuda; under torchrun each process uses cuda:LOCAL_RANK.")
]

MODEL_FLAGS = ("--model", "--options", "--weights")
"""How the command line spells `load_elmo`'s path, options and weights (used in its errors)."""

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="ELMo contextual word vectors.",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"elmo-bilm {version('elmo-bilm')}")
        raise typer.Exit()


@app.callback()
def _commands(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """ELMo contextual word vectors (elmo-bilm)."""


def plural(count: int, noun: str) -> str:
    """`1 line`, `2 lines`, `0 lines`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def load_model(model: Path | None, options: Path | None, weights: Path | None, device: str = "cpu") -> Elmo:
    """The model named on the command line: a model folder, an options/hdf5 pair, or
    else the default model that ships with the package (`elmo_core.load_elmo`).

    Dropout is 0: this is for inference.

    Raises:
        ElmoError: when the arguments do not name exactly one model.
    """
    from ..files.model_folder import load_elmo

    return load_elmo(model, options, weights, map_location=device, names=MODEL_FLAGS, dropout=0.0)


def _check_device(device: str) -> None:
    """Raise a one-line ElmoError unless `device` names a torch device this machine has."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ElmoError(f"--device {device!r} is not a torch device ({err}); use cpu, cuda or cuda:N.") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ElmoError(
            f"--device {device}: this torch ({torch.__version__}) sees no CUDA device. Use --device cpu, "
            "or install a CUDA build of torch on a machine with a GPU."
        )
    if parsed.type not in ("cpu", "cuda"):
        raise ElmoError(f"--device {device}: only cpu and cuda devices are supported.")


# `elmo embed`'s options.
LayersOption = Annotated[str, typer.Option(help="all | top | average | mix | a layer index 0..n_layers.")]
BatchSizeOption = Annotated[
    int | None,
    typer.Option(help="At most this many lines per batch (default: the --batch-tokens budget alone decides)."),
]
TokenizeOption = Annotated[
    bool, typer.Option(help="Tokenise raw lines (spaCy English rules) instead of splitting on whitespace.")
]
EmbedProgressOption = Annotated[
    bool, typer.Option(help="Show a progress bar (once, from the first process, under torchrun).")
]
WindowTokensOption = Annotated[
    int,
    typer.Option(
        help="Read a line longer than this in overlapping windows of this many tokens (0 = read every line whole)."
    ),
]
WindowContextOption = Annotated[
    int | None, typer.Option(help="Context tokens on each side of a window (default: window-tokens // 8).")
]
EmbedPrecisionOption = Annotated[
    str,
    typer.Option(
        help="fp32 (exact), int8 (CPU: int8 LSTMs, 1.2-2.8x faster, cosine about 0.9998), "
        "bf16 (GPUs, and CPUs with AVX512-BF16 or AMX: bf16 products, float32 state) or fp16 (GPUs)."
    ),
]
TokenCacheOption = Annotated[
    int, typer.Option(help="Word types kept in the layer-0 cache (0 = off); changes no value.")
]
PieceTokensOption = Annotated[
    int,
    typer.Option(
        help="Lines are embedded and saved in pieces of about this many tokens: what a resumed run "
        "redoes at most, and the unit torchrun processes share."
    ),
]


@app.command(short_help="ELMo vectors for every line of a text file, into one hdf5 file.")
def embed(
    input_file: Annotated[
        Path,
        typer.Argument(metavar="INPUT", help="Text file, one sentence per line (.xz, .gz, .bz2; - = standard input)."),
    ],
    output_file: Annotated[Path, typer.Argument(metavar="OUTPUT", help="hdf5 file to write.")],
    layers: LayersOption = "all",
    model: ModelOption = None,
    options: OptionsOption = None,
    weights: WeightsOption = None,
    batch_tokens: BatchTokensOption = DEFAULT_BATCH_TOKENS,
    batch_size: BatchSizeOption = None,
    device: TorchrunDeviceOption = "cpu",
    tokenize: TokenizeOption = False,
    progress: EmbedProgressOption = True,
    window_tokens: WindowTokensOption = DEFAULT_WINDOW_TOKENS,
    window_context: WindowContextOption = None,
    precision: EmbedPrecisionOption = "fp32",
    token_cache: TokenCacheOption = DEFAULT_TOKEN_CACHE_WORDS,
    piece_tokens: PieceTokensOption = DEFAULT_PIECE_TOKENS,
) -> None:
    """Write ELMo vectors for every line of INPUT to the hdf5 file OUTPUT.

    One dataset per input line, named by its 0-based line number, of shape (layers, tokens, dim)
    for --layers all and (tokens, dim) otherwise; its attribute "tokens" holds the line's tokens,
    one per row. A blank line gives a dataset with 0 tokens.

    Work in progress lives in OUTPUT.partial/, which one run owns at a time, and OUTPUT appears
    only when complete. An interrupted run continues where it stopped when the same command is
    run again. For several processes or machines, launch with torchrun: `torchrun
    --nproc-per-node 4 -m elmo_core embed INPUT OUTPUT ...` (see the README's "Big corpora"
    section).

    A line longer than --window-tokens (a whole document on one line, say) is read in overlapping
    windows, so memory does not grow with its length; see the README's "Long documents" section
    for what that does to vectors near the cuts.
    """
    layer_choice: str | int = int(layers) if layers.lstrip("-").isdigit() else layers
    _check_embed_options(precision, batch_tokens, window_tokens, piece_tokens, device, input_file, output_file)
    with _resumable_on_interrupt(output_file) as stopped, _process_group(device) as (rank, device):
        elmo = _embedding_model(model, options, weights, device, layer_choice, token_cache, precision)
        result = embed_file(
            elmo,
            input_file,
            output_file,
            layers=layer_choice,
            batch_tokens=batch_tokens,
            batch_size=batch_size,
            device=device,
            autocast_dtype=AUTOCAST_DTYPES.get(precision),
            window_tokens=window_tokens or None,
            window_context=window_context if window_tokens else None,
            piece_tokens=piece_tokens,
            tokenize=get_tokenizer() if tokenize else None,
            progress=progress,
            settings={"tokenize": "spacy-en" if tokenize else None, "precision": precision},
            stop_requested=stopped,
        )
    if rank == 0:
        _report_embedding(result, input_file, output_file)


def _check_embed_options(
    precision: str,
    batch_tokens: int,
    window_tokens: int,
    piece_tokens: int,
    device: str,
    input_file: Path,
    output_file: Path,
) -> None:
    """Raise a one-line ElmoError for a bad option, device, INPUT or OUTPUT, before any work is done."""
    if precision not in PRECISIONS:
        raise ElmoError(f"--precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    check_int("--window-tokens", window_tokens, minimum=0, meaning="0 = no windows", error=ElmoError)
    check_int("--piece-tokens", piece_tokens, meaning="tokens", error=ElmoError)
    _check_device(device)
    if precision == "bf16" and torch.device(device).type == "cpu":
        check_cpu_bf16()  # refused where the CPU has no native bf16: it would be slower than fp32
    check_embed_paths(input_file, output_file)


@contextmanager
def _resumable_on_interrupt(output_file: Path) -> Iterator[Callable[[], bool]]:
    """Ctrl-C and SIGTERM (a scheduler's stop) end `elmo embed` with one line saying that
    the same command resumes the job (exit status 130, or 143 for SIGTERM).

    Yields the `stop_requested` check for `embed_file`: the handler raises KeyboardInterrupt
    at once, and records the signal too, so that `embed_file` stops at its next line even
    where Python drops the raised KeyboardInterrupt (a signal that lands in a finalizer or a
    weakref callback). Python would print such a dropped interrupt as "Exception ignored in
    ..." with a traceback; the recorded stop already stands for it, so it is not printed."""
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
        if int(os.environ.get("RANK", "0")) == 0:
            folder = job_folder(output_file)
            kept = f"the finished pieces are kept in {folder}; " if folder.is_dir() else ""
            typer.echo(f"interrupted: {output_file} was not written; {kept}run the same command to resume.", err=True)
        raise SystemExit(128 + (received[0] if received else signal.SIGINT)) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = unraisable_hook


@contextmanager
def _process_group(device: str) -> Iterator[tuple[int, str]]:
    """`init_distributed(device)` for the duration of a command: yields (rank, this process's
    device), and destroys the process group at the end when torchrun started several processes."""
    from ..runtime.distributed import init_distributed

    rank, world_size, device = init_distributed(device)
    try:
        yield rank, device
    finally:
        if world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()


def _embedding_model(
    model: Path | None,
    options: Path | None,
    weights: Path | None,
    device: str,
    layer_choice: str | int,
    token_cache: int,
    precision: str,
) -> Elmo:
    """The model `elmo embed` runs: loaded, `layer_choice` checked against it, with its token
    cache set, and quantised for --precision int8."""
    elmo = load_model(model, options, weights, device)
    check_layers(layer_choice, elmo.n_outputs, len(elmo.scalar_mixes))
    set_token_cache(elmo, token_cache)
    if precision == "int8":
        elmo = quantize_int8(elmo)  # refuses a model on a GPU with a one-line ValueError
    return elmo


def _report_embedding(result: EmbedFileResult, input_file: Path, output_file: Path) -> None:
    """What `elmo embed` wrote, on stderr (and a warning for an empty INPUT)."""
    if result.lines == 0:
        typer.echo(f"warning: INPUT {input_file} is empty; OUTPUT holds no sentences.", err=True)
    done = result.pieces_resumed
    verb = "was" if done == 1 else "were"
    resumed = f"; {done} of {plural(result.pieces, 'piece')} {verb} already done" if done else ""
    typer.echo(
        f"wrote {plural(result.lines, 'line')} ({plural(result.tokens, 'token')}) to {output_file}{resumed}", err=True
    )


# `elmo train`'s options (each is the `TrainingSettings` field of the same name).
OutOption = Annotated[Path, typer.Option(help="Output folder: model folder, checkpoint.pt, train_log.jsonl.")]
TrainFilesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--train",
        help="Training text: a file or a quoted glob ('train/*.txt.xz'); repeat for more. Optional with --resume.",
    ),
]
ValidOption = Annotated[Path | None, typer.Option(help="Held-out text for validation perplexity.")]
NewModelOptionsOption = Annotated[Path | None, typer.Option(help="bilm-tf options.json of a new model.")]
ContinueModelOption = Annotated[
    Path | None,
    typer.Option(help="Continue from this model folder (weights; vocabulary and softmax if it has them)."),
]
ResumeOption = Annotated[Path | None, typer.Option(help="Continue a run exactly from its checkpoint.pt.")]
VocabOption = Annotated[
    Path | None, typer.Option(help="Vocabulary file (bilm-tf vocab.txt) instead of counting the training text.")
]
VocabSizeOption = Annotated[
    int | None, typer.Option(help="Keep the N most frequent words (specials included). Default 100000.")
]
MinCountOption = Annotated[int | None, typer.Option(help="Keep words seen at least N times (instead of --vocab-size).")]
TrainBatchTokensOption = Annotated[
    int, typer.Option(help="Padded positions per batch and process (<S>/</S> included).")
]
MaxStepsOption = Annotated[int | None, typer.Option(help="Stop at this total number of steps.")]
MaxHoursOption = Annotated[float | None, typer.Option(help="Stop after this many hours of this run.")]
MaxEpochsOption = Annotated[
    int | None,
    typer.Option(
        help="Stop at the end of this many passes over the training files (counted across resumes; "
        "under torchrun, when the first rank has read its share)."
    ),
]
TrainLrOption = Annotated[
    float | None,
    typer.Option(
        help="Learning rate (default 1e-3 for adam, 0.2 for adagrad). With --resume: a new rate from the "
        "first resumed step on (default: the checkpoint's)."
    ),
]
OptimizerOption = Annotated[str, typer.Option(help="adam or adagrad (bilm-tf's).")]
DropoutOption = Annotated[float, typer.Option(help="Dropout on LSTM inputs and the top output (bilm-tf: 0.1).")]
ClipNormOption = Annotated[float, typer.Option(help="Clip the gradient norm to this (0 = off).")]
CheckpointEveryOption = Annotated[int, typer.Option(help="Save checkpoint and model folder every N steps.")]
ValidateEveryOption = Annotated[int, typer.Option(help="Validation perplexity every N steps.")]
LogEveryOption = Annotated[int, typer.Option(help="A train_log.jsonl row every N steps.")]
TrainPrecisionOption = Annotated[
    str | None,
    typer.Option(
        help="auto (bf16 on CUDA, fp32 on CPU; the default), fp32, bf16 or fp16. With --resume: the "
        "checkpoint's unless given, a new one from here on when given."
    ),
]
TrainPretokenizedOption = Annotated[
    bool,
    typer.Option(help="Input is one tokenised sentence per line (see python -m elmo_core.apps.training pretokenize)."),
]
TrainSeedOption = Annotated[int, typer.Option(help="Seed for weights, shuffling and dropout.")]
MaxSentenceTokensOption = Annotated[int, typer.Option(help="Cut longer sentences into pieces of this many tokens.")]
BufferSentencesOption = Annotated[int, typer.Option(help="Sentences shuffled and length-sorted together.")]
CutoffsOption = Annotated[
    str | None,
    typer.Option(help="Adaptive-softmax cluster ends, e.g. '4000,20000' (default: from the vocabulary size)."),
]
PrefetchOption = Annotated[
    int | None, typer.Option(help="Batches built ahead in a worker process (default 8 on CUDA, 0 on CPU).")
]
TrainProgressOption = Annotated[bool, typer.Option(help="Show a progress bar.")]


@app.command(short_help="Pretrain a biLM language model (resumable; torchrun for more).")
def train(
    out: OutOption,
    train_files: TrainFilesOption = None,
    valid: ValidOption = None,
    options: NewModelOptionsOption = None,
    model: ContinueModelOption = None,
    resume: ResumeOption = None,
    vocab: VocabOption = None,
    vocab_size: VocabSizeOption = None,
    min_count: MinCountOption = None,
    batch_tokens: TrainBatchTokensOption = 4096,
    max_steps: MaxStepsOption = None,
    max_hours: MaxHoursOption = None,
    max_epochs: MaxEpochsOption = None,
    lr: TrainLrOption = None,
    optimizer: OptimizerOption = "adam",
    dropout: DropoutOption = 0.1,
    clip_norm: ClipNormOption = 10.0,
    checkpoint_every: CheckpointEveryOption = 1000,
    validate_every: ValidateEveryOption = 1000,
    log_every: LogEveryOption = 50,
    device: TorchrunDeviceOption = "cpu",
    precision: TrainPrecisionOption = None,
    pretokenized: TrainPretokenizedOption = False,
    seed: TrainSeedOption = 0,
    max_sentence_tokens: MaxSentenceTokensOption = 100,
    buffer_sentences: BufferSentencesOption = 20_000,
    cutoffs: CutoffsOption = None,
    prefetch: PrefetchOption = None,
    progress: TrainProgressOption = True,
) -> None:
    """Pretrain a biLM language model (forward + backward LM, shared adaptive softmax).

    Writes a model folder (loadable by every `elmo` command, plus vocab.txt and
    lm_head.safetensors), checkpoint.pt and train_log.jsonl to --out, every
    --checkpoint-every steps and at the end. One run owns --out at a time: a second
    run on it stops at once. For several processes, launch with torchrun:
    `torchrun --nproc-per-node 2 -m elmo_core train ...`.
    """
    settings = _training_settings(locals())  # first, while the locals are exactly the options
    for path, what in ((valid, "--valid"), (options, "--options"), (vocab, "--vocab"), (resume, "--resume")):
        if path is not None:
            check_input_file(path, what)
    settings.check()  # before anything is read or written (run_training checks again)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from .training.commands import run_training

    summary = run_training(settings)
    if int(os.environ.get("RANK", "0")) == 0:
        trained = f"trained to step {summary['step']} ({plural(summary['tokens'], 'token')})"
        typer.echo(f"{trained}; model folder: {out}", err=True)


def _training_settings(options: dict[str, Any]) -> TrainingSettings:
    """`elmo train`'s options as `TrainingSettings`: each option is the field of the same name,
    except --train (the parameter `train_files`: `train` is the command) and --cutoffs (text,
    '4000,20000')."""
    from .training.commands import TrainingSettings

    fields = {name: value for name, value in options.items() if name not in ("train_files", "cutoffs")}
    cutoffs = options["cutoffs"]
    fields["cutoffs"] = [int(c) for c in cutoffs.split(",")] if cutoffs else None
    return TrainingSettings(train=options["train_files"], **fields)


@app.command(short_help="Forward, backward and average perplexity of text files.")
def perplexity(
    files: Annotated[
        list[str], typer.Argument(metavar="FILE...", help="Text files (.xz, .gz, .bz2; - = standard input).")
    ],
    model: Annotated[
        Path | None, typer.Option(help="Model folder with a language-model head (default: the default model).")
    ] = None,
    pretokenized: Annotated[
        bool, typer.Option(help="One tokenised sentence per line instead of raw paragraphs.")
    ] = False,
    batch_tokens: BatchTokensOption = DEFAULT_BATCH_TOKENS,
    device: DeviceOption = "cpu",
    progress: Annotated[bool, typer.Option(help="Show a progress bar per file, on stderr.")] = True,
) -> None:
    """Print forward, backward and average perplexity over each FILE's sentences.

    average = exp((forward loss + backward loss) / 2), bilm-tf's "average perplexity"
    (the geometric mean of the two). Raw text is split into sentences and tokenised
    with spaCy's English rules, as for training. Output: one tab-separated row per file;
    a file without sentences gets a warning instead of a row.
    """
    from .training.commands import run_perplexity

    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    for path in files:
        check_input_file(path, "FILE")
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


@app.command(short_help="Convert between bilm-tf's files and a model folder.")
def convert(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="OPTIONS WEIGHTS OUT_DIR | MODEL_DIR OUT_PREFIX | OUT_DIR",
            help="bilm-tf options.json, hdf5 weights and the model folder to write (see below).",
        ),
    ],
    to_hdf5: Annotated[
        bool,
        typer.Option(
            "--to-hdf5",
            help="Write MODEL_DIR back to bilm-tf's files: OUT_PREFIX_options.json and OUT_PREFIX_weights.hdf5.",
        ),
    ] = False,
    download: Annotated[
        str | None,
        typer.Option(
            help="Download a published model (small, medium, original, original_5.5B) and convert it into OUT_DIR."
        ),
    ] = None,
) -> None:
    """Convert between bilm-tf's files (options.json + weights.hdf5) and a model folder.

    elmo convert OPTIONS WEIGHTS OUT_DIR writes a complete model folder: the files
    transformers' save_pretrained writes, code included, so it loads with
    AutoModel.from_pretrained(OUT_DIR, trust_remote_code=True) as well as with every
    elmo command (--model OUT_DIR). Needs transformers (the package's hf extra).

    elmo convert --to-hdf5 MODEL_DIR OUT_PREFIX writes OUT_PREFIX_options.json and
    OUT_PREFIX_weights.hdf5 (the published files' naming); every dataset is exactly the
    original's.

    elmo convert --download NAME OUT_DIR fetches a published model from AllenNLP's
    public storage and converts it on arrival.
    """
    _check_convert_paths(paths, to_hdf5, download)
    _check_convert_spares_inputs(paths, to_hdf5, download)
    if to_hdf5:
        _write_bilm_tf_files(*paths)
        return
    converter = _hf_converter()
    out = converter.download_published(download, paths[0]) if download else converter.convert_bilm_tf_to_hf(*paths)
    typer.echo(f"wrote model folder {out}", err=True)


def _check_convert_paths(paths: list[Path], to_hdf5: bool, download: str | None) -> None:
    """Raise a one-line ElmoError unless the paths fit the form of `elmo convert` the flags choose."""
    if to_hdf5 and download:
        raise ElmoError("--to-hdf5 and --download do not go together.")
    expected = (
        (1, "OUT_DIR") if download else (2, "MODEL_DIR OUT_PREFIX") if to_hdf5 else (3, "OPTIONS WEIGHTS OUT_DIR")
    )
    if len(paths) != expected[0]:
        raise ElmoError(
            f"this form of elmo convert takes {expected[1]}; got {len(paths)} path(s): {[str(p) for p in paths]}."
        )
    if not to_hdf5 and not download:
        check_input_file(paths[0], "OPTIONS")
        check_input_file(paths[1], "WEIGHTS")


def _bilm_tf_paths(prefix: Path) -> tuple[Path, Path]:
    """The files `elmo convert --to-hdf5 MODEL_DIR OUT_PREFIX` writes."""
    return prefix.with_name(prefix.name + "_options.json"), prefix.with_name(prefix.name + "_weights.hdf5")


def _check_convert_spares_inputs(paths: list[Path], to_hdf5: bool, download: str | None) -> None:
    """Raise a one-line ElmoError if what `elmo convert` writes would replace one of its inputs."""
    from ..files.model_folder import MODEL_FOLDER_FILES

    if to_hdf5:
        model_dir, prefix = paths
        inputs = [("a file of MODEL_DIR", p) for p in sorted(model_dir.glob("*")) if p.is_file()]
        options_path, weights_path = _bilm_tf_paths(prefix)
        outputs = [("OUT_PREFIX_options.json", options_path), ("OUT_PREFIX_weights.hdf5", weights_path)]
        check_output_spares_inputs(outputs, inputs)
    elif not download:
        check_output_spares_inputs(
            [], [("OPTIONS", paths[0]), ("WEIGHTS", paths[1])], folders=[("OUT_DIR", paths[2], MODEL_FOLDER_FILES)]
        )


def _write_bilm_tf_files(model_dir: Path, prefix: Path) -> None:
    """`elmo convert --to-hdf5`: OUT_PREFIX_options.json and OUT_PREFIX_weights.hdf5 from a model folder."""
    import json

    from ..files.model_folder import load_model_folder
    from ..files.weights import save_bilm_tf

    elmo = load_model_folder(model_dir)
    options_path, weights_path = _bilm_tf_paths(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data = elmo.options.to_dict()  # bilm-tf's two sections only, as the published files
    options_path.write_text(json.dumps({k: data[k] for k in ("lstm", "char_cnn")}, indent=2) + "\n", encoding="utf-8")
    save_bilm_tf(elmo, weights_path)
    typer.echo(f"wrote {options_path} and {weights_path}", err=True)


def _hf_converter() -> Any:
    """The Hugging Face side of `elmo convert` (bilm-tf files or a download -> a transformers model folder).

    It lives in hf_elmo, which elmo_core does not depend on: it is found through an entry
    point, as tokenizers are (elmo_core.files.plugins).
    """
    from ..files.plugins import load_plugin

    return load_plugin(
        "elmo_core.converters",
        "hf",
        "elmo convert writes a transformers model folder: pip install 'elmo-bilm[hf]'.",
    )


@app.command(short_help="Linear probe of each biLM layer on a CoNLL file's token labels.")
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
        typer.Option(help="Save a bar plot of the accuracies here (.png unless another suffix; needs matplotlib)."),
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
) -> None:
    """Linear probe of each biLM layer (0 = char CNN) and their average on token labels.

    Fits a softmax regression on the frozen vectors of TRAIN's tokens, per layer, to
    the labels in --column, and prints the accuracy on EVAL's tokens (labels never seen
    in TRAIN count as wrong), with the majority-label baseline. Peters et al. (2018)
    found the first LSTM layer best for POS tags.
    """
    from .probe import plot_path, plot_probe, read_conll_column, run_probe

    if column == 0:
        raise ElmoError("--column 0 is the token itself; give the label column (1 = second, -1 = last).")
    check_int("--batch-tokens", batch_tokens, error=ElmoError)
    for path, what in ((train_file, "TRAIN"), (eval_file, "EVAL")):
        check_input_file(path, what)
    if plot is not None:
        plot = plot_path(plot)  # no matplotlib, or a suffix it cannot write: say so now, not after the probe
        if not plot.parent.is_dir():
            raise ElmoError(f"the folder of --plot ({plot.parent}) does not exist; create it first.")
        inputs = [("TRAIN", train_file), ("EVAL", eval_file), ("--options", options), ("--weights", weights)]
        check_output_spares_inputs([("--plot", plot)], inputs)
    elmo = load_model(model, options, weights, device)
    train_data = read_conll_column(train_file, column)
    eval_data = read_conll_column(eval_file, column)
    result = run_probe(
        elmo,
        train_data,
        eval_data,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        batch_tokens=batch_tokens,
    )
    typer.echo("representation\taccuracy\tcorrect\ttokens")
    for name, accuracy, correct in zip(result.names, result.accuracy, result.correct):
        typer.echo(f"{name}\t{accuracy:.4f}\t{correct}\t{result.num_tokens}")
    typer.echo(f"majority label\t{result.majority_accuracy:.4f}\t\t{result.num_tokens}")
    if plot is not None:
        written = plot_probe(
            result, plot, title=title or f"linear probe, column {column}: {train_file.name} -> {eval_file.name}"
        )
        typer.echo(f"wrote the plot to {written}", err=True)


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks.

    The command owns its process, so it also fixes glibc's mmap threshold
    (`elmo_core.runtime.memory.use_mmap_for_large_blocks`): memory then stays close to what
    is alive, batch after batch; `elmo train` gets `TRAIN_MMAP_THRESHOLD` (see
    `elmo_core.runtime.memory` for why).
    """
    use_mmap_for_large_blocks(TRAIN_MMAP_THRESHOLD if sys.argv[1:2] == ["train"] else MMAP_THRESHOLD)
    try:
        thread_policy()  # a bad ELMO_THREADS is one line before any work
        app()
    except (ElmoError, TypeError, ValueError, OSError) as err:  # OSError: files, the network
        typer.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
