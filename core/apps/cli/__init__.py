"""The `elmo` command line: one module per command, named as the command (`elmo --help`).

`python -m elmo_core` is the same command. Errors are one line on stderr, exit status 2.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ...model.environment import check_environment
from ...model.errors import ElmoError
from ...runtime.memory import MMAP_THRESHOLD, use_heap_for_every_block, use_mmap_for_large_blocks
from ..console import quiet_failures
from . import convert, data, embed, perplexity, probe, train, widen
from .process import reserve_kernel_cache, use_writable_compile_cache
from .shared import command_group

__all__ = ["app", "main"]

app = command_group("ELMo contextual word vectors.")

for command, short_help in (
    (embed.embed, "ELMo vectors for every line of a text file, into one hdf5 or Parquet file."),
    (train.train, "Pretrain a biLM language model (resumable; torchrun for more)."),
    (perplexity.perplexity, "Forward, backward and average perplexity of text files."),
    (convert.convert, "Convert between bilm-tf's files and a model folder."),
    (probe.probe, "Linear probe of each biLM layer on a CoNLL file's token labels."),
    (widen.widen, "Grow a trained biLM to a wider shape that computes the same function."),
):
    app.command(short_help=short_help)(command)
app.add_typer(
    data.app,
    name="data",
    short_help="Prepare training data: pretokenize raw text, count the vocabulary, hold sentences out.",
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


def main() -> None:
    """Console-script entry point: one-line errors instead of tracebacks.

    The command owns its process, so it makes process-wide settings the library never makes:
    glibc's mmap threshold (`elmo_core.runtime.memory`), room for oneDNN kernels, a writable
    compile cache (`elmo_core.apps.cli.process`) and a stderr that drops what it cannot write.
    """
    if sys.argv[1:2] == ["train"]:
        use_heap_for_every_block()
        reserve_kernel_cache()
    else:
        use_mmap_for_large_blocks(MMAP_THRESHOLD)
    with quiet_failures():  # a closed or full stderr drops the messages, not the work
        try:
            check_environment()  # a bad ELMO_THREADS, WORLD_SIZE, ... is one line before any work
            use_writable_compile_cache()  # torch's compile cache: a temporary one where the set one is not writable
            app()
        except (ElmoError, TypeError, ValueError, OSError) as err:  # OSError: files, the network
            typer.echo(f"error: {err}", err=True)
            raise SystemExit(2) from None
