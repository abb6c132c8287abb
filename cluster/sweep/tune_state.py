"""Ray Tune's own experiment state (EXPERIMENT/tune: tuner.pkl, experiment_state-*.json, the
searcher's and scheduler's state) is pickles, and Tune unpickles them to resume a sweep, so a
sweep directory from someone else would run its code on `raypex tune --resume`. raypex cannot
read that state without Tune, so it vouches for it instead, as Jupyter vouches for a notebook's
output: when a sweep command ends, it signs the state with a key only this user can read
(HMAC-SHA256 over each file's name and SHA-256), and a resume goes ahead only when the signature
matches. Anything else (state edited, a file added, a sweep from another user or machine, a
sweep whose command was killed before it could sign) is refused in one line, unless the user
says the state is theirs (`--trust-tune-state`).

The trials' checkpoint sets under tune/ (checkpoint_*/) are raypex's data files, not signed:
they change as PBT copies them and are checked file by file (cluster/driver/checkpoints.py
`check_run_files`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from raypex.cluster.storage import join, list_files, read_bytes, write_bytes

SIGNATURE_FILE = "tune.sig"  # in the experiment directory, beside tune/
KEY_BYTES = 32


class UnsignedTuneState(ValueError):
    """Tune's state in an experiment directory that this user's raypex did not sign as it is."""


def key_path() -> Path:
    """This user's signing key: $RAYPEX_KEY_FILE, else ~/.config/raypex/sweep-key."""
    if os.environ.get("RAYPEX_KEY_FILE"):
        return Path(os.environ["RAYPEX_KEY_FILE"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "raypex" / "sweep-key"


def _key(create: bool) -> bytes | None:
    path = key_path()
    if path.is_file():
        return path.read_bytes()
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_bytes(KEY_BYTES)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # readable by this user only
    with os.fdopen(descriptor, "wb") as out:
        out.write(key)
    return key


def _state_files(experiment: str) -> list[str]:
    """Tune's state files under EXPERIMENT/tune (relative paths), its trials' checkpoints left out."""
    return [name for name in list_files(join(experiment, "tune"))
            if not any(part.startswith("checkpoint_") for part in name.split("/"))]


def _digest(experiment: str, key: bytes) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name in _state_files(experiment):
        mac.update(f"{name}\0{hashlib.sha256(read_bytes(join(experiment, 'tune', name))).hexdigest()}\n".encode())
    return mac.hexdigest()


def sign_tune_state(experiment: str) -> None:
    """Sign Tune's state in `experiment` (a path or a URI) as it is now, with this user's key
    (made on first use)."""
    key = _key(create=True)
    write_bytes(join(experiment, SIGNATURE_FILE), _digest(experiment, key).encode())


def check_tune_state(experiment: str) -> None:
    """UnsignedTuneState, in one line, unless `experiment`'s Tune state is what this user's
    raypex signed."""
    where = join(experiment, "tune")
    why = None
    key = _key(create=False)
    try:
        signature = read_bytes(join(experiment, SIGNATURE_FILE)).decode().strip()
    except (OSError, UnicodeDecodeError):
        signature = None
    if signature is None:
        why = "it carries no signature (the sweep's command was killed before it could sign, or it is not yours)"
    elif key is None or not hmac.compare_digest(signature, _digest(experiment, key)):
        why = "its signature does not match (it changed since, or another user or machine signed it)"
    if why is not None:
        raise UnsignedTuneState(f"{where} is Ray Tune's pickled state, which Tune unpickles to resume (a pickle can "
                                f"run code), and {why}; if it is your own sweep: --trust-tune-state")
