"""The run configuration: typed sections validated by pydantic.

One YAML file (plus dotted command-line overrides) becomes one `RunConfig`. Validation happens
here, before any actor starts, so a bad value costs the user a one-line error and not a
half-started cluster. Components never receive this object whole: cluster/ hands each one the
fields it needs.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from raypex.cluster.config.collectors_section import CollectorsConfig
from raypex.cluster.config.network_section import NetworkConfig
from raypex.cluster.config.replay_section import ReplayConfig
from raypex.cluster.config.section import Section, on_off_from_yaml_bools
from raypex.learner.algorithms.registry import algorithm, names

# Bounds for settings under which a run could never make progress in any reasonable time.
MAX_SAMPLES_PER_RUN = 1e12  # about 12 days at a million samples/s
MAX_SAMPLES_PER_EPOCH = 1e9  # about 17 minutes at a million samples/s between weight broadcasts
SLOW_EPOCH_SAMPLES = 1e7  # above this, an epoch lasts a minute or more on a CPU learner: warned


class EnvConfig(Section):
    """Which Gymnasium environment the collectors and the evaluator step."""

    id: str = Field("CartPole-v1", description="A registered Gymnasium id, or your own env as module:Class, module:factory or "
                    "path/to/file.py:Name (README, 'Your own environment').")
    num_envs: int = Field(16, ge=1, le=4096, description="Envs in each collector's vector env.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments for gymnasium.make_vec (ALE: its vector env)."
    )
    wrappers: list[str | dict[str, dict[str, Any] | None]] = Field(
        default_factory=list, description="Gymnasium wrappers around every env of the collectors and the evaluator, "
        "in order: each an import path (gymnasium.wrappers:ClipReward) or a one-key mapping from it to its keyword "
        "arguments ({gymnasium.wrappers:ClipReward: {max_reward: 0.5}}); checked when the run starts. Not for ALE "
        "envs (ale-py's vector env).")
    frame_stack: int = Field(4, ge=1, le=16, description="Pixel envs: frames stacked into one observation.")
    clip_rewards: bool = Field(
        False, description="Train on rewards clipped to [-1, 1]; episode returns report the raw score."
    )
    terminal_on_life_loss: bool = Field(
        False, description="ALE envs: a lost life ends the n-step return (the game goes on)."
    )
    step_timeout_s: float = Field(
        60.0, gt=0.0, le=86400.0, description="A collector whose env's step has not returned for this many seconds "
                                             "(a hung simulator) ends the run in one line naming it.")
    code_dir: str | None = Field(
        None, description="Where an env.id naming your code (module:Name, a relative file.py:Name) is looked up: "
                          "raypex train records its working directory here, so raypex eval finds the code from "
                          "any directory.")

    @field_validator("wrappers")
    @classmethod
    def _wrapper_entries(cls, entries: list) -> list:
        if entries:  # (gymnasium is imported only for a config that has wrappers)
            from raypex.actors.env_wrappers import wrapper_entry

            for entry in entries:
                wrapper_entry(entry)
        return entries

    @model_validator(mode="after")
    def _life_loss_needs_ale(self) -> EnvConfig:
        if self.terminal_on_life_loss and not self.id.startswith("ALE/"):
            raise ValueError(f"terminal_on_life_loss needs an ALE/ env id (lives are ALE's), got '{self.id}'")
        return self


class AlgoConfig(Section):
    """The algorithm: DQN or R2D2 (recurrent) for Discrete actions, TD3 or SAC for Box actions;
    discounting and n-step returns for all of them."""

    name: str = Field(
        "dqn", description="A registered algorithm (learner/algorithms/): dqn: Discrete actions (Double DQN, "
        "dueling); qrdqn, iqn: dqn learning quantiles of the return's distribution (QR-DQN, IQN); r2d2: dqn with an LSTM, "
        "trained on replayed sequences (partially observed envs); td3, sac: Box actions (twin critics).")
    gamma: float = Field(0.99, gt=0.0, le=1.0, description="Discount factor.")

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in names():
            raise ValueError(f"one of {', '.join(names())}, the registered algorithms")
        return name
    n_step: int = Field(3, ge=1, le=100, description="Steps folded into each return.")
    double_dqn: bool = Field(True, description="dqn, qrdqn, iqn: pick the next action with the online network.")
    huber_delta: float = Field(1.0, gt=0.0, description="dqn: Huber loss threshold; qrdqn, iqn: the quantile Huber "
                               "loss's kappa.")
    quantiles: int = Field(32, ge=2, le=1024, description="qrdqn: quantiles of each action's return distribution "
                           "(the QR-DQN paper's 200 on Atari); iqn: fractions drawn per transition for the online "
                           "and for the target quantiles, and the fixed ones whose mean it acts on.")
    exploration_noise: float = Field(
        0.1, ge=0.0, le=1.0, description="td3: collectors' Gaussian action noise, a fraction of each action's "
        "half-range; collector i of N uses it times noise_spread^(2i/(N-1) - 1).")
    noise_spread: float = Field(3.0, ge=1.0, le=100.0, description="td3: the ratio of the noisiest collector's noise "
                                "to exploration_noise (and of exploration_noise to the quietest one's).")
    policy_noise: float = Field(0.2, ge=0.0, le=1.0, description="td3: target policy smoothing noise (fraction of "
                                "the half-range).")
    noise_clip: float = Field(0.5, ge=0.0, le=1.0, description="td3: the smoothing noise's clip (fraction of the "
                              "half-range).")
    policy_delay: Annotated[int, Field(ge=1, le=100)] | Literal["auto"] = Field(
        "auto", description="Critic updates per actor update (and SAC's temperature update); auto: 2 for td3, 1 for sac.")
    target_entropy: float | Literal["auto"] = Field(
        "auto", description="sac: the entropy the temperature is tuned to (auto: minus the action dimensions).")
    init_temperature: float = Field(1.0, gt=0.0, description="sac: the entropy temperature's first value.")
    burn_in: int = Field(40, ge=0, description="r2d2: a replayed sequence's first steps, run only to bring the "
                         "stored recurrent state up to date (no loss, no gradient).")
    value_rescale: bool = Field(True, description="r2d2: learn h(Q) with h(x) = sign(x)(sqrt(|x|+1)-1) + 0.001x, "
                                "which squashes large returns (R2D2's, from Pohlen et al. 2018).")


class LearnerConfig(Section):
    """The learner actor: device, precision, optimisation and epoch structure."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: a GPU when the cluster has one, else CPU (said out loud)."
    )
    num: int = Field(
        1, ge=1, le=64, description="Learners: each hosts the shards of its collectors (split among them in order) "
        "and computes its part of every update's batch, their gradients summed over torch.distributed (gloo; NCCL "
        "for CUDA gradients), so N learners step exactly as one holding every shard. The Ray runtime only; replay "
        "on the host.")
    num_cpus: float = Field(1.0, gt=0.0, description="CPUs Ray reserves for each learner.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "fp32", description="Autocast dtype: bf16 (CPU or GPU), fp16 (CUDA, adds loss scaling), fp32 = off; auto = "
        "the fastest measured: fp16 for CNNs on CUDA, bf16 for CNNs on a CPU with bf16 units (AVX512-BF16 or AMX; "
        "elsewhere bf16 is emulated, 9x slower than fp32 on an AVX2 EPYC, so fp32), and for td3/sac MLPs of 256 units or "
        "more on such a CPU (1.3-1.4x fp32 per update, their output heads kept in fp32); fp32 for other MLPs."
    )
    lr: float = Field(0.02, gt=0.0, lt=1.0, description="Adam learning rate.")
    adam_eps: float = Field(1e-8, gt=0.0, description="Adam epsilon.")
    max_grad_norm: float = Field(10.0, gt=0.0, description="Gradient clipping norm.")
    micro_batch: int = Field(256, ge=1, description="Transitions per micro-batch (drawn across all shards).")
    accumulation_steps: int = Field(1, ge=1, description="Micro-batches accumulated per update.")
    target_update: Literal["hard", "polyak"] = Field(
        "polyak", description="How target networks follow theirs (learner/target_rules.py): polyak moves them by "
        "target_tau after each step of their networks (td3's actor target: after each actor step); hard copies them "
        "whole every target_update_every_samples.")
    target_update_every_samples: int = Field(
        12800, ge=1, description="Samples trained between hard target copies (updates x micro_batch x "
        "accumulation_steps), counted in samples so that the period holds when the batch shape changes; the learner "
        "copies every round(this / batch) updates, at least every update.")
    target_tau: float = Field(0.02, gt=0.0, le=1.0, description="Polyak rate per update.")
    updates_per_epoch: int = Field(25, ge=1, description="Optimizer steps in one epoch.")
    broadcast_every_epochs: int = Field(1, ge=1, description="Epochs between weight broadcasts.")
    compile: bool | Literal["auto"] = Field(
        False, description="torch.compile during warm-up: the DQN family's networks, or td3's and sac's critics' "
        "loss (forward and backward: batch renormalization's and the categorical head's small ops fused, about 1.2x "
        "a CPU learner's updates with those critics); auto = on only for CNNs whose update is captured on CUDA."
    )
    cuda_graphs: Literal["auto", "on", "off"] = Field(
        "auto", description="Capture the whole update as one CUDA graph during warm-up; auto = on for CUDA."
    )
    _cuda_graphs_on_off = field_validator("cuda_graphs", mode="before")(on_off_from_yaml_bools)


class EvalConfig(Section):
    """Greedy evaluation on a separate env, run by its own actor while the learner trains."""

    episodes: int = Field(100, ge=1, description="Episodes per evaluation (run in parallel).")
    epsilon: float = Field(
        0.0, ge=0.0, le=1.0, description="Random-action rate while evaluating (Atari's protocol uses 0.05)."
    )
    max_episode_steps: int = Field(
        27_000, ge=1, le=100_000_000, description="An evaluation episode still running after this many steps stops "
        "there, scored with its return so far (the DQN evaluation protocol's cap: 108,000 Atari frames at 4 a step), so "
        "a greedy policy that stalls a game with no time limit of its own (MinAtar's, your own env's) cannot hold an "
        "evaluation, or raypex eval, forever. An env's own shorter limit (CartPole 500, MuJoCo 1,000) ends it first."
    )
    every_env_steps: int = Field(
        800, ge=1, description="Env steps between evaluations of the newest weights (one runs at a time, "
        "only on weights published since the last one started)."
    )
    every_s: float | None = Field(
        None, gt=0, description="Also evaluate once this many seconds have passed since the last evaluation "
        "became due, so a run whose env steps crawl still draws its curve; null = by env steps only."
    )
    video_every: int = Field(
        20, ge=0, description="Every this many evaluations, the first episode of one that runs to the end is "
        "saved as a video (RUN_DIR/videos/eval-vVERSION.png, an animated PNG, and TensorBoard's eval/video "
        "image); 0 = never. Pixel games, MinAtar, CartPole, Pendulum and MuJoCo envs have pictures.",
    )
    max_return: float | Literal["auto"] | None = Field(
        "auto",
        description="The most one episode can score. When known, an evaluation stops once "
        "stop.eval_return is out of reach, and only every 5th one runs to the end for "
        "eval/return_mean. auto = known for CartPole (500) and Pong (21) without env.kwargs; "
        "null = every evaluation runs to the end.",
    )

    @field_validator("max_return", mode="before")
    @classmethod
    def _number_auto_or_null(cls, value: Any) -> Any:
        if value is None or value == "auto" or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        raise ValueError("must be a number, auto or null")


class StopConfig(Section):
    """When the run ends: whichever comes first."""

    env_steps: int = Field(500_000, ge=1, description="Total env steps across collectors.")
    eval_return: float | None = Field(
        490.0, description="Stop at the first evaluation whose mean return reaches this; null = never."
    )
    wall_s: float | None = Field(
        None, gt=0, description="Stop once the run has trained this many seconds of wall time (summary.json's "
        "wall_s: a resumed run's count the commands before it), to compare settings at one time budget; null = no "
        "time limit."
    )


class CheckpointConfig(Section):
    """How often the learner state is written to RUN_DIR/checkpoints."""

    every_epochs: int = Field(100, ge=1, description="Epochs between checkpoints (and one at the end).")
    keep: int = Field(3, ge=1, description="Checkpoints kept on disk.")
    replay: bool = Field(
        True, description="Save every shard's replay with each checkpoint: a resumed run and a learner Ray restarted "
        "get it back (off in the pixel configs, whose replay is gigabytes)."
    )


class RunConfig(Section):
    """Everything one `raypex train` run needs."""

    seed: int = Field(0, ge=0, description="Seed for networks, envs and sampling.")
    runtime: Literal["ray", "local"] = Field(
        "ray", description="ray: every part a Ray actor, on a local cluster started for the run or on a joined one; "
        "local: every part in the command's own process, in lockstep, without Ray (`raypex train --local`: "
        "debugging, notebooks, the fastest start for small envs).")
    env: EnvConfig = Field(default_factory=EnvConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    collectors: CollectorsConfig = Field(default_factory=CollectorsConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    stop: StopConfig = Field(default_factory=StopConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.learner.micro_batch > self.replay.capacity:
            raise ValueError(
                f"learner.micro_batch ({self.learner.micro_batch}) must not exceed "
                f"replay.capacity ({self.replay.capacity}), the transitions one shard holds"
            )
        shards = self.collectors.shards
        if self.replay.min_size > self.replay.capacity * shards:
            raise ValueError(
                f"replay.min_size ({self.replay.min_size}) must not exceed the total replay "
                f"capacity (replay.capacity x {'collectors.max' if self.collectors.elastic else 'collectors.num'} = "
                f"{self.replay.capacity * shards})"
            )
        self._check_elastic()
        if self.learner.micro_batch > self.replay.min_size:
            raise ValueError(
                f"learner.micro_batch ({self.learner.micro_batch}) must not exceed "
                f"replay.min_size ({self.replay.min_size})"
            )
        self._check_learners()
        target = self.stop.eval_return
        bound = self.eval.max_return
        if isinstance(bound, float) and target is not None and bound < target:
            raise ValueError(
                f"eval.max_return ({bound:g}) must be at least stop.eval_return ({target:g}), "
                "or no evaluation could ever reach it"
            )
        if self.stop.env_steps < self.replay.min_size:
            raise ValueError(
                f"stop.env_steps ({self.stop.env_steps}) is below replay.min_size ({self.replay.min_size}): the run "
                "would end before learning starts; raise stop.env_steps or lower replay.min_size"
            )
        chunk = self.collectors.chunk_steps * self.env.num_envs
        if chunk > self.replay.capacity:
            raise ValueError(
                f"collectors.chunk_steps x env.num_envs ({self.collectors.chunk_steps} x {self.env.num_envs} = "
                f"{chunk} transitions per chunk) must not exceed replay.capacity ({self.replay.capacity}), "
                "or one chunk overwrites its own start"
            )
        samples_to_end = self.replay.samples_per_insert * self.stop.env_steps
        if samples_to_end > MAX_SAMPLES_PER_RUN:
            raise ValueError(
                f"replay.samples_per_insert ({self.replay.samples_per_insert:g}) x stop.env_steps "
                f"({self.stop.env_steps}) = {samples_to_end:.3g} samples before the run could end; at most "
                f"{MAX_SAMPLES_PER_RUN:.0e} are accepted (days at a million samples/s)"
            )
        samples_per_epoch = self.learner.updates_per_epoch * self.learner.micro_batch * self.learner.accumulation_steps
        if samples_per_epoch > MAX_SAMPLES_PER_EPOCH:
            raise ValueError(
                f"learner.updates_per_epoch x micro_batch x accumulation_steps = {samples_per_epoch:.3g} samples "
                f"per epoch; at most {MAX_SAMPLES_PER_EPOCH:.0e} are accepted: weights, evaluations and "
                "checkpoints happen only between epochs"
            )
        if self.learner.precision == "fp16" and self.learner.device == "cpu":
            raise ValueError("learner.precision fp16 needs CUDA; use bf16 or fp32 with device cpu")
        if self.learner.cuda_graphs == "on" and self.learner.device == "cpu":
            raise ValueError("learner.cuda_graphs on needs CUDA; use auto or off with device cpu")
        plugin = algorithm(self.algo.name)
        continuous = plugin.box_actions
        if self.collectors.acting == "served" and "served" not in inspect.signature(plugin.policy).parameters:
            raise ValueError(f"collectors.acting served: algo.name {self.algo.name}'s plug-in builds its policy "
                             "without `served` (Algorithm.policy), so its forward cannot run on an acting server; "
                             "use collectors.acting local")
        self._check_sale(continuous)
        self._check_sequences()
        self._check_prior()
        if continuous and self.collectors.act_device == "cuda" and self.collectors.acting == "local":
            raise ValueError(f"collectors.act_device cuda is for dqn; algo.name {self.algo.name}'s collectors act on their CPU "
                             "(the acting graph, in ONNX Runtime); use auto or cpu, or collectors.acting served (its "
                             "server acts on the node's GPU)")
        if self.collectors.act_device == "cuda" and self.learner.device == "cpu":
            raise ValueError("collectors.act_device cuda shares the learner's GPU, and learner.device is cpu; "
                             "use collectors.act_device auto or cpu, or learner.device auto or cuda")
        if self.network.obs_norm and not continuous:
            raise ValueError("network.obs_norm is for algo.name td3 and sac")
        allowed = ("none", "layer_norm", "batch_renorm") if continuous else ("none", "layer_norm")
        if self.network.critic_norm not in allowed:
            raise ValueError(f"network.critic_norm {self.network.critic_norm} is not for algo.name {self.algo.name}; "
                             f"use {' or '.join(allowed)}")
        if self.network.critic_head != "scalar" and not continuous:
            raise ValueError(f"network.critic_head {self.network.critic_head} is for td3's and sac's critics; for a "
                             f"distribution over returns with Discrete actions use algo.name qrdqn or iqn")
        if continuous and self.replay.prioritized and self.replay.initial_priority == "td":
            raise ValueError(f"replay.initial_priority td needs Q-values at the collectors, which algo.name "
                             f"{self.algo.name} does not have there; use max")
        return self

    def _check_elastic(self) -> None:
        """Collectors that follow the cluster (num auto) are Ray actors on its nodes, each acting on its own."""
        if not self.collectors.elastic:
            return
        if self.runtime == "local":
            raise ValueError("collectors.num auto follows a Ray cluster's nodes; --local runs every part in one process: "
                             "set collectors.num to a number")
        if self.learner.num > 1:
            raise ValueError("collectors.num auto: each learner of a group hosts a fixed team of shards; set "
                             "collectors.num to a number with learner.num above 1")
        if self.collectors.acting == "served":
            raise ValueError("collectors.num auto: acting servers are started with the run, one per node; use "
                             "collectors.acting local, or collectors.num a number")
        if self.collectors.act_device == "cuda":
            raise ValueError("collectors.num auto: collectors act on their CPU (a GPU share per collector is reserved "
                             "up front); use collectors.act_device auto or cpu")

    def _check_learners(self) -> None:
        learners = self.learner.num
        if learners == 1:
            return
        if learners > self.collectors.num:
            raise ValueError(f"learner.num ({learners}) must not exceed collectors.num ({self.collectors.num}): each "
                             "learner hosts the shards of its own collectors")
        if self.runtime == "local":
            raise ValueError(f"learner.num {learners} needs the Ray runtime (one learner per actor); drop --local or "
                             "set learner.num 1")
        if self.replay.storage == "device":
            raise ValueError("replay.storage device: several learners draw from replay on the host; use auto or host "
                             "with learner.num above 1")
        if self.learner.cuda_graphs == "on":
            raise ValueError("learner.cuda_graphs on: several learners' updates run eagerly (each update's part of "
                             "the batch changes shape); use auto or off with learner.num above 1")
        if self.network.critic_norm == "batch_renorm" and self.learner.accumulation_steps > 1:
            raise ValueError(f"network.critic_norm batch_renorm with learner.accumulation_steps "
                             f"{self.learner.accumulation_steps}: several learners renormalize the group's whole batch "
                             "(a learner's part is not split into micro-batches); use learner.accumulation_steps 1 "
                             "with learner.num above 1")

    def _check_prior(self) -> None:
        """replay.prior: one-step transitions drawn uniformly beside the collectors' (replay/sharded.py)."""
        if self.replay.prior is None:
            return
        refusal = ("r2d2 trains on sequences" if algorithm(self.algo.name).sequences
                   else "prioritized replay draws by priority" if self.replay.prioritized
                   else "several learners each hold their own shards" if self.learner.num > 1 else None)
        if refusal is not None:
            raise ValueError(f"replay.prior mixes a dataset's transitions into uniform draws of one learner's replay; "
                             f"{refusal}: drop replay.prior, or {self._prior_fix()}")

    def _prior_fix(self) -> str:
        if algorithm(self.algo.name).sequences:
            return "use a feed-forward algorithm (dqn, td3, sac)"
        return "set replay.prioritized false" if self.replay.prioritized else "set learner.num 1"

    def _check_sequences(self) -> None:
        name, replay = self.algo.name, self.replay
        if not algorithm(name).sequences:
            return
        if replay.sequence_overlap >= replay.sequence_length:
            raise ValueError(f"replay.sequence_overlap ({replay.sequence_overlap}) must be below replay.sequence_length "
                             f"({replay.sequence_length})")
        if self.algo.burn_in > replay.sequence_length - 2:
            raise ValueError(f"algo.burn_in ({self.algo.burn_in}) must leave at least 2 of replay.sequence_length "
                             f"({replay.sequence_length}) steps to learn from")
        if self.learner.cuda_graphs == "on":
            raise ValueError(f"learner.cuda_graphs on: algo.name {name}'s update is not captured as CUDA graphs yet "
                             "(it runs eagerly on a GPU); use auto or off")
        if self.collectors.act_device == "cuda" and self.collectors.acting == "local":
            raise ValueError(f"collectors.act_device cuda is for dqn; algo.name {name}'s collectors run the acting graph "
                             "on their CPU; use auto or cpu, or collectors.acting served (its server acts on the node's "
                             "GPU)")
        if self.network.critic_norm != "none":
            raise ValueError(f"network.critic_norm {self.network.critic_norm} is not for algo.name {name}; use none")
        if replay.prioritized and replay.initial_priority == "td":
            raise ValueError(f"replay.initial_priority td is for dqn's transitions; algo.name {name}'s sequences start "
                             "at the largest priority: use max")

    def _check_sale(self, continuous: bool) -> None:
        if not self.network.sale:
            return
        if not continuous:
            raise ValueError("network.sale is for algo.name td3 and sac")
        if self.algo.n_step != 1:
            raise ValueError(f"network.sale needs algo.n_step 1 (its encoder predicts the next observation from one "
                             f"action), got {self.algo.n_step}")
        if self.learner.target_update != "hard":
            raise ValueError("network.sale copies its targets whole every learner.target_update_every_samples: set "
                             "learner.target_update hard")
        if self.network.critic_norm != "none" or self.network.obs_norm:
            raise ValueError("network.sale goes with network.critic_norm none and network.obs_norm false (its "
                             "embeddings are normalized already)")


def config_warnings(config: RunConfig) -> list[str]:
    """One line for each setting that works but probably not as the user meant."""
    warnings = []
    learner = config.learner
    samples_per_epoch = learner.updates_per_epoch * learner.micro_batch * learner.accumulation_steps
    if samples_per_epoch > SLOW_EPOCH_SAMPLES:
        warnings.append(
            f"learner.updates_per_epoch: one epoch trains {samples_per_epoch:.3g} samples; collectors get new "
            "weights, evaluations and checkpoints only between epochs, minutes apart on a CPU learner")
    slack = config.replay.min_size + config.replay.error_buffer
    chunk = config.collectors.chunk_steps * config.env.num_envs
    if config.replay.samples_per_insert > 0 and chunk > slack:
        warnings.append(
            f"collectors.chunk_steps: a chunk holds {chunk} transitions, more than the limiter's slack "
            f"(replay.min_size + replay.error_buffer = {slack}); collectors will wait for the learner after "
            "every chunk and act on older weights")
    return warnings
