"""A replay shard's state as a file of arrays that loads without running code.

`ReplayShard.get_state()` is a tree of dicts holding numpy arrays and plain values (ints, floats,
bools, strings, None). The file is an uncompressed .npz (a zip of .npy files): every array under
its path in the tree ("storage/columns/obs"), and the tree itself, with each array replaced by a
reference to its entry, as JSON in the entry TREE. It is read with `allow_pickle=False`, so an
object array (or a file that is a pickle) is refused instead of unpickled: a run directory
from someone else is safe to resume. Uncompressed, because replay is mostly frames or floats that
compress poorly and a checkpoint must not stall the learner.

Replay files raypex wrote before this format were a pickle of the same tree. `read_pickled_state`
reads one through an unpickler that can build only numpy arrays, dtypes and scalars (what such a
tree holds) and refuses any other import in one line, so converting an old file runs nothing it
holds.

The writer streams into any binary file object (a local file, a pyarrow output stream) and
returns the bytes written and their SHA-256, computed on the way, for the checkpoint's manifest.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import zipfile
from typing import IO, Any

import numpy as np

TREE = "__tree__"  # the entry holding the JSON tree
_ARRAY = "__array__"  # {"__array__": key}: the array stored under `key`


def first_sentence(err: BaseException) -> str:
    """The first sentence of an error's message (a loader's advice after it is not for our line)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0].rstrip(".")


class NotAnArrayFile(ValueError):
    """A file that is not a replay state written by `write_state` (a pickle, an object array,
    a damaged or foreign file): refused without running anything it holds."""


class _HashingWriter:
    """A write-only, non-seekable stream that counts and hashes what passes to `sink`."""

    def __init__(self, sink: IO[bytes]):
        self.sink, self.sha256, self.written = sink, hashlib.sha256(), 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sink.write(view)
        self.sha256.update(view)
        self.written += len(view)
        return len(view)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self.sink.flush()

    def seekable(self) -> bool:
        return False


def _split(value: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """`value` as JSON, its arrays moved into `arrays` by path."""
    if isinstance(value, dict):
        return {str(key): _split(item, f"{path}/{key}", arrays) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split(item, f"{path}/{i}", arrays) for i, item in enumerate(value)]
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError(f"replay state {path} is an object array; only plain arrays are stored")
        arrays[path] = value
        return {_ARRAY: path}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"replay state {path} is a {type(value).__name__}; only arrays and plain values are stored")


def write_state(state: dict, sink: IO[bytes]) -> tuple[int, str]:
    """Write `state` to the binary stream `sink`; returns (bytes written, SHA-256 hex)."""
    arrays: dict[str, np.ndarray] = {}
    tree = _split(state, "", arrays)
    entries = {TREE: np.frombuffer(json.dumps(tree).encode(), np.uint8), **arrays}
    writer = _HashingWriter(sink)
    with zipfile.ZipFile(writer, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:  # np.load reads it
        for key, array in entries.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
    writer.flush()
    return writer.written, writer.sha256.hexdigest()


def _join(value: Any, archive) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return archive[value[_ARRAY]]
        return {key: _join(item, archive) for key, item in value.items()}
    if isinstance(value, list):
        return [_join(item, archive) for item in value]
    return value


def read_state(source: IO[bytes] | str, name: str) -> dict:
    """The state `write_state` wrote, from a seekable binary stream or a path; `name` (the file's
    name) is what a NotAnArrayFile's one line says."""
    try:
        with np.load(source, allow_pickle=False) as archive:
            tree = json.loads(archive[TREE].tobytes())
            state = _join(tree, archive)
    except (ValueError, KeyError, OSError, EOFError, TypeError, AttributeError, zipfile.BadZipFile) as err:
        raise NotAnArrayFile(f"{name} is not a replay file of arrays ({first_sentence(err)}); raypex does not load "
                             "anything else from a run directory") from None
    if not isinstance(state, dict):
        raise NotAnArrayFile(f"{name} is not a replay file of arrays (its tree is not a mapping)")
    return state


def check_state_file(source: IO[bytes] | str, name: str) -> None:
    """NotAnArrayFile unless `source` is a file `write_state` could have written: a zip of .npy
    entries, none of them an object array, with a readable tree. Reads the entries' headers and the
    tree, not the arrays: cheap for a file of gigabytes."""
    try:
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
            if f"{TREE}.npy" not in names:
                raise ValueError(f"no {TREE} entry")
            for entry in names:
                if not entry.endswith(".npy"):
                    raise ValueError(f"an entry {entry} that is not an array")
                with archive.open(entry) as member:
                    major, _ = np.lib.format.read_magic(member)
                    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                    _, _, dtype = read_header(member)
                    if dtype.hasobject:
                        raise ValueError(f"{entry} is an object array")
            json.loads(np.lib.format.read_array(archive.open(f"{TREE}.npy"), allow_pickle=False).tobytes())
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise NotAnArrayFile(f"{name} is not a replay file of arrays ({first_sentence(err)}); raypex does not load "
                             "anything else from a run directory") from None


# What pickling a replay state tree imports (numpy 1.x and 2.x spell the modules differently):
# every constructor a plain array, dtype or numpy scalar needs, and nothing that can run code.
_PICKLED_STATE_GLOBALS = {
    (module, name)
    for core in ("numpy.core", "numpy._core")
    for module, name in ((f"{core}.numeric", "_frombuffer"), (f"{core}.multiarray", "_reconstruct"),
                         (f"{core}.multiarray", "scalar"))
} | {("numpy", "dtype"), ("numpy", "ndarray")}


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays and plain values, and refuses every other global."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _PICKLED_STATE_GLOBALS:
            raise pickle.UnpicklingError(f"it imports {module}.{name}, which replay never holds")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it refers to persistent objects, which replay never holds")


def read_pickled_state(data: bytes, name: str) -> dict:
    """A replay state from the pickle an older raypex wrote, built without running anything it
    holds; NotAnArrayFile (naming `name`) for a pickle that imports anything but numpy's array
    constructors, or that does not hold a plain tree of arrays."""
    try:
        state = _ArraysOnlyUnpickler(io.BytesIO(data)).load()
        _split(state, "", {})  # a plain tree of arrays and values, as write_state takes
    except (pickle.UnpicklingError, TypeError, ValueError, EOFError, AttributeError, IndexError, KeyError) as err:
        raise NotAnArrayFile(f"{name} is not replay pickled by raypex ({first_sentence(err)}); refused without running "
                             "anything it holds") from None
    if not isinstance(state, dict):
        raise NotAnArrayFile(f"{name} is not replay pickled by raypex (it holds a {type(state).__name__}); "
                             "refused")
    return state
