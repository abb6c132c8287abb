"""An evaluation episode's frames as an animated PNG: a file in the run directory and a
TensorBoard image summary (browsers, TensorBoard's included, play APNG). zlib and struct only:
no video codec, no imaging library.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from tensorboard.compat.proto.summary_pb2 import Summary

from cluster.driver.checkpoints import atomic_write

FPS = 25


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _rows(frame: np.ndarray) -> bytes:
    # each scanline starts with filter type 0 (none)
    flat = frame.reshape(frame.shape[0], -1)
    return zlib.compress(np.concatenate([np.zeros((flat.shape[0], 1), np.uint8), flat], axis=1).tobytes(), 6)


def apng(frames: np.ndarray, fps: int = FPS) -> bytes:
    """APNG bytes of uint8 frames [T, H, W] (gray) or [T, H, W, 3] (RGB), `fps` frames a second."""
    frames = np.ascontiguousarray(frames, np.uint8)
    count, height, width = frames.shape[:3]
    colour = 2 if frames.ndim == 4 else 0
    out = [b"\x89PNG\r\n\x1a\n", _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)),
           _chunk(b"acTL", struct.pack(">II", count, 0))]
    sequence = 0
    for i, frame in enumerate(frames):
        control = struct.pack(">IIIIIHHBB", sequence, width, height, 0, 0, 1, fps, 0, 0)
        out.append(_chunk(b"fcTL", control))
        sequence += 1
        data = _rows(frame)
        if i == 0:
            out.append(_chunk(b"IDAT", data))  # the first frame doubles as the still image
        else:
            out.append(_chunk(b"fdAT", struct.pack(">I", sequence) + data))
            sequence += 1
    out.append(_chunk(b"IEND", b""))
    return b"".join(out)


def video_summary(tag: str, frames: np.ndarray, encoded: bytes) -> Summary:
    """A TensorBoard image summary holding the animation (the Images tab shows it playing)."""
    image = Summary.Image(height=frames.shape[1], width=frames.shape[2], colorspace=3 if frames.ndim == 4 else 1,
                          encoded_image_string=encoded)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def write_video(run_dir: Path, version: int, frames: np.ndarray) -> tuple[Path, bytes]:
    """videos/eval-v<version>.png in the run directory; (its path, its bytes)."""
    encoded = apng(frames)
    path = run_dir / "videos" / f"eval-v{version:06d}.png"
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, encoded)
    return path, encoded
