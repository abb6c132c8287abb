"""The Learner: optimizes the Q-network on micro-batches with gradient accumulation.

A plain class (no Ray import). cluster/ hosts it in a Ray actor and injects where batches come
from (`next_batch`, which blocks until a Batch is available) and where weights go (`publish`).
One *update* is `accumulation_steps` micro-batches whose gradients are summed (each loss scaled by
1/G, so the update equals one batch G times larger) followed by one optimizer step. One *epoch*
is `updates_per_epoch` updates; every `broadcast_every_epochs` epochs the weights are published.
"""

from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from learner.device_feed import DeviceFeed
from learner.losses import double_dqn_loss
from learner.messages import TrainingStopped, Weights
from learner.networks import build_q_network
from learner.precision import make_precision
from learner.settings import LearnerSettings
from learner.weights import export_arrays, load_arrays
from replay.messages import Batch

LEARNER_PHASES = ("feed", "forward_backward", "optimizer", "broadcast")


class Learner:
    """Online and target Q-networks, Adam, mixed precision and the epoch loop."""

    def __init__(
        self,
        settings: LearnerSettings,
        device: torch.device,
        next_batch: Callable[[], Batch],
        publish: Callable[[Weights], None],
    ):
        self.s = settings
        self.device = device
        torch.manual_seed(settings.seed)
        self.online = build_q_network(
            settings.obs_shape, settings.num_actions, settings.hidden, settings.dueling
        ).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self._online_params = list(self.online.parameters())
        self._target_params = list(self.target.parameters())
        # fused: one kernel for all parameters instead of a Python loop over them (CPU and CUDA).
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=settings.lr, eps=settings.adam_eps, fused=True)
        self.precision = make_precision(settings.precision, device)
        self.online_fn: nn.Module = torch.compile(self.online) if settings.compile else self.online
        self.target_fn: nn.Module = torch.compile(self.target) if settings.compile else self.target
        self.feed = DeviceFeed(next_batch, device)
        self.publish = publish
        self.updates = 0
        self.epochs = 0
        self.version = 0
        # Set (from another thread) when the run ends: the epoch in progress stops after the
        # current update, so the run's end never waits for a long epoch or for data that will
        # not come.
        self.stop_requested = False
        self.broadcast_ms = 0.0
        # Host seconds per phase of the update loop (on CUDA, kernel time shows up where the host
        # waits for it); `raypex bench --profile` turns them into fractions.
        self.phase_s = dict.fromkeys(LEARNER_PHASES, 0.0)

    # -- one update ---------------------------------------------------------------------------
    def accumulate(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward + backward of one micro-batch, its loss scaled by 1/G; returns (loss, q_mean)."""
        with self.precision.autocast():
            out = double_dqn_loss(
                self.online_fn, self.target_fn, batch["obs"], batch["action"], batch["return"],
                # Uniform replay: every importance weight is 1, so the loss skips the multiply.
                # Prioritized replay will pass batch["weight"] here.
                batch["discount"], batch["next_obs"], None, self.s.huber_delta, self.s.double_dqn,
            )
        scaled = out.loss / self.s.accumulation_steps
        if self.precision.scaler is not None:
            self.precision.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        return out.loss.detach(), out.q_mean

    def apply_gradients(self) -> None:
        """Clip, step the optimizer (through the scaler when there is one), update the target."""
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        nn.utils.clip_grad_norm_(self._online_params, self.s.max_grad_norm, foreach=True)
        if scaler is not None:
            scaler.step(self.optimizer)
            scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        self._update_target()

    def _update_target(self) -> None:
        if self.s.target_update == "polyak":
            with torch.no_grad():
                # One fused call over all parameters; a Python loop costs ~5x more per update.
                torch._foreach_lerp_(self._target_params, self._online_params, self.s.target_tau)
        elif self.updates % self.s.target_update_every == 0:
            self.target.load_state_dict(self.online.state_dict())

    # -- epochs -------------------------------------------------------------------------------
    def train_epoch(self) -> dict[str, float]:
        """Run one epoch of updates; publish weights when due; return the epoch's metrics.

        After `stop_requested` (or a TrainingStopped from the batch source) the epoch ends early:
        `updates_in_epoch` says how many updates it made, and one with none is not counted.
        """
        clock = time.perf_counter
        phase = self.phase_s
        start = clock()
        loss_sum = torch.zeros((), device=self.device)
        q_sum = torch.zeros((), device=self.device)
        done = 0
        try:
            while done < self.s.updates_per_epoch and not self.stop_requested:
                for _ in range(self.s.accumulation_steps):
                    t0 = clock()
                    batch = self.feed.next()
                    t1 = clock()
                    loss, q_mean = self.accumulate(batch)
                    loss_sum += loss
                    q_sum += q_mean
                    phase["feed"] += t1 - t0
                    phase["forward_backward"] += clock() - t1
                t2 = clock()
                self.apply_gradients()
                phase["optimizer"] += clock() - t2
                done += 1
        except TrainingStopped:
            self.optimizer.zero_grad(set_to_none=True)  # a partial accumulation is dropped
        if done == 0:
            return {"updates_in_epoch": 0, "epoch_s": clock() - start, "updates": self.updates,
                    "epochs": self.epochs, "version": self.version}
        self.epochs += 1
        if self.epochs % self.s.broadcast_every_epochs == 0:
            t3 = clock()
            self.publish_weights()
            phase["broadcast"] += clock() - t3
        micro_batches = done * self.s.accumulation_steps
        metrics = {
            "td_loss": float(loss_sum) / micro_batches,
            "q_values": float(q_sum) / micro_batches,
            "epoch_s": time.perf_counter() - start,
            "updates": self.updates,
            "epochs": self.epochs,
            "version": self.version,
            "updates_in_epoch": done,
            "samples_per_update": self.s.accumulation_steps * self.s.micro_batch,
            "broadcast_ms": self.broadcast_ms,
        }
        if self.precision.scaler is not None:
            metrics["grad_scale"] = float(self.precision.scaler.get_scale())
        return metrics

    def publish_weights(self) -> None:
        """Publish the online network as a new version (one put, one reference to all)."""
        self.version += 1
        start = time.perf_counter()
        self.publish(Weights(self.version, export_arrays(self.online)))
        self.broadcast_ms = (time.perf_counter() - start) * 1e3

    def warmup(self) -> None:
        """Run forward and backward (and compilation) once on a synthetic batch, before the clock
        starts; the gradients are discarded, so the weights do not change."""
        batch = synthetic_batch(self.s.obs_shape, self.s.obs_dtype, self.s.micro_batch, self.device)
        for _ in range(2):
            self.accumulate(batch)
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # -- state, export -------------------------------------------------------------------------
    def get_state(self) -> dict:
        """Everything needed to resume: networks, optimizer, scaler, counters, RNG."""
        scaler = self.precision.scaler
        return {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "counters": {"updates": self.updates, "epochs": self.epochs, "version": self.version},
            "torch_rng": torch.get_rng_state(),
        }

    def set_state(self, state: dict) -> None:
        """Restore from `get_state` output."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.precision.scaler is not None and state["scaler"] is not None:
            self.precision.scaler.load_state_dict(state["scaler"])
        counters = state["counters"]
        self.updates, self.epochs, self.version = counters["updates"], counters["epochs"], counters["version"]
        torch.set_rng_state(state["torch_rng"])

    def state_bytes(self) -> bytes:
        """`get_state` serialized with torch.save (what checkpoints hold)."""
        buffer = io.BytesIO()
        torch.save(self.get_state(), buffer)
        return buffer.getvalue()

    def load_state_bytes(self, data: bytes) -> None:
        """Restore from `state_bytes` output."""
        self.set_state(torch.load(io.BytesIO(data), map_location=self.device, weights_only=False))

    def export_policy(self, arrays: dict[str, np.ndarray] | None = None) -> bytes:
        """The greedy Q-network as a torch.export program (float32 obs [B, ...] -> Q [B, A]).

        With `arrays` (a published Weights' arrays) it exports those weights instead of the
        current ones: the version an evaluation passed, not whatever was trained after it.
        """
        module = copy.deepcopy(self.online).to("cpu").float().eval()
        if arrays is not None:
            load_arrays(module, arrays)
        example = torch.zeros((2, *self.s.obs_shape), dtype=torch.float32)
        batch = torch.export.Dim("batch", min=1)
        program = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        return buffer.getvalue()


def synthetic_batch(obs_shape: tuple[int, ...], obs_dtype: str, size: int,
                    device: torch.device) -> dict[str, torch.Tensor]:
    """A batch of zeros with the shapes and dtypes replay serves (uint8 pixels), for warm-up."""
    dtype = torch.uint8 if obs_dtype == "uint8" else torch.float32
    return {
        "obs": torch.zeros((size, *obs_shape), dtype=dtype, device=device),
        "action": torch.zeros(size, dtype=torch.int64, device=device),
        "return": torch.zeros(size, device=device),
        "discount": torch.zeros(size, device=device),
        "next_obs": torch.zeros((size, *obs_shape), dtype=dtype, device=device),
        "weight": torch.ones(size, device=device),
    }
