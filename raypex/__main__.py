"""`python -m raypex` runs the raypex command (the same as the console script)."""

from raypex.cluster.commands.cli import console

console()
