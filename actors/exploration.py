"""Ape-X exploration: a fixed epsilon per collector, optionally annealed from 1.0 at the start.

Collector i of N acts with eps_i = eps_base ** (1 + alpha * i / (N - 1)) (eps_base for N = 1), so
the fleet spans from exploratory to nearly greedy. With `anneal_steps` > 0, epsilon starts at 1.0
and falls linearly to eps_i over the collector's first `anneal_steps` env steps.
"""

from __future__ import annotations


def apex_epsilon(index: int, num_collectors: int, base: float, alpha: float) -> float:
    """The Ape-X epsilon of collector `index` among `num_collectors`."""
    if not 0 <= index < num_collectors:
        raise ValueError(f"collector index {index} outside 0..{num_collectors - 1}")
    if num_collectors == 1:
        return base
    return base ** (1.0 + alpha * index / (num_collectors - 1))


def annealed_epsilon(final: float, env_steps: int, anneal_steps: int) -> float:
    """Epsilon after `env_steps`: linear from 1.0 to `final` over `anneal_steps` (0 = no anneal)."""
    if anneal_steps <= 0 or env_steps >= anneal_steps:
        return final
    return 1.0 + (final - 1.0) * env_steps / anneal_steps
