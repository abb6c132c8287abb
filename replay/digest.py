"""What a replay shard or a set of weights holds, as one SHA-256: computed the same way from a
checkpoint's copy and from what a learner holds after restoring it, so the two can be compared (a
Tune exploit carries a donor's replay and weights into another trial: cluster/sweep/trial.py
records both)."""

from __future__ import annotations

import hashlib

import numpy as np


def content_digest(value) -> str:
    """SHA-256 of nested dicts, lists, arrays and counters (a replay storage's `get_state()`, a
    network's published arrays): every array's dtype, shape and bytes and every other value's
    repr, dict keys in order."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest, value) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        array = np.ascontiguousarray(np.asarray(value))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    else:
        digest.update(repr(value).encode())
