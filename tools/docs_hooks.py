"""MkDocs hooks for the documentation site (configured in mkdocs.yml).

A line `<!-- elmo-help: embed -->` in a page becomes the live `elmo embed --help`, at 80
columns, in a text block. The command reference therefore always shows the installed
command's help, and a renamed or removed command fails the build.

The built site carries Mermaid (`javascripts/mermaid.min.js`), so its diagrams render offline.
`python tools/fetch_mermaid.py` fetches it once into `local/mermaid/`. Without it the
build warns (and `--strict` fails).
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

MERMAID = Path(__file__).resolve().parent.parent / "local" / "mermaid"  # tools/fetch_mermaid.py
log = logging.getLogger("mkdocs.hooks.docs_hooks")

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


def on_post_build(config: Any, **kwargs: Any) -> None:
    """Copy Mermaid and its licence into the site (mkdocs.yml's extra_javascript loads it)."""
    script = MERMAID / "mermaid.min.js"
    if not script.is_file():
        log.warning(f"{script} is missing, so diagrams need a network to render: run python tools/fetch_mermaid.py")
        return
    target = Path(config["site_dir"]) / "javascripts"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(script, target / "mermaid.min.js")
    shutil.copyfile(MERMAID / "LICENSE", target / "mermaid.LICENSE")
