"""The configs that ship with raypex (configs/, installed as the package `raypex.configs`).

`raypex train pong` and `raypex train configs/pong.yaml` both work from any directory: a CONFIG
argument that is not an existing file is looked up by name here. Imports nothing of ours, so the
argument reading in cluster/config/arguments.py can use it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGE = "raypex.configs"


def shipped_configs() -> dict[str, Path]:
    """name -> path of every shipped config, sorted by name (empty if the package is missing)."""
    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:
        return {}
    found = {Path(str(entry)).stem: Path(str(entry)) for entry in root.iterdir() if entry.name.endswith(".yaml")}
    return dict(sorted(found.items()))


def find_shipped(item: str) -> Path | None:
    """The shipped config `item` names: `pong`, `pong.yaml`, or `configs/pong.yaml` given from a
    directory that has no such file. None when no shipped config has that name."""
    path = Path(item)
    if path.suffix in ("", ".yaml") and path.parent in (Path(), Path("configs")):
        return shipped_configs().get(path.stem)
    return None


def config_path(item: str | Path) -> Path:
    """The file a CONFIG argument means: an existing file as given, else the shipped config it
    names, else the path as given (for loading to say it is not found). `raypex`'s argument
    reading and the `python -m` tools' CONFIG argument both resolve through it."""
    if Path(item).is_file():
        return Path(item)
    return find_shipped(str(item)) or Path(item)


def summary_line(path: Path) -> str:
    """The config's first comment line, up to its first colon: what the config is for."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("# ").strip()
            return text.split(": ", 1)[0].rstrip(".")
        if line.strip():
            break
    return ""
