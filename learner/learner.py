"""The Learner: trains one algorithm's update step (learner/algorithm.py: DQN, TD3 or SAC), one
whole update at a time, and publishes its policy.

A plain class (no Ray import). cluster/ hosts it in a Ray actor and gives it the run's replay (a
ShardedReplay in this same process, which collectors insert into) and where weights go
(`publish`). Each update's batch is drawn from that replay by a ReplayFeed
(learner/replay_feed.py): gathered on the host, or, when the replay's columns are on the GPU,
gathered by the update itself from the drawn indices.
One *update* is `accumulation_steps` micro-batches whose gradients are summed (each loss scaled by
1/G, so the update equals one batch G times larger) followed by the
step's optimizer steps. On CUDA the update is captured as CUDA graphs during warm-up
(learner/cuda_graph.py), the gather from the replay's columns included. One *epoch* is `updates_per_epoch` updates; every
`broadcast_every_epochs` epochs the weights are published.
"""

from __future__ import annotations

import copy
import io
import time
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np
import torch

from raypex.learner.algorithm import AlgorithmStep
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.gradient_group import GradientGroup
from raypex.learner.group_feed import GroupFeed
from raypex.learner.learner_state import learner_state, read_learner_state, restore_learner_state
from raypex.learner.policy_file import RECURRENT, export_policy_archive
from raypex.learner.precision import configure_cuda_math
from raypex.learner.priority_feedback import PriorityFeedback
from raypex.learner.replay_feed import ReplayFeed, gather_from
from raypex.learner.settings import LearnerSettings
from raypex.learner.synthetic import synthetic_batch, synthetic_index_batch
from raypex.learner.weights import export_arrays, load_arrays
from raypex.replay.contracts import EpochStats, PublishWeights, TrainingStopped, Weights
from raypex.replay.sharded import ShardedReplay

# feed: drawing (and on the host, gathering) a batch, waiting for data included; update: host time
# to run (CPU) or enqueue (CUDA) an update; gpu: waiting for the GPU to finish the update before
# last (CUDA only; GPU-bound time shows up here).
LEARNER_PHASES = ("feed", "update", "gpu", "broadcast")
# Updates the host may enqueue ahead of the GPU: enough to keep it busy while the next draw is made.
GPU_QUEUE_DEPTH = 2


class Learner:
    """The feed, the algorithm's step, priority feedback, publishing and the epoch loop."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: torch.device,
        replay: ShardedReplay,
        publish: PublishWeights,
        starved=None,
    ):
        """`starved` runs while the replay ratio allows no draw, in a process with no other thread
        to insert (a local run); None: wait for an insert. A learner of a group is made
        alone and then `join`s it."""
        self.s = settings
        self.device = device
        cuda = device.type == "cuda"
        if cuda:
            configure_cuda_math()
        elif settings.cuda_graphs == "on":
            raise ValueError("learner.cuda_graphs on needs a CUDA device; use auto or off on CPU")
        torch.manual_seed(settings.seed)
        if settings.prioritized != replay.prioritized:
            raise ValueError("the learner and its replay disagree on prioritized replay")
        self.replay = replay
        self.feed: ReplayFeed | GroupFeed = ReplayFeed(replay, device, settings.accumulation_steps,
                                                       settings.micro_batch, starved,
                                                       should_stop=lambda: self._stop_requested)
        self.step: AlgorithmStep = algorithm(settings.algo).build_step(settings, device,
                                                                    gather_from(replay) if self.feed.on_device else None)
        self.cuda_graphs = settings.captures(device.type)
        self.feedback = PriorityFeedback(replay, device) if settings.prioritized else None
        self._captured: Callable[[Mapping[str, torch.Tensor]], None] | None = None
        self._gpu_queue: deque[torch.cuda.Event] = deque()
        self.publish = publish
        self.updates = 0
        self.first_update_at: float | None = None  # wall clock of the first update (start-up's end)
        self.epochs = 0
        self.version = 0
        self.acting_graph: bytes | None = None  # exported at the first publish, sent with every version
        self._stop_requested = False  # see request_stop
        self.broadcast_ms = 0.0
        # Host seconds per phase of the update loop; `raypex bench --profile` turns them into fractions.
        self.phase_s = dict.fromkeys(LEARNER_PHASES, 0.0)

    def join(self, group: GradientGroup) -> None:
        """From now on (before warm-up) train as one learner of `group` (learner/gradient_group.py):
        `replay` holds this learner's own shards, a GroupFeed draws its part of each update's batch,
        and the step sums its gradients with the group's. Eager updates: a part changes shape."""
        if self.feed.on_device:
            raise ValueError("a learner of a group draws from replay on the host")
        self.feed = GroupFeed(self.replay, self.s.accumulation_steps * self.s.micro_batch, group, self.s.seed,
                              should_stop=lambda: self._stop_requested)
        self.step.gradients = group
        self.cuda_graphs = False

    @property
    def policy(self) -> torch.nn.Module:
        """The network collectors act with (the step's: DQN's online Q-network, TD3's and SAC's actor)."""
        return self.step.policy

    @property
    def compiled(self) -> bool:
        """Whether the step's networks run through torch.compile."""
        return self.step.compiled

    def request_stop(self) -> None:
        """End the epoch in progress after its current update, and every later one at once (safe to
        call from another thread): the run's end never waits for a long epoch or for data that
        will not come."""
        self._stop_requested = True

    @property
    def stop_requested(self) -> bool:
        """Whether `request_stop` was called (the replay feed stops waiting for data then)."""
        return self._stop_requested

    @property
    def captured(self) -> bool:
        """Whether updates replay a captured CUDA graph (after `warmup`)."""
        return self._captured is not None

    # -- one update ---------------------------------------------------------------------------
    def update(self, batch: dict[str, torch.Tensor]) -> None:
        """One update from a [G, B, ...] batch on the device: replayed when captured, else eager."""
        if self._captured is not None:
            self._captured(batch)
        else:
            self.step(batch)
        self.updates += 1
        self.step.after_update(self.updates)

    # -- epochs -------------------------------------------------------------------------------
    def train_epoch(self) -> EpochStats:
        """Run one epoch of updates; publish weights when due; return the epoch's metrics.

        After `request_stop` (or a TrainingStopped from the replay feed) the epoch ends early:
        `updates_in_epoch` says how many updates it made, and one with none is not counted.
        """
        clock = time.perf_counter
        phase = self.phase_s
        start = clock()
        done = 0
        try:
            # a learner of a group stops when its feed says the group does: alone, it would leave the others waiting
            while done < self.s.updates_per_epoch and (self.feed.stops_with_its_group or not self._stop_requested):
                t0 = clock()
                with self.feed.update_slot(updates_left=self.s.updates_per_epoch - done) as batch:
                    t1 = clock()
                    self.update(batch)
                if self.feedback is not None:
                    self.feedback.after_update(self.feed.keys, self.step.td_abs)
                t2 = clock()
                self._after_update()
                if self.first_update_at is None:
                    self.first_update_at = time.time()
                phase["feed"] += t1 - t0
                phase["update"] += t2 - t1
                phase["gpu"] += clock() - t2
                done += 1
        except TrainingStopped:
            pass
        if done == 0:
            return EpochStats(0, clock() - start, self.updates, self.epochs, self.version)
        self.epochs += 1
        if self.epochs % self.s.broadcast_every_epochs == 0:
            t3 = clock()
            self.publish_weights()
            phase["broadcast"] += clock() - t3
        scaler = self.step.precision.scaler
        return EpochStats(
            updates_in_epoch=done, epoch_s=time.perf_counter() - start, updates=self.updates, epochs=self.epochs,
            version=self.version, samples_per_update=self.s.accumulation_steps * self.s.micro_batch,
            broadcast_ms=self.broadcast_ms, first_update_at=self.first_update_at,
            losses=self.step.take_metrics(done * self.s.accumulation_steps),  # one read of the device per epoch
            grad_scale=scaler.get_scale() if scaler is not None else None)

    def _after_update(self) -> None:
        """On CUDA: keep the host no more than GPU_QUEUE_DEPTH updates ahead of the GPU (wait for
        the oldest otherwise)."""
        if self.device.type != "cuda":
            return
        done = torch.cuda.Event()
        done.record()
        self._gpu_queue.append(done)
        if len(self._gpu_queue) > GPU_QUEUE_DEPTH:
            self._gpu_queue.popleft().synchronize()

    def publish_weights(self) -> None:
        """Publish the policy network as a new version (one put, one reference to all)."""
        self.version += 1
        start = time.perf_counter()
        if self.acting_graph is None:
            self.acting_graph = algorithm(self.s.algo).acting_graph(self.step.policy, self.s.obs_shape, self.s.obs_dtype,
                                                                    self.s.obs_parts)
        self.publish(Weights(self.version, export_arrays(self.step.policy), untrained=self.updates == 0,
                             acting_graph=self.acting_graph))
        self.broadcast_ms = (time.perf_counter() - start) * 1e3

    def warmup(self) -> None:
        """Run whole updates on a synthetic batch before the clock starts (cuDNN and the
        allocator settle, torch.compile compiles) and, on CUDA, capture the update as a graph;
        every tensor those updates changed is put back, so the weights do not change."""
        example = self.example_batch(np.random.default_rng(self.s.seed))
        if self.cuda_graphs:
            self._captured = self.step.capture(example)
            return
        gradients, self.step.gradients = self.step.gradients, None  # a warm-up of its own, not the group's
        try:
            self.step.warm_up(example)
        finally:
            self.step.gradients = gradients
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def example_batch(self, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """A random batch in the form `update` takes, on the device: indices into the replay's
        columns when they are on the device, else training fields."""
        if self.feed.on_device:
            return synthetic_index_batch(self.s, self.replay, self.device, rng)
        return synthetic_batch(self.s, self.device, rng)

    # -- state, export -------------------------------------------------------------------------
    def get_state(self) -> dict:
        """Everything needed to resume: networks, optimizers, scaler, counters, RNG (learner/learner_state.py)."""
        return learner_state(self)

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output."""
        restore_learner_state(self, state)
        if self._captured is not None:  # the optimizer's state tensors were replaced: capture anew
            self.warmup()

    def state_bytes(self) -> bytes:
        """`get_state` serialized with torch.save (what checkpoints hold)."""
        buffer = io.BytesIO()
        torch.save(self.get_state(), buffer)
        return buffer.getvalue()

    def load_state_bytes(self, data: bytes) -> None:
        """Restore from `state_bytes` output."""
        self.set_state(read_learner_state(data, self.device))

    def export_policy(self, arrays: dict[str, np.ndarray] | None = None) -> bytes:
        """policy.pt2's bytes: the step's policy for one observation or a batch (learner/policy_file).

        With `arrays` (a published Weights' arrays) it exports those weights instead of the
        current ones: the version an evaluation passed, not whatever was trained after it.
        """
        policy = copy.deepcopy(self.step.policy).to("cpu").float().eval()
        if arrays is not None:
            load_arrays(policy, arrays)
        module, outputs = self.step.exportable(policy)
        state_size = module.state_size if outputs == RECURRENT else 0
        return export_policy_archive(module, tuple(self.s.obs_shape), outputs=outputs, state_size=state_size,
                                     parts=tuple(self.s.obs_parts))

