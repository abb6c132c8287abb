"""The Ray side of the messages: how chunks and weights cross processes.

Each adapter gives a plain component (Collector, Learner) the callable it was written against:
- ChunkSink.push: one `add_chunk` call on the learner's actor per chunk (the replay lives there),
  at most `max_in_flight` unanswered (backpressure without object-store spill), and a pause while
  the replay-ratio limiter leaves this collector no room.
- WeightInbox.poll: non-blocking; weights are fetched on a side thread and handed over once local.
- WeightPublisher.publish: one `ray.put` per version, the same ref sent to every collector.
Batches cross no process at all: the learner draws them from the replay beside it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import ray

from raypex.replay.contracts import Chunk, Weights

# Ray records an event in its GCS for every call unless told not to; at thousands of calls a
# minute that grew gcs_server by ~400 MB over a long run. The hosts mark their per-chunk,
# per-epoch and polling methods with this (raypex's own metrics say what they do).
QUIET = ray.method(enable_task_events=False)


def _never() -> bool:
    return False


def _nothing() -> None:
    pass


def _reply_or_none(ref):
    """The learner's reply, or None when it died before answering (the driver has Ray restart
    it; the chunk is lost with its replay). Any other error is a bug and is raised."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayActorError:
        return None


# A limited side sleeps until the other side should have made room, then re-reads the counters.
# These bound that sleep; they are rate-control pauses, not synchronization.
_MIN_PAUSE_S = 0.001
_MAX_PAUSE_S = 0.05


class ChunkSink:
    """Writes one collector's chunks to its shard, in the learner's actor, with bounded in-flight
    calls and the insert-side limit.

    While the limiter leaves no room, the sink sleeps for the time the learner should need to make
    room (estimated from how fast the room grew between readings) instead of polling in a tight
    loop: a throttled collector then costs the machine almost no CPU.

    It names the learner's actor rather than holding its handle: the wiring makes the sink and it
    travels in the collector's constructor arguments, which Ray passes again to a collector it
    restarts. A handle inside them would send those arguments to the object store, from where Ray
    may not be able to restart the actor (ray#53727); a name is plain data, and the restarted
    collector finds the same learner (and its shard's data) by it.
    """

    def __init__(self, learner_name: str, shard: int, max_in_flight: int, should_stop: Callable[[], bool] = _never):
        self.learner_name = learner_name
        self.shard_index = shard
        self._learner = None  # looked up in the collector's process, on first use
        self.max_in_flight = max_in_flight
        self.should_stop = should_stop  # the host sets its own: waiting for room ends when true
        self.while_waiting: Callable[[], None] = _nothing  # the host's use for time spent throttled
        self.in_flight: deque = deque()
        self._attach_reply: ray.ObjectRef | None = None
        self.room = float("inf")
        self.throttled_s = 0.0
        self._room_rate = 0.0  # transitions of room gained per second while waiting

    @property
    def learner(self):
        """The learner's actor handle (looked up by name once, in the process that writes)."""
        if self._learner is None:
            self._learner = ray.get_actor(self.learner_name)
        return self._learner

    def attach(self) -> None:
        """Tell the shard a new collector process writes to it. The call goes now (so a process
        that dies before its first chunk still counts as a restart); its answer is read by
        `counted_before`, at the first chunk, so the env loop need not wait for the learner."""
        self._attach_reply = self.learner.attach_writer.remote(self.shard_index)

    def counted_before(self) -> int:
        """The env steps this process counts on from: those of the chunks earlier processes
        stored in its shard (waits for the learner's answer to `attach`)."""
        return ray.get(self._attach_reply)

    def push(self, chunk: Chunk, env_steps: int | None = None) -> None:
        """Send the chunk (its collector's env steps so far with it); block only while too many
        writes are pending or the limiter is full."""
        self.in_flight.append(self.learner.add_chunk.remote(self.shard_index, chunk, env_steps))
        while len(self.in_flight) > self.max_in_flight:
            self._observe(_reply_or_none(self.in_flight.popleft()))
        done, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight), timeout=0)
        for ref in done:
            self.in_flight.remove(ref)
            self._observe(_reply_or_none(ref))
        if self.room <= 0:
            self._wait_for_room()

    def flush(self) -> None:
        """Wait until every chunk sent is stored (or died with a learner): a collector whose node
        is about to go loses nothing it sent."""
        while self.in_flight:
            self._observe(_reply_or_none(self.in_flight.popleft()))

    def _observe(self, room: float | None) -> None:
        # None: the learner died with the chunk (it is restarted, and the next add goes there)
        if room is not None:
            self.room = room

    def _wait_for_room(self) -> None:
        start = time.perf_counter()
        while self.room <= 0 and not self.should_stop():
            deficit = 1.0 - self.room
            pause = deficit / self._room_rate if self._room_rate > 0 else _MIN_PAUSE_S
            pause = min(max(pause, _MIN_PAUSE_S), _MAX_PAUSE_S)
            before, asleep = self.room, time.perf_counter()
            time.sleep(pause)
            self.while_waiting()
            self._observe(_reply_or_none(self.learner.insert_room.remote()))
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

    def __init__(self, prepare: Callable[[Weights], None] = lambda weights: None):
        """`prepare`: work a version needs before the env loop loads it, done here (on the side thread)."""
        self.prepare = prepare
        self._lock = threading.Lock()
        self._newest_version = -1
        self._ready: Weights | None = None
        self.newest_ref: ray.ObjectRef | None = None  # of the newest version received (served acting sends it on)

    def receive(self, ref: ray.ObjectRef, version: int) -> None:
        """Fetch an announced Weights version (older than one already received: ignored)."""
        if version <= self._newest_version:
            return
        weights = ray.get(ref)
        self.prepare(weights)
        with self._lock:
            if version > self._newest_version:
                self._newest_version = version
                self._ready, self.newest_ref = weights, ref

    def poll(self) -> Weights | None:
        """The newest received weights not handed out yet, else None (never blocks)."""
        if self._ready is None:
            return None
        with self._lock:
            weights, self._ready = self._ready, None
        return weights


class WeightPublisher:
    """Puts each weights version into the object store once and announces it to every collector.

    Collectors are named, not held: the learner's constructor arguments stay plain data, so Ray
    can restart a learner that died (see ChunkSink); handles are looked up on first use. With
    `elastic` (collectors.num auto) a name is a slot that a collector takes when it joins: it is
    announced to from its first `resend` until it is forgotten (it left)."""

    def __init__(self, collector_names: list[str], elastic: bool = False):
        self.collector_names = collector_names
        self.elastic = elastic
        self._collectors: dict[int, object] | None = None  # by index: those announced to
        self.latest: tuple[ray.ObjectRef, int] | None = None  # ref, version
        self.latest_weights: Weights | None = None  # the same version by value, for the driver

    @property
    def collectors(self) -> dict[int, object]:
        """The handles of the collectors announced to, by index (a fixed run's all, looked up once)."""
        if self._collectors is None:
            self._collectors = {} if self.elastic else {i: ray.get_actor(name)
                                                        for i, name in enumerate(self.collector_names)}
        return self._collectors

    def publish(self, weights: Weights) -> None:
        """One ray.put, then the same ref (wrapped in a list, so Ray does not resolve it) to all.
        A publisher of no collectors (a group's learner after the first) keeps the version only."""
        self.latest_weights = weights
        if not self.collector_names:
            return
        ref = ray.put(weights)
        self.latest = (ref, weights.version)
        for collector in self.collectors.values():
            collector.set_weights.remote([ref], weights.version)

    def resend(self, index: int) -> None:
        """Announce the latest version to collector `index` (after Ray restarted it, or it joined)."""
        if index not in self.collectors:  # a collector that joins: its actor is new under the slot's name
            self.collectors[index] = ray.get_actor(self.collector_names[index])
        if self.latest is not None:
            ref, version = self.latest
            self.collectors[index].set_weights.remote([ref], version)

    def forget(self, index: int) -> None:
        """Collector `index` left the run: announce nothing more to it."""
        self.collectors.pop(index, None)
