"""`elmo train`: pretrain a biLM language model (resumable; torchrun for more processes).

Its options are made from `TrainingSettings`' fields, one option per field with the
field's name, default and `metadata["help"]` (`settings_parameters`): the settings are
declared once, there.
"""

from __future__ import annotations

import inspect
import logging
import os
import typing
from dataclasses import MISSING, Field, fields
from typing import Annotated, Any

import typer

from ...files.text_files import check_input_file
from ..training.commands import TrainingSettings
from .shared import plural

__all__ = ["settings_parameters", "train"]


def train(**options: Any) -> None:
    """Pretrain a biLM language model (forward + backward LM, shared adaptive softmax).

    Writes a model folder (loadable by every `elmo` command, plus vocab.txt and
    lm_head.safetensors), checkpoint.pt and train_log.jsonl to --out, every
    --checkpoint-every steps and at the end. One run owns --out at a time: a second
    run on it stops at once. For several processes, launch with torchrun:
    `torchrun --nproc-per-node 2 -m elmo_core train ...`.
    """
    settings = _training_settings(options)
    for what in ("valid", "options", "vocab", "resume"):
        if getattr(settings, what) is not None:
            check_input_file(getattr(settings, what), "--" + what)
    settings.check_files()  # before anything is read or written (run_training checks again)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from ..training.commands import run_training

    summary = run_training(settings)
    if int(os.environ.get("RANK", "0")) == 0:
        trained = f"trained to step {summary['step']} ({plural(summary['tokens'], 'token')})"
        typer.echo(f"{trained}; model folder: {settings.out}", err=True)


def settings_parameters(settings: type) -> list[inspect.Parameter]:
    """One typer option per field of the dataclass `settings` that has `metadata["help"]`:
    named as the field, with its default (none: a required option) and help; its type is
    the field's, or `metadata["cli"]["type"]` where the field's does not suit a command line;
    its value is named in help by `metadata["cli"]["metavar"]`, or by its type (`Command`).
    The fields the class declares come first, in its order, then those it inherits."""
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
    """`elmo train`'s options as `TrainingSettings`: each option is the field of the same name,
    read by the field's `metadata["cli"]["parse"]` where it has one (--cutoffs '4000,20000')."""
    cli = {f.name: f.metadata.get("cli", {}) for f in fields(TrainingSettings)}
    parse = {name: spec["parse"] for name, spec in cli.items() if "parse" in spec}
    return TrainingSettings(**{name: parse[name](v) if name in parse else v for name, v in options.items()})


_PARAMETERS = settings_parameters(TrainingSettings)
train.__signature__ = inspect.Signature(_PARAMETERS)  # type: ignore[attr-defined]
train.__annotations__ = {p.name: p.annotation for p in _PARAMETERS}
