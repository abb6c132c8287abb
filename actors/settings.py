"""CollectorSettings and EvaluatorSettings: the explicit values a collector and the evaluator are built from.

Kept apart from the Collector (which imports torch) so the driver can build settings without
importing torch, which would cost a second of start-up on every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CollectorSettings:
    """What one collector needs from the env, algo, network and collectors config."""

    index: int
    num_collectors: int
    env_id: str
    env_kwargs: dict
    num_envs: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    hidden: list[int]
    dueling: bool
    n_step: int
    gamma: float
    chunk_steps: int
    epsilon_base: float
    epsilon_alpha: float
    epsilon_anneal_steps: int
    seed: int
    frame_stack: int = 0  # > 0: pixel observations, sent to replay frame-once
    clip_rewards: bool = False
    terminal_on_life_loss: bool = False
    td_priorities: bool = False  # send each transition's |n-step TD error| with the chunk (prioritized replay)
    act_precision: str = "auto"  # auto | fp32 | bf16: the acting network's dtype (actors/acting.py)
    act_fusion: str = "auto"  # auto | on | off: the acting forward as a oneDNN-fused trace (actors/acting.py)
    act_device: str = "cpu"  # cpu | cuda: where the acting network runs (cuda: the GPU share Ray gave this actor)
    acting: str = "local"  # local | served: the collector runs its forward, or its node's acting server does
    algo: str = "dqn"  # the algorithm's plug-in, which builds the policy it acts with (learner/algorithms/)
    action_low: tuple[float, ...] = ()  # Box actions' bounds
    action_high: tuple[float, ...] = ()
    action_noise: float = 0.0  # td3: this collector's Gaussian noise, a fraction of each action's half-range
    layer_norm: bool = False  # dqn: the Q-network's hidden layers are layer-normalized (network.critic_norm)
    recurrent_size: int = 0  # recurrent_q: the state's units (h and c each)
    sequence_period: int = 0  # recurrent_q: a replayed sequence starts every this many steps (actors/sequence_adder.py)
    exploration_index: int | None = None  # its place in the Ape-X spread of epsilons (None: `index`)
    env_wrappers: tuple = ()  # env.wrappers' entries (actors/env_wrappers.py)
    quantiles: int = 0  # qrdqn: quantiles of each action's return distribution
    encoder: str | None = None  # network.encoder: the user's observation encoder (learner/encoders.py)
    encoder_kwargs: dict = field(default_factory=dict)
    obs_parts: tuple = ()  # Dict and Tuple observations: (key, shape, dtype) of each part (replay/contracts.py)

    @property
    def action_dim(self) -> int:
        """Dimensions of a Box action; 0 for Discrete actions."""
        return len(self.action_low)


@dataclass(frozen=True)
class EvaluatorSettings:
    """What the evaluator needs: its env, episodes and seed, and the network published weights fit."""

    env_id: str
    env_kwargs: dict
    episodes: int  # per evaluation, run in parallel
    seed: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int  # 0 for Box actions
    hidden: list[int]
    dueling: bool
    frame_stack: int  # the config's env.frame_stack
    stacked: bool  # frames stacked by raypex (pixel envs), not by the env
    epsilon: float  # random-action rate while evaluating (Atari's protocol: 0.05)
    max_episode_steps: int  # an episode still running after this many steps stops there (eval.max_episode_steps)
    action_low: tuple[float, ...] = ()  # Box actions' bounds: the weights are a td3/sac actor
    action_high: tuple[float, ...] = ()
    layer_norm: bool = False  # dqn: the Q-network's hidden layers are layer-normalized (network.critic_norm)
    algo: str = "dqn"  # the algorithm's plug-in, which builds the greedy policy of its published weights
    recurrent_size: int = 0  # a recurrent policy's state: units of h and c each
    env_wrappers: tuple = ()  # env.wrappers' entries (actors/env_wrappers.py)
    quantiles: int = 0  # qrdqn: quantiles of each action's return distribution
    encoder: str | None = None  # network.encoder: the user's observation encoder (learner/encoders.py)
    encoder_kwargs: dict = field(default_factory=dict)
    obs_parts: tuple = ()  # Dict and Tuple observations: (key, shape, dtype) of each part (replay/contracts.py)
