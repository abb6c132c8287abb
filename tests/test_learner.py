"""The loss on a hand example, gradient accumulation, precision and the learner's state (no Ray)."""

import io
import re
import threading

import numpy as np
import pytest
import torch
from torch import nn

from raypex.cluster.bench.throughput import CycledFeed
from raypex.learner import policy_file
from raypex.learner.cpu_features import bf16_units_in, cpu_has_bf16_units
from raypex.learner.dqn_step import DQNStep
from raypex.learner.learner import Learner
from raypex.learner.loss_scale import DeviceLossScale
from raypex.learner.losses import double_dqn_loss
from raypex.learner.policy_file import PolicyFileError, export_policy_archive, load_policy
from raypex.learner.precision import PrecisionPolicy, make_precision, resolve_precision
from raypex.learner.settings import LearnerSettings
from raypex.replay.contracts import Weights
from raypex.replay.priorities import BetaSchedule, PrioritySettings
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay


class TableQ(nn.Module):
    """Q-values looked up from a fixed table by an integer state stored in obs[:, 0]."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table, dtype=torch.float32))

    def forward(self, obs):
        return self.table[obs[:, 0].long()]


def test_double_dqn_loss_on_a_hand_example():
    online = TableQ([[1.0, 2.0], [3.0, 0.5], [0.0, 4.0]])
    target = TableQ([[10.0, 20.0], [6.0, 8.0], [5.0, 7.0]])
    obs = torch.tensor([[0.0], [1.0]])
    next_obs = torch.tensor([[1.0], [2.0]])
    action = torch.tensor([1, 0])
    returns = torch.tensor([1.0, 0.5])
    discount = torch.tensor([0.5, 0.0])  # second transition terminated
    weight = torch.ones(2)
    out = double_dqn_loss(online, target, obs, action, returns, discount, next_obs, weight, huber_delta=1.0)
    # transition 0: Q=2; online picks argmax over state 1 -> action 0; target Q(1,0)=6; y = 1 + 0.5*6 = 4
    #   td = 2 - 4 = -2 -> huber = 1*(2 - 0.5) = 1.5
    # transition 1: Q=3; terminal: y = 0.5; td = 2.5 -> huber = 2.5 - 0.5 = 2.0
    assert out.td_error.tolist() == pytest.approx([-2.0, 2.5])
    assert out.loss.item() == pytest.approx((1.5 + 2.0) / 2)
    assert out.q_mean.item() == pytest.approx(2.5)
    plain = double_dqn_loss(online, target, obs, action, returns, discount, next_obs, weight, 1.0, double_dqn=False)
    # plain DQN: max over target(1) = 8 -> y = 5, td = -3 -> huber 2.5
    assert plain.td_error.tolist() == pytest.approx([-3.0, 2.5])


def test_importance_weights_scale_each_term():
    online = TableQ([[0.0, 0.0]])
    target = TableQ([[0.0, 0.0]])
    obs = torch.zeros(2, 1)
    args = (obs, torch.tensor([0, 1]), torch.tensor([0.5, 1.5]), torch.zeros(2), obs)  # terms 0.125 and 1.0
    unweighted = double_dqn_loss(online, target, *args, torch.ones(2), huber_delta=1.0)
    first = double_dqn_loss(online, target, *args, torch.tensor([2.0, 0.0]), huber_delta=1.0)
    second = double_dqn_loss(online, target, *args, torch.tensor([0.0, 2.0]), huber_delta=1.0)
    assert unweighted.loss.item() == pytest.approx((0.125 + 1.0) / 2)  # 0.5 * 0.5^2, then 1.5 - 0.5
    assert first.loss.item() == pytest.approx(2 * 0.125 / 2)
    assert second.loss.item() == pytest.approx(2 * 1.0 / 2)


def settings(**overrides) -> LearnerSettings:
    values = {
        "obs_shape": (4,), "obs_dtype": "float32", "num_actions": 3, "hidden": [32, 32], "dueling": True,
        "double_dqn": True, "huber_delta": 1.0, "lr": 1e-3, "adam_eps": 1e-8, "max_grad_norm": 1e9,
        "micro_batch": 16, "accumulation_steps": 1, "target_update": "hard", "target_update_every": 5,
        "target_tau": 0.01, "updates_per_epoch": 3, "broadcast_every_epochs": 1, "precision": "fp32",
        "compile": False, "seed": 0,
    }
    values.update(overrides)
    return LearnerSettings(**values)


def random_batch(rng: np.random.Generator, size: int) -> dict:
    return {
        "obs": rng.normal(size=(size, 4)).astype(np.float32),
        "action": rng.integers(0, 3, size).astype(np.int64),
        "return": rng.normal(size=size).astype(np.float32),
        "discount": rng.choice([0.0, 0.97], size).astype(np.float32),
        "next_obs": rng.normal(size=(size, 4)).astype(np.float32),
    }


def filled_replay(s: LearnerSettings, rng: np.random.Generator, size: int = 256, shards: int = 2) -> ShardedReplay:
    """A replay of `shards` shards holding `size` random transitions each (pixels as uint8
    stacks), prioritized as `s` says, with the limiter off."""
    prioritized = s.prioritized
    replay = ShardedReplay(shards, StorageSpec(size, s.obs_shape, s.obs_dtype), SamplesPerInsertLimiter(0.0, 1, 1), 0,
                           PrioritySettings() if prioritized else None, BetaSchedule(0.4, 100, 1) if prioritized else None)
    for i in range(shards):
        chunk = random_batch(rng, size)
        if s.obs_dtype == "uint8":
            chunk["obs"], chunk["next_obs"] = rng.integers(0, 256, (2, size, *s.obs_shape), dtype=np.uint8)
        chunk["priority"] = rng.random(size).astype(np.float32)
        replay.add(i, chunk)
    return replay


def learner_for(s: LearnerSettings, published: list | None = None, seed: int = 1) -> Learner:
    """A CPU learner of `s` over a filled replay."""
    rng = np.random.default_rng(seed)
    return Learner(s, torch.device("cpu"), filled_replay(s, rng), (published if published is not None else []).append)


def stacked(batches: list[dict]) -> dict[str, torch.Tensor]:
    """Micro-batches as one update's [G, B, ...] tensors."""
    return {name: torch.from_numpy(np.stack([b[name] for b in batches])) for name in batches[0]}


def grads_after(learner: Learner, batches: list[dict]) -> list[torch.Tensor]:
    """The (unclipped: max_grad_norm is huge) gradients of one update over `batches`."""
    learner.step.optimizer.zero_grad(set_to_none=True)
    learner.step.device_update(stacked(batches))
    return [p.grad.clone() for p in learner.step.online.parameters()]


def test_k_micro_batches_give_the_gradient_of_one_batch_k_times_larger():
    rng = np.random.default_rng(0)
    micro = [random_batch(rng, 16) for _ in range(4)]
    whole = {k: np.concatenate([b[k] for b in micro]) for k in micro[0]}
    accumulated = learner_for(settings(accumulation_steps=4))
    single = learner_for(settings(accumulation_steps=1, micro_batch=64))
    single.step.online.load_state_dict(accumulated.step.online.state_dict())
    single.step.target.load_state_dict(accumulated.step.target.state_dict())
    for got, want in zip(grads_after(accumulated, micro), grads_after(single, [whole])):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def make_learner(**overrides):
    published: list[Weights] = []
    return learner_for(settings(**overrides), published), published


def test_epoch_updates_publishes_and_syncs_target():
    learner, published = make_learner(accumulation_steps=2, updates_per_epoch=5, target_update_every=5)
    before = [p.detach().clone() for p in learner.step.online.parameters()]
    metrics = learner.train_epoch()
    assert metrics.updates == 5 and learner.updates == 5
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.step.online.parameters()))
    assert [w.version for w in published] == [1]
    assert set(published[0].arrays) == set(learner.step.online.state_dict())
    for t, o in zip(learner.step.target.parameters(), learner.step.online.parameters()):
        assert torch.equal(t, o)  # hard copy at update 5
    assert np.isfinite(metrics.losses["td_loss"]) and metrics.samples_per_update == 32


def test_a_layer_normalized_q_network_trains_its_norms_and_publishes_them_to_the_collectors_network():
    """network.critic_norm layer_norm: the learner's Q-network trains the LayerNorms' scales and
    shifts, and the weights it publishes load into the network a collector builds from its settings."""
    from raypex.learner.networks import build_q_network
    from raypex.learner.weights import load_arrays

    learner, published = make_learner(critic_norm="layer_norm", updates_per_epoch=5)
    norms = [name for name in learner.step.online.state_dict() if name.startswith("norms.")]
    assert len(norms) == 4  # scale and shift of each of the two hidden layers
    before = {name: learner.step.online.state_dict()[name].clone() for name in norms}
    learner.train_epoch()
    assert all(not torch.equal(before[name], learner.step.online.state_dict()[name]) for name in norms)
    acting = build_q_network((4,), 3, [32, 32], True, "float32", layer_norm=True)
    load_arrays(acting, published[-1].arrays)
    obs = torch.randn(64, 4)
    with torch.inference_mode():
        torch.testing.assert_close(acting(obs), learner.step.online(obs))


def test_polyak_moves_the_target_tau_of_the_way_to_the_updated_online_network():
    learner, _ = make_learner(target_update="polyak", target_tau=0.25, updates_per_epoch=1)
    with torch.no_grad():  # a target apart from the online network, so the mix is visible
        for t in learner.step.target.parameters():
            t.add_(1.0)
    before = [t.detach().clone() for t in learner.step.target.parameters()]
    learner.train_epoch()
    for t, t0, o in zip(learner.step.target.parameters(), before, learner.step.online.parameters(), strict=True):
        torch.testing.assert_close(t, t0 + 0.25 * (o - t0))
        assert not torch.equal(t, t0)


def test_bf16_autocast_trains_on_cpu():
    learner, _ = make_learner(precision="bf16", updates_per_epoch=4)
    assert learner.step.precision.name == "bfloat16"
    metrics = learner.train_epoch()
    assert np.isfinite(metrics.losses["td_loss"])
    assert all(p.dtype == torch.float32 for p in learner.step.online.parameters())  # master weights fp32


def test_fp16_is_refused_on_cpu():
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        make_precision("fp16", torch.device("cpu"))


def test_warmup_leaves_weights_unchanged():
    learner, _ = make_learner()
    before = {k: v.clone() for k, v in learner.step.online.state_dict().items()}
    learner.warmup()
    assert all(torch.equal(before[k], v) for k, v in learner.step.online.state_dict().items())
    assert all(p.grad is None for p in learner.step.online.parameters())


def test_state_roundtrip_resumes_counters_and_weights():
    learner, _ = make_learner()
    learner.train_epoch()
    data = learner.state_bytes()
    fresh, _ = make_learner(seed=5)
    fresh.load_state_bytes(data)
    assert (fresh.updates, fresh.epochs, fresh.version) == (learner.updates, learner.epochs, learner.version)
    for a, b in zip(fresh.step.online.parameters(), learner.step.online.parameters()):
        assert torch.equal(a, b)


def test_a_resumed_learner_trains_with_its_own_learning_rate_not_the_checkpoints():
    """`--resume RUN learner.lr=...` and a Tune exploit that perturbs the rate: the optimizer's moments
    come from the checkpoint, the rate and epsilon from the settings."""
    from raypex.learner.algorithms.registry import algorithm

    learner, _ = make_learner()
    learner.train_epoch()
    fresh, _ = make_learner(lr=3e-2, adam_eps=1e-5)
    fresh.load_state_bytes(learner.state_bytes())
    (group,) = fresh.step.optimizer.param_groups
    assert (group["lr"], group["eps"]) == (3e-2, 1e-5) and fresh.step.optimizer.state  # moments kept
    kwargs = {"obs_shape": (3,), "num_actions": 0, "algo": "sac", "policy_delay": 1, "action_low": (-1.0,),
              "action_high": (1.0,), "target_update": "polyak"}
    sac = algorithm("sac")
    saved = sac.build_step(settings(**kwargs), torch.device("cpu")).state_dict()
    resumed = sac.build_step(settings(**kwargs, lr=7e-4), torch.device("cpu"))
    resumed.load_state_dict(saved)
    assert {group["lr"] for optimizer in resumed.optimizers() for group in optimizer.param_groups} == {7e-4}


def test_a_checkpoint_from_before_the_algorithm_steps_resumes_the_same_learner():
    """A DQN checkpoint of the layout raypex wrote before the steps were plug-ins (the networks,
    optimizer and scaler at the top level) restores the same networks and counters."""
    learner, _ = make_learner()
    learner.train_epoch()
    state = learner.get_state()
    old_layout = {**state.pop("step"), "counters": state["counters"], "torch_rng": state["torch_rng"]}
    fresh, _ = make_learner(seed=5)
    fresh.set_state(old_layout)
    assert fresh.updates == learner.updates > 0
    for a, b in zip(fresh.step.online.parameters(), learner.step.online.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_of_other_network_shapes_is_refused_in_one_line():
    """A resume whose networks differ from the checkpoint's (other network settings, or an older
    raypex's networks: the image encoder gained a projection) says so in one line, not torch's
    list of mismatches."""
    learner, _ = make_learner(hidden=[32, 32])
    other, _ = make_learner(hidden=[16, 16])
    with pytest.raises(ValueError) as refused:
        other.load_state_bytes(learner.state_bytes())
    said = str(refused.value)
    assert said.startswith("this checkpoint's networks do not fit this run's") and "size mismatch for" in said
    assert "\n" not in said


def test_exported_policy_takes_one_observation_or_a_batch(tmp_path):
    """policy.pt2: torch.export.load's program takes a float32 batch; load_policy takes one
    observation or a batch, numpy or torch, and says which shapes it takes when neither fits."""
    learner, _ = make_learner()
    path = tmp_path / "policy.pt2"
    path.write_bytes(learner.export_policy())
    obs = torch.randn(7, 4)
    with torch.inference_mode():
        expected = learner.step.online(obs)
        torch.testing.assert_close(torch.export.load(str(path)).module()(obs), expected)
    policy = load_policy(path)
    assert policy.obs_shape == (4,)
    torch.testing.assert_close(policy.q_values(obs.numpy()), expected)
    torch.testing.assert_close(policy.q_values(obs[3]), expected[3])
    assert policy.act(obs[3].numpy().astype(np.float64)).shape == () and policy.act(obs).shape == (7,)
    assert policy.act(obs[3]) == expected[3].argmax()
    with pytest.raises(ValueError, match=r"one observation of shape \[4\] or a batch \[B, 4\], got \[2, 5\]"):
        policy.q_values(torch.zeros(2, 5))
    # a policy.pt2 of the batch program alone (raypex before the archive held two) still takes one
    old = tmp_path / "old.pt2"
    torch.export.save(torch.export.load(str(path)), str(old))
    torch.testing.assert_close(load_policy(old).q_values(obs[3]), expected[3])
    # cut short in a copy, or a checkpoint under the policy's name: one line saying so
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(path.read_bytes()[:5000])
    checkpoint = tmp_path / "checkpoint.pt2"
    checkpoint.write_bytes(learner.state_bytes())
    for damaged in (cut, checkpoint):
        with pytest.raises(PolicyFileError, match=rf"^{re.escape(str(damaged))}: not a readable policy.pt2 .*: \S") as e:
            load_policy(damaged)
        assert "\n" not in str(e.value)


PIXELS = (4, 36, 36)  # the smallest frames the Nature CNN takes (as the test pixel env has)


def pixel_batch(rng: np.random.Generator, size: int) -> dict:
    """A replay batch as a frame storage serves it: uint8 stacks."""
    batch = random_batch(rng, size)
    batch["obs"] = rng.integers(0, 256, (size, *PIXELS), dtype=np.uint8)
    batch["next_obs"] = rng.integers(0, 256, (size, *PIXELS), dtype=np.uint8)
    return batch


def pixel_learner(**overrides):
    s = settings(**{"obs_shape": PIXELS, "obs_dtype": "uint8", "hidden": [64], "micro_batch": 8, **overrides})
    published: list[Weights] = []
    return learner_for(s, published, seed=2), published


def test_cnn_is_chosen_for_frame_stacks_and_scales_uint8_inside():
    learner, _ = pixel_learner()
    assert isinstance(learner.step.online.convs[0], nn.Conv2d)
    frames = torch.randint(0, 256, (3, *PIXELS), dtype=torch.uint8)
    with torch.inference_mode():
        # uint8 in, scaled to [0, 1] inside: the same Q-values as the float32 0..255 frames.
        torch.testing.assert_close(learner.step.online(frames), learner.step.online(frames.float()))


def test_cnn_accumulation_equals_one_large_batch():
    rng = np.random.default_rng(3)
    micro = [pixel_batch(rng, 8) for _ in range(3)]
    whole = {k: np.concatenate([b[k] for b in micro]) for k in micro[0]}
    accumulated, _ = pixel_learner(accumulation_steps=3)
    single, _ = pixel_learner(accumulation_steps=1, micro_batch=24)
    single.step.online.load_state_dict(accumulated.step.online.state_dict())
    single.step.target.load_state_dict(accumulated.step.target.state_dict())
    for got, want in zip(grads_after(accumulated, micro), grads_after(single, [whole])):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_cnn_trains_in_bf16_on_cpu_from_uint8_batches_and_exports(tmp_path):
    learner, published = pixel_learner(precision="bf16", accumulation_steps=2, updates_per_epoch=2)
    learner.warmup()
    before = [p.detach().clone() for p in learner.step.online.parameters()]
    metrics = learner.train_epoch()
    assert np.isfinite(metrics.losses["td_loss"]) and published[-1].version == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.step.online.parameters()))
    program = torch.export.load(io.BytesIO(learner.export_policy())).module()
    frames = torch.randint(0, 256, (5, *PIXELS))
    with torch.inference_mode():
        expected = learner.step.online(frames.float())
        torch.testing.assert_close(program(frames.float()), expected)  # torch.export.load's: float32
    path = tmp_path / "policy.pt2"
    path.write_bytes(learner.export_policy())
    single = load_policy(path).q_values(frames[2].to(torch.uint8).numpy())  # one uint8 stack, as the env gives
    torch.testing.assert_close(single, expected[2])


def test_the_exporter_warmed_on_a_thread_is_started_once_and_waited_for_by_the_export(tmp_path):
    """What a run's end does (LearnerActor.warm_exporter, then export_policy): the warm-up runs on
    one thread however often it is asked for, and the export after it writes a policy that acts."""
    policy_file.warm_exporter()
    thread = policy_file._warming
    policy_file.warm_exporter()
    assert thread is not None and policy_file._warming is thread
    network = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    path = tmp_path / "policy.pt2"
    path.write_bytes(export_policy_archive(network, (4,)))
    assert not thread.is_alive()
    obs = torch.randn(4)
    with torch.inference_mode():
        torch.testing.assert_close(load_policy(path).q_values(obs.numpy()), network(obs[None])[0])


def test_the_warming_thread_is_published_only_once_started(monkeypatch):
    """warm_exporter runs on the learner actor's control thread while export_policy may already run
    on its default one (a run that ends at once): the export must never find a thread it cannot
    join yet (seen in CI: "cannot join thread before it is started")."""
    monkeypatch.setattr(policy_file, "_warming", None)
    published_at_start = []
    start = threading.Thread.start

    def recording_start(thread):
        published_at_start.append(policy_file._warming)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    policy_file.warm_exporter()
    assert published_at_start == [None] and policy_file._warming is not None


def scaled_step(learner: Learner) -> tuple[DQNStep, DeviceLossScale]:
    """A DQN step like the learner's, starting from its weights, with fp16-style loss scaling
    bolted on (fp32 maths, on CPU)."""
    scaler = DeviceLossScale(torch.device("cpu"), init_scale=1024.0, growth_interval=2)
    step = DQNStep(learner.s, torch.device("cpu"), precision=PrecisionPolicy("cpu", None, scaler))
    step.online.load_state_dict(learner.step.online.state_dict())
    step.target.load_state_dict(learner.step.target.state_dict())
    return step, scaler


def test_loss_scaling_gives_the_unscaled_update_and_grows_after_clean_steps():
    rng = np.random.default_rng(5)
    batch = stacked([random_batch(rng, 16), random_batch(rng, 16)])
    scaled, _ = make_learner(accumulation_steps=2)
    plain, _ = make_learner(accumulation_steps=2)
    step, scaler = scaled_step(scaled)
    for _ in range(2):
        step(batch)
        plain.update(batch)
    for a, b in zip(step.online.parameters(), plain.step.online.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert scaler.get_scale() == 2048.0  # two clean steps at growth_interval 2: doubled once


def test_an_overflowing_update_is_skipped_on_the_device_and_the_scale_backs_off():
    rng = np.random.default_rng(6)
    learner, _ = make_learner()
    step, scaler = scaled_step(learner)
    batch = stacked([random_batch(rng, 16)])
    batch["return"][0, 3] = float("nan")  # what an fp16 overflow leaves: non-finite gradients
    before = [p.detach().clone() for p in step.online.parameters()]
    step(batch)
    assert float(scaler.found_inf) == 1.0 and scaler.get_scale() == 512.0
    assert all(torch.equal(a, b) for a, b in zip(before, step.online.parameters()))
    assert all(float(s["step"]) == 0 for s in step.optimizer.state.values())  # Adam's count undone too
    restored = DeviceLossScale(torch.device("cpu"))
    restored.load_state_dict(scaler.state_dict())
    assert restored.get_scale() == 512.0 and restored.growth_interval == 2


def test_share_online_pass_changes_the_cost_not_the_loss():
    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    from raypex.learner.networks import build_q_network

    online, target = build_q_network((4,), 3, [16], True), build_q_network((4,), 3, [16], True)
    b = {k: torch.from_numpy(v) for k, v in random_batch(rng, 32).items()}
    args = (online, target, b["obs"], b["action"], b["return"], b["discount"], b["next_obs"], None, 1.0, True)
    shared, separate = double_dqn_loss(*args, share_online_pass=True), double_dqn_loss(*args, share_online_pass=False)
    torch.testing.assert_close(shared.loss, separate.loss)
    grads = [torch.autograd.grad(out.loss, list(online.parameters())) for out in (shared, separate)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_warmup_puts_back_adam_state_loaded_from_a_checkpoint():
    learner, _ = make_learner()
    learner.train_epoch()
    moments = {k: v.clone() for k, v in learner.step.optimizer.state_dict()["state"][0].items()}
    learner.warmup()
    for name, value in learner.step.optimizer.state_dict()["state"][0].items():
        assert torch.equal(value, moments[name]), name


def test_a_prioritized_update_weighs_its_loss_and_gives_the_replay_each_transitions_error():
    s = settings(prioritized=True, accumulation_steps=4, updates_per_epoch=1)
    learner = learner_for(s, seed=4)
    replay = learner.replay
    before = learner.step.online.state_dict(), learner.step.target.state_dict()
    online, target = learner_for(s), learner_for(s)
    online.step.online.load_state_dict(before[0])
    target.step.online.load_state_dict(before[1])
    applied_before = sum(st.priorities.updates_applied for st in replay.stats())
    learner.train_epoch()
    learner.feedback.flush()  # errors are applied a few updates at a time; the run's end applies the rest
    keys = learner.feed.keys
    assert keys.row.shape == (4, 16)
    # the transitions drawn, read back from their shards, and their |TD error| under the networks before
    fields = {name: np.stack([replay.shards[shard].storage.gather(np.array([row]))[name][0]
                              for shard, row in zip(keys.shard.ravel(), keys.row.ravel())])
              for name in ("obs", "action", "return", "discount", "next_obs")}
    t = {k: torch.from_numpy(v) for k, v in fields.items()}
    out = double_dqn_loss(online.step.online, target.step.online, t["obs"], t["action"], t["return"], t["discount"],
                          t["next_obs"], None, 1.0)
    mass = replay.shards[0].priorities.mass(out.td_error.abs().detach().numpy())
    stamps_now = np.array([replay.shards[sh].priorities.stamps[r] for sh, r in zip(keys.shard.ravel(), keys.row.ravel())])
    assert (stamps_now == keys.stamp.ravel()).all()  # nothing overwritten: every error applies
    got = np.array([replay.shards[sh].priorities.masses()[r] for sh, r in zip(keys.shard.ravel(), keys.row.ravel())])
    np.testing.assert_allclose(got, mass, rtol=1e-4)
    assert sum(st.priorities.updates_applied for st in replay.stats()) - applied_before == 64
    assert learner.feedback.unsent == 0


def test_importance_weights_of_zero_leave_the_network_unchanged():
    rng = np.random.default_rng(5)
    s = settings(prioritized=True, updates_per_epoch=2)

    def weighted(weight: float) -> dict[str, torch.Tensor]:
        batch = random_batch(rng, 16)
        batch["weight"] = np.full(16, weight, np.float32)
        return stacked([batch])

    learner = learner_for(s)
    learner.feed = CycledFeed([weighted(0.0)], on_device=False)
    before = [p.detach().clone() for p in learner.step.online.parameters()]
    learner.train_epoch()
    assert all(torch.equal(a, b) for a, b in zip(before, learner.step.online.parameters()))
    learner.feed = CycledFeed([weighted(0.5)], on_device=False)
    learner.train_epoch()
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.step.online.parameters()))


def test_the_host_adam_steps_as_torch_adam_does_and_reads_its_checkpoints():
    """A CPU learner's HostAdam (no torch.optim, whose first step imports torch._dynamo: 1.1 s of
    start-up) against fused torch.optim.Adam: the same parameters after steps, a skipped step
    where found_inf is 1, and each one's state_dict loaded by the other."""
    from raypex.learner.host_adam import HostAdam

    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    host = HostAdam(ours, lr=1e-2, eps=1e-8)
    reference = torch.optim.Adam(theirs, lr=1e-2, eps=1e-8, fused=True)
    for step in range(4):
        grads = [torch.randn_like(p) for p in ours]
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        if step == 2:  # an fp16 overflow: both skip, the step count included
            host.found_inf = reference.found_inf = torch.ones(())
        host.step()
        reference.step()
        host.found_inf = reference.found_inf = None
        host.zero_grad()
        reference.zero_grad()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)
    assert float(host.state[ours[0]]["step"]) == 3.0
    again = HostAdam([torch.nn.Parameter(p.detach().clone()) for p in ours], lr=1e-2, eps=1e-8)
    again.load_state_dict(reference.state_dict())
    back = torch.optim.Adam([torch.nn.Parameter(p.detach().clone()) for p in ours], lr=1e-2, fused=True)
    back.load_state_dict(host.state_dict())
    for a, b in zip(again.state_dict()["state"].values(), back.state_dict()["state"].values()):
        assert set(a) == set(b) == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.allclose(a[key], b[key], atol=1e-7) for key in a)
    with pytest.raises(ValueError, match="optimizer state for 2 parameters, this one has 1"):
        HostAdam([torch.nn.Parameter(torch.zeros(1))], lr=1e-2, eps=1e-8).load_state_dict(host.state_dict())


def test_auto_precision_on_a_cpu_is_bf16_only_where_the_cpu_has_bf16_units():
    """Emulated bf16 trained the Nature CNN 9x slower than fp32 on an AVX2-only EPYC (BENCHMARKS.md (git history))."""
    sapphire = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
    epyc = "processor\t: 0\nflags\t\t: fpu avx avx2 sha_ni\n"
    assert bf16_units_in(sapphire) and not bf16_units_in(epyc) and not bf16_units_in("")
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, pixels=True) == ("bf16" if cpu_has_bf16_units() else "fp32")
    assert resolve_precision("auto", cpu, pixels=False) == "fp32"
    assert resolve_precision("auto", cpu, pixels=False, wide_actor_critic=True) == ("bf16" if cpu_has_bf16_units() else "fp32")
    assert resolve_precision("auto", torch.device("cuda"), pixels=False, wide_actor_critic=True) == "fp32"
    assert resolve_precision("auto", torch.device("cuda"), pixels=True) == "fp16"
    assert resolve_precision("bf16", cpu, pixels=True) == "bf16"  # asked for: kept


def test_actor_critic_heads_stay_fp32_under_bf16_autocast():
    """bf16 has 8 bits of mantissa: Q-values near 500 would move in steps of 2 (learner/precision.py
    fp32_head). Under bf16 autocast the hidden layers run in bf16 and the heads in fp32."""
    from raypex.learner.actor_critic_networks import ActorNetwork, TwinCritic

    torch.manual_seed(0)
    critic, actor = TwinCritic((17,), 6, [32, 32]), ActorNetwork((17,), 6, [32, 32], gaussian=True)
    with torch.no_grad():
        critic.q1_out.bias.fill_(500.0)
    obs, action = torch.randn(16, 17), torch.rand(16, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q1, _ = critic(obs, action)
        features = critic.q1_torso(torch.cat([obs, action], 1))
        sampled, log_prob = actor.sample(obs, torch.randn(16, 6))
    assert features.dtype == torch.bfloat16 and q1.dtype == sampled.dtype == log_prob.dtype == torch.float32
    expected = (features.float() @ critic.q1_out.weight.T + critic.q1_out.bias).squeeze(1)
    assert torch.allclose(q1, expected, atol=1e-4)
    assert float((q1 - q1.bfloat16().float()).abs().max().detach()) > 0.1  # precision a bf16 head would have rounded off
