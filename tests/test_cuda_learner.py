"""The captured CUDA-graph update against the eager one (runs where CUDA exists; the CPU tests in
test_learner.py run the same UpdateStep eagerly)."""

import numpy as np
import pytest
import torch

from learner.learner import Learner
from tests.test_learner import random_batch, settings

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the captured update needs CUDA")
CUDA = torch.device("cuda")
PIXELS = (4, 36, 36)
FRAMES_PER_SAMPLE = 7  # a stack of 4 and n-step 3 (replay/frames.py)


def batches(kind: str, size: int, seed: int = 0) -> list[dict]:
    """32 micro-batches: flat ("mlp"), whole pixel stacks ("cnn") or frames once ("frames")."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(32):
        batch = random_batch(rng, size)
        if kind == "cnn":
            batch["obs"] = rng.integers(0, 256, (size, *PIXELS), dtype=np.uint8)
            batch["next_obs"] = rng.integers(0, 256, (size, *PIXELS), dtype=np.uint8)
        elif kind == "frames":
            width = size * FRAMES_PER_SAMPLE
            del batch["obs"], batch["next_obs"]
            batch["frames"] = rng.integers(0, 256, (width, *PIXELS[1:]), dtype=np.uint8)
            batch["obs_index"] = rng.integers(0, width, (size, PIXELS[0]))
            batch["next_index"] = rng.integers(0, width, (size, PIXELS[0]))
        out.append(batch)
    return out


def learner_pair(pixels: bool | str, **overrides):
    """Two learners with the same initial weights, fed the same batches: captured and eager.
    `pixels`: False (an MLP), True (a CNN on whole stacks) or "frames" (a CNN on frame-once batches)."""
    kind = "frames" if pixels == "frames" else "cnn" if pixels else "mlp"
    shape = {"obs_shape": PIXELS, "obs_dtype": "uint8", "hidden": [64]} if pixels else {}
    if kind == "frames":
        shape["frames_per_sample"] = FRAMES_PER_SAMPLE
    data = batches(kind, overrides.get("micro_batch", 16))
    pair = []
    for graphs in ("on", "off"):
        stream = iter(data * 100)
        s = settings(**{**shape, **overrides, "cuda_graphs": graphs})
        pair.append(Learner(s, CUDA, lambda stream=stream: next(stream), lambda w: None))
    # Both learners must run the same convolution algorithms: cuDNN's autotuner may pick a
    # different (non-deterministic) one per learner, and that, not capture, would set them apart.
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    for learner in pair:
        learner.warmup()
    return pair


@torch.no_grad()
def relative_gap(captured: Learner, eager: Learner, initial: list[torch.Tensor]) -> float:
    """How far apart the two learners' weights are, relative to how far training moved them."""
    gap = sum(float((a - b).float().norm() ** 2) for a, b in zip(captured.online.parameters(), eager.online.parameters()))
    moved = sum(float((a - b).float().norm() ** 2) for a, b in zip(eager.online.parameters(), initial))
    assert moved > 0, "training did not move the weights"
    return (gap / moved) ** 0.5


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("pixels", [False, True, "frames"], ids=["mlp", "cnn", "frames"])
@pytest.mark.parametrize("target_update", ["polyak", "hard"])
def test_captured_updates_give_the_eager_parameters(precision, pixels, target_update):
    captured, eager = learner_pair(pixels, precision=precision, accumulation_steps=2, updates_per_epoch=5,
                                   target_update=target_update, target_update_every=3, lr=1e-3,
                                   adam_eps=1e-3)  # Adam with a tiny eps turns rounding in ~0 grads into whole steps
    assert captured.captured and not eager.captured
    initial = [p.detach().clone() for p in eager.online.parameters()]
    for _ in range(2):
        m_captured, m_eager = captured.train_epoch(), eager.train_epoch()
        assert m_captured["td_loss"] == pytest.approx(m_eager["td_loss"], rel=2e-2)
    tolerance = 1e-3 if precision == "fp32" else 2e-2
    assert relative_gap(captured, eager, initial) < tolerance
    for a, b in zip(captured.target.parameters(), eager.target.parameters()):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)


def test_an_fp16_overflow_inside_the_graph_skips_the_step_and_backs_off():
    captured, _ = learner_pair(False, precision="fp16", updates_per_epoch=1)
    scaler = captured.precision.scaler
    scaler.scale.fill_(2.0**100)  # any gradient overflows fp16 at this scale
    before = [p.detach().clone() for p in captured.online.parameters()]
    captured.train_epoch()
    assert scaler.get_scale() == 2.0**99
    assert all(torch.equal(a, b) for a, b in zip(before, captured.online.parameters()))
    captured.train_epoch()
    assert scaler.get_scale() == 2.0**98


def test_loading_a_checkpoint_after_capture_captures_again():
    first, _ = learner_pair(True, precision="bf16", updates_per_epoch=3)
    first.train_epoch()
    state = first.state_bytes()
    captured, eager = learner_pair(True, precision="bf16", updates_per_epoch=3, seed=9)
    for learner in (captured, eager):
        learner.load_state_bytes(state)
    assert captured.captured and captured.updates == 3
    initial = [p.detach().clone() for p in eager.online.parameters()]
    for a, b in zip(initial, first.online.parameters()):
        assert torch.equal(a, b)
    captured.train_epoch()
    eager.train_epoch()
    assert relative_gap(captured, eager, initial) < 2e-2  # the new graph trains from the loaded Adam state


@pytest.mark.parametrize("pixels", [True, "frames"], ids=["cnn", "frames"])
def test_compiled_networks_inside_the_captured_update_match_eager(pixels):
    captured, eager = learner_pair(pixels, precision="fp16", compile=True, accumulation_steps=2, updates_per_epoch=4,
                                   lr=1e-3, adam_eps=1e-3)
    initial = [p.detach().clone() for p in eager.online.parameters()]
    captured.train_epoch()
    eager.train_epoch()
    assert relative_gap(captured, eager, initial) < 2e-2


def test_a_captured_prioritized_update_weighs_its_loss_and_sends_the_eager_errors():
    """Importance weights enter the captured graph as a static input and the |TD errors| leave it
    in a static buffer; copied to the host without a synchronize, they reach the sender a few
    updates later, equal to the eager learner's."""
    from replay.contracts import SampledKeys

    data = batches("mlp", 16, seed=3)
    rng = np.random.default_rng(0)
    for i, batch in enumerate(data):
        batch["weight"] = rng.uniform(0.1, 1.0, 16).astype(np.float32)
        batch["keys"] = SampledKeys(i % 2, "p", np.arange(16) + 16 * i, np.arange(16))
    sent = {"on": [], "off": []}
    pair = []
    for graphs in ("on", "off"):
        stream = iter(data)
        s = settings(prioritized=True, updates_per_epoch=8, cuda_graphs=graphs)
        pair.append(Learner(s, CUDA, lambda stream=stream: next(stream), lambda w: None, sent[graphs].extend))
    torch.backends.cudnn.deterministic = True
    pair[1].online.load_state_dict(pair[0].online.state_dict())
    pair[1].target.load_state_dict(pair[0].target.state_dict())
    for learner in pair:
        learner.warmup()
        learner.train_epoch()
        learner.train_epoch()  # the second epoch's updates let the first epoch's copies be sent
        torch.cuda.synchronize()
        learner.feed.close()
    assert pair[0].captured and not pair[1].captured
    for graphs, learner in zip(("on", "off"), pair):
        learner.feedback.flush()  # the end of a run: every copy still pending goes out
        transitions = sum(len(u.index) for u in sent[graphs])
        assert transitions + learner.feedback.unsent == 2 * 8 * 16, (graphs, transitions, learner.feedback.unsent)
    on = {(u.shard, int(u.index[0])): u.td_abs for u in sent["on"]}
    off = {(u.shard, int(u.index[0])): u.td_abs for u in sent["off"]}
    both = set(on) & set(off)
    assert len(both) >= 8, (sorted(on), sorted(off))  # nothing lost on the way, at least the first epoch's
    for key in both:
        np.testing.assert_allclose(on[key], off[key], rtol=1e-3, atol=1e-4)
