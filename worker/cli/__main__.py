"""``python -m worker.cli`` is the `dream` command."""

from worker.cli import main

main(prog_name="dream")
