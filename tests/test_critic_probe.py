"""benchmarks/critic_probe.py: the figures it reads from a TD3/SAC learner's weights and replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.critic_probe import probe
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.precision import make_precision
from tests.test_learner import settings


def columns(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    obs = rng.normal(size=(rows, 4)).astype(np.float32)
    discount = np.full(rows, 0.99, np.float32)
    discount[:7] = 0.0
    returns = rng.normal(size=rows).astype(np.float32)
    returns[10] = 1e4  # one row the critics cannot have fitted
    return {"obs": obs, "action": rng.uniform(-1, 1, (rows, 2)).astype(np.float32), "return": returns,
            "discount": discount, "next_obs": obs + 0.1}


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_the_probe_finds_the_row_that_holds_the_squared_error_and_compares_gradients_of_equal_weights(algo):
    s = settings(num_actions=0, algo=algo, action_low=(-1.0, -1.0), action_high=(1.0, 1.0), hidden=[16, 16],
                 target_update="polyak", policy_delay=2 if algo == "td3" else 1)
    cpu = torch.device("cpu")
    first = algorithm(s.algo).build_step(s, cpu, precision=make_precision("fp32", cpu))
    same = algorithm(s.algo).build_step(s, cpu, precision=make_precision("fp32", cpu))
    same.load_state_dict(first.state_dict())
    found = probe({"fp32": first, "bf16": same}, columns(np.random.default_rng(0), 300), rows=300, seed=0)
    assert found.rows == 300 and found.terminal_rows == 7
    assert found.top_1pct_share > 0.99 and found.top_10pct_share >= found.top_1pct_share
    assert found.abs_error_quantiles["max"] > 9_000 > 10 * found.abs_error_quantiles["99%"]
    assert found.critic_gradient_cosine == pytest.approx(1.0, abs=1e-6)
    assert found.actor_gradient_cosine == pytest.approx(1.0, abs=1e-6)
    lower = algorithm(s.algo).build_step(s, cpu, precision=make_precision("bf16", cpu))
    lower.load_state_dict(first.state_dict())
    rounded = probe({"fp32": first, "bf16": lower}, columns(np.random.default_rng(0), 300), rows=300, seed=0)
    assert 0.9 < rounded.critic_gradient_cosine < 1.0 and 0.9 < rounded.actor_gradient_cosine < 1.0
