"""`python -m elmo_core` = the `elmo` command."""

from .cli import main

main()
