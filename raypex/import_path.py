"""The `package.module:Name` paths a config names for the user's own code (env wrappers, an
encoder): one parse and one import, so every such setting is refused in the same words and the
hint for a near miss is the same everywhere."""

from __future__ import annotations

import difflib
import importlib
from typing import Any


class ImportPathError(ValueError):
    """An import path that does not name an object: its one-line reason, without the setting's name."""


def split_import_path(path: str, kind: str = "Name") -> tuple[str, str]:
    """(module, name) of `path`; ImportPathError when it is not of the form package.module:`kind`."""
    module, _, name = str(path).partition(":")
    if not module or not name.isidentifier():
        raise ImportPathError(f"'{path}' is not an import path of the form package.module:{kind}")
    return module, name


def resolve_import_path(path: str) -> Any:
    """The object `path` names, imported here; ImportPathError when its module does not import or
    does not hold the name (with the closest name it does hold)."""
    module_name, name = split_import_path(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ImportPathError(f"{module_name} cannot be imported ({err}); install the package that holds it on "
                              "every node") from None
    found = getattr(module, name, None)
    if found is None:
        close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")], n=1)
        hint = f"; did you mean {module_name}:{close[0]}?" if close else ""
        raise ImportPathError(f"{module_name} has no {name}{hint}")
    return found
