"""A small TensorBoard writer built on the tensorboard package alone (no torch, no TensorFlow).

Only the driver writes metrics, and the driver must start fast: torch's SummaryWriter would cost it
a second of importing torch. Scalars, one text entry and the plugin summaries of
cluster/driver/tensorboard_layout.py are all raypex writes.
"""

from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter


class TensorBoardLog:
    """Appends scalar and text summaries to an event file in `log_dir`."""

    def __init__(self, log_dir: Path, flush_secs: float = 5.0):
        log_dir.mkdir(parents=True, exist_ok=True)
        earlier = set(log_dir.glob("events.out.tfevents.*"))
        self._writer = EventFileWriter(str(log_dir), flush_secs=flush_secs)
        self._files = set(log_dir.glob("events.out.tfevents.*")) - earlier  # this writer's own

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Write several scalars at one global step (env steps)."""
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
        self._writer.add_event(Event(wall_time=time.time(), step=int(step), summary=summary))

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """Write a text entry shown in TensorBoard's Text tab (monospace: indented as code)."""
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(
            dtype="DT_STRING",
            string_val=["\n".join("    " + line for line in text.splitlines()).encode()],
            tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
        )
        self.summary(Summary(value=[Summary.Value(tag=tag, metadata=metadata, tensor=tensor)]), step)

    def summary(self, summary: Summary, step: int = 0) -> None:
        """Write a ready-made summary (a plugin's layout or hparams entry)."""
        self._writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        """Write buffered events to disk."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()

    def discard(self) -> None:
        """Close and delete this writer's event file (a resume refused once Ray was up leaves the
        run directory as it found it)."""
        self._writer.close()
        for path in self._files:
            path.unlink(missing_ok=True)
