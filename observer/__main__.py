"""`python -m observer` is the `observer` command."""

from observer.cli import main

main()
