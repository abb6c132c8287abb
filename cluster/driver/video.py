"""An evaluation's video (an animated PNG the evaluator encoded, actors/apng.py) written where a user
looks: a file in the run directory and a TensorBoard image summary (the Images tab plays it)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.compat.proto.summary_pb2 import Summary

from raypex.actors.apng import EncodedVideo
from raypex.cluster.storage import atomic_write


def video_summary(tag: str, video: EncodedVideo) -> Summary:
    """A TensorBoard image summary holding the animation."""
    image = Summary.Image(height=video.height, width=video.width, colorspace=3 if video.channels == 3 else 1,
                          encoded_image_string=video.data)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def write_video(run_dir: Path, version: int, video: EncodedVideo) -> Path:
    """videos/eval-v<version>.png in the run directory (written whole or not at all); its path."""
    path = run_dir / "videos" / f"eval-v{version:06d}.png"
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, video.data)
    return path
