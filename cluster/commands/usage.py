"""What every `raypex` subcommand shares: the one-line usage error and the reading of CONFIG
and key=value arguments. Imports nothing of ours, so the subcommands and the CLI that dispatches
to them do not import each other."""

from __future__ import annotations

import re
import time
from pathlib import Path


class UsageError(Exception):
    """A mistake in what the user asked for (one-line message, exit 2)."""


def split_positional(args: list[str]) -> tuple[Path | None, list[str]]:
    """Separate the optional CONFIG path from `key=value` overrides."""
    config, overrides = None, []
    for i, item in enumerate(args):
        if "=" in item:
            overrides.append(item)
        elif i == 0 and (item.endswith((".yaml", ".yml")) or Path(item).is_file()):
            config = Path(item)
        elif i == 0:
            raise UsageError(f"'{item}' is neither a config file (.yaml) nor a key=value override")
        else:
            raise UsageError(f"'{item}' is neither the config file (it must come first) nor a key=value override")
    return config, overrides


def default_run_dir(env_id: str, seed: int) -> Path:
    """runs/<env>-<date-time>-s<seed>, unique per second."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id)
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"
