"""The Ray side of the three messages: how chunks, batches and weights cross processes.

Each adapter gives a plain component (Collector, Learner) the callable it was written against:
- ChunkSink.push: one `shard.add` call per chunk, at most `max_in_flight` unanswered (backpressure
  without object-store spill), and a pause while the shard's replay-ratio limiter has no room.
- WeightInbox.poll: non-blocking; weights are fetched on a side thread and handed over once local.
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

from replay.contracts import Batch, Chunk, ShardCounters, TrainingStopped, Weights, with_keys
from replay.mixing import ShardMixer
from replay.shard import ShardEmpty

# Ray records an event in its GCS for every call unless told not to; at thousands of calls a
# minute that grew gcs_server by ~400 MB over a long run. The hosts mark their per-chunk,
# per-batch, per-epoch and polling methods with this (raypex's own metrics say what they do).
QUIET = ray.method(enable_task_events=False)


def _never() -> bool:
    return False


def _reply_or_none(ref):
    """A shard's reply, or None when the shard died before answering (Ray restarts it) or, just
    restarted, had nothing to sample yet. Any other error is a bug and is raised."""
    try:
        return ray.get(ref)
    except (ray.exceptions.RayActorError, ShardEmpty):
        return None


# A limited side sleeps until the other side should have made room, then re-reads the counters.
# These bound that sleep; they are rate-control pauses, not synchronization.
_MIN_PAUSE_S = 0.001
_MAX_PAUSE_S = 0.05


class ChunkSink:
    """Writes chunks to one shard with bounded in-flight calls and the insert-side limit.

    While the limiter has no room, the sink sleeps for the time the learner should need to make
    room (estimated from how fast this shard's room grew between readings) instead of polling in
    a tight loop: a throttled collector then costs the machine almost no CPU.

    It names its shard rather than holding its handle: the wiring makes the sink and it travels in
    the collector's constructor arguments, which Ray passes again to a collector it restarts. A
    handle inside them would send those arguments to the object store, from where Ray may not be
    able to restart the actor (ray#53727); a name is plain data, and the restarted collector finds
    the same shard (and its data) by it.
    """

    def __init__(self, shard_name: str, max_in_flight: int, should_stop: Callable[[], bool] = _never):
        self.shard_name = shard_name
        self._shard = None  # looked up in the collector's process, on first use
        self.max_in_flight = max_in_flight
        self.should_stop = should_stop  # the host sets its own: waiting for room ends when true
        self.in_flight: deque = deque()
        self.room = float("inf")
        self.throttled_s = 0.0
        self._room_rate = 0.0  # transitions of room gained per second while waiting

    @property
    def shard(self):
        """The shard's actor handle (looked up by name once, in the process that writes)."""
        if self._shard is None:
            self._shard = ray.get_actor(self.shard_name)
        return self._shard

    def attach(self) -> int:
        """Tell the shard a new collector process writes to it; returns the env steps to count on
        from (those of the chunks earlier processes stored there)."""
        return ray.get(self.shard.attach_writer.remote())

    def push(self, chunk: Chunk, env_steps: int | None = None) -> None:
        """Send the chunk (its collector's env steps so far with it); block only while too many
        writes are pending or the limiter is full."""
        self.in_flight.append(self.shard.add.remote(chunk, env_steps))
        while len(self.in_flight) > self.max_in_flight:
            self._observe(_reply_or_none(self.in_flight.popleft()))
        done, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        for ref in done:
            self.in_flight.remove(ref)
            self._observe(_reply_or_none(ref))
        if self.room <= 0:
            self._wait_for_room()

    def _observe(self, counters: ShardCounters | None) -> None:
        # None: the shard died with the chunk (Ray restarts it, and the next add goes there)
        if counters is not None:
            self.room = counters["insert_room"]

    def _wait_for_room(self) -> None:
        start = time.perf_counter()
        while self.room <= 0 and not self.should_stop():
            deficit = 1.0 - self.room
            pause = deficit / self._room_rate if self._room_rate > 0 else _MIN_PAUSE_S
            pause = min(max(pause, _MIN_PAUSE_S), _MAX_PAUSE_S)
            before, asleep = self.room, time.perf_counter()
            time.sleep(pause)
            self._observe(_reply_or_none(self.shard.counters.remote()))
            gained = (self.room - before) / (time.perf_counter() - asleep)
            self._room_rate = gained if self._room_rate == 0 else 0.5 * (self._room_rate + gained)
        self.throttled_s += time.perf_counter() - start


class WeightInbox:
    """Hands the env loop the newest weights that are already in this process.

    `receive` runs on the actor's side thread that serves `set_weights`: it fetches the arrays
    there (blocking that thread only), so `poll`, called by the env loop between steps, is a
    lock-protected swap with no Ray call at all. A collector that the rate limiter wakes for a
    few milliseconds at a time therefore acts with the newest weights from its first step, instead
    of finding a just-announced version not yet fetched.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._newest_version = -1
        self._ready: Weights | None = None

    def receive(self, ref: ray.ObjectRef, version: int) -> None:
        """Fetch an announced version (older than one already received: ignored)."""
        if version <= self._newest_version:
            return
        arrays = ray.get(ref)
        with self._lock:
            if version > self._newest_version:
                self._newest_version = version
                self._ready = Weights(version, arrays)

    def poll(self) -> Weights | None:
        """The newest received weights not handed out yet, else None (never blocks)."""
        if self._ready is None:
            return None
        with self._lock:
            weights, self._ready = self._ready, None
        return weights


class BatchSource:
    """Prefetches micro-batches from the shards; `next_batch` blocks only when none has arrived.

    Requests go out in groups: the shards for the next `group` micro-batches are drawn at once
    (each independently, in proportion to shard size, under the rate limit), each shard drawn gets
    a single call for all of its micro-batches, and the micro-batches are handed out in the order
    they were drawn, so consecutive micro-batches (one update's accumulation) mix shards exactly as
    independent draws would. Up to `depth` micro-batches are kept requested or received ahead.

    Every shard's counters are also re-read in the background every `REFRESH_GROUPS` groups: sample
    replies only report the shard that was sampled, so a shard first seen empty would otherwise
    never be sampled, its limiter would never make room, and its collector would stall for good.
    """

    REFRESH_GROUPS = 4

    def __init__(self, shards: list, mixer: ShardMixer, depth: int, should_stop: Callable[[], bool] = _never):
        self.shards = shards
        self.should_stop = should_stop  # the host sets its own: waiting for data ends in TrainingStopped
        self.mixer = mixer
        self.depth = max(1, depth)
        self.group = max(1, self.depth // 2)
        self.in_flight: deque = deque()  # groups: (draw order, {shard: ref})
        self.in_flight_batches = 0
        self.ready: deque = deque()  # micro-batches received, not yet handed out
        self.wait_s = 0.0  # waiting while learning (data asked for but not there yet)
        self.fill_wait_s = 0.0  # waiting before replay reached its minimum size
        self.counter_refs: list = []
        self.groups_since_refresh = 0

    def next_batch(self) -> Batch:
        """The next micro-batch (requests are topped up first)."""
        self._top_up()
        if not self.ready:
            if not self.in_flight:
                self._wait_until_sampling_allowed()
            start = time.perf_counter()
            self._receive_front_group()
            self.wait_s += time.perf_counter() - start
        batch = self.ready.popleft()
        self._top_up()
        return batch

    def _receive_front_group(self) -> None:
        order, refs = self.in_flight.popleft()
        self.in_flight_batches -= len(order)
        replies = {shard: _reply_or_none(ref) for shard, ref in refs.items()}
        position = dict.fromkeys(refs, 0)
        for reply in replies.values():
            if reply is not None:
                self.mixer.observe(reply[1])
        for shard in order:
            if replies[shard] is None:  # its shard died (Ray restarts it): these were never sampled
                self.mixer.lost(1)
                continue
            stacked, counters = replies[shard]
            i = position[shard]
            position[shard] += 1
            self.ready.append(with_keys({k: v[i] for k, v in stacked.items()}, shard, counters["incarnation"]))

    def _observe(self, counter_refs: list) -> None:
        for ref in counter_refs:
            counters = _reply_or_none(ref)
            if counters is not None:
                self.mixer.observe(counters)

    def _refresh_counters(self) -> None:
        if self.counter_refs:
            done, self.counter_refs = ray.wait(self.counter_refs, num_returns=len(self.counter_refs), timeout=0)
            self._observe(done)
        elif self.groups_since_refresh >= self.REFRESH_GROUPS:
            self.groups_since_refresh = 0
            self.counter_refs = self._poll_counters()

    def _poll_counters(self) -> list:
        """Ask every shard for its counters, telling each its share of the fleet's insert room."""
        return [shard.counters.remote(self.mixer.fleet_view(i)) for i, shard in enumerate(self.shards)]

    def _top_up(self) -> None:
        while len(self.ready) + self.in_flight_batches <= self.depth - self.group:
            self._refresh_counters()  # once per group: each ray.wait costs as much as a request
            order = []
            for _ in range(self.group):
                shard = self.mixer.next_shard()
                if shard is None:
                    break
                order.append(shard)
            if not order:
                return
            refs = {shard: self.shards[shard].sample.remote(self.mixer.micro_batch, order.count(shard),
                                                            self.mixer.fleet_view(shard),
                                                            self.mixer.priority_view(shard))
                    for shard in dict.fromkeys(order)}
            self.in_flight.append((order, refs))
            self.in_flight_batches += len(order)
            self.groups_since_refresh += 1

    def _wait_until_sampling_allowed(self) -> None:
        start = time.perf_counter()
        filling = self.mixer.sizes.sum() < self.mixer.limiter.min_size
        while not self.in_flight:
            if self.should_stop():
                raise TrainingStopped("the run is stopping")
            self._observe(self._poll_counters())
            self._top_up()
            if not self.in_flight:
                time.sleep(_MIN_PAUSE_S)
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
        self.latest_weights: Weights | None = None  # the same version by value, for the driver

    def publish(self, weights: Weights) -> None:
        """One ray.put, then the same ref (wrapped in a list, so Ray does not resolve it) to all."""
        ref = ray.put(weights.arrays)
        self.latest = (ref, weights.version)
        self.latest_weights = weights
        for collector in self.collectors:
            collector.set_weights.remote([ref], weights.version)

    def resend(self, collector) -> None:
        """Announce the latest version to one (restarted) collector."""
        if self.latest is not None:
            ref, version = self.latest
            collector.set_weights.remote([ref], version)
