"""LearnerSettings: the explicit hyperparameters the Learner is built from (torch-free module,
so the driver can build it without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LearnerSettings:
    """The learner's hyperparameters (the fields of the learner, algo and network config)."""

    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int
    hidden: list[int]
    dueling: bool
    double_dqn: bool
    huber_delta: float
    lr: float
    adam_eps: float
    max_grad_norm: float
    micro_batch: int
    accumulation_steps: int
    target_update: str
    target_update_every: int
    target_tau: float
    updates_per_epoch: int
    broadcast_every_epochs: int
    precision: str  # fp32 | bf16 | fp16 | auto (learner/precision.py: resolve_precision)
    compile: bool | None  # None: auto, on for the CNN when its update is captured on CUDA
    seed: int
    cuda_graphs: str = "auto"  # auto | on | off: capture the whole update as a CUDA graph (auto: on CUDA)
    channels_last: bool = True  # NHWC convolutions on CUDA
    prioritized: bool = False  # weigh by importance weights, send |TD errors| back (replay/priorities.py)
    algo: str = "dqn"  # the name of a registered algorithm (learner/algorithms/registry.py)
    action_low: tuple[float, ...] = ()  # Box actions' bounds (td3, sac)
    action_high: tuple[float, ...] = ()
    policy_noise: float = 0.2  # td3: target smoothing noise, fraction of the half-range
    noise_clip: float = 0.5  # td3
    policy_delay: int = 2  # critic updates per actor update
    target_entropy: float | None = None  # sac: None is minus the action dimensions
    init_temperature: float = 1.0  # sac
    obs_norm: bool = False  # td3/sac: running observation normalization inside the networks (learner/obs_norm.py)
    critic_norm: str = "none"  # dqn: none | layer_norm; td3/sac: none | layer_norm | batch_renorm (CrossQ's, no target critics)
    critic_head: str = "scalar"  # td3/sac: scalar | categorical (learner/categorical_critic.py)
    critic_bins: int = 101  # td3/sac, categorical: values of the support
    critic_range: tuple[float, float] | None = None  # td3/sac, categorical: [low, high] of the support
    sale: bool = False  # td3/sac: SALE embeddings, hard target copies every target_update_every (learner/sale.py)
    n_step: int = 5  # r2d2: steps of reward in each target (the others fold n-step returns in collectors)
    burn_in: int = 40  # r2d2: a replayed sequence's first steps, unrolled without gradient before the loss
    recurrent_size: int = 128  # r2d2: LSTM units
    core: str = "lstm"  # r2d2: lstm | mlp (a feed-forward layer in its place, no memory)
    sequence_length: int = 80  # r2d2: steps of each replayed sequence, burn-in included
    value_rescale: bool = True  # r2d2: targets through h(x) = sign(x)(sqrt(|x|+1)-1) + 1e-3 x
    quantiles: int = 32  # qrdqn: quantiles of each action's return distribution; iqn: fractions drawn per transition
    encoder: str | None = None  # network.encoder: the user's observation encoder (learner/encoders.py)
    encoder_kwargs: dict = field(default_factory=dict)
    obs_parts: tuple = ()  # Dict and Tuple observations: (key, shape, dtype) of each part (replay/contracts.py)

    @property
    def has_images(self) -> bool:
        """Whether the networks read images (a CNN): image observations, or an image part."""
        return len(self.obs_shape) == 3 or any(len(shape) == 3 for _, shape, _ in self.obs_parts)

    def captures(self, device_type: str) -> bool:
        """Whether the update is captured as CUDA graphs on a device of this type (auto: on CUDA)."""
        return device_type == "cuda" and self.cuda_graphs != "off"

    @property
    def action_dim(self) -> int:
        """Dimensions of a Box action; 0 for Discrete actions."""
        return len(self.action_low)
