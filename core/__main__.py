"""`python -m elmo_core` = the `elmo` command."""

from .apps.cli import main

main()
