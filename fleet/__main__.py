"""`python -m fleet` is the `fleet` command."""

from fleet.cli import main

main()
