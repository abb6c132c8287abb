"""The Ray side of the three messages: how chunks, batches and weights cross processes.

Each adapter gives a plain component (Collector, Learner) the callable it was written against:
- ChunkSink.push: one `shard.add` call per chunk, at most `max_in_flight` unanswered (backpressure
  without object-store spill), and a pause while the shard's replay-ratio limiter has no room.
- WeightInbox.poll: non-blocking; a newly announced weights ref is loaded only once it is local.
- BatchSource.next_batch: keeps `depth` sample requests in flight across shards (chosen by
  ShardMixer) and measures the time the learner actually waits.
- WeightPublisher.publish: one `ray.put` per version, the same ref sent to every collector.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import ray

from learner.weights import Weights
from replay.messages import Batch, Chunk, ShardCounters
from replay.mixing import ShardMixer

_POLL_S = 0.002  # how often a limited side re-reads the counters; bounded, not a sync primitive


class ChunkSink:
    """Writes chunks to one shard with bounded in-flight calls and the insert-side limit."""

    def __init__(self, shard, max_in_flight: int, should_stop: Callable[[], bool]):
        self.shard = shard
        self.max_in_flight = max_in_flight
        self.should_stop = should_stop
        self.in_flight: deque = deque()
        self.room = float("inf")
        self.throttled_s = 0.0

    def push(self, chunk: Chunk) -> None:
        """Send the chunk; block only while too many writes are pending or the limiter is full."""
        self.in_flight.append(self.shard.add.remote(chunk))
        while len(self.in_flight) > self.max_in_flight:
            self._observe(ray.get(self.in_flight.popleft()))
        done, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        for ref in done:
            self.in_flight.remove(ref)
            self._observe(ray.get(ref))
        if self.room <= 0:
            self._wait_for_room()

    def _observe(self, counters: ShardCounters) -> None:
        self.room = counters["insert_room"]

    def _wait_for_room(self) -> None:
        start = time.perf_counter()
        while self.room <= 0 and not self.should_stop():
            time.sleep(_POLL_S)
            self._observe(ray.get(self.shard.counters.remote()))
        self.throttled_s += time.perf_counter() - start


class WeightInbox:
    """Receives weight announcements (from another thread) and hands them over once local."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: tuple[ray.ObjectRef, int] | None = None

    def announce(self, ref: ray.ObjectRef, version: int) -> None:
        """Remember the newest announced version (older ones are dropped unseen)."""
        with self._lock:
            if self._pending is None or version > self._pending[1]:
                self._pending = (ref, version)

    def poll(self) -> Weights | None:
        """The announced weights if they are already in this node's object store, else None."""
        pending = self._pending
        if pending is None:
            return None
        ref, version = pending
        ready, _ = ray.wait([ref], timeout=0, fetch_local=True)
        if not ready:
            return None
        arrays = ray.get(ref)
        with self._lock:
            if self._pending is pending:
                self._pending = None
        return Weights(version, arrays)


class BatchSource:
    """Prefetches micro-batches from the shards; `next_batch` blocks only when none has arrived."""

    def __init__(self, shards: list, mixer: ShardMixer, depth: int):
        self.shards = shards
        self.mixer = mixer
        self.depth = depth
        self.in_flight: deque = deque()
        self.wait_s = 0.0  # waiting while learning (data asked for but not there yet)
        self.fill_wait_s = 0.0  # waiting before replay reached its minimum size

    def next_batch(self) -> Batch:
        """The oldest requested micro-batch (requests are topped up to `depth` first)."""
        self._top_up()
        if not self.in_flight:
            self._wait_until_sampling_allowed()
        start = time.perf_counter()
        batch, counters = ray.get(self.in_flight.popleft())
        self.wait_s += time.perf_counter() - start
        self.mixer.observe(counters)
        self._top_up()
        return batch

    def _top_up(self) -> None:
        while len(self.in_flight) < self.depth:
            shard = self.mixer.next_shard()
            if shard is None:
                return
            self.in_flight.append(self.shards[shard].sample.remote(self.mixer.micro_batch))

    def _wait_until_sampling_allowed(self) -> None:
        start = time.perf_counter()
        filling = self.mixer.sizes.sum() < self.mixer.limiter.min_size
        while not self.in_flight:
            for counters in ray.get([shard.counters.remote() for shard in self.shards]):
                self.mixer.observe(counters)
            self._top_up()
            if not self.in_flight:
                time.sleep(_POLL_S)
        waited = time.perf_counter() - start
        if filling:
            self.fill_wait_s += waited
        else:
            self.wait_s += waited


class WeightPublisher:
    """Puts each weights version into the object store once and announces it to every collector."""

    def __init__(self, collectors: list):
        self.collectors = collectors
        self.latest: tuple[ray.ObjectRef, int] | None = None

    def publish(self, weights: Weights) -> None:
        """One ray.put, then the same ref (wrapped in a list, so Ray does not resolve it) to all."""
        ref = ray.put(weights.arrays)
        self.latest = (ref, weights.version)
        for collector in self.collectors:
            collector.set_weights.remote([ref], weights.version)

    def resend(self, collector) -> None:
        """Announce the latest version to one (restarted) collector."""
        if self.latest is not None:
            ref, version = self.latest
            collector.set_weights.remote([ref], version)
