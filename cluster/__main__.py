"""`python -m cluster` runs the raypex command (same as the console script)."""

from cluster.commands.cli import console

console()
