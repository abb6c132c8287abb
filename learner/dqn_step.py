"""DQN as the learner's algorithm: the online and target Q-networks, fused Adam, and one whole
update as one function of device tensors (G micro-batches of forward and backward, the loss scale,
clipping, the optimizer step and the Polyak target update).

The same `device_update` runs eagerly (the CPU path, and CUDA with capture off) and is captured
once as a CUDA graph (learner/cuda_graph.py), so a test can hold one against the other. What makes
it capturable:
- nothing is read back to the host: no `.item()`, no branch on a tensor's value; an fp16 overflow
  skips the step on the device (learner/loss_scale.py), and the running loss and Q sums are
  device tensors added to in place and read once per epoch;
- gradients start each update as None, so the first micro-batch's backward writes them and the
  others add to them: in a graph that is the same kernels over the same buffers on every replay
  (the eager call sets them back to None after each update);
- the optimizer is fused Adam with its step counter on the device.
A hard target copy is done on the host after the update (`after_update`): it happens every few
thousand updates, and a host-side `_foreach_copy_` then costs nothing.

Each micro-batch is `batch[field][g]`: every field has the leading shape [G, ...]. When the
replay's columns are on the update's device, the batch holds only the drawn indices and `gather`
builds the fields from the columns first (learner/replay_feed.py): inside the captured graph, so
a pixel batch's stacks are gathered from the frames where they are stored.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping

import torch
from torch import nn

from raypex.learner.algorithm import take_means
from raypex.learner.cuda_graph import CapturedUpdate, TrainingStateSnapshot
from raypex.learner.encoders import encoder_from
from raypex.learner.gradient_group import GradientGroup, weighed
from raypex.learner.host_adam import adam_for, load_optimizer
from raypex.learner.losses import LossOutput, double_dqn_loss
from raypex.learner.networks import NatureCNNQNetwork, build_q_network
from raypex.learner.precision import PrecisionPolicy, make_precision, resolve_precision
from raypex.learner.settings import LearnerSettings
from raypex.learner.target_rules import target_rule
from raypex.replay.contracts import indexed, nested


class DQNStep:
    """Double DQN with a dueling network, importance weights under prioritized replay, hard or
    Polyak targets; its policy is the greedy online Q-network."""

    kind = "dqn"
    policy_key = "online"  # state_dict()'s entry for `policy`
    # A subclass's loss of (online, target, ...) that reads more of the networks than their forward
    # (QR-DQN's and IQN's quantiles): `loss_fn` compiles it whole, where DQN's compiled forwards
    # (`online_fn`, `target_fn`) would leave it eager.
    loss_function: Callable[..., LossOutput] | None = None

    def __init__(self, settings: LearnerSettings, device: torch.device,
                 gather: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
                 precision: PrecisionPolicy | None = None):
        """`gather` turns a batch of indices into the training fields (None: the batch has them);
        `precision` None: the settings' (auto: fp16 for a CNN on CUDA, learner/precision.py)."""
        self.s = settings
        self.gather = gather
        self.device = device
        cuda = device.type == "cuda"
        pixels = settings.has_images
        self.precision = precision or make_precision(resolve_precision(settings.precision, device, pixels), device)
        # Compiling pays inside a captured CNN update (1.4x for fp16 at 512x4 on an H100) and
        # costs start-up everywhere else it was measured.
        self.compiled = settings.compile if settings.compile is not None else (settings.captures(device.type) and pixels)
        self.online = self.build_network(settings).to(device)
        if isinstance(self.online, NatureCNNQNetwork):
            self.online.use_channels_last(settings.channels_last and cuda)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        self.policy: nn.Module = self.online  # what collectors act with and policy.pt2 holds
        self.params = list(self.online.parameters())
        self.targets = target_rule(settings.target_update, [(self.target, self.online)], settings.target_tau,
                                   settings.target_update_every)
        # fused: one kernel for all parameters, its step counter on the device (so capturable).
        self.optimizer = adam_for(self.params, settings.lr, settings.adam_eps, device)
        # the networks as called (compiled or not)
        self.online_fn: nn.Module = torch.compile(self.online) if self.compiled else self.online
        self.target_fn: nn.Module = torch.compile(self.target) if self.compiled else self.target
        self.share_online_pass = len(settings.obs_shape) == 1  # one online pass over s and s' (see double_dqn_loss)
        # Sums over micro-batches since the last `take_metrics`: read once per epoch, not per update.
        self.loss_sum = torch.zeros((), device=device)
        self.q_sum = torch.zeros((), device=device)
        # Prioritized replay: the last update's |TD error| per transition, [G, B], written in place
        # (one buffer, so a captured graph writes the same memory on every replay).
        self.td_abs: torch.Tensor | None = None
        if self.precision.scaler is not None:
            self.optimizer.found_inf = self.precision.scaler.found_inf  # fused Adam skips the step when it is 1
        self.gradients: GradientGroup | None = None  # several learners (learner/gradient_group.py)

    # -- one update -----------------------------------------------------------------------------
    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One eager update."""
        self.device_update(batch)
        self.optimizer.zero_grad(set_to_none=True)

    def device_update(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One update's device work: accumulate G micro-batches, unscale, clip, step, move a Polyak target."""
        if self.gather is not None:
            batch = self.gather(batch)
        batch = nested(batch)
        micro_batches = batch["action"].shape[0]
        scaler = self.precision.scaler
        if self.s.prioritized and (self.td_abs is None or self.td_abs.shape != batch["action"].shape):
            # one buffer while the shape holds (a captured graph writes the same memory each replay);
            # a learner of a group gets parts of other sizes
            self.td_abs = torch.zeros(batch["action"].shape, device=batch["action"].device)
        # a learner of a group whose part is empty computes nothing: its gradients count as zeros
        empty = batch["action"].shape[1] == 0
        for g in range(0 if empty else micro_batches):
            with self.precision.autocast():
                out = self.micro_batch_loss(batch, g)
            if self.td_abs is not None:
                self.td_abs[g].copy_(out.priority)
            loss = weighed(out.loss / micro_batches, self.gradients)  # the gradient of one batch G times larger
            (scaler.scale_loss(loss) if scaler is not None else loss).backward()
            self.loss_sum += out.loss.detach()
            self.q_sum += out.q_mean
        if scaler is not None:
            scaler.unscale_([p.grad for p in self.params])
        if self.gradients is not None:
            self.gradients.reduce(self.params, scaler.found_inf if scaler is not None else None)
        nn.utils.clip_grad_norm_(self.params, self.s.max_grad_norm, foreach=True)
        self.optimizer.step()
        if scaler is not None:
            scaler.update()
        self.targets.after_step()

    def build_network(self, settings: LearnerSettings) -> nn.Module:
        """The online Q-network (the target is a copy of it)."""
        return build_q_network(settings.obs_shape, settings.num_actions, settings.hidden, settings.dueling,
                               settings.obs_dtype, settings.critic_norm == "layer_norm", encoder_from(settings))

    @functools.cached_property
    def loss_fn(self) -> Callable[..., LossOutput]:
        """`loss_function`, through torch.compile with learner.compile."""
        return torch.compile(self.loss_function, dynamic=False) if self.compiled else self.loss_function

    def micro_batch_loss(self, batch: Mapping[str, torch.Tensor], g: int) -> LossOutput:
        """Micro-batch `g`'s n-step (Double) DQN loss (learner/losses.py)."""
        return double_dqn_loss(
            self.online_fn, self.target_fn, indexed(batch["obs"], g), batch["action"][g], batch["return"][g],
            # Uniform replay: no importance weights, so the loss skips the multiply.
            batch["discount"][g], indexed(batch["next_obs"], g), batch["weight"][g] if self.s.prioritized else None,
            self.s.huber_delta, self.s.double_dqn, self.share_online_pass,
        )

    def after_update(self, updates: int) -> None:
        """A hard target copy when one is due (learner/target_rules.py)."""
        self.targets.after_update(updates)

    def capture(self, example: Mapping[str, torch.Tensor]) -> CapturedUpdate:
        """The update captured as a CUDA graph over static copies of `example`."""
        return CapturedUpdate(self, self.device_update, example)

    def warm_up(self, example: Mapping[str, torch.Tensor]) -> None:
        """Two eager updates on `example`, then everything they changed put back: cuDNN and the
        allocator settle and torch.compile compiles before the clock starts."""
        snapshot = TrainingStateSnapshot(self)
        for _ in range(2):
            self(example)
        snapshot.restore()

    # -- what a warm-up snapshot and a checkpoint hold -------------------------------------------
    def training_tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes, optimizer state aside (what a warm-up snapshot puts back)."""
        scaler = self.precision.scaler
        scaler_tensors = [scaler.scale, scaler.growth_tracker, scaler.found_inf] if scaler is not None else []
        return [*self.params, *self.targets.targets, *scaler_tensors, self.loss_sum, self.q_sum]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers an update steps."""
        return [self.optimizer]

    def take_metrics(self, micro_batches: int) -> dict[str, float]:
        """Mean loss and Q over the `micro_batches` since the last call (one read of the device); resets the sums."""
        return take_means({"td_loss": self.loss_sum, "q_values": self.q_sum}, micro_batches)

    def state_dict(self) -> dict:
        """The networks, the optimizer and the fp16 loss scale."""
        scaler = self.precision.scaler
        return {"online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scaler": scaler.state_dict() if scaler is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` output (a CPU run's into a GPU run's too)."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        load_optimizer(self.optimizer, state["optimizer"], self.s.lr, self.s.adam_eps)
        for group in self.optimizer.param_groups:  # a CPU run's checkpoint says capturable=False
            group["capturable"] = self.device.type == "cuda"
        if self.precision.scaler is not None and state["scaler"] is not None:
            self.precision.scaler.load_state_dict(state["scaler"])

    def exportable(self, policy: nn.Module) -> tuple[nn.Module, str]:
        """`policy` (a CPU copy of `self.policy`) as policy.pt2 holds it: Q-values out."""
        if isinstance(policy, NatureCNNQNetwork):
            policy.use_channels_last(False)
        return policy, "q_values"
