"""The in-process measurements of `raypex bench` (no Ray): the ceilings the distributed rows are
compared with.

- `env_policy`: a real Collector (action selection, env step, n-step folding) whose chunks go
  nowhere: the most one collector process can do.
- `env_raw`: steps/s of that Collector's vector env alone (ALE's own vector env for Atari, without
  raypex's frame stacking), random actions, no policy. Stepped after env_policy, not built again:
  ALE's vector env takes seconds to build and reset (3.1 s for 8 Pong envs on the 2-core box).

`RawEnvProbe` steps the same raw vector env inside an actor; the Ray stage places one where each
collector ran and steps them all at once (`env_raw_all`): ALE alone on the collectors' cores, which
is less than env_raw x collectors where cores are hyperthreads or share memory bandwidth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from raypex.actors.settings import CollectorSettings
from raypex.replay.contracts import Weights


@dataclass(frozen=True)
class LocalRates:
    """What the in-process stages measured: env_policy's env steps/s, its phase fractions and
    the form it acted in (dtype, fused or not), and env_raw's env steps/s."""

    policy: float
    phases: dict[str, float]
    form: str
    raw: float


def env_raw_steps_per_s(env, seconds: float, seed: int = 0) -> float:
    """Env steps per second (summed over the envs) of a reset vector env with uniformly random
    actions."""
    actions = random_actions(env.single_action_space, env.num_envs, 64, np.random.default_rng(seed))
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions:
            env.step(a)
        steps += len(actions)
    return steps * env.num_envs / (time.perf_counter() - start)


class RawEnvProbe:
    """A collector's vector env without raypex's frame stacking, made and reset in the constructor
    (seconds for ALE), stepped with random actions by `rate`."""

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict, seed: int):
        from raypex.actors.envs import make_raw_vector_env

        self.env = make_raw_vector_env(env_id, num_envs, env_kwargs)
        self.env.reset(seed=seed)
        self.seed = seed

    def ready(self) -> None:
        """Returns once the constructor has made and reset the env (an actor's first call waits)."""

    def rate(self, seconds: float) -> float:
        """Env steps per second over `seconds` of stepping."""
        return env_raw_steps_per_s(self.env, seconds, self.seed)


def random_actions(space, num_envs: int, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` batches of uniformly random actions for `num_envs` envs of one action space
    (Discrete, or a bounded Box), drawn before the clock starts."""
    if hasattr(space, "n"):
        return [rng.integers(0, int(space.n), num_envs) for _ in range(count)]
    shape = (num_envs, *space.shape)
    return [rng.uniform(space.low, space.high, shape).astype(space.dtype) for _ in range(count)]


def first_weights(s: CollectorSettings) -> Weights:
    """Freshly initialized weights of the network a collector with these settings acts with, and
    their acting graph, as a learner publishes them."""
    from raypex.learner.algorithms.registry import algorithm
    from raypex.learner.weights import export_arrays

    plugin = algorithm(s.algo)
    network = plugin.acting_network(s)
    graph = plugin.acting_graph(network, s.obs_shape, s.obs_dtype, s.obs_parts)
    return Weights(0, export_arrays(network), acting_graph=graph)


def local_rates(settings: CollectorSettings, seconds: float) -> LocalRates:
    """env_policy, then env_raw on the same envs, `seconds` each."""
    collector, rate, phases = _collector_rate(settings, seconds)
    wrapped = collector.stepper.env
    raw_env = wrapped.unwrapped  # without raypex's frame stacking or conversion
    try:
        raw = env_raw_steps_per_s(raw_env, seconds, settings.seed)
    finally:
        wrapped.close()
    return LocalRates(rate, phases, collector.policy.form, raw)


def _collector_rate(settings: CollectorSettings, seconds: float):
    """One Collector whose chunks are dropped, its env steps per second and phase fractions. It
    acts with a network's weights from its first step (a collector running the acting graph would
    act at random until weights come)."""
    from raypex.actors.collector import PHASES, Collector
    from raypex.cluster.hosts.acting_precision import act_precision_for_this_cpu

    settings = act_precision_for_this_cpu(settings)  # as a collector's host decides it on this machine
    pending = [first_weights(settings)]
    collector = Collector(settings, push=lambda chunk: None, poll_weights=lambda: pending.pop() if pending else None)
    collector.collect_chunk()  # first chunk: allocations, lazy imports
    first_steps = collector.env_steps
    first_phase = dict(collector.phase_s)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        collector.collect_chunk()
    elapsed = time.perf_counter() - start
    spent = {p: collector.phase_s[p] - first_phase[p] for p in PHASES}
    total = sum(spent.values()) or 1.0
    phases = {p: t / total for p, t in spent.items()}
    return collector, (collector.env_steps - first_steps) / elapsed, phases
