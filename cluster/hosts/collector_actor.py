"""CollectorActor: the Ray shell around a Collector, wired to its shard and the weight inbox.

It is a threaded actor: `run` occupies one thread with the env loop while `set_weights`, `stats`
and `stop` are served on others, so announcing weights or reading counters never waits for the
env loop and the env loop never waits for them. Its sink to its shard is made by the wiring and
comes with the constructor's arguments, which Ray passes again to a collector it restarts: the
new process writes to the same shard (and its data). torch is imported inside the actor only: the
driver, which names this class, never pays for it.
"""

from __future__ import annotations

import os
import threading
import time

import ray

from raypex.actors.settings import CollectorSettings
from raypex.cluster.hosts.acting_precision import act_precision_for_this_cpu
from raypex.cluster.hosts.ray_seams import QUIET, ChunkSink, WeightInbox
from raypex.cluster.process_clock import process_start_time
from raypex.replay.contracts import CollectorStats


class CollectorActor:
    """Hosts one Collector; `run` loops until `stop` is called."""

    def __init__(self, settings: CollectorSettings, sink: ChunkSink, server: str | None = None,
                 come_back_s: float = 60.0):
        """`server`: the name of its node's acting server (collectors.acting served), waited for
        up to `come_back_s` while Ray restarts it."""
        self.startup = {"process_started": process_start_time()}  # wall clock (summary.json's startup_s)
        from raypex.actors.collector import Collector

        self.startup["imported"] = time.time()
        self._stop = threading.Event()
        self.inbox = WeightInbox(prepare=self._build_session)
        self.sink = sink  # collector -> its shard, made by the wiring
        self.sink.should_stop = self._stop.is_set
        served = None
        if server is not None:  # requests over the node's socket, weights through Ray (once per version)
            from raypex.actors.acting_line import LineClient, socket_address
            from raypex.actors.served_acting import ServedForward
            from raypex.cluster.hosts.acting_server_actor import WeightsToServer

            served = ServedForward(LineClient(socket_address(server), come_back_s).serve,
                                   WeightsToServer(server, come_back_s, lambda: self.inbox.newest_ref))
        self.collector = Collector(act_precision_for_this_cpu(settings), self._push, self.inbox.poll, served)
        self.startup["env_ready"] = self.collector.stepper.ready_at
        self.sink.while_waiting = self.collector.load_newer_weights  # same thread: the env loop's
        # A process Ray restarted counts env steps on from what its predecessors stored; the shard
        # also counts the attachments, which is how the driver counts restarts. The answer is
        # read at the first chunk: the learner may still be importing torch while this steps.
        self.sink.attach()
        self.counted_on = False
        self.startup["constructed"] = time.time()

    def _build_session(self, weights) -> None:
        """The acting graph's session, for a collector that runs it in its own process: built on the
        thread that receives weights, so that neither ONNX Runtime's import (60 ms) nor the build
        pauses the env loop; not for one that acts in torch or on its node's server."""
        from raypex.actors.onnx_acting import GraphForward, session_for

        if weights.acting_graph and self.collector.policy.form == GraphForward.form:
            session_for(weights.acting_graph)

    def _push(self, chunk) -> None:
        if not self.counted_on:
            self.collector.env_steps += self.sink.counted_before()
            self.counted_on = True
        self.sink.push(chunk, self.collector.env_steps)

    def run(self) -> int:
        """Collect chunks until stopped; returns the env steps done, every chunk of them stored."""
        self._stop.clear()
        while not self._stop.is_set():
            self.collector.collect_chunk()
        self.sink.flush()
        return self.collector.env_steps

    @QUIET
    def set_weights(self, ref_in_list: list, version: int) -> None:
        """Fetch an announced Weights version (on this side thread); the env loop loads it between
        steps (TD3/SAC collectors skip a fresh learner's untrained ones: actors/continuous_acting.py)."""
        self.inbox.receive(ref_in_list[0], version)

    @QUIET
    def stats(self) -> CollectorStats:
        """The collector's counters plus the time its sink spent throttled by the limiter."""
        stats = self.collector.stats()
        # The sink's throttled time is spent inside push(); report it apart, not twice.
        stats.phase_s["push"] = max(0.0, stats.phase_s["push"] - self.sink.throttled_s)
        stats.phase_s["throttle"] = self.sink.throttled_s
        stats.startup = self.startup
        return stats

    def stop(self) -> None:
        """Ask the env loop to finish its current chunk and return."""
        self._stop.set()

    def pid(self) -> int:
        """This actor's process id (bench reads its resident memory)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (placement checks)."""
        return ray.get_runtime_context().get_node_id()
