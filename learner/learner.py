"""The Learner: optimizes the Q-network (or TD3's and SAC's actor and critics), one whole update at a time.

A plain class (no Ray import). cluster/ hosts it in a Ray actor and gives it the run's replay (a
ShardedReplay in this same process, which collectors insert into) and where weights go
(`publish`). Each update's batch is drawn from that replay by a ReplayFeed
(learner/replay_feed.py): gathered on the host, or, when the replay's columns are on the GPU,
gathered by the update itself from the drawn indices.
One *update* is `accumulation_steps` micro-batches whose gradients are summed (each loss scaled by
1/G, so the update equals one batch G times larger) followed by one optimizer step
(learner/update_step.py). On CUDA the update is captured as one CUDA graph during warm-up
(learner/cuda_graph.py), the gather from the replay's columns included. One *epoch* is `updates_per_epoch` updates; every
`broadcast_every_epochs` epochs the weights are published.
"""

from __future__ import annotations

import copy
import io
import time
from collections import deque

import numpy as np
import torch
from torch import nn

from learner.actor_critic_networks import ActionsInEnvUnits
from learner.actor_critic_step import ActorCriticStep
from learner.cuda_graph import CapturedActorCriticUpdate, CapturedUpdate, TrainingStateSnapshot
from learner.host_adam import adam_for
from learner.learner_state import learner_state, restore_learner_state
from learner.networks import NatureCNNQNetwork, build_q_network
from learner.policy_file import export_policy_archive
from learner.precision import configure_cuda_math, make_precision, resolve_precision
from learner.priority_feedback import PriorityFeedback
from learner.replay_feed import ReplayFeed, gather_from
from learner.settings import LearnerSettings
from learner.synthetic import synthetic_batch, synthetic_index_batch
from learner.update_step import StepSettings, UpdateStep, copy_target
from learner.weights import export_arrays, load_arrays
from replay.contracts import PublishWeights, TrainingStopped, Weights
from replay.sharded import ShardedReplay

# feed: drawing (and on the host, gathering) a batch, waiting for data included; update: host time
# to run (CPU) or enqueue (CUDA) an update; gpu: waiting for the GPU to finish the update before
# last (CUDA only; GPU-bound time shows up here).
LEARNER_PHASES = ("feed", "update", "gpu", "broadcast")
# Updates the host may enqueue ahead of the GPU: enough to keep it busy while the next draw is made.
GPU_QUEUE_DEPTH = 2


class Learner:
    """Online and target Q-networks, Adam, mixed precision and the epoch loop."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: torch.device,
        replay: ShardedReplay,
        publish: PublishWeights,
        starved=None,
    ):
        """`starved` runs while the replay ratio allows no draw, in a process with no other thread
        to insert (the lockstep replica); None: wait for an insert."""
        self.s = settings
        self.device = device
        cuda = device.type == "cuda"
        if cuda:
            configure_cuda_math()
        elif settings.cuda_graphs == "on":
            raise ValueError("learner.cuda_graphs on needs a CUDA device; use auto or off on CPU")
        torch.manual_seed(settings.seed)
        pixels = len(settings.obs_shape) == 3
        if settings.prioritized != replay.prioritized:
            raise ValueError("the learner and its replay disagree on prioritized replay")
        self.replay = replay
        self.feed = ReplayFeed(replay, device, settings.accumulation_steps, settings.micro_batch, starved,
                               should_stop=lambda: self._stop_requested)
        gather = gather_from(replay) if self.feed.on_device else None
        self.actor_critic = settings.algo != "dqn"
        if self.actor_critic:
            self._init_actor_critic(settings, device, gather)
            self._init_loop(replay, device, publish)
            return
        self.cuda_graphs = cuda and settings.cuda_graphs != "off"
        # Compiling pays inside a captured CNN update (1.4x for fp16 at 512x4 on an H100) and
        # costs start-up everywhere else it was measured.
        self.compiled = settings.compile if settings.compile is not None else (self.cuda_graphs and pixels)
        self.online = build_q_network(
            settings.obs_shape, settings.num_actions, settings.hidden, settings.dueling, settings.obs_dtype
        ).to(device)
        if isinstance(self.online, NatureCNNQNetwork):
            self.online.use_channels_last(settings.channels_last and cuda)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self._online_params = list(self.online.parameters())
        self._target_params = list(self.target.parameters())
        # fused: one kernel for all parameters, its step counter on the device (so capturable).
        self.optimizer = adam_for(self.online.parameters(), settings.lr, settings.adam_eps, device)
        self.precision = make_precision(resolve_precision(settings.precision, device, pixels), device)
        online_fn: nn.Module = torch.compile(self.online) if self.compiled else self.online
        target_fn: nn.Module = torch.compile(self.target) if self.compiled else self.target
        polyak = settings.target_tau if settings.target_update == "polyak" else None
        self.step = UpdateStep(
            self.online, self.target, online_fn, target_fn, self.optimizer, self.precision,
            StepSettings(settings.huber_delta, settings.double_dqn, settings.max_grad_norm, polyak,
                         share_online_pass=not pixels, prioritized=settings.prioritized),
            device, gather=gather,
        )
        self._init_loop(replay, device, publish)

    def _init_actor_critic(self, settings: LearnerSettings, device: torch.device, gather) -> None:
        """TD3 or SAC (learner/actor_critic_step.py): the same feed, epochs, publishing, state and
        (on CUDA) captured updates as DQN, with the actor as what collectors act with and policy.pt2 holds."""
        self.cuda_graphs = device.type == "cuda" and settings.cuda_graphs != "off"
        self.compiled = False
        self.precision = make_precision(resolve_precision(settings.precision, device, False), device)
        self.step = ActorCriticStep(settings, device, self.precision, gather=gather)
        self.online, self.target, self.optimizer = self.step.actor, None, None

    def _init_loop(self, replay: ShardedReplay, device: torch.device, publish: PublishWeights) -> None:
        self.feedback = PriorityFeedback(replay, device) if self.s.prioritized else None
        self._captured: CapturedUpdate | CapturedActorCriticUpdate | None = None
        self._gpu_queue: deque[torch.cuda.Event] = deque()
        self.publish = publish
        self.updates = 0
        self.first_update_at: float | None = None  # wall clock of the first update (start-up's end)
        self.epochs = 0
        self.version = 0
        self._stop_requested = False  # see request_stop
        self.broadcast_ms = 0.0
        # Host seconds per phase of the update loop; `raypex bench --profile` turns them into fractions.
        self.phase_s = dict.fromkeys(LEARNER_PHASES, 0.0)

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
            if self.optimizer is not None:  # an actor-critic step clears its own gradients
                self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        if not self.actor_critic and self.s.target_update == "hard" and self.updates % self.s.target_update_every == 0:
            copy_target(self._target_params, self._online_params)

    # -- epochs -------------------------------------------------------------------------------
    def train_epoch(self) -> dict[str, float]:
        """Run one epoch of updates; publish weights when due; return the epoch's metrics.

        After `request_stop` (or a TrainingStopped from the replay feed) the epoch ends early:
        `updates_in_epoch` says how many updates it made, and one with none is not counted.
        """
        clock = time.perf_counter
        phase = self.phase_s
        start = clock()
        done = 0
        try:
            while done < self.s.updates_per_epoch and not self._stop_requested:
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
            return {"updates_in_epoch": 0, "epoch_s": clock() - start, "updates": self.updates,
                    "epochs": self.epochs, "version": self.version}
        self.epochs += 1
        if self.epochs % self.s.broadcast_every_epochs == 0:
            t3 = clock()
            self.publish_weights()
            phase["broadcast"] += clock() - t3
        loss_sum, q_sum = self.step.take_sums()  # one read of the device per epoch
        micro_batches = done * self.s.accumulation_steps
        metrics = {
            "td_loss": loss_sum / micro_batches,
            "q_values": q_sum / micro_batches,
            "epoch_s": time.perf_counter() - start,
            "updates": self.updates,
            "epochs": self.epochs,
            "version": self.version,
            "updates_in_epoch": done,
            "samples_per_update": self.s.accumulation_steps * self.s.micro_batch,
            "broadcast_ms": self.broadcast_ms,
            "first_update_at": self.first_update_at,
        }
        if self.precision.scaler is not None:
            metrics["grad_scale"] = self.precision.scaler.get_scale()
        if self.actor_critic:
            metrics.update(self.step.take_actor_metrics())
        return metrics

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
        """Publish the online network as a new version (one put, one reference to all)."""
        self.version += 1
        start = time.perf_counter()
        self.publish(Weights(self.version, export_arrays(self.online), untrained=self.updates == 0))
        self.broadcast_ms = (time.perf_counter() - start) * 1e3

    def warmup(self) -> None:
        """Run whole updates on a synthetic batch before the clock starts (cuDNN and the
        allocator settle, torch.compile compiles) and, on CUDA, capture the update as a graph;
        every tensor those updates changed is put back, so the weights do not change."""
        example = self.example_batch(np.random.default_rng(self.s.seed))
        if self.actor_critic:  # eager, the first updates cost little: only a capture needs a warm-up
            if self.cuda_graphs:
                self._captured = CapturedActorCriticUpdate(self.step, example)
            return
        if self.cuda_graphs:
            self._captured = CapturedUpdate(self.step, example)
            return
        snapshot = TrainingStateSnapshot(self.step)
        for _ in range(2):
            self.step(example)
        snapshot.restore()
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
        self.set_state(torch.load(io.BytesIO(data), map_location=self.device, weights_only=False))

    def export_policy(self, arrays: dict[str, np.ndarray] | None = None) -> bytes:
        """policy.pt2's bytes: the greedy Q-network for one observation or a batch (learner/policy_file).

        With `arrays` (a published Weights' arrays) it exports those weights instead of the
        current ones: the version an evaluation passed, not whatever was trained after it.
        """
        module = copy.deepcopy(self.online).to("cpu").float().eval()
        if isinstance(module, NatureCNNQNetwork):
            module.use_channels_last(False)
        if arrays is not None:
            load_arrays(module, arrays)
        if self.actor_critic:
            actions = ActionsInEnvUnits(module, self.s.action_low, self.s.action_high).eval()
            return export_policy_archive(actions, tuple(self.s.obs_shape), outputs="actions")
        return export_policy_archive(module, tuple(self.s.obs_shape))

