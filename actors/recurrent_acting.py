"""RecurrentPolicy: acting with r2d2's recurrent Q-network through its acting graph (a step:
observations and state in, Q-values and the next state out; actors/onnx_acting.py), epsilon-greedy
in a collector and greedy in the evaluator.

Each env carries its recurrent state from step to step; the collector starts it again (zeros) at
each env's episode start (`start_episodes`) and gives it to each step: the adder stores the state
a sequence's first step started from, so the learner unrolls from where the collector was. Until
the learner's first weights arrive it acts uniformly at random, its state staying at zeros.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.exploration import EpsilonGreedy, collector_epsilon
from raypex.actors.onnx_acting import ActsThroughGraph
from raypex.actors.served_acting import ServedForward
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.replay.contracts import batch_size


class RecurrentPolicy(ActsThroughGraph):
    """Epsilon-greedy (or greedy) actions of the published recurrent weights, a state per env
    (actors/policy.py)."""

    exploration = "epsilon"
    acts_with_untrained_weights = True

    def __init__(self, num_actions: int, recurrent_size: int, rng: np.random.Generator,
                 epsilon: EpsilonGreedy | None = None, graph: ServedForward | None = None):
        """`rng`: the random actions before the first weights; `epsilon`: a collector's exploration
        (None: greedy only); `graph`: the node's acting server (default: the graph in this process)."""
        self.num_actions, self.recurrent_size, self.rng, self.epsilon = num_actions, recurrent_size, rng, epsilon
        self.use(graph)

    def initial_state(self, num_envs: int) -> np.ndarray:
        """h and c of each env at an episode's start: zeros."""
        return np.zeros((num_envs, 2 * self.recurrent_size), np.float32)

    def start_episodes(self, state: np.ndarray, starting: np.ndarray) -> np.ndarray:
        """Envs whose next observation is an episode's first start from the initial state (a new
        array: the adder may hold the one it was given)."""
        return np.where(starting[:, None], np.float32(0.0), state)

    def exploration_rate(self, env_steps: int) -> float:
        return self.epsilon.rate(env_steps) if self.epsilon is not None else 0.0

    def act(self, obs: np.ndarray, state: np.ndarray, env_steps: int, explore: bool = True):
        """The (epsilon-)greedy action per env and every env's next state; uniformly random, the
        state staying at zeros, before the first weights."""
        if not self.graph.loaded:
            return self.rng.integers(0, self.num_actions, batch_size(obs)), {}, state
        q, state = self.graph.run(obs=obs, state=state)
        greedy = q.argmax(axis=1)
        if explore and self.epsilon is not None:
            return self.epsilon.choose(greedy, env_steps), {}, state
        return greedy, {}, state


def collector_recurrent_policy(s: CollectorSettings, seed: int, rng: np.random.Generator,
                               served: ServedForward | None = None) -> RecurrentPolicy:
    """A collector's: Ape-X's epsilon for its index (actors/exploration.py), random until weights come."""
    return RecurrentPolicy(s.num_actions, s.recurrent_size, np.random.default_rng(seed + 1), collector_epsilon(s, rng),
                           served)


def greedy_recurrent_policy(s: EvaluatorSettings) -> RecurrentPolicy:
    """The evaluator's: greedy, each episode's state carried from its first step."""
    return RecurrentPolicy(s.num_actions, s.recurrent_size, np.random.default_rng(s.seed))
