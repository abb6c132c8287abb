"""One whole actor-critic update from a [G, B] batch: the critics' step, then (every
`policy_delay` updates: by default every second for TD3, every one for SAC) the actor's step with
whatever its objective trains beside it (SAC's temperature). What TD3 and SAC differ in is their
objective (learner/actor_objectives.py), which the algorithm's plug-in hands the step
(learner/algorithms/); the rest is composed from pieces the config chooses:
- the targets follow their networks by `learner.target_update` (learner/target_rules.py);
- `network.critic_norm: batch_renorm` gives CrossQ's critics, which have no targets
  (learner/batch_renorm.py, learner/td3_loss.py twin_critic_loss); `layer_norm` a LayerNorm in
  each of their hidden layers;
- `network.critic_head: categorical` gives critics that predict a distribution over a fixed
  support, trained by cross-entropy to HL-Gauss targets (learner/categorical_critic.py);
- `network.obs_norm` merges each batch's observations into running statistics that every network
  reads (learner/obs_norm.py);
- `network.sale` trains the SALE encoder on each micro-batch before the critics, the actor and
  critics reading its frozen copies, refreshed at each whole target copy (learner/sale.py
  SaleTraining).

Like the DQN update (learner/dqn_step.py) it accumulates G micro-batches' gradients (each loss
scaled by 1/G), scales fp16 losses on the device (one scale for the critics' step, one for the
actor's), clips, steps fused Adam, keeps the reported sums on the device (read once per epoch)
and, for prioritized replay, writes each transition's |TD error| (the first critic's) into one
buffer. `update(batch, noise, with_actor)` is the part that runs on the device with nothing read
back to the host, so on CUDA it is captured as two graphs, with and without the actor's step
(learner/cuda_graph.py CapturedActorCriticUpdate); the host keeps the counters and decides which
one an update replays. The Gaussian noise both algorithms draw (TD3's target smoothing, SAC's
sampled actions) is drawn for a whole update into one [2, G, B, action_dim] tensor before it runs:
the graph reads it from a fixed buffer and needs no random generator of its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

import torch
from torch import nn

from raypex.learner.actor_critic_networks import ActionsInEnvUnits, ActorNetwork, TwinCritic
from raypex.learner.actor_objectives import SACObjective, TD3Objective
from raypex.learner.algorithm import take_means
from raypex.learner.batch_renorm import BatchRenorm
from raypex.learner.categorical_critic import HLGaussSupport
from raypex.learner.cuda_graph import CapturedActorCriticUpdate, TrainingStateSnapshot
from raypex.learner.encoders import user_encoder
from raypex.learner.gradient_group import GradientGroup, weighed
from raypex.learner.host_adam import adam_for, load_optimizer
from raypex.learner.loss_scale import DeviceLossScale
from raypex.learner.obs_norm import RunningObsNorm
from raypex.learner.precision import WIDE_MLP, PrecisionPolicy, make_precision, resolve_precision
from raypex.learner.sale import SaleTraining, SaleTwinCritic
from raypex.learner.settings import LearnerSettings
from raypex.learner.target_rules import target_rule
from raypex.learner.td3_loss import CriticLossOutput
from raypex.replay.contracts import indexed, nested

TRANSITION = ("obs", "action", "return", "discount", "next_obs")  # the columns a critic loss reads


def _backward(loss: torch.Tensor, scale: DeviceLossScale | None) -> None:
    (scale.scale_loss(loss) if scale is not None else loss).backward()


class ActorCriticStep:
    """The networks, optimizers and one update of an actor-critic algorithm with `objective`'s
    losses (TD3's or SAC's); its policy is the actor, in the env's action units once exported."""

    kind = "actor_critic"
    policy_key = "actor"  # state_dict()'s entry for `policy`

    def __init__(self, settings: LearnerSettings, device: torch.device,
                 gather: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
                 precision: PrecisionPolicy | None = None, *, objective: TD3Objective | SACObjective):
        """`gather` as DQNStep's; `precision` None: the settings' (auto: learner/precision.py resolve_precision)."""
        self.s = settings
        self.objective = objective
        self.gather = gather
        obs_shape, obs_dtype, action_dim = tuple(settings.obs_shape), settings.obs_dtype, settings.action_dim
        wide = len(obs_shape) == 1 and min(settings.hidden) >= WIDE_MLP
        self.precision = precision = precision or make_precision(
            resolve_precision(settings.precision, device, False, wide_actor_critic=wide), device)
        encoder = user_encoder(settings)
        self.actor = ActorNetwork(obs_shape, action_dim, settings.hidden, objective.gaussian, obs_dtype,
                                  settings.obs_norm, settings.sale, encoder).to(device)
        crossq = settings.critic_norm == "batch_renorm"
        # network.sale (learner/sale.py): the encoder trained here; the actor and critics read frozen copies of it
        self.sale = SaleTraining(obs_shape[0], action_dim, settings.lr, settings.adam_eps, device) if settings.sale else None
        support = (HLGaussSupport(*settings.critic_range, settings.critic_bins)
                   if settings.critic_head == "categorical" else None)
        if self.sale is not None:
            self.critic: nn.Module = SaleTwinCritic(obs_shape[0], action_dim, settings.hidden, support).to(device)
            self.sale.read_by(self.actor, self.critic)
        else:
            self.critic = TwinCritic(obs_shape, action_dim, settings.hidden, obs_dtype, settings.obs_norm, crossq,
                                     encoder, settings.critic_norm == "layer_norm", support).to(device)
        # CrossQ's critics have no targets: their next-state values come from the same batch
        self.critic_target = None if crossq else copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False) if objective.uses_actor_target else None
        self.policy: nn.Module = self.actor  # what collectors act with and policy.pt2 holds
        # what the losses train: a frozen embedding copy is not among them
        self.actor_params = [p for p in self.actor.parameters() if p.requires_grad]
        self.critic_params = [p for p in self.critic.parameters() if p.requires_grad]
        # the targets follow their networks by learner.target_update (learner/target_rules.py); with
        # SALE each whole copy also refreshes the frozen embeddings and the value clipping's bounds
        pairs = [(t, o) for t, o in ((self.critic_target, self.critic), (self.actor_target, self.actor)) if t is not None]
        self.targets = target_rule(settings.target_update, pairs, settings.target_tau, settings.target_update_every)
        # network.obs_norm: the actor's statistics are updated from each batch, then copied to the others
        networks = (self.actor, self.critic, self.critic_target, self.actor_target)
        self.normalizers = [net.encoder for net in networks if net is not None and isinstance(net.encoder, RunningObsNorm)]
        self.actor_optimizer = adam_for(self.actor_params, settings.lr, settings.adam_eps, device)
        self.critic_optimizer = adam_for(self.critic_params, settings.lr, settings.adam_eps, device)
        # what the critics' step trains: the critics, and SALE's encoder beside them
        self.critic_step_params = self.critic_params + (self.sale.params if self.sale is not None else [])
        if self.sale is not None:
            self.targets.on_copy(self.sale.after_target_copy)
        # fp16: a loss scale for the critics' step and one for the actor's (and SAC's temperature):
        # an overflow in one skips that step only, on the device (fused Adam reads found_inf)
        self.critic_scale: DeviceLossScale | None = precision.scaler
        self.actor_scale = DeviceLossScale(device) if precision.scaler is not None else None
        if self.critic_scale is not None and self.actor_scale is not None:
            self.critic_optimizer.found_inf = self.critic_scale.found_inf
            if self.sale is not None:
                self.sale.optimizer.found_inf = self.critic_scale.found_inf
            for optimizer in (self.actor_optimizer, *objective.optimizers()):
                optimizer.found_inf = self.actor_scale.found_inf
        self.updates = 0
        self.generator = torch.Generator(device=device).manual_seed(settings.seed + 17)
        self.loss_sum = torch.zeros((), device=device)  # the critics' loss, per micro-batch
        self.q_sum = torch.zeros((), device=device)
        self.actor_loss_sum = torch.zeros((), device=device)
        self.actor_steps = 0
        self.td_abs: torch.Tensor | None = None
        self._gradients: GradientGroup | None = None
        self._forward_joins_group = False
        # learner.compile: the critics' loss, forward and backward, through torch.compile, which
        # fuses the many small ops of batch renormalization and the categorical head. The actor's
        # loss stays eager (compiled, its step was slower), and so does the critics' where their
        # forward is a group's collective. auto leaves it off: it was measured on CPUs only.
        self.compiled = settings.compile is True
        self._compiled_critic_loss = torch.compile(self.critic_loss, dynamic=False) if self.compiled else None

    @property
    def gradients(self) -> GradientGroup | None:
        """Several learners (learner/gradient_group.py): the group this step's updates are one part of."""
        return self._gradients

    @gradients.setter
    def gradients(self, group: GradientGroup | None) -> None:
        """Join `group` (None: leave it); what reads the batch in the forward (batch renormalization)
        and the bounds SALE keeps read the group's batch from then on."""
        self._gradients = group
        renorms = [module for module in self.critic.modules() if isinstance(module, BatchRenorm)]
        for module in renorms:
            module.group = group
        self._forward_joins_group = group is not None and bool(renorms)  # its forward is a collective
        if self.sale is not None:
            self.sale.group = group

    @property
    def critic_loss_fn(self) -> Callable[..., CriticLossOutput]:
        """`critic_loss` as an update calls it: compiled with learner.compile, unless the critics'
        forward is a group's collective."""
        if self._compiled_critic_loss is None or self._forward_joins_group:
            return self.critic_loss
        return self._compiled_critic_loss

    def noise_shape(self) -> tuple[int, ...]:
        """[2, G, B, action_dim]: the critics' (0) and the actor's (1) standard normal noise for one update."""
        return (2, self.s.accumulation_steps, self.s.micro_batch, self.s.action_dim)

    def draw_noise(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """One update's standard normal noise, from this step's generator (into `out` if given)."""
        if out is None:
            out = torch.empty(self.noise_shape(), device=self.loss_sum.device)
        return out.normal_(generator=self.generator)

    def with_actor_next(self) -> bool:
        """Whether the next update steps the actor too: every policy_delay-th (SAC's default: every one)."""
        return (self.updates + 1) % self.s.policy_delay == 0

    def __call__(self, batch: Mapping[str, torch.Tensor]) -> None:
        """One eager update (see the module docstring)."""
        with_actor = self.with_actor_next()
        noise = self.draw_noise()
        if self.gradients is not None:  # drawn for the group's batch: this learner's rows
            noise = self.gradients.own_rows(noise, dim=1)
        self.update(batch, noise, with_actor)
        self.count(with_actor)

    def after_update(self, updates: int) -> None:
        """A hard target copy when one is due (learner/target_rules.py; with SALE, its embeddings
        and bounds follow it)."""
        self.targets.after_update(updates)

    def capture(self, example: Mapping[str, torch.Tensor]) -> CapturedActorCriticUpdate:
        """The update captured as two CUDA graphs, with and without the actor's step."""
        return CapturedActorCriticUpdate(self, example)

    def warm_up(self, example: Mapping[str, torch.Tensor]) -> None:
        """With learner.compile, one update on `example`, then everything it changed put back:
        torch.compile compiles the critics' loss before the clock starts. Otherwise nothing: small
        eager updates cost little the first time."""
        if not self.compiled:
            return
        snapshot = TrainingStateSnapshot(self)
        self.update(example, self.draw_noise(), False)
        snapshot.restore()

    def exportable(self, policy: nn.Module) -> tuple[nn.Module, str]:
        """`policy` (a CPU copy of the actor) as policy.pt2 holds it: actions in the env's units out."""
        return ActionsInEnvUnits(policy, self.s.action_low, self.s.action_high).eval(), "actions"

    def count(self, with_actor: bool) -> None:
        """The host's counters after one update (eager or replayed)."""
        self.updates += 1
        if with_actor:
            self.actor_steps += self.s.accumulation_steps

    def update(self, batch: Mapping[str, torch.Tensor], noise: torch.Tensor, with_actor: bool) -> None:
        """The device work of one update: nothing read back, no branch on a tensor's value."""
        if self.gather is not None:
            batch = self.gather(batch)
        batch = nested(batch)
        if self.normalizers:
            self._update_normalizers(batch["obs"])
        groups = batch["action"].shape[0]
        if self.s.prioritized and (self.td_abs is None or self.td_abs.shape != batch["return"].shape):
            self.td_abs = torch.zeros(batch["return"].shape, device=batch["return"].device)  # as DQNStep's
        s = self.s
        # A learner of a group with an empty part computes nothing (its gradients count as zeros)
        # unless the critics' forward joins the group's (batch renormalization): then it runs on no rows.
        empty = batch["action"].shape[1] == 0
        for g in range(0 if empty and not self._forward_joins_group else groups):
            action = batch["action"][g]
            weight = batch["weight"][g] if s.prioritized else None
            if self.sale is not None:
                with self.precision.autocast():
                    encoder_loss = self.sale.loss(batch["obs"][g], action, batch["next_obs"][g])
                _backward(weighed(encoder_loss / groups, self._gradients), self.critic_scale)
            out = self.critic_loss_fn({key: indexed(batch[key], g) for key in TRANSITION}, weight, noise[0, g])
            _backward(weighed(out.loss / groups, self._gradients), self.critic_scale)
            if empty:  # its means are of no rows
                continue
            if self.sale is not None:
                self.sale.saw_targets(out.target)
            if self.td_abs is not None:
                self.td_abs[g].copy_(out.td_error.detach().abs())
            self.loss_sum += out.loss.detach()
            self.q_sum += out.q_mean
        if self.sale is not None:
            self.sale.after_critic_losses()
        if self.critic_scale is not None:
            self.critic_scale.unscale_([p.grad for p in self.critic_step_params])
        if self.gradients is not None:
            overflowed = self.critic_scale.found_inf if self.critic_scale is not None else None
            self.gradients.reduce(self.critic_step_params, overflowed)
        nn.utils.clip_grad_norm_(self.critic_params, s.max_grad_norm, foreach=True)
        self.critic_optimizer.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        if self.sale is not None:
            self.sale.step()
        if self.critic_scale is not None:
            self.critic_scale.update()
        if with_actor:
            self._actor_step(batch, 0 if empty else groups, noise[1])
        if with_actor:
            self.targets.after_step()

    def critic_loss(self, transitions: Mapping[str, torch.Tensor], weight: torch.Tensor | None,
                    noise: torch.Tensor) -> CriticLossOutput:
        """The critics' loss on one micro-batch of TRANSITION columns, under the step's precision;
        `noise`: standard normal, one per action (TD3's target smoothing, SAC's next action)."""
        bounds = self.sale.next_q_bounds if self.sale is not None else None
        with self.precision.autocast():
            return self.objective.critic_loss(self.critic, self.critic_target, self.actor, self.actor_target,
                                              tuple(transitions[key] for key in TRANSITION), weight, noise, bounds)

    def actor_loss(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the actor's loss, the loss of what its objective trains beside it or None) on one
        micro-batch, under the step's precision."""
        with self.precision.autocast():
            return self.objective.actor_loss(self.actor, self.critic, obs, noise)

    def _update_normalizers(self, obs: torch.Tensor) -> None:
        first, *others = self.normalizers
        first.update(obs, self._gradients)
        for other in others:
            torch._foreach_copy_(list(other.buffers()), list(first.buffers()))

    def _actor_step(self, batch: Mapping[str, torch.Tensor], groups: int, noise: torch.Tensor) -> None:
        # the actor's loss moves the actor only, and reads batch-renormalized critics by their running statistics
        for p in self.critic_params:
            p.requires_grad_(False)
        self.critic.eval()
        for g in range(groups):
            actor_loss, beside = self.actor_loss(indexed(batch["obs"], g), noise[g])
            loss = actor_loss if beside is None else actor_loss + beside  # no shared parameter
            _backward(weighed(loss / groups, self._gradients), self.actor_scale)
            self.actor_loss_sum += actor_loss.detach()
        for p in self.critic_params:
            p.requires_grad_(True)
        self.critic.train()
        stepped = self.actor_params + self.objective.parameters()  # the actor and what its objective trains beside it
        if self.actor_scale is not None:
            self.actor_scale.unscale_([p.grad for p in stepped])
        if self.gradients is not None:
            self.gradients.reduce(stepped, self.actor_scale.found_inf if self.actor_scale is not None else None)
        nn.utils.clip_grad_norm_(self.actor_params, self.s.max_grad_norm, foreach=True)
        for optimizer in (self.actor_optimizer, *self.objective.optimizers()):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if self.actor_scale is not None:
            self.actor_scale.update()

    def training_tensors(self) -> list[torch.Tensor]:
        """Every tensor an update changes, optimizer state aside (what a warm-up snapshot puts back)."""
        networks = [net for net in (self.actor, self.critic, self.critic_target, self.actor_target) if net is not None]
        scales = [t for scale in (self.critic_scale, self.actor_scale) if scale is not None
                  for t in (scale.scale, scale.growth_tracker, scale.found_inf)]
        return [*(p for net in networks for p in net.parameters()), *(b for net in networks for b in net.buffers()),
                *self.objective.parameters(), self.loss_sum, self.q_sum, *(self.sale.tensors() if self.sale is not None else []),
                self.actor_loss_sum, *scales, *([self.td_abs] if self.td_abs is not None else [])]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers an update steps."""
        return [self.critic_optimizer, self.actor_optimizer, *self.objective.optimizers(),
                *([self.sale.optimizer] if self.sale is not None else [])]

    def take_metrics(self, micro_batches: int) -> dict[str, float]:
        """The critics' mean loss and Q1 over the `micro_batches` since the last call, the actor's
        mean loss over its steps since then, and its objective's own figures; resets the sums."""
        metrics = take_means({"td_loss": self.loss_sum, "q_values": self.q_sum}, micro_batches)
        metrics.update(take_means({"actor_loss": self.actor_loss_sum}, self.actor_steps) if self.actor_steps
                       else {"actor_loss": 0.0})
        self.actor_steps = 0
        metrics.update(self.objective.metrics())
        if self.sale is not None:
            metrics["embedding_loss"] = self.sale.take_loss(micro_batches)
        return metrics

    def state_dict(self) -> dict:
        """Every network, optimizer and counter an exact resume needs."""
        state = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                 "actor_optimizer": self.actor_optimizer.state_dict(),
                 "critic_optimizer": self.critic_optimizer.state_dict(), "updates": self.updates,
                 "generator": self.generator.get_state(), **self.objective.state_dict()}
        if self.critic_target is not None:
            state["critic_target"] = self.critic_target.state_dict()
        if self.actor_target is not None:
            state["actor_target"] = self.actor_target.state_dict()
        if self.sale is not None:
            state["sale"] = self.sale.state_dict()
        if self.critic_scale is not None and self.actor_scale is not None:
            state["loss_scales"] = {"critic": self.critic_scale.state_dict(), "actor": self.actor_scale.state_dict()}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict` output."""
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        if self.critic_target is not None:
            self.critic_target.load_state_dict(state["critic_target"])
        load_optimizer(self.actor_optimizer, state["actor_optimizer"], self.s.lr, self.s.adam_eps)
        load_optimizer(self.critic_optimizer, state["critic_optimizer"], self.s.lr, self.s.adam_eps)
        self.objective.load_state_dict(state)
        self.updates = state["updates"]
        self.generator.set_state(state["generator"].cpu())
        if self.actor_target is not None:
            self.actor_target.load_state_dict(state["actor_target"])
        if self.sale is not None:
            self.sale.load_state_dict(state["sale"])
        scales = state.get("loss_scales")
        if scales is not None and self.critic_scale is not None and self.actor_scale is not None:
            self.critic_scale.load_state_dict(scales["critic"])
            self.actor_scale.load_state_dict(scales["actor"])
