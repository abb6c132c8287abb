"""ReplayFeed: each update's batch from the replay in the learner's own process.

Nothing per batch crosses a process. Under the replay's lock (replay/sharded.py) the feed draws
the update's G x B transitions on the host, then:
- replay on the host (the CPU learner, or a GPU learner whose replay did not fit its GPU): it
  gathers the fields there and releases the lock before the update runs; on CUDA the gathered
  batch then goes to the device once, from pinned memory;
- replay on the GPU (learner/device_columns.py): only the indices (and importance weights) are
  copied to the device, the update gathers the fields itself (inside the captured CUDA graph), and
  the lock is held until the update is enqueued, so an insert that overwrites rows of this draw is
  ordered after it on the GPU.

On a CPU learner with uniform replay the feed draws and gathers the next few updates' batches
in one go (at most HOST_DRAW_AHEAD, never past the epoch's end nor what the limiter allows): at
CartPole's size a draw and a gather cost about as much in numpy's per-call overhead for 256 rows
as for 2,048, and that overhead was a sixth of the update. Prioritized replay draws per update,
from priorities the previous update just refreshed.

While the samples-per-insert limiter does not allow a draw, the feed waits for the next insert
(or calls `starved`: a local run's collectors collect then, having no other thread). That wait, once
replay has reached its minimum size, is the learner waiting for data (`wait_s`); before it,
`fill_wait_s`. `should_stop` ends the wait with TrainingStopped when the run is ending.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator

import torch

from raypex.replay.contracts import TrainingStopped
from raypex.replay.sharded import SampledKeys, ShardedReplay

_WAIT_S = 0.05  # the longest one wait for an insert lasts before the stop flag is read again
HOST_DRAW_AHEAD = 8  # updates drawn and gathered at once by a CPU learner from uniform replay


def _never() -> bool:
    return False


class ReplayFeed:
    """Hands the update loop one batch at a time (see the module docstring)."""

    stops_with_its_group = False  # one learner: its epoch ends at its own request_stop

    def __init__(self, replay: ShardedReplay, device: torch.device, micro_batches: int, micro_batch: int,
                 starved: Callable[[], None] | None = None, should_stop: Callable[[], bool] = _never):
        self.replay = replay
        self.device = device
        self.groups, self.count = micro_batches, micro_batch
        self.on_device = replay.backend.name == "device"
        self.starved = starved
        self.should_stop = should_stop
        self.wait_s = 0.0
        self.fill_wait_s = 0.0
        self.keys: SampledKeys | None = None  # of the batch handed out last (prioritized replay)
        self.draw_ahead = HOST_DRAW_AHEAD if device.type == "cpu" and not replay.prioritized else 1
        self._drawn: deque[dict[str, torch.Tensor]] = deque()  # batches drawn ahead, not yet handed out

    @contextlib.contextmanager
    def update_slot(self, limited: bool = True, updates_left: int = 1) -> Iterator[dict[str, torch.Tensor]]:
        """The next update's batch, to be used (on CUDA: enqueued) inside the `with` block;
        `limited` False draws without asking the samples-per-insert limiter (the bench's
        reference batches, drawn once and kept). `updates_left`: how many updates the caller will
        make before it stops to publish or report (the most a CPU learner draws ahead)."""
        if not self.on_device:
            if not self._drawn:
                if limited:
                    self._wait_until_allowed()
                self._drawn.extend(self._draw_on_host(self._updates_to_draw(limited, updates_left)))
            yield self._drawn.popleft()
            return
        if limited:
            self._wait_until_allowed()
        replay = self.replay
        columns = replay.backend
        with replay.lock:
            draw = replay.draw(self.groups, self.count)
            self.keys = draw.keys
            arrays = dict(draw.index)
            if draw.weight is not None:
                arrays["weight"] = draw.weight
            batch = {name: columns.to_device(array) for name, array in arrays.items()}
            if columns.written is not None:
                torch.cuda.current_stream(self.device).wait_event(columns.written)
            yield batch
            reading = torch.cuda.Event()
            reading.record()
            columns.reading = reading

    def _updates_to_draw(self, limited: bool, updates_left: int) -> int:
        ahead = min(self.draw_ahead, max(1, updates_left))
        needed = self.groups * self.count
        while ahead > 1 and limited and not self.replay.can_sample(ahead * needed):
            ahead //= 2
        return ahead

    def _draw_on_host(self, updates: int) -> list[dict[str, torch.Tensor]]:
        """`updates` batches from one draw and one gather per field (replay on the host)."""
        replay = self.replay
        with replay.lock:
            draw = replay.draw(updates * self.groups, self.count)
            arrays = replay.gather(draw)
        self.keys = draw.keys  # prioritized replay draws one update at a time
        batches = []
        for first in range(0, updates * self.groups, self.groups):
            batch = {name: torch.from_numpy(array[first:first + self.groups]) for name, array in arrays.items()}
            if self.device.type == "cuda":
                batch = {name: t.pin_memory().to(self.device, non_blocking=True) for name, t in batch.items()}
            batches.append(batch)
        return batches

    def _wait_until_allowed(self) -> None:
        needed = self.groups * self.count
        replay = self.replay
        if replay.can_sample(needed):
            return
        filling = replay.steps_held < replay.limiter.min_size
        start = time.perf_counter()
        try:
            while not replay.can_sample(needed):
                if self.should_stop():
                    raise TrainingStopped("the run is stopping")
                if self.starved is not None:
                    self.starved()
                elif replay.wait_for_insert(needed, _WAIT_S):
                    break
        finally:
            waited = time.perf_counter() - start
            if filling:
                self.fill_wait_s += waited
            else:
                self.wait_s += waited

    def take(self, count: int) -> list[dict[str, torch.Tensor]]:
        """`count` batches as the feed makes them, kept (the bench cycles them as its reference:
        the same update loop with nothing drawn or gathered on the host). Drawn past the
        limiter: the collectors may have stopped."""
        batches = []
        for _ in range(count):
            with self.update_slot(limited=False) as batch:
                batches.append(batch)
        return batches


def gather_from(replay: ShardedReplay):
    """The update's gather for a replay whose columns are on its device: a batch of drawn indices
    (and importance weights) -> the training fields, one indexing per field."""
    columns, plan = replay.columns, replay.gather_plan

    def gather(batch):
        fields = {field: columns[column][batch[key]] for field, (column, key) in plan.items()}
        if "weight" in batch:
            fields["weight"] = batch["weight"]
        return fields

    return gather
