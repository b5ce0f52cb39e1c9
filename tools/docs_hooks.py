"""MkDocs hooks for the documentation site (configured in mkdocs.yml).

A line `<!-- elmo-help: embed -->` in a page becomes the live `elmo embed --help`, at 80
columns, in a text block. The command reference therefore always shows the installed
command's help, and a renamed or removed command fails the build.
"""

from __future__ import annotations

import re
from typing import Any

HELP_MARKER = re.compile(r"^<!-- elmo-help:(?P<command>[\w -]*)-->$", re.MULTILINE)


def command_help(command: str) -> str:
    """The help text of `elmo COMMAND` (the top level for an empty command), at 80 columns."""
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app

    args = [*command.split(), "--help"]
    result = CliRunner().invoke(app, args, prog_name="elmo", terminal_width=80)
    if result.exit_code != 0:
        raise RuntimeError(f"`elmo {' '.join(args)}` exited with status {result.exit_code}: {result.output}")
    return result.output.rstrip()


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each help marker with the command's help."""
    return HELP_MARKER.sub(lambda m: f"```text\n{command_help(m['command'].strip())}\n```", markdown)
