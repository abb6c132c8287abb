"""`python -m cluster` runs the raypex command (same as the console script)."""

from cluster.cli import console

console()
