"""The network section of the run config: layer sizes and heads, normalization, the categorical
critic's support, the user's encoder, the recurrent core and SALE."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from raypex.cluster.config.section import Section
from raypex.import_path import split_import_path


class NetworkConfig(Section):
    """The Q-network shared by learner and collectors."""

    hidden: list[int] = Field([64, 64], min_length=1, description="Hidden layer sizes: the MLP's on flat "
                              "observations; on images, the fully connected layers after the CNN torso.")
    dueling: bool = Field(True, description="Dueling value/advantage head.")
    obs_norm: bool = Field(False, description="td3/sac on flat observations: normalize each dimension by its "
                           "running mean and std over the batches the learner trains on; the statistics live in the "
                           "networks, so collectors, evaluations and policy.pt2 apply them.")
    critic_norm: Literal["none", "layer_norm", "batch_renorm"] = Field(
        "none", description="Normalization in the value networks. layer_norm puts a LayerNorm before each hidden "
        "layer's ReLU (dqn's Q-network, as PQN does; td3/sac's critics, as BRO does). td3/sac: batch_renorm gives "
        "CrossQ's critics (Bhatt et al. 2024): batch renormalization of their input and hidden layers and no target "
        "critics, (s, a) and (s', a') going through them as one batch.")
    critic_head: Literal["scalar", "categorical"] = Field(
        "scalar", description="td3/sac: what each critic predicts. scalar: Q, regressed with a squared error. "
        "categorical: a distribution over critic_bins values spread evenly over critic_range, trained by cross-entropy "
        "to the HL-Gauss distribution of the same target (a Gaussian of 0.75 bins' width around it; Farebrother et al. "
        "2024), its Q the distribution's mean.")
    critic_bins: int = Field(101, ge=3, le=1001, description="td3/sac with critic_head categorical: values of the "
                             "support.")
    critic_range: tuple[float, float] | None = Field(
        None, description="td3/sac with critic_head categorical: [low, high] of the support, the range of the "
        "discounted returns the critics may see (a target outside it counts as the nearest end).")
    encoder: str | None = Field(
        None, description="Your observation encoder, package.module:Class, in place of raypex's MLP input or CNN for "
        "every algorithm (learner, collectors, evaluator, policy.pt2): built as Class(observation_space, "
        "**encoder_kwargs), a torch Module mapping float32 observations [B, ...] (uint8 pixels scaled to [0, 1]) to "
        "features [B, F]; the hidden layers and heads follow it. Its package must be installed on every node; "
        "checked when the run starts.")
    encoder_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for network.encoder.")
    recurrent_size: int = Field(128, ge=1, le=4096, description="r2d2: the LSTM's units, after the hidden layers.")
    core: Literal["lstm", "mlp"] = Field(
        "lstm", description="r2d2: the recurrent core; mlp puts a feed-forward ReLU layer of recurrent_size units in "
        "its place, which keeps no state: the same learner without memory, to measure what memory buys.")
    sale: bool = Field(False, description="td3/sac on flat observations: SALE embeddings (Fujimoto et al. 2023, TD7's): "
                       "an encoder learns zs = f(s) and zsa = g(zs, a) by predicting the next state's zs, and the actor "
                       "and critics read them beside the observation; the targets are hard copies every "
                       "learner.target_update_every_samples (set learner.target_update hard), the next Q-value clipped "
                       "to the range of the targets seen up to the last period. Needs algo.n_step 1.")

    @field_validator("encoder")
    @classmethod
    def _import_path(cls, path: str | None) -> str | None:
        if path is not None:
            split_import_path(path, kind="Class")
        return path

    @model_validator(mode="after")
    def _encoder_alone(self) -> NetworkConfig:
        if self.encoder is None:
            if self.encoder_kwargs:
                raise ValueError("encoder_kwargs: set network.encoder too (the kwargs are its)")
            return self
        clashing = [name for name, on in (("obs_norm", self.obs_norm), ("sale", self.sale)) if on]
        if clashing:
            raise ValueError(f"encoder takes the observations itself: drop network.{clashing[0]} (it reads raw "
                             "flat observations), or normalize inside your encoder")
        return self

    @property
    def flat_only(self) -> tuple[str, ...]:
        """The options set here that need flat observations (actors/envs.py check_algo_fits)."""
        return tuple(name for name, on in (("network.obs_norm", self.obs_norm), ("network.sale", self.sale)) if on)

    @model_validator(mode="after")
    def _critic_support(self) -> NetworkConfig:
        if self.critic_head == "scalar":
            if self.critic_range is not None:
                raise ValueError("critic_range is the categorical critic's support: set network.critic_head "
                                 "categorical too, or drop it")
            return self
        if self.critic_range is None:
            raise ValueError("critic_head categorical needs network.critic_range [low, high], the range of the "
                             "discounted returns its support spans")
        if not self.critic_range[0] < self.critic_range[1]:
            raise ValueError(f"critic_range {list(self.critic_range)}: low must be below high")
        return self

    @model_validator(mode="after")
    def _positive_layers(self) -> NetworkConfig:
        if any(h < 1 for h in self.hidden):
            raise ValueError("hidden: every layer size must be >= 1")
        return self
