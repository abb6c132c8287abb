"""The collector's acting network: the bf16 acting copy agrees with float32, follows published
weights, and `auto` chooses by timing on this CPU."""

import numpy as np
import pytest
import torch

from actors.acting import AUTO_MIN_GAIN, ActingPolicy
from learner.networks import acting_copy, build_q_network
from learner.weights import export_arrays

SHAPES = [((4, 84, 84), "uint8"), ((6, 10, 10), "uint8"), ((8,), "float32")]


def _obs(shape, dtype, batch=16, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, (batch, *shape), dtype=np.uint8)
    return rng.normal(size=(batch, *shape)).astype(np.float32)


def _q(network, obs):
    with torch.inference_mode():
        return network(torch.from_numpy(obs)).float().numpy()


@pytest.mark.parametrize(("shape", "dtype"), SHAPES)
def test_the_bf16_acting_copy_gives_the_float32_q_values_within_bf16_rounding(shape, dtype):
    torch.manual_seed(0)
    network = build_q_network(shape, 6, [64], True, dtype)
    copy = acting_copy(network, torch.bfloat16)
    obs = _obs(shape, dtype)
    exact, fast = _q(network, obs), _q(copy, obs)
    assert next(copy.parameters()).dtype == torch.bfloat16
    assert np.abs(fast - exact).max() <= 0.03 * np.abs(exact).max() + 1e-3
    if dtype == "uint8":  # the 1/255 went into the first convolution's weights
        assert copy.input_scale == 1.0 and network.input_scale == pytest.approx(1 / 255)


def test_published_weights_reach_the_acting_copy():
    torch.manual_seed(0)
    shape = (4, 84, 84)
    policy = ActingPolicy(build_q_network(shape, 6, [64], True, "uint8"), "bf16", _obs(shape, "uint8", 4))
    trained = build_q_network(shape, 6, [64], True, "uint8")  # other random weights
    obs = _obs(shape, "uint8", seed=1)
    q_before = _q(policy.fast, obs)
    policy.load(export_arrays(trained))
    q_trained, q_after = _q(trained, obs), _q(policy.fast, obs)
    tolerance = 0.03 * np.abs(q_trained).max() + 1e-3
    assert policy.precision == "bf16"
    assert np.abs(q_before - q_trained).max() > 10 * tolerance
    assert np.abs(q_after - q_trained).max() <= tolerance
    # each greedy action is the trained network's argmax, up to bf16's rounding of near ties
    chosen = q_trained[np.arange(len(obs)), policy.greedy(obs)]
    assert np.all(chosen >= q_trained.max(axis=1) - 2 * tolerance)


def test_auto_times_both_precisions_and_fp32_builds_no_copy():
    network = build_q_network((4, 84, 84), 6, [64], True, "uint8")
    auto = ActingPolicy(network, "auto", _obs((4, 84, 84), "uint8", 8))
    assert set(auto.timings_ms) == {"fp32", "bf16"} and all(t > 0 for t in auto.timings_ms.values())
    faster = auto.timings_ms["fp32"] >= AUTO_MIN_GAIN * auto.timings_ms["bf16"]
    assert auto.precision == ("bf16" if faster else "fp32")
    assert (auto.fast is not None) == faster
    plain = ActingPolicy(network, "fp32", _obs((4, 84, 84), "uint8", 8))
    assert plain.fast is None and plain.precision == "fp32" and plain.timings_ms == {}
    with pytest.raises(ValueError, match="one of auto, fp32, bf16"):
        ActingPolicy(network, "fp16", _obs((4, 84, 84), "uint8", 8))
