"""What several `elmo` commands share: the model options, the device, the process group, wording."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import torch
import typer
from typer.core import TyperArgument, TyperCommand, TyperOption

from ...model.elmo import Elmo
from ...model.errors import ElmoError, SettingError
from ...runtime.embedding import EmbedSettings
from ..training.settings import TrainingSettings

METAVARS: dict[object, str] = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}
"""How an option's help names its value by its type, where it names none of its own: `--batch-tokens N`."""
METAVARS.update({"integer": "N", "float": "NUMBER", "text": "TEXT", "path": "PATH"})  # click's names of those types


def _metavar(option: Any) -> str:
    # typer 0.2x records the annotation (`type_descriptor`), earlier typer only click's type.
    descriptor = getattr(option, "type_descriptor", None)
    if descriptor is None:
        return METAVARS.get(option.type.name, "VALUE")
    kind = descriptor.annotation
    return METAVARS.get(get_args(kind)[0] if get_origin(kind) is list else kind, "VALUE")  # list: a repeated option


class _Argument(TyperArgument):
    """A command's argument, named in help by its metavar alone (INPUT, FILES...), as click names it."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        # `INPUT OUTPUT`, `FILE...`, `[FILE]` as click writes them (typer 0.2x: `{INPUT}`, `{FILE...}...`).
        name = self.display_name_raw
        if self.nargs != 1 and not name.endswith("..."):
            name += "..."
        return name if self.required else f"[{name}]"


class Command(TyperCommand):
    """An `elmo` command: its help names values in words (`METAVARS`), its errors name options.

    A `SettingError` says `--batch-size must be ...`, not `batch_size must be ...`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                param.__class__ = _Argument
            elif isinstance(param, TyperOption) and param.metavar is None and not param.is_flag:
                param.metavar = _metavar(param)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except SettingError as err:
            raise ElmoError(self.respell(err)) from None

    def respell(self, err: SettingError) -> str:
        """`err`'s message with each setting it names spelled as this command's option."""
        options = {p.name: p.opts[0] for p in self.params if isinstance(p, TyperOption)}
        message = str(err)
        for name in err.names:
            if name in options:
                message = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", options[name], message)
        return message


class _Commands(typer.Typer):
    """A typer app whose commands are `Command`s."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


def command_group(help: str) -> typer.Typer:
    """A typer app with the house settings: no completion, help when bare, plain tracebacks and help."""
    return _Commands(
        add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None, help=help
    )


def setting_option(settings: type, name: str, *param_decls: str, **kwargs: Any) -> Any:
    """The `typer.Option` for the field `name` of `settings`, with the help and metavar of its metadata."""
    (found,) = [f for f in fields(settings) if f.name == name]
    kwargs.setdefault("metavar", found.metadata.get("cli", {}).get("metavar"))
    return typer.Option(*param_decls, help=found.metadata["help"], **kwargs)


# Options shared by several commands, each declared (and its help written) once.
ModelOption = Annotated[Path | None, typer.Option(metavar="DIR", help="Model folder.")]
OptionsOption = Annotated[Path | None, typer.Option(metavar="FILE", help="bilm-tf options.json (with --weights).")]
WeightsOption = Annotated[Path | None, typer.Option(metavar="FILE", help="bilm-tf hdf5 weights (with --options).")]
BatchTokensOption = Annotated[int, setting_option(EmbedSettings, "batch_tokens")]
DeviceOption = Annotated[str, typer.Option(metavar="DEVICE", help="torch device, e.g. cpu or cuda.")]
TorchrunDeviceOption = Annotated[str, setting_option(TrainingSettings, "device")]  # elmo train's --device

MODEL_FLAGS = ("--model", "--options", "--weights")
"""How the command line spells `load_elmo`'s path, options and weights (used in its errors)."""


def plural(count: int, noun: str) -> str:
    """`1 line`, `2 lines`, `0 lines`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def load_model(
    model: Path | None, options: Path | None, weights: Path | None, device: str = "cpu", **settings: Any
) -> Elmo:
    """The model named on the command line, or the default model, with dropout 0.

    `settings` go to `load_elmo` (e.g. `token_cache_words`).

    Raises:
        ElmoError: when the arguments do not name exactly one model.
    """
    from ...files.model_folder import load_model_source, resolve_model_source

    source = resolve_model_source(model, options, weights, names=MODEL_FLAGS)
    return load_model_source(source, map_location=device, dropout=0.0, **settings)


def check_device(device: str) -> None:
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


@contextmanager
def process_group(device: str) -> Iterator[tuple[int, str]]:
    """`init_distributed(device)` for the duration of a command. Yields (rank, this process's device)."""
    from ...runtime.distributed import init_distributed

    rank, world_size, device = init_distributed(device)
    try:
        yield rank, device
    finally:
        if world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
