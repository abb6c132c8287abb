"""Policy: the one batched call collectors and the evaluator act through, whatever the algorithm.

An algorithm's plug-in (learner/algorithms/) builds its policy from its own settings; nothing
outside the plug-ins asks what kind of network it is. One call acts for every env of a vector
env at once:

    actions, extras, state = policy.act(obs, state, env_steps, explore)

- `actions`: what replay stores (a Box action in [-1, 1]; the collector scales it for the env);
- `extras`: what the adder takes beside the step, by name: `q_taken` (the value of each action
  taken) and `bootstrap` (the value of `obs`, the previous step's next observation) for initial
  priorities; empty when the policy has none;
- `state`: each env's recurrent state after the step (None for a policy without one). The state
  given is the one the step starts from; the adder stores it at a sequence's first step.

`explore` False is the evaluator's greedy policy (its own epsilon aside). Until the first
published weights arrive a policy acts at random, or with its own initial weights where
`acts_with_untrained_weights` says those explore as well as random ones (epsilon-greedy).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from raypex.replay.contracts import Weights

Extras = dict[str, np.ndarray]


class Policy(Protocol):
    """A batched acting policy (see the module's docstring)."""

    precision: str  # the dtype it acts in ("fp32", "bf16")
    form: str  # what acts, in words, for the start-up line and the bench ("onnx", "bf16, fused", ...)
    exploration: str | None  # what `exploration_rate` is in TensorBoard's collector/ tags (None: none)
    acts_with_untrained_weights: bool  # whether a fresh learner's initial weights are loaded and acted with

    def load(self, weights: Weights) -> None:
        """Act with these published weights (their arrays, fed to their acting graph or loaded
        into a torch module) from the next call on."""

    def initial_state(self, num_envs: int) -> Any:
        """Every env's state at an episode's start (None: the policy keeps none)."""

    def start_episodes(self, state: Any, starting: np.ndarray) -> Any:
        """`state` with the envs whose next step starts an episode set to the initial state."""

    def act(self, obs: np.ndarray, state: Any, env_steps: int, explore: bool = True) -> tuple[np.ndarray, Extras, Any]:
        """Actions for a batch of observations, what the adder takes beside them, the next state."""

    def exploration_rate(self, env_steps: int) -> float:
        """Epsilon, or the action noise, after `env_steps` (0 where the policy samples)."""


class Stateless:
    """The state methods of a policy that keeps no state between steps."""

    def initial_state(self, num_envs: int) -> None:
        return None

    def start_episodes(self, state: None, starting: np.ndarray) -> None:
        return None
