"""`elmo train`: pretrain a biLM language model, resumable, under torchrun for more processes.

Its options are made from `TrainingSettings`' fields (`settings_parameters`), so each
setting is declared once.
"""

from __future__ import annotations

import inspect
import logging
import shlex
import signal
import time
import typing
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from ...files.text_files import check_input_file
from ...model.environment import environment_value
from ..training.checkpoint import CHECKPOINT_NAME
from ..training.settings import STOP_SETTINGS, TrainingSettings
from .shared import plural

__all__ = ["train"]


def train(**options: Any) -> None:
    """Pretrain a biLM language model (forward + backward LM, shared adaptive softmax).

    Writes a model folder (with vocab.txt and lm_head.safetensors), checkpoint.pt and
    train_log.jsonl to --out, every --checkpoint-every steps and at the end. One run owns
    --out at a time. A new run refuses an --out that holds another run's files: continue
    that one with --resume OUT/checkpoint.pt. Ctrl-C stops after the current step, saves a
    checkpoint and prints the command that resumes. A second Ctrl-C stops at once. For
    several processes, launch with torchrun: `torchrun --nproc-per-node 2 -m elmo_core train ...`.
    """
    settings = _training_settings(options)
    for what in ("valid", "options", "vocab", "resume"):
        if getattr(settings, what) is not None:
            check_input_file(getattr(settings, what), "--" + what)
    settings.check_files()  # before anything is read or written (run_training checks again)
    _log_plainly()
    from ..training.commands import run_training

    started = time.monotonic()
    reports = environment_value("RANK") == 0
    checkpoint = Path(settings.out) / CHECKPOINT_NAME
    try:
        summary = run_training(settings, stop_on_signals=True)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the first step
        if reports:
            kept = f"; {checkpoint} holds the last checkpoint" if checkpoint.is_file() else ""
            typer.echo(f"interrupted: stopped at once, without saving{kept}.", err=True)
        raise SystemExit(128 + int(signal.SIGINT)) from None
    if reports and summary.get("interrupted"):
        resume = shlex.join(resume_command(settings, (time.monotonic() - started) / 3600))
        typer.echo(f"interrupted at step {summary['step']}: saved {checkpoint}; resume with: {resume}", err=True)
    elif reports:
        trained = f"trained to step {summary['step']} ({plural(summary['tokens'], 'token')})"
        typer.echo(f"{trained}; model folder: {settings.out}", err=True)
    if summary.get("interrupted"):
        raise SystemExit(128 + int(signal.SIGINT))


class _PlainFormatter(logging.Formatter):
    """A log record as the other commands write to stderr: `warning: ...` for a warning."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return f"{record.levelname.lower()}: {text}" if record.levelno >= logging.WARNING else text


def _log_plainly() -> None:
    # Unless the program has set up logging itself (`logging.basicConfig`'s rule).
    if logging.root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_PlainFormatter("%(message)s"))
    logging.root.addHandler(handler)
    logging.root.setLevel(logging.INFO)


def resume_command(settings: TrainingSettings, hours_used: float = 0.0) -> list[str]:
    """The command that continues an interrupted run from its checkpoint, to the stops it was given.

    The checkpoint holds the data, model, learning rate and precision. The stops
    (`STOP_SETTINGS`) come from the command, so those not at their defaults are given again.
    `--max-hours` gets what is left after `hours_used`.
    """
    world: int = environment_value("WORLD_SIZE")
    start = ["torchrun", "--nproc-per-node", str(world), "-m", "elmo_core"] if world > 1 else ["elmo"]
    out = Path(settings.out)
    command = [*start, "train", "--out", str(out), "--resume", str(out / CHECKPOINT_NAME)]
    defaults = {f.name: f.default for f in fields(TrainingSettings)}
    for name in STOP_SETTINGS:
        value = getattr(settings, name)
        if name == "max_hours" and value is not None:
            value = round(max(value - hours_used, 0.0), 4)
        if value == defaults[name]:
            continue
        option = "--" + name.replace("_", "-")
        command += [f"--no-{option[2:]}"] if value is False else [option] if value is True else [option, str(value)]
    return command


def settings_parameters(settings: type) -> list[inspect.Parameter]:
    """One typer option per field of the dataclass `settings` that has `metadata["help"]`.

    Each has the field's name, default (none: required) and help. `metadata["cli"]` may give a
    `type` and a `metavar`. The class's own fields come first, then those it inherits.
    """
    hints = typing.get_type_hints(settings)
    own = list(vars(settings).get("__annotations__", {}))

    def position(f: Field) -> tuple[int, int]:
        return (0, own.index(f.name)) if f.name in own else (1, 0)  # a stable sort keeps the rest in order

    parameters = []
    for f in sorted(fields(settings), key=position):
        if "help" not in f.metadata:
            continue
        kind = f.metadata["cli"].get("type", hints[f.name])
        default = inspect.Parameter.empty if f.default is MISSING else f.default
        option = typer.Option(help=f.metadata["help"], metavar=f.metadata["cli"].get("metavar"))
        annotation = Annotated[kind, option]  # type: ignore[valid-type]  # built at run time
        parameters.append(
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return parameters


def _training_settings(options: dict[str, Any]) -> TrainingSettings:
    # A field's metadata["cli"]["parse"] reads its option's text (--cutoffs '4000,20000').
    cli = {f.name: f.metadata.get("cli", {}) for f in fields(TrainingSettings)}
    parse = {name: spec["parse"] for name, spec in cli.items() if "parse" in spec}
    return TrainingSettings(**{name: parse[name](v) if name in parse else v for name, v in options.items()})


_PARAMETERS = settings_parameters(TrainingSettings)
train.__signature__ = inspect.Signature(_PARAMETERS)  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in _PARAMETERS}
