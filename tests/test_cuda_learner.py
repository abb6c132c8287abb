"""The captured CUDA-graph update against the eager one (runs where CUDA exists; the CPU tests in
test_learner.py run the same UpdateStep eagerly)."""

import threading

import numpy as np
import pytest
import torch

from raypex.actors.adders import EnvStep, FrameAdder
from raypex.learner.device_columns import DeviceColumns
from raypex.learner.learner import Learner
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay
from tests.test_learner import random_batch, settings

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the captured update needs CUDA")
CUDA = torch.device("cuda")
PIXELS = (4, 36, 36)


def device_replay(kind: str, prioritized: bool, seed: int = 0) -> ShardedReplay:
    """Two shards on the GPU, filled with the same random data for the same seed: flat
    transitions ("mlp"), whole pixel stacks ("cnn") or frames stored once ("frames")."""
    rng = np.random.default_rng(seed)
    frame_stack, num_envs = (4, 4) if kind == "frames" else (0, 1)
    obs_shape, dtype = ((4,), "float32") if kind == "mlp" else (PIXELS, "uint8")
    replay = ShardedReplay(2, StorageSpec(512, obs_shape, dtype, frame_stack, num_envs), SamplesPerInsertLimiter(0, 1, 1),
                           seed, PrioritySettings() if prioritized else None,
                           BetaSchedule(0.4, 100, 1) if prioritized else None, DeviceColumns(CUDA))
    for shard in range(2):
        if kind != "frames":
            chunk = random_batch(rng, 512)
            if kind == "cnn":
                chunk["obs"], chunk["next_obs"] = rng.integers(0, 256, (2, 512, *PIXELS), dtype=np.uint8)
            chunk["priority"] = rng.random(512).astype(np.float32)
            replay.add(shard, chunk)
            continue
        stacks = rng.integers(0, 256, (num_envs, *PIXELS), dtype=np.uint8)
        adder = FrameAdder(3, 0.99, num_envs, 32, stacks, with_priorities=prioritized)
        for t in range(160):
            following = rng.integers(0, 256, (num_envs, *PIXELS), dtype=np.uint8)
            done = rng.random(num_envs) < 0.02
            adder.add(EnvStep(stacks, rng.integers(0, 3, num_envs), rng.normal(size=num_envs), done,
                              np.zeros(num_envs, bool), following))
            stacks = following
            if (t + 1) % 32 == 0:
                replay.add(shard, adder.pop())
    return replay


def learner_pair(pixels: bool | str, prioritized: bool = False, **overrides):
    """Two learners with the same initial weights over replays of the same data and seed (so the
    same draws), on the GPU: captured and eager. `pixels`: False (an MLP), True (a CNN on whole
    stacks) or "frames" (a CNN on frames stored once, stacks gathered inside the update)."""
    kind = "frames" if pixels == "frames" else "cnn" if pixels else "mlp"
    shape = {"obs_shape": PIXELS, "obs_dtype": "uint8", "hidden": [64]} if pixels else {}
    pair = []
    for graphs in ("on", "off"):
        s = settings(**{**shape, **overrides, "cuda_graphs": graphs, "prioritized": prioritized})
        pair.append(Learner(s, CUDA, device_replay(kind, prioritized), lambda w: None))
    assert all(learner.feed.on_device for learner in pair)
    # Both learners must run the same convolution algorithms: cuDNN's autotuner may pick a
    # different (non-deterministic) one per learner, and that, not capture, would set them apart.
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    pair[1].step.online.load_state_dict(pair[0].step.online.state_dict())
    pair[1].step.target.load_state_dict(pair[0].step.target.state_dict())
    for learner in pair:
        learner.warmup()
    return pair


@torch.no_grad()
def relative_gap(captured: Learner, eager: Learner, initial: list[torch.Tensor]) -> float:
    """How far apart the two learners' weights are, relative to how far training moved them."""
    gap = sum(float((a - b).float().norm() ** 2) for a, b in zip(captured.step.online.parameters(), eager.step.online.parameters()))
    moved = sum(float((a - b).float().norm() ** 2) for a, b in zip(eager.step.online.parameters(), initial))
    assert moved > 0, "training did not move the weights"
    return (gap / moved) ** 0.5


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("pixels", [False, True, "frames"], ids=["mlp", "cnn", "frames"])
@pytest.mark.parametrize("target_update", ["polyak", "hard"])
@pytest.mark.parametrize("critic_norm", ["none", "layer_norm"])
def test_captured_updates_give_the_eager_parameters(precision, pixels, target_update, critic_norm):
    # adam_eps 1e-3: Adam with a tiny eps turns rounding in ~0 grads into whole steps
    captured, eager = learner_pair(pixels, precision=precision, accumulation_steps=2, updates_per_epoch=5,
                                   target_update=target_update, target_update_every=3, lr=1e-3,
                                   adam_eps=1e-3, critic_norm=critic_norm)
    assert captured.captured and not eager.captured
    initial = [p.detach().clone() for p in eager.step.online.parameters()]
    for _ in range(2):
        m_captured, m_eager = captured.train_epoch(), eager.train_epoch()
        assert m_captured.losses["td_loss"] == pytest.approx(m_eager.losses["td_loss"], rel=2e-2)
    tolerance = 1e-3 if precision == "fp32" else 2e-2
    assert relative_gap(captured, eager, initial) < tolerance
    for a, b in zip(captured.step.target.parameters(), eager.step.target.parameters()):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)


def test_an_fp16_overflow_inside_the_graph_skips_the_step_and_backs_off():
    captured, _ = learner_pair(False, precision="fp16", updates_per_epoch=1)
    scaler = captured.step.precision.scaler
    scaler.scale.fill_(2.0**100)  # any gradient overflows fp16 at this scale
    before = [p.detach().clone() for p in captured.step.online.parameters()]
    captured.train_epoch()
    assert scaler.get_scale() == 2.0**99
    assert all(torch.equal(a, b) for a, b in zip(before, captured.step.online.parameters()))
    captured.train_epoch()
    assert scaler.get_scale() == 2.0**98


def test_capture_survives_collectors_inserting_from_another_thread():
    # On the H100 the first Pong run after a warm compile cache captured while the replay thread
    # copied collectors' chunks to the GPU, and the capture failed (cudaErrorStreamCaptureInvalidated):
    # the capture must watch only its own thread.
    s = settings(obs_shape=PIXELS, obs_dtype="uint8", hidden=[64], cuda_graphs="on", prioritized=True)
    replay = device_replay("cnn", prioritized=True)
    learner = Learner(s, CUDA, replay, lambda w: None)
    rng = np.random.default_rng(1)
    chunk = random_batch(rng, 64)
    chunk["obs"], chunk["next_obs"] = rng.integers(0, 256, (2, 64, *PIXELS), dtype=np.uint8)
    chunk["priority"] = rng.random(64).astype(np.float32)
    inserting, stop, inserts = threading.Event(), threading.Event(), [0]

    def insert_until_stopped():
        while not stop.is_set():
            replay.add(1, chunk)
            inserts[0] += 1
            inserting.set()

    thread = threading.Thread(target=insert_until_stopped)
    thread.start()
    try:
        assert inserting.wait(30)
        before = inserts[0]
        learner.warmup()
        during = inserts[0] - before
    finally:
        stop.set()
        thread.join()
    assert learner.captured and during > 0
    assert np.isfinite(learner.train_epoch().losses["td_loss"])


def test_loading_a_checkpoint_after_capture_captures_again():
    first, _ = learner_pair(True, precision="bf16", updates_per_epoch=3)
    first.train_epoch()
    state = first.state_bytes()
    captured, eager = learner_pair(True, precision="bf16", updates_per_epoch=3)
    for learner in (captured, eager):
        learner.load_state_bytes(state)
    assert captured.captured and captured.updates == 3
    initial = [p.detach().clone() for p in eager.step.online.parameters()]
    for a, b in zip(initial, first.step.online.parameters()):
        assert torch.equal(a, b)
    captured.train_epoch()
    eager.train_epoch()
    assert relative_gap(captured, eager, initial) < 2e-2  # the new graph trains from the loaded Adam state


@pytest.mark.parametrize("pixels", [True, "frames"], ids=["cnn", "frames"])
def test_compiled_networks_inside_the_captured_update_match_eager(pixels):
    captured, eager = learner_pair(pixels, precision="fp16", compile=True, accumulation_steps=2, updates_per_epoch=4,
                                   lr=1e-3, adam_eps=1e-3)
    initial = [p.detach().clone() for p in eager.step.online.parameters()]
    captured.train_epoch()
    eager.train_epoch()
    assert relative_gap(captured, eager, initial) < 2e-2


def test_a_captured_prioritized_update_gives_the_replay_the_eager_errors():
    """Importance weights enter the captured graph with the drawn indices and the |TD errors| leave
    it in a static buffer; copied to the host without a synchronize, they reach the replay a few
    updates later, equal to the eager learner's."""
    pair = learner_pair(False, prioritized=True, updates_per_epoch=8)
    for learner in pair:
        learner.train_epoch()
        learner.train_epoch()
        learner.feedback.flush()  # the end of a run: every copy still pending is applied
    assert pair[0].captured and not pair[1].captured
    for learner in pair:
        applied = sum(s.priorities.updates_applied + s.priorities.updates_dropped for s in learner.replay.stats())
        assert applied + learner.feedback.unsent == 2 * 8 * 16
    masses = [learner.replay.tree.get(np.arange(2 * 512)) for learner in pair]
    np.testing.assert_allclose(masses[0], masses[1], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("algo", ["td3", "sac"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("images", [False, True], ids=["flat", "images"])
@pytest.mark.parametrize("critic_norm", ["none", "batch_renorm"])
def test_captured_td3_and_sac_updates_give_the_eager_parameters(algo, precision, images, critic_norm):
    """Both graphs of a TD3 update (with and without the actor's step) and SAC's one, against
    eager updates from the same weights, draws and noise; on flat observations and on uint8
    pictures (the image encoders inside the graphs); with CrossQ's batch-renormalized critics too
    (their running statistics are buffers the graph updates in place)."""
    from tests.test_continuous import continuous_learner

    pair = [continuous_learner(algo, CUDA, DeviceColumns(CUDA), images, cuda_graphs=graphs, precision=precision,
                               accumulation_steps=2, updates_per_epoch=5, lr=1e-3, adam_eps=1e-3,
                               critic_norm=critic_norm)
            for graphs in ("on", "off")]
    captured, eager = pair
    for learner in pair:
        learner.warmup()
    assert captured.captured and not eager.captured and captured.feed.on_device
    initial = [p.detach().clone() for p in eager.step.critic_params + eager.step.actor_params]
    for _ in range(2):
        m_captured, m_eager = captured.train_epoch(), eager.train_epoch()
        assert m_captured.losses["td_loss"] == pytest.approx(m_eager.losses["td_loss"], rel=2e-2)
        assert m_captured.losses["actor_loss"] == pytest.approx(m_eager.losses["actor_loss"], rel=5e-2, abs=1e-3)
    assert captured.step.updates == eager.step.updates == 10
    with torch.no_grad():
        ours = captured.step.critic_params + captured.step.actor_params
        theirs = eager.step.critic_params + eager.step.actor_params
        gap = sum(float((a - b).norm() ** 2) for a, b in zip(ours, theirs)) ** 0.5
        moved = sum(float((a - b).norm() ** 2) for a, b in zip(theirs, initial)) ** 0.5
    assert moved > 0 and gap / moved < (1e-3 if precision == "fp32" else 2e-2)
    pairs = zip(captured.step.critic.named_buffers(), eager.step.critic.buffers())
    statistics = [(name, a, b) for (name, a), b in pairs if "running_" in name or name.endswith("steps")]
    assert bool(statistics) == (critic_norm == "batch_renorm")
    for name, a, b in statistics:
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3, msg=name)
    if algo == "sac":
        assert float(captured.step.objective.alpha) == pytest.approx(float(eager.step.objective.alpha), rel=1e-3)


def test_a_compiled_critic_loss_inside_the_captured_sac_update_matches_eager():
    """learner.compile on CUDA: the critics' compiled loss (batch-renormalized, categorical) inside
    the captured graphs trains as the eager, uncompiled update does."""
    from tests.test_continuous import continuous_learner

    pair = [continuous_learner("sac", CUDA, DeviceColumns(CUDA), cuda_graphs=graphs, compile=graphs == "on",
                               precision="bf16", accumulation_steps=2, updates_per_epoch=5, lr=1e-3, adam_eps=1e-3,
                               critic_norm="batch_renorm", critic_head="categorical", critic_range=(-10.0, 10.0),
                               critic_bins=21)
            for graphs in ("on", "off")]
    captured, eager = pair
    for learner in pair:
        learner.warmup()
    assert captured.captured and captured.compiled and not eager.captured and not eager.compiled
    initial = [p.detach().clone() for p in eager.step.critic_params + eager.step.actor_params]
    for _ in range(2):
        m_captured, m_eager = captured.train_epoch(), eager.train_epoch()
        assert m_captured.losses["td_loss"] == pytest.approx(m_eager.losses["td_loss"], rel=2e-2)
    with torch.no_grad():
        ours = captured.step.critic_params + captured.step.actor_params
        theirs = eager.step.critic_params + eager.step.actor_params
        gap = sum(float((a - b).norm() ** 2) for a, b in zip(ours, theirs)) ** 0.5
        moved = sum(float((a - b).norm() ** 2) for a, b in zip(theirs, initial)) ** 0.5
    assert moved > 0 and gap / moved < 2e-2


@pytest.mark.parametrize("algo", ["td3", "sac"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_captured_sale_updates_give_the_eager_parameters(algo, precision):
    """network.sale inside the graphs: the encoder's step and the value clipping are captured; the
    hard target copies, the frozen embeddings and the clipping's bounds change on the host between
    replays (every 4 updates here), in place, so the graphs read them without a new capture."""
    from tests.test_continuous import continuous_learner

    pair = [continuous_learner(algo, CUDA, DeviceColumns(CUDA), cuda_graphs=graphs, precision=precision,
                               accumulation_steps=2, updates_per_epoch=5, lr=1e-3, adam_eps=1e-3, sale=True,
                               target_update="hard", target_update_every=4)
            for graphs in ("on", "off")]
    captured, eager = pair
    for learner in pair:
        learner.warmup()
    assert captured.captured and not eager.captured

    def trained(learner: Learner) -> list[torch.Tensor]:
        step = learner.step
        return step.critic_step_params + step.actor_params + list(step.critic.embedding.parameters())

    initial = [p.detach().clone() for p in trained(eager)]
    for _ in range(2):
        m_captured, m_eager = captured.train_epoch(), eager.train_epoch()
        assert m_captured.losses["td_loss"] == pytest.approx(m_eager.losses["td_loss"], rel=2e-2)
        assert m_captured.losses["embedding_loss"] == pytest.approx(m_eager.losses["embedding_loss"], rel=2e-2)
    assert captured.step.updates == eager.step.updates == 10
    with torch.no_grad():
        gap = sum(float((a - b).float().norm() ** 2) for a, b in zip(trained(captured), trained(eager))) ** 0.5
        moved = sum(float((a - b).float().norm() ** 2) for a, b in zip(trained(eager), initial)) ** 0.5
    assert moved > 0 and gap / moved < (1e-3 if precision == "fp32" else 2e-2)
    bounds = eager.step.sale.next_q_bounds
    assert float(bounds[1] - bounds[0]) > 0  # two target periods passed: the clipping has real bounds
    torch.testing.assert_close(captured.step.sale.next_q_bounds, bounds, rtol=2e-2, atol=1e-3)
