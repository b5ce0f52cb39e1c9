"""What several `elmo` commands share: the model options, the device, the process group, wording."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from ...model.elmo import Elmo
from ...model.errors import ElmoError
from ...runtime.embedding import EmbedSettings
from ..training.commands import TrainingSettings

__all__ = [
    "BatchTokensOption",
    "DeviceOption",
    "MODEL_FLAGS",
    "ModelOption",
    "OptionsOption",
    "TorchrunDeviceOption",
    "WeightsOption",
    "check_device",
    "load_model",
    "plural",
    "process_group",
    "setting_option",
]


def command_group(help: str) -> typer.Typer:
    """A typer app with the house settings: no shell completion, help when called bare,
    plain tracebacks (`main` turns errors into one line) and plain-text help."""
    return typer.Typer(
        add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None, help=help
    )


def setting_option(settings: type, name: str, *param_decls: str, **kwargs: Any) -> Any:
    """The `typer.Option` for the field `name` of the settings dataclass `settings`, with the
    field's help (`metadata["help"]`): the option's text is written once, beside the field."""
    (found,) = [f for f in fields(settings) if f.name == name]
    return typer.Option(*param_decls, help=found.metadata["help"], **kwargs)


# Options shared by several commands, each declared (and its help written) once.
ModelOption = Annotated[Path | None, typer.Option(help="Model folder.")]
OptionsOption = Annotated[Path | None, typer.Option(help="bilm-tf options.json (with --weights).")]
WeightsOption = Annotated[Path | None, typer.Option(help="bilm-tf hdf5 weights (with --options).")]
BatchTokensOption = Annotated[int, setting_option(EmbedSettings, "batch_tokens")]
DeviceOption = Annotated[str, typer.Option(help="torch device, e.g. cpu or cuda.")]
TorchrunDeviceOption = Annotated[str, setting_option(TrainingSettings, "device")]  # elmo train's --device

MODEL_FLAGS = ("--model", "--options", "--weights")
"""How the command line spells `load_elmo`'s path, options and weights (used in its errors)."""


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
    from ...files.model_folder import load_elmo

    return load_elmo(model, options, weights, map_location=device, names=MODEL_FLAGS, dropout=0.0)


def check_device(device: str) -> None:
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


@contextmanager
def process_group(device: str) -> Iterator[tuple[int, str]]:
    """`init_distributed(device)` for the duration of a command: yields (rank, this process's
    device), and destroys the process group at the end when torchrun started several processes."""
    from ...runtime.distributed import init_distributed

    rank, world_size, device = init_distributed(device)
    try:
        yield rank, device
    finally:
        if world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
