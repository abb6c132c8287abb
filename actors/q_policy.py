"""QPolicy: acting on a Q-network over Discrete actions (DQN's), epsilon-greedy in a collector and
greedy in the evaluator (actors/policy.py says what a policy gives).

The Q-values come from the network's fastest form on this process: the acting graph for an MLP on
the CPU (actors/onnx_acting.py: no torch imported); for a CNN, whichever of torch's forms
(actors/acting.py: bf16 or a fused trace where this CPU runs them faster) and the acting graph wins
the timing at the collector's start; torch on the GPU Ray gave the collector. With initial priorities from
TD errors, the one forward that chooses the actions also gives the adder what it needs: the value
of each action taken and the value of `obs`, the previous step's bootstrap.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.exploration import EpsilonGreedy, collector_epsilon
from raypex.actors.policy import Extras, Stateless
from raypex.actors.served_acting import ServedForward
from raypex.actors.settings import CollectorSettings, EvaluatorSettings
from raypex.replay.contracts import Weights


class QPolicy(Stateless):
    """Epsilon-greedy (or greedy) actions from a Q forward (GraphQ or ActingPolicy)."""

    exploration = "epsilon"
    # Epsilon-greedy acts with any network, a fresh learner's untrained one too (Ape-X style).
    acts_with_untrained_weights = True

    def __init__(self, forward, epsilon: EpsilonGreedy | None, with_values: bool = False):
        """`epsilon`: a collector's exploration (None: greedy only); `with_values`: give the adder
        each step's Q-values (initial priorities from TD errors)."""
        self.forward, self.epsilon, self.with_values = forward, epsilon, with_values

    @property
    def precision(self) -> str:
        return self.forward.precision

    @property
    def form(self) -> str:
        return self.forward.form

    def load(self, weights: Weights) -> None:
        self.forward.load(weights)

    def exploration_rate(self, env_steps: int) -> float:
        return self.epsilon.rate(env_steps) if self.epsilon is not None else 0.0

    def act(self, obs: np.ndarray, state: None, env_steps: int, explore: bool = True) -> tuple[np.ndarray, Extras, None]:
        explore = explore and self.epsilon is not None
        if not (self.with_values and explore):
            greedy = self.forward.greedy(obs)
            return (self.epsilon.choose(greedy, env_steps) if explore else greedy), {}, None
        q = self.forward.q_values(obs)
        actions = self.epsilon.choose(q.argmax(axis=1), env_steps)
        return actions, {"bootstrap": q.max(axis=1), "q_taken": q[np.arange(len(actions)), actions]}, None


def collector_q_policy(s: CollectorSettings, example_obs: np.ndarray, seed: int, rng: np.random.Generator,
                       served: ServedForward | None = None) -> QPolicy:
    """A collector's Q policy: the acting graph on its node's acting server when `served`, in its
    own process for an MLP acting on the CPU (no torch imported), else the form of its own random
    initial network this CPU runs fastest (torch's ActingPolicy, or the acting graph where ONNX
    Runtime wins the timing), or torch on the GPU Ray gave it; Ape-X's epsilon for its index
    (actors/exploration.py)."""
    from raypex.actors.onnx_acting import GraphQ, q_acts_with_graph

    epsilon = collector_epsilon(s, rng)
    if served is not None or (s.act_device == "cpu" and q_acts_with_graph(tuple(s.obs_shape), s.act_precision,
                                                                          s.act_fusion, s.obs_parts)):
        return QPolicy(GraphQ(s.num_actions, np.random.default_rng(seed + 1), served), epsilon, s.td_priorities)
    import torch

    from raypex.actors.acting import ActingPolicy

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    from raypex.learner.algorithms.registry import algorithm

    forward = ActingPolicy(algorithm(s.algo).acting_network(s), s.act_precision, example_obs, s.act_fusion,
                           s.act_device)
    if s.act_device == "cpu" and s.act_precision != "bf16" and s.act_fusion != "on":
        forward = _graph_if_faster(forward, s, example_obs, seed) or forward
    return QPolicy(forward, epsilon, s.td_priorities)


def _graph_if_faster(forward, s: CollectorSettings, example_obs: np.ndarray, seed: int):
    """The acting graph of the collector's own initial network (a GraphQ acting with it until the
    learner's weights come), when ONNX Runtime runs it at least AUTO_MIN_GAIN faster than the
    torch form `forward`'s timing chose, timed the same way; else None. Neither wins everywhere
    (`python -m benchmarks.acting_forms`: MinAtar's CNN 124-194 us in ONNX Runtime against 251-300
    us fused, Pong's Nature CNN 7.2-7.6 ms against 5.3-5.6 ms, on this project's 2-core box)."""
    from raypex.actors.acting import AUTO_MIN_GAIN, median_calls_ms
    from raypex.actors.onnx_acting import GraphQ
    from raypex.learner.algorithms.registry import algorithm
    from raypex.learner.weights import export_arrays

    try:
        graph = algorithm(s.algo).acting_graph(forward.network, s.obs_shape, s.obs_dtype)
    except Exception:  # noqa: BLE001 - a torch that cannot export this network acts in torch
        return None
    candidate = GraphQ(s.num_actions, np.random.default_rng(seed + 1))
    candidate.load(Weights(-1, export_arrays(forward.network), acting_graph=graph))
    forward.timings_ms["onnx"], chosen_ms = median_calls_ms([lambda: candidate.q_values(example_obs),
                                                             lambda: forward.q_values(example_obs)])
    return candidate if chosen_ms >= AUTO_MIN_GAIN * forward.timings_ms["onnx"] else None


def greedy_q_policy(s: EvaluatorSettings) -> QPolicy:
    """The evaluator's: greedy, the acting graph on its CPU."""
    from raypex.actors.onnx_acting import GraphQ

    return QPolicy(GraphQ(s.num_actions, np.random.default_rng(s.seed)), None)


def q_network(s: CollectorSettings | EvaluatorSettings):
    """The Q-network (torch, freshly initialized) published weights of these settings load into."""
    from raypex.learner.encoders import encoder_from
    from raypex.learner.networks import build_q_network

    return build_q_network(s.obs_shape, s.num_actions, s.hidden, s.dueling, s.obs_dtype, s.layer_norm, encoder_from(s))
