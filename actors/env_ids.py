"""What an `env.id` names, and the code a user's own env lives in.

Besides Gymnasium's registered ids (with ALE's and MinAtar's), `env.id` can name code:
- `module:RegisteredId`: importing `module` registers the id (Gymnasium's own form);
- `module:Class` or `module:factory`: a gymnasium.Env subclass, or a function returning an env,
  needing no registration;
- `path/to/file.py:Name`: the same from a file, relative to the working directory or absolute.

A module is looked up with the working directory first on the path. The driver's working
directory (or the file's directory) is what the run ships to every actor as Ray's runtime-env
working directory (`code_to_ship`), so on every node the actors' working directory holds the same
files and the same `env.id` resolves there: a file path that does not exist on a node is looked up
by its name in the actor's working directory.

A Class or factory is registered in each process under `user/<module>.<Name>`, so the rest of
raypex builds it through gym.make / gym.make_vec like any registered env. Nothing here imports Ray.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import gymnasium as gym


class UnsupportedEnv(Exception):
    """The env id is unknown, its code fails, or its spaces are not ones raypex learns on (one-line
    message). `details`: the user's own traceback, when their code raised (`--debug` shows it)."""

    def __init__(self, message: str, details: str | None = None):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class EnvCode:
    """Where a code-naming `env.id` points: the module, the name in it, and the file."""

    module: str
    name: str
    file: Path | None  # the module's source file (None for a namespace package or builtin)
    from_path: bool  # given as path/to/file.py:Name


def names_code(env_id: str) -> bool:
    """Whether `env_id` has the `module:Name` or `file.py:Name` form."""
    return ":" in env_id and not env_id.startswith("ALE/")


def _split(env_id: str) -> tuple[str, str]:
    where, _, name = env_id.rpartition(":")
    if not where or not name:
        raise UnsupportedEnv(f"env.id '{env_id}': expected module:Name or path/to/file.py:Name")
    return where, name


def _where_in_user_code(file: Path | None) -> str:
    """`file.py:LINE` of the innermost frame of the traceback being handled that is in `file`."""
    frames = traceback.extract_tb(sys.exc_info()[2])
    if file is not None:
        mine = [f for f in frames if Path(f.filename).resolve() == file.resolve()]
        if mine:
            return f"{file.name}:{mine[-1].lineno}"
    return file.name if file is not None else "its module"


def user_code_failure(env_id: str, file: Path | None, what: str, err: BaseException) -> UnsupportedEnv:
    """A one-line UnsupportedEnv for an exception raised by the user's code (being handled)."""
    reason = f"{type(err).__name__}: {err}".strip().splitlines()[0]
    return UnsupportedEnv(f"env.id '{env_id}': {what} failed at {_where_in_user_code(file)}: {reason}",
                          details=traceback.format_exc())


def _load_file(env_id: str, path_text: str) -> ModuleType:
    path = Path(path_text)
    if not path.is_file():
        shipped = Path.cwd() / path.name  # on another node: the run's working directory holds it
        if path.is_absolute() or not shipped.is_file():
            raise UnsupportedEnv(f"env.id '{env_id}': no file {path_text}")
        path = shipped
    path = path.resolve()
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) and Path(loaded.__file__).resolve() == path:
        return loaded
    if loaded is not None:  # another file of the same name: this one is meant
        del sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # its sibling modules import as they do beside it
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # classes defined there pickle by this name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's code may raise anything: one line says what
        del sys.modules[name]
        raise user_code_failure(env_id, path, f"importing {path.name}", err) from None
    return module


def _import(env_id: str, module_name: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # a console script's path starts at its bin directory, not here
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise UnsupportedEnv(f"env.id '{env_id}': no module '{module_name}' in {cwd} or on the Python path "
                                 "(give a file as path/to/file.py:Name)") from None
        spec = importlib.util.find_spec(module_name.split(".")[0])
        file = Path(spec.origin) if spec is not None and spec.origin else None
        raise user_code_failure(env_id, file, f"importing {module_name}", err) from None
    except Exception as err:  # noqa: BLE001 - as above
        spec = importlib.util.find_spec(module_name)
        file = Path(spec.origin) if spec is not None and spec.origin else None
        raise user_code_failure(env_id, file, f"importing {module_name}", err) from None


def _forget_user_module(module_name: str) -> None:
    """Drop a module of the working directory from sys.modules, so the next import reads the file
    as it is now (a notebook's user edits env code between runs); installed modules stay."""
    loaded = sys.modules.get(module_name)
    file = getattr(loaded, "__file__", None)
    if file and Path.cwd().resolve() in Path(file).resolve().parents:
        del sys.modules[module_name]


def env_code(env_id: str, fresh: bool = False) -> tuple[EnvCode, ModuleType]:
    """Import the code a `module:Name` / `file.py:Name` id names; (where it is, the module).
    `fresh`: read a user's file again even if this process imported it before."""
    where, name = _split(env_id)
    from_path = where.endswith(".py")
    if fresh:
        _forget_user_module(Path(where).stem if from_path else where)
    with warnings.catch_warnings():  # read again, the file registers its ids again: nothing to warn of
        warnings.filterwarnings("ignore", message=".*Overriding environment")
        module = _load_file(env_id, where) if from_path else _import(env_id, where)
    file = getattr(module, "__file__", None)
    return EnvCode(module.__name__, name, Path(file).resolve() if file else None, from_path), module


_resolved: dict[str, str] = {}  # env.id -> the registered id it builds, in this process


def registered_id(env_id: str, fresh: bool = False) -> str:
    """The Gymnasium id that builds `env_id`'s env in this process (importing and registering its
    code on first use, or again with `fresh`); UnsupportedEnv when it names nothing that builds
    an env."""
    if not names_code(env_id):
        return env_id
    if env_id in _resolved and not fresh:
        return _resolved[env_id]
    return register(env_id, *env_code(env_id, fresh))


def register(env_id: str, code: EnvCode, module: ModuleType) -> str:
    """Register the env that `code` (imported as `module`) names for `env_id`; its Gymnasium id."""
    if code.name in gym.envs.registry:  # module:RegisteredId: importing registered it
        _resolved[env_id] = code.name
        return code.name
    target = getattr(module, code.name, None)
    where = code.file.name if code.file is not None else code.module
    if target is None:
        raise UnsupportedEnv(f"env.id '{env_id}': {where} has no '{code.name}' (neither a Gymnasium env class, "
                             "a function returning an env, nor an id it registers)")
    if not callable(target):
        raise UnsupportedEnv(f"env.id '{env_id}': '{code.name}' in {where} is a {type(target).__name__}, not a "
                             "Gymnasium env class or a function returning an env")
    gym_id = f"user/{code.module}.{code.name}"
    gym.envs.registry.pop(gym_id, None)  # registered again: the code may have changed (fresh)
    gym.register(id=gym_id, entry_point=target, disable_env_checker=True)
    _resolved[env_id] = gym_id
    return gym_id


def code_to_ship(env_id: str) -> Path | None:
    """The directory every actor needs as its working directory for `env_id` to resolve there: the
    working directory a `module:Name` was found in, or the file's directory for `file.py:Name`.
    None when the id names no code, or code installed elsewhere (a package on the path)."""
    if not names_code(env_id):
        return None
    code, _ = env_code(env_id)
    if code.file is None:
        return None
    if code.from_path:
        return code.file.parent
    cwd = Path.cwd().resolve()
    return cwd if cwd in code.file.parents else None
