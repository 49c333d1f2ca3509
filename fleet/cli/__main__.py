"""`python -m fleet.cli`: installed schedules run fleet this way."""

from fleet.cli.main import main

main()
