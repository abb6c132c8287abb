"""The collector's acting network: the bf16 acting copy agrees with float32, follows published
weights, the oneDNN-fused trace gives the eager network's Q-values and follows published weights
too, and `auto` chooses both by timing on this CPU."""

import numpy as np
import pytest
import torch

from raypex.actors.acting import AUTO_MIN_GAIN, ActingPolicy, fused_trace
from raypex.learner.networks import acting_copy, build_q_network
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights

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
    policy.load(Weights(1, export_arrays(trained)))
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
    assert set(auto.timings_ms) == {"fp32", "bf16"} and auto.fused is None and all(t > 0 for t in auto.timings_ms.values())
    faster = auto.timings_ms["fp32"] >= AUTO_MIN_GAIN * auto.timings_ms["bf16"]
    assert auto.precision == ("bf16" if faster else "fp32")
    assert (auto.fast is not None) == faster
    plain = ActingPolicy(network, "fp32", _obs((4, 84, 84), "uint8", 8))
    assert plain.fast is None and plain.precision == "fp32" and plain.timings_ms == {}
    with pytest.raises(ValueError, match="one of auto, fp32, bf16"):
        ActingPolicy(network, "fp16", _obs((4, 84, 84), "uint8", 8))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_fused_trace_gives_the_eager_q_values_and_follows_published_weights(precision):
    torch.manual_seed(0)
    shape = (4, 84, 84)
    policy = ActingPolicy(build_q_network(shape, 6, [64], True, "uint8"), precision, _obs(shape, "uint8", 8), "on")
    eager = policy.fast or policy.network
    obs = _obs(shape, "uint8", 8, seed=1)  # the batch shape the trace was made for, other frames
    assert policy.fused is not None and policy.form == f"{precision}, fused"
    q_fused, q_eager = policy.q_values(obs), _q(eager, obs)
    tolerance = 0.03 * np.abs(q_eager).max() + 1e-3
    assert np.abs(q_fused - q_eager).max() <= tolerance
    trained = build_q_network(shape, 6, [64], True, "uint8")
    policy.load(Weights(1, export_arrays(trained)))  # lands in the parameters the trace reads: no retrace
    q_trained = _q(trained, obs)
    assert np.abs(q_fused - q_trained).max() > 10 * tolerance
    assert np.abs(policy.q_values(obs) - q_trained).max() <= tolerance
    chosen = q_trained[np.arange(len(obs)), policy.greedy(obs)]
    assert np.all(chosen >= q_trained.max(axis=1) - 2 * tolerance)


def test_auto_fusion_times_image_networks_only_and_off_traces_nothing():
    image = ActingPolicy(build_q_network((4, 84, 84), 6, [64], True, "uint8"), "fp32", _obs((4, 84, 84), "uint8", 8),
                         "auto")
    assert set(image.timings_ms) == {"eager", "fused"} and all(t > 0 for t in image.timings_ms.values())
    faster = image.timings_ms["eager"] >= AUTO_MIN_GAIN * image.timings_ms["fused"]
    assert (image.fused is not None) == faster and image.form == ("fp32, fused" if faster else "fp32")
    flat = ActingPolicy(build_q_network((8,), 2, [64], True, "float32"), "fp32", _obs((8,), "float32"), "auto")
    assert flat.fused is None and flat.timings_ms == {} and flat.form == "fp32"
    off = ActingPolicy(build_q_network((4, 84, 84), 6, [64], True, "uint8"), "fp32", _obs((4, 84, 84), "uint8", 8),
                       "off")
    assert off.fused is None and off.timings_ms == {}
    with pytest.raises(ValueError, match="one of auto, on, off"):
        ActingPolicy(build_q_network((8,), 2, [64], True, "float32"), "fp32", _obs((8,), "float32"), "yes")


def test_a_fused_trace_of_the_small_cnn_matches_it():
    torch.manual_seed(0)
    network = build_q_network((6, 10, 10), 5, [128], False, "uint8").eval()
    obs = _obs((6, 10, 10), "uint8", 32)
    traced = fused_trace(network, torch.from_numpy(obs))
    assert np.allclose(_q(traced, obs), _q(network, obs), atol=1e-5)


def _cnn_settings(**extra):
    from raypex.actors.settings import CollectorSettings

    return CollectorSettings(index=0, num_collectors=1, env_id="x", env_kwargs={}, num_envs=8, obs_shape=(6, 10, 10),
                             obs_dtype="uint8", num_actions=5, hidden=[64], dueling=True, n_step=1, gamma=0.99,
                             chunk_steps=8, epsilon_base=0.4, epsilon_alpha=7.0, epsilon_anneal_steps=0, seed=0,
                             algo="dqn", **extra)


@pytest.mark.parametrize(("onnx_ms", "torch_ms", "form"), [(1.0, 1.2, "onnx"), (1.0, 1.05, "fp32"), (1.2, 1.0, "fp32")])
def test_a_cnn_collector_acts_through_the_acting_graph_where_it_wins_the_timing(monkeypatch, onnx_ms, torch_ms, form):
    """Timed against the torch form ActingPolicy chose (fp32 eager here, nothing else timed), the
    acting graph must be AUTO_MIN_GAIN faster to act; chosen, it acts with the collector's own
    initial network, as the torch form would have."""
    from raypex.actors import acting
    from raypex.actors.q_policy import collector_q_policy

    def timed(calls):  # the graph, then the chosen torch form, timed in turn
        assert len(calls) == 2 and [call() for call in calls]
        return [onnx_ms, torch_ms]

    monkeypatch.setattr(acting, "median_calls_ms", timed)
    obs = _obs((6, 10, 10), "uint8", 8)
    torch.manual_seed(3)
    policy = collector_q_policy(_cnn_settings(act_precision="fp32", act_fusion="off"), obs, 3, np.random.default_rng(0))
    assert policy.form == form
    torch.manual_seed(3)
    initial = build_q_network((6, 10, 10), 5, [64], True, "uint8")
    np.testing.assert_allclose(policy.forward.q_values(obs), _q(initial, obs), rtol=1e-4, atol=1e-5)


def test_a_cnn_collector_asked_for_bf16_or_a_fused_trace_does_not_time_the_graph():
    from raypex.actors.q_policy import collector_q_policy

    obs = _obs((6, 10, 10), "uint8", 8)
    for precision, fusion in (("bf16", "off"), ("fp32", "on")):
        policy = collector_q_policy(_cnn_settings(act_precision=precision, act_fusion=fusion), obs, 3,
                                    np.random.default_rng(0))
        assert "onnx" not in policy.forward.timings_ms and policy.form != "onnx"
