"""Animated PNG, encoded one frame at a time as an evaluation episode runs (browsers, TensorBoard's
included, play APNG). zlib and struct only: no video codec, no imaging library.

Each frame is compressed when it is added, so a recorded episode holds its compressed rows (about
a kilobyte a frame for CartPole's pictures) instead of every raw picture: the evaluator that records
keeps a flat memory, and a video crosses to the driver as a few hundred kilobytes of PNG rather than
tens of megabytes of pixels through the object store.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

FPS = 25


@dataclass(frozen=True)
class EncodedVideo:
    """An animated PNG's bytes and the picture size TensorBoard's image summary needs."""

    data: bytes
    height: int
    width: int
    channels: int  # 1: gray, 3: RGB
    count: int  # frames


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _rows(frame: np.ndarray) -> bytes:
    # each scanline starts with filter type 0 (none)
    flat = frame.reshape(frame.shape[0], -1)
    return zlib.compress(np.concatenate([np.zeros((flat.shape[0], 1), np.uint8), flat], axis=1).tobytes(), 6)


class ApngWriter:
    """Collects frames of one shape (uint8 [H, W] gray or [H, W, 3] RGB), compressed as they come."""

    def __init__(self, fps: int = FPS):
        self.fps = fps
        self.shape: tuple[int, ...] | None = None
        self._compressed: list[bytes] = []

    def __len__(self) -> int:
        return len(self._compressed)

    def add(self, frame: np.ndarray) -> None:
        """Compress one frame; every frame must have the first one's shape."""
        frame = np.ascontiguousarray(frame, np.uint8)
        if frame.ndim not in (2, 3) or (frame.ndim == 3 and frame.shape[2] != 3):
            raise ValueError(f"a video frame is uint8 [H, W] or [H, W, 3], got shape {frame.shape}")
        if self.shape is None:
            self.shape = frame.shape
        elif frame.shape != self.shape:
            raise ValueError(f"every frame of a video has one shape: {self.shape} first, then {frame.shape}")
        self._compressed.append(_rows(frame))

    def finish(self) -> EncodedVideo | None:
        """The animation of every frame added (None when there was none)."""
        if self.shape is None:
            return None
        height, width = self.shape[:2]
        colour = 2 if len(self.shape) == 3 else 0
        out = [b"\x89PNG\r\n\x1a\n", _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)),
               _chunk(b"acTL", struct.pack(">II", len(self._compressed), 0))]
        sequence = 0
        for i, rows in enumerate(self._compressed):
            control = struct.pack(">IIIIIHHBB", sequence, width, height, 0, 0, 1, self.fps, 0, 0)
            out.append(_chunk(b"fcTL", control))
            sequence += 1
            if i == 0:
                out.append(_chunk(b"IDAT", rows))  # the first frame doubles as the still image
            else:
                out.append(_chunk(b"fdAT", struct.pack(">I", sequence) + rows))
                sequence += 1
        out.append(_chunk(b"IEND", b""))
        return EncodedVideo(b"".join(out), height, width, 3 if colour == 2 else 1, len(self._compressed))

