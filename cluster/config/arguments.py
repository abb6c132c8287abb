"""What every way into raypex shares (the CLI's subcommands, the Python API, the bench): the
one-line usage error and the reading of CONFIG and key=value arguments. Imports nothing of ours
but the shipped-config lookup, so everything above the config can use it."""

from __future__ import annotations

import difflib
import re
import time
from pathlib import Path

from raypex.cluster.config.shipped import config_path, shipped_configs


class UsageError(Exception):
    """A mistake in what the user asked for (one-line message, exit 2). `details`: the traceback
    of the user's own code behind it, when there is one (printed with --debug)."""

    def __init__(self, message: str, details: str | None = None):
        super().__init__(message)
        self.details = details  # the traceback of the user's own code behind it, or None


def split_positional(args: list[str]) -> tuple[Path | None, list[str]]:
    """Separate the optional CONFIG (a path, or the name of a shipped config) from `key=value`
    overrides."""
    config, overrides = None, []
    for i, item in enumerate(args):
        if "=" in item:
            overrides.append(item)
        elif i == 0 and ((path := config_path(item)).is_file() or item.endswith((".yaml", ".yml"))):
            config = path  # a YAML path that is not found: loading says so, and names the shipped configs
        elif i == 0:
            shipped_names = list(shipped_configs())
            names = ", ".join(shipped_names) or "none installed"
            close = difflib.get_close_matches(item, shipped_names, n=1)
            if close:
                raise UsageError(f"'{item}' is not a config file or a shipped config; did you mean '{close[0]}'?")
            raise UsageError(f"'{item}' is neither a config file, a shipped config ({names}; `raypex configs` "
                             "lists them) nor a key=value override")
        else:
            raise UsageError(f"'{item}' is neither the config file (it must come first) nor a key=value override")
    return config, overrides


def default_run_dir(env_id: str, seed: int) -> Path:
    """runs/<env>-<date-time>-s<seed>, unique per second."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id)
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"
