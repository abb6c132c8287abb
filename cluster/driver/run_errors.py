"""The errors that end a run or refuse one, each with a one-line message; here, without Ray, so
that `raypex train` can name them before it imports Ray (cluster/commands/train.py)."""

from __future__ import annotations


class PlacementError(Exception):
    """The cluster cannot hold the requested actors (one-line message)."""


class RunFailed(Exception):
    """The run cannot go on (a collector keeps dying, the learner died); one-line message."""


class CheckpointRefused(Exception):
    """The learner could not restore the checkpoint a resume gave it (networks of other shapes:
    saved by a raypex whose networks differ); one-line message. Nothing of the run is written."""
