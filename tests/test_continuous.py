"""TD3 and SAC: the losses against hand-computed values, action scaling both ways, the numpy actor
against the torch one, and the action spaces and settings that are refused in one line."""

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from raypex.actors.action_scaling import ActionScale
from raypex.actors.action_spaces import action_fields
from raypex.actors.continuous_acting import ActorPolicy
from raypex.actors.envs import EnvSpec, UnsupportedEnv, check_algo_fits, inspect_env
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.learner.actor_critic_networks import ActorNetwork
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights
from raypex.learner.sac_loss import sac_actor_and_temperature_loss, sac_critic_loss
from raypex.learner.td3_loss import td3_actor_loss, td3_critic_loss
from tests.test_video import decode_apng


class ConstantCritic(nn.Module):
    """Q1 = sum(obs) + 2a, Q2 = sum(obs) + a: easy to compute by hand."""

    support = None  # scalar critics (TwinCritic's categorical support: learner/categorical_critic.py)

    def forward(self, obs, action):
        return obs.sum(1) + 2 * action[:, 0], obs.sum(1) + action[:, 0]


class LinearActor(nn.Module):
    """actor(s) = tanh(s[0]); sample: a fixed action and log-probability."""

    def forward(self, obs):
        return torch.tanh(obs[:, :1])

    def sample(self, obs, noise):
        return torch.full((len(obs), 1), 0.5), torch.full((len(obs),), -1.0)


OBS = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
NEXT = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
ACTION = torch.tensor([[0.5], [-1.0]])
RETURN = torch.tensor([1.0, 0.0])
DISCOUNT = torch.tensor([0.9, 0.0])  # the second transition terminated


def test_td3_critic_loss_matches_a_hand_computation():
    noise = torch.tensor([[0.9], [0.0]])  # clipped to 0.5
    out = td3_critic_loss(ConstantCritic(), ConstantCritic(), LinearActor(), OBS, ACTION, RETURN, DISCOUNT, NEXT,
                          None, noise, noise_clip=0.5)
    # next action 1: clip(tanh(1) + 0.5, -1, 1) = 1; Q1' = 2 + 2 = 4, Q2' = 2 + 1 = 3 -> min 3
    target = torch.tensor([1.0 + 0.9 * 3.0, 0.0])
    q1, q2 = torch.tensor([2.0, -1.0]), torch.tensor([1.5, 0.0])
    expected = ((q1 - target) ** 2 + (q2 - target) ** 2).mean()
    assert torch.allclose(out.loss, expected) and torch.allclose(out.td_error, q1 - target)
    weighted = td3_critic_loss(ConstantCritic(), ConstantCritic(), LinearActor(), OBS, ACTION, RETURN, DISCOUNT,
                               NEXT, torch.tensor([1.0, 0.0]), noise, noise_clip=0.5)
    assert torch.allclose(weighted.loss, ((q1[0] - target[0]) ** 2 + (q2[0] - target[0]) ** 2) / 2)


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_crossq_critics_give_the_target_critics_loss_and_gradients_when_the_batch_does_not_matter(algo):
    """With no target critics (CrossQ) the next values come from the critics themselves, in one
    forward over (s, a) and (s', a'): for critics without batch statistics that is the loss, TD
    errors and gradients of a target network equal to them, and nothing flows through the target."""
    import copy

    from raypex.learner.actor_critic_networks import TwinCritic

    torch.manual_seed(0)
    critic = TwinCritic((2,), 1, [8])
    seen = []
    critic.register_forward_hook(lambda module, args, out: seen.append(len(args[0])))

    def loss(critic_target):
        if algo == "td3":
            return td3_critic_loss(critic, critic_target, LinearActor(), OBS, ACTION, RETURN, DISCOUNT, NEXT, None,
                                   torch.tensor([[0.9], [0.0]]), noise_clip=0.5)
        return sac_critic_loss(critic, critic_target, LinearActor(), torch.tensor(0.2), OBS, ACTION, RETURN, DISCOUNT,
                               NEXT, None, torch.zeros(2, 1))

    joint = loss(None)
    joint.loss.backward()
    joint_grads = [p.grad.clone() for p in critic.parameters()]
    critic.zero_grad()
    assert seen == [4]  # one forward of both halves
    apart = loss(copy.deepcopy(critic).requires_grad_(False))
    apart.loss.backward()
    assert torch.allclose(joint.loss, apart.loss) and torch.allclose(joint.td_error, apart.td_error)
    assert all(torch.allclose(a, p.grad) for a, p in zip(joint_grads, critic.parameters(), strict=True))


def test_batch_renormalization_uses_the_batch_then_corrects_it_towards_the_running_statistics():
    from raypex.learner.batch_renorm import EPS, MOMENTUM, BatchRenorm

    x = torch.randn(256, 3, generator=torch.Generator().manual_seed(0)) * torch.tensor([0.5, 2.0, 9.0]) + 3.0
    mean, var = x.mean(0), x.var(0, unbiased=False)
    warming = BatchRenorm(3)
    out = warming(x)  # the warm-up: batch normalization
    assert torch.allclose(out, (x - mean) / (var + EPS).sqrt(), atol=1e-5)
    assert torch.allclose(warming.running_mean, MOMENTUM * mean) and int(warming.steps) == 1
    assert torch.allclose(warming.running_var, 1 + MOMENTUM * (var * 256 / 255 - 1))  # unbiased, as BatchNorm's
    renorm = BatchRenorm(3, warmup_steps=0)  # running statistics 0 and 1: r and d clip at 3 and 5 here
    running_std = (1 + EPS) ** 0.5
    r = ((var + EPS).sqrt() / running_std).clamp(1 / 3, 3)
    d = (mean / running_std).clamp(-5, 5)
    assert torch.allclose(renorm(x), (x - mean) / (var + EPS).sqrt() * r + d, atol=1e-5)
    renorm.eval()  # what the actor's loss reads: the running statistics alone
    stats = renorm.running_mean.clone(), renorm.running_var.clone()
    assert torch.allclose(renorm(x), (x - stats[0]) / (stats[1] + EPS).sqrt())
    assert torch.equal(renorm.running_mean, stats[0]) and int(renorm.steps) == 1


def test_td3_actor_loss_is_minus_the_first_critic_at_the_actors_action():
    loss = td3_actor_loss(LinearActor(), ConstantCritic(), OBS)
    assert math.isclose(float(loss), -float((OBS.sum(1) + 2 * torch.tanh(OBS[:, 0])).mean()), rel_tol=1e-6)


def test_sac_losses_match_a_hand_computation():
    alpha = torch.tensor(0.2)
    out = sac_critic_loss(ConstantCritic(), ConstantCritic(), LinearActor(), alpha, OBS, ACTION, RETURN, DISCOUNT,
                          NEXT, None, torch.zeros(2, 1))
    # next action 0.5, log p -1: min(Q1', Q2') = sum(s') + 0.5 -> [2.5, 0.5]; soft value + 0.2
    target = torch.tensor([1.0 + 0.9 * (2.5 + 0.2), 0.0])
    q1, q2 = torch.tensor([2.0, -1.0]), torch.tensor([1.5, 0.0])
    assert torch.allclose(out.loss, ((q1 - target) ** 2 + (q2 - target) ** 2).mean())
    log_alpha = torch.tensor(math.log(0.2), requires_grad=True)
    actor_loss, temperature_loss = sac_actor_and_temperature_loss(LinearActor(), ConstantCritic(), log_alpha, OBS,
                                                                  torch.zeros(2, 1), target_entropy=-1.0)
    assert torch.allclose(actor_loss, (0.2 * -1.0 - (OBS.sum(1) + 0.5)).mean())
    assert torch.allclose(temperature_loss, -(log_alpha * (-1.0 - 1.0)))


def test_the_squashed_gaussian_log_probability_matches_the_change_of_variables():
    torch.manual_seed(0)
    actor = ActorNetwork((3,), 2, [8], gaussian=True)
    obs, noise = torch.randn(4, 3), torch.randn(4, 2)
    action, log_prob = actor.sample(obs, noise)
    features = actor.torso(obs)
    mean, raw = actor.mean(features), actor.log_std(features)
    std = (-5.0 + 3.5 * (raw.tanh() + 1)).exp()
    pre = mean + std * noise
    expected = torch.distributions.Normal(mean, std).log_prob(pre).sum(1) - torch.log(1 - torch.tanh(pre) ** 2).sum(1)
    assert torch.allclose(action, torch.tanh(pre)) and torch.allclose(log_prob, expected, atol=1e-4)


def test_actions_scale_to_the_env_bounds_and_back():
    scale = ActionScale((-2.0, 0.0), (2.0, 1.0))
    unit = np.array([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0], [3.0, -7.0]], np.float32)
    env = scale.to_env(unit)
    assert np.allclose(env, [[-2, 0], [0, 0.5], [2, 1], [2, 0]])  # outside [-1, 1]: clipped first
    assert np.allclose(scale.to_unit(env[:3]), unit[:3])
    with pytest.raises(ValueError, match="low < high"):
        ActionScale((1.0,), (1.0,))


def test_running_observation_statistics_merge_batches_exactly_and_the_acting_graph_applies_them():
    from raypex.learner.obs_norm import RunningObsNorm

    rng = np.random.default_rng(0)
    batches = [rng.normal([5.0, -3.0, 0.0], [10.0, 0.1, 1.0], size=(size, 3)).astype(np.float32) for size in (7, 64, 1)]
    norm = RunningObsNorm(3)
    for batch in batches:
        norm.update(torch.from_numpy(batch))
    every = np.concatenate(batches)
    assert np.allclose(norm.mean.numpy(), every.mean(0), rtol=1e-4, atol=1e-4)
    # exact but for the prior (mean 0, var 1, weight 1e-4 of a sample), which moves a var of 0.008 by 1.4e-5
    assert np.allclose(norm.var.numpy(), every.var(0), rtol=1e-3, atol=5e-5)
    scaled = norm(torch.tensor([[5.0, -3.0, 100.0]]))
    assert abs(float(scaled[0, 0])) < 0.2 and float(scaled[0, 2]) == 10.0  # clipped
    torch.manual_seed(2)
    actor = ActorNetwork((3,), 2, [16], gaussian=False, obs_norm=True)
    actor.encoder.load_state_dict(norm.state_dict())
    obs = batches[1][:5]
    acting = ActorPolicy(False, 2, 0.0, np.random.default_rng(0))
    acting.load(Weights(1, export_arrays(actor), acting_graph=export_acting_graph(algorithm("td3"), actor, (3,), "float32")))
    with torch.no_grad():
        assert np.allclose(acting.act(obs, None, 0, explore=False)[0], actor(torch.from_numpy(obs)).numpy(), atol=1e-5)
    for option in ("network.obs_norm", "network.sale"):
        with pytest.raises(UnsupportedEnv, match=f"{option} is for flat observations; env.id 'Img-v0' has images"):
            check_algo_fits("td3", EnvSpec((3, 10, 10), "uint8", 0, action_low=(-1.0,), action_high=(1.0,)), "Img-v0",
                            flat_only=(option,))


@pytest.mark.parametrize("space, says", [
    (gym.spaces.MultiDiscrete([3, 2]), "MultiDiscrete action space of shape (2,)"),
    (gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), "Dict action space"),
    (gym.spaces.Box(-np.inf, np.inf, (2,)), "unbounded Box action space of shape (2,)"),
    (gym.spaces.Box(-1, 1, (2, 2)), "Box action space of shape (2, 2)"),
])
def test_action_spaces_raypex_cannot_learn_on_are_refused_in_one_line(space, says):
    with pytest.raises(UnsupportedEnv) as err:
        action_fields("Mine-v0", space)
    assert says in str(err.value) and "Discrete actions (algo.name dqn)" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_algo_and_an_action_space_that_do_not_fit_are_refused_naming_both():
    pendulum = inspect_env("Pendulum-v1", {})
    assert pendulum.action_dim == 1 and pendulum.action_low == (-2.0,)
    with pytest.raises(UnsupportedEnv, match="algo.name dqn needs Discrete actions; env.id 'Pendulum-v1' has a Box"):
        check_algo_fits("dqn", pendulum, "Pendulum-v1")
    with pytest.raises(UnsupportedEnv, match="algo.name sac needs a Box action space; env.id 'CartPole-v1' has 2"):
        check_algo_fits("sac", inspect_env("CartPole-v1", {}), "CartPole-v1")
    check_algo_fits("td3", EnvSpec((3, 10, 10), "uint8", 0, action_low=(-1.0,), action_high=(1.0,)), "Img-v0")
    check_algo_fits("sac", EnvSpec((4, 36, 36), "uint8", 0, frame_stack=4, action_low=(-1.0,), action_high=(1.0,)),
                    "Frames-v0")  # images and stacked frames: tests/test_continuous_images.py


@pytest.mark.parametrize("overrides, says", [
    (["algo.name=ppo"], "algo.name"),
    (["algo.name=sac", "replay.prioritized=true", "replay.initial_priority=td"], "initial_priority td"),
    (["network.obs_norm=true"], "network.obs_norm is for algo.name td3 and sac"),
    (["network.critic_norm=batch_renorm"], "network.critic_norm batch_renorm is not for algo.name dqn"),
    (["network.sale=true"], "network.sale is for algo.name td3 and sac"),
    (["algo.name=td3", "network.sale=true", "algo.n_step=3", "learner.target_update=hard"], "needs algo.n_step 1"),
    (["algo.name=td3", "network.sale=true", "algo.n_step=1"], "set learner.target_update hard"),
    (["algo.name=sac", "network.sale=true", "algo.n_step=1", "learner.target_update=hard", "network.obs_norm=true"],
     "network.sale goes with network.critic_norm none and network.obs_norm false"),
])
def test_settings_td3_and_sac_do_not_take_are_refused(overrides, says):
    with pytest.raises(ConfigError, match=says):
        load_config(None, overrides)


SALE = ["network.sale=true", "algo.n_step=1", "learner.target_update=hard"]


@pytest.mark.parametrize("algo, critic_norm, extra", [("td3", "none", []), ("sac", "none", []),
                                                      ("sac", "batch_renorm", []), ("td3", "none", SALE)],
                         ids=["td3", "sac", "crossq", "sale"])
def test_a_continuous_run_flows_collector_to_shard_to_learner_and_back_and_resumes(algo, critic_norm, extra):
    from pathlib import Path

    from raypex.cluster.local.wiring import build_local
    from raypex.cluster.plan.topology import plan_run

    config = load_config(Path("configs/pendulum.yaml"), [
        f"algo.name={algo}", "collectors.chunk_steps=4", "replay.min_size=256", "learner.updates_per_epoch=4",
        "replay.prioritized=true", "replay.initial_priority=max", "network.hidden=[32,32]",
        f"network.critic_norm={critic_norm}", *extra])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    run = build_local(plan_run(config, spec))
    for _ in range(5):
        for collector in run.collectors:
            collector.collect_chunk()
    stored = run.replay.shards[0].storage.columns["action"][: run.replay.shards[0].size]
    assert stored.dtype == np.float32 and stored.shape[1:] == (1,) and np.abs(stored).max() <= 1.0
    metrics = run.learner.train_epoch()
    assert metrics.updates_in_epoch == 4 and np.isfinite([metrics.losses["td_loss"], metrics.losses["actor_loss"]]).all()
    assert ("temperature" in metrics.losses) == (algo == "sac")
    td_abs = run.learner.step.td_abs  # the first critic's |TD errors|, what the feedback sends to the shards
    assert td_abs is not None and td_abs.shape == (1, 256) and float(td_abs.sum()) > 0
    for collector in run.collectors:
        collector.collect_chunk()
        assert collector.version == 1
    state = run.learner.state_bytes()
    again = build_local(plan_run(config, spec))
    again.learner.load_state_bytes(state)
    obs = np.zeros((2, 3), np.float32)
    ours, theirs = run.learner.step.actor, again.learner.step.actor
    assert torch.equal(ours(torch.from_numpy(obs)), theirs(torch.from_numpy(obs)))
    assert again.learner.updates == run.learner.updates and again.learner.step.updates == run.learner.step.updates
    critics = run.learner.step.critic, again.learner.step.critic
    assert critics[0].training and all(torch.equal(a, b) for a, b in zip(*(c.state_dict().values() for c in critics)))
    assert (run.learner.step.critic_target is None) == (critic_norm == "batch_renorm")


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_the_benchs_in_process_stages_step_box_action_envs(algo):
    """`raypex bench`'s in-process rows for a Box action space: env_raw, env_policy and the replay
    costs of --stage priorities (each once assumed Discrete actions and ended the bench with a
    traceback)."""
    from raypex.cluster.bench.local_stages import local_rates
    from raypex.cluster.plan.settings import collector_settings

    config = load_config(None, ["env.id=Pendulum-v1", f"algo.name={algo}", "env.num_envs=2"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    rates = local_rates(collector_settings(config, spec, 0), 0.05)
    assert rates.policy > 0 and rates.raw > 0 and rates.form == "onnx" and rates.phases["act"] > 0
    from raypex.cluster.bench.priority_costs import replay_costs

    small = load_config(None, ["env.id=Pendulum-v1", f"algo.name={algo}", "env.num_envs=2", "replay.capacity=512",
                               "replay.min_size=256", "learner.micro_batch=64"])
    costs = replay_costs(small, spec, 0.01)  # --stage priorities: chunks with no initial priorities start at max
    assert costs["prioritized"]["update_us"] > 0 and costs["uniform"]["sample_us"] > 0


def test_a_mujoco_evaluation_records_pictures_of_its_first_episode(monkeypatch):
    """MuJoCo envs get videos: states recorded while the episode runs, drawn afterwards offscreen."""
    from raypex.actors import mujoco_video
    from raypex.actors.evaluator import Evaluator

    evaluator = Evaluator("HalfCheetah-v5", {"max_episode_steps": 30}, 2, 0, max_episode_steps=27_000)
    returns = evaluator.evaluate(lambda obs: np.ones((len(obs), 6), np.float32), record=True)
    video = evaluator.video
    assert returns.shape == (2,) and video is not None
    assert (video.count, video.height, video.width, video.channels) == (30, *mujoco_video.SIZE, 3)
    count, frames = decode_apng(video.data)
    assert count == 30 and frames[0].shape == (*mujoco_video.SIZE, 3)
    assert frames[0].std() > 10 and np.abs(frames[-1].astype(int) - frames[0]).mean() > 0.5  # a scene, and it moves
    evaluator.evaluate(lambda obs: np.ones((len(obs), 6), np.float32))  # not recorded: the last video stays
    assert evaluator.video is video
    monkeypatch.setattr(mujoco_video, "MAX_PICTURES", 4)  # a long episode: evenly spaced states are drawn
    evaluator.evaluate(lambda obs: np.ones((len(obs), 6), np.float32), record=True)
    assert evaluator.video.count == 4  # every 8th of 30 states
    evaluator.close()


def continuous_learner(algo: str, device: torch.device, columns=None, images: bool = False, **overrides):
    """A TD3 or SAC Learner over two shards of the same random Pendulum-shaped data for the same
    seed (so the same draws), its columns where `columns` keeps them (None: host memory); with
    `images`, the observations are uint8 pictures [2, 12, 12] (PixelReach's) instead of 3 floats."""
    from raypex.learner.learner import Learner
    from raypex.replay.rate_limit import SamplesPerInsertLimiter
    from raypex.replay.shard import StorageSpec
    from raypex.replay.sharded import ShardedReplay
    from tests.test_learner import settings

    rng = np.random.default_rng(0)
    obs_shape, obs_dtype = ((2, 12, 12), "uint8") if images else ((3,), "float32")

    def observations() -> np.ndarray:
        if images:
            return rng.integers(0, 256, (512, *obs_shape)).astype(np.uint8)
        return rng.normal(size=(512, *obs_shape)).astype(np.float32)

    s = settings(obs_shape=obs_shape, obs_dtype=obs_dtype, num_actions=0, algo=algo, action_low=(-2.0,),
                 action_high=(2.0,), hidden=[32, 32], target_update=overrides.pop("target_update", "polyak"),
                 policy_delay=overrides.pop("policy_delay", 2 if algo == "td3" else 1), **overrides)
    replay = ShardedReplay(2, StorageSpec(512, obs_shape, obs_dtype, action_dim=1), SamplesPerInsertLimiter(0.0, 1, 1),
                           0, None, None, *([columns] if columns is not None else []))
    for shard in range(2):
        replay.add(shard, {"obs": observations(), "action": rng.uniform(-1, 1, (512, 1)).astype(np.float32),
                           "return": rng.normal(size=512).astype(np.float32),
                           "discount": rng.choice([0.0, 0.97], 512).astype(np.float32), "next_obs": observations()})
    return Learner(s, device, replay, lambda weights: None)


def test_the_learner_matrix_replay_gathers_box_actions_with_their_dimension():
    """The learner matrix's replay (the columns a CUDA learner gathers its batches from) stores
    float actions of the env's action_dim: it once stored Discrete ones, and every TD3/SAC variant
    of `python -m benchmarks.learner_matrix configs/pendulum.yaml` failed on the GPU box."""
    from benchmarks.learner_matrix import replay as matrix_replay
    from raypex.cluster.plan.settings import learner_settings
    from raypex.learner.replay_feed import gather_from
    from raypex.learner.synthetic import synthetic_index_batch

    config = load_config(Path("configs/pendulum.yaml"), ["learner.micro_batch=8", "learner.accumulation_steps=2"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    settings = learner_settings(config, spec)
    replay = matrix_replay(settings, torch.device("cpu"), spec)
    batch = gather_from(replay)(synthetic_index_batch(settings, replay, torch.device("cpu"), np.random.default_rng(0)))
    assert batch["action"].shape == (2, 8, 1) and str(batch["action"].dtype).endswith("float32")  # numpy columns on a CPU
    assert batch["obs"].shape == batch["next_obs"].shape == (2, 8, 3)


@pytest.mark.parametrize("images, obs_norm, critic_norm, sale", [
    (False, False, "none", False), (True, False, "none", False), (False, True, "none", False),
    (False, False, "batch_renorm", False), (False, False, "none", True)], ids=["flat", "images", "obs_norm", "crossq", "sale"])
def test_the_actor_critic_warm_up_snapshot_puts_every_tensor_and_the_noise_stream_back(images, obs_norm, critic_norm, sale):
    """What capture relies on (learner/cuda_graph.py): updates run during warm-up leave the
    networks (image encoders, observation statistics and batch renormalization's included), the
    three optimizers' state, the sums and the noise generator as they were."""
    from raypex.learner.cuda_graph import TrainingStateSnapshot, optimizer_state_tensors

    learner = continuous_learner("sac", torch.device("cpu"), images=images, accumulation_steps=2, obs_norm=obs_norm,
                                 critic_norm=critic_norm, sale=sale)
    step = learner.step
    learner.train_epoch()  # Adam has state now: restored, not zeroed
    before = [t.detach().clone() for t in step.training_tensors()]
    moments = [t.clone() for optimizer in step.optimizers() for t in optimizer_state_tensors(optimizer)]
    snapshot = TrainingStateSnapshot(step)
    generator_state = step.generator.get_state()
    next_noise = step.draw_noise()
    step.generator.set_state(generator_state)
    batch = learner.example_batch(np.random.default_rng(1))
    for _ in range(3):
        step(batch)
    assert not torch.equal(before[0], step.training_tensors()[0])
    snapshot.restore()
    assert all(torch.equal(a, b) for a, b in zip(before, step.training_tensors(), strict=True))
    now = [t for optimizer in step.optimizers() for t in optimizer_state_tensors(optimizer)]
    assert len(moments) == len(now) > 0 and all(torch.equal(a, b) for a, b in zip(moments, now))
    assert torch.equal(step.draw_noise(), next_noise)
    assert all(p.grad is None for p in step.actor_params + step.critic_params)


def test_compiled_critic_losses_train_as_the_eager_ones_do():
    """learner.compile: the warm-up compiles the critics' loss and puts back what it changed, and
    the compiled updates move every network as the eager ones do (same seed, same draws)."""
    runs = {}
    for compiled in (False, True):
        learner = continuous_learner("sac", torch.device("cpu"), critic_norm="batch_renorm", compile=compiled,
                                     critic_head="categorical", critic_range=(-10.0, 10.0), critic_bins=21,
                                     updates_per_epoch=4)
        before = [t.detach().clone() for t in learner.step.training_tensors()]
        learner.warmup()
        assert all(torch.equal(a, b) for a, b in zip(before, learner.step.training_tensors(), strict=True))
        metrics = [learner.train_epoch() for _ in range(2)]
        assert not torch.equal(before[0], learner.step.training_tensors()[0])  # trained, not left as built
        runs[compiled] = (learner, metrics)
        assert learner.compiled == compiled
    (eager, eager_metrics), (compiled, compiled_metrics) = runs[False], runs[True]
    for a, b in zip(eager.step.training_tensors(), compiled.step.training_tensors(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(eager_metrics, compiled_metrics, strict=True):
        assert a.losses["td_loss"] == pytest.approx(b.losses["td_loss"], rel=1e-4)


def test_the_actor_steps_every_policy_delay_updates():
    """TD3's paper's 2, SAC's 1 (the defaults, cluster/plan/settings.py policy_delay), CrossQ's 3."""
    for algo, delay, actor_updates in (("td3", 2, [False, True, False, True]), ("sac", 1, [True] * 4),
                                       ("sac", 3, [False, False, True, False])):
        learner = continuous_learner(algo, torch.device("cpu"), updates_per_epoch=1, policy_delay=delay)
        seen = []
        for _ in range(4):
            seen.append(learner.step.with_actor_next())
            before = [p.detach().clone() for p in learner.step.actor_params]
            learner.train_epoch()
            moved = any(not torch.equal(a, b) for a, b in zip(before, learner.step.actor_params))
            assert moved == seen[-1]
        assert seen == actor_updates and learner.step.updates == 4


@pytest.mark.parametrize("env_id,obs_dim,action_dim", [
    ("Pendulum-v1", 3, 1), ("MountainCarContinuous-v0", 2, 1), ("HalfCheetah-v5", 17, 6), ("Hopper-v5", 11, 3),
    ("Walker2d-v5", 17, 6), ("Ant-v5", 105, 8), ("Humanoid-v5", 348, 17)])
def test_each_continuous_env_the_issue_names_runs_from_its_id_alone(env_id, obs_dim, action_dim):
    """Gymnasium's continuous envs, MuJoCo's through the mujoco extra: a SAC collector steps each
    from `env.id` and pushes float actions in [-1, 1] (the env got them in its own units)."""
    from raypex.actors.collector import Collector
    from raypex.cluster.plan.settings import collector_settings

    config = load_config(None, [f"env.id={env_id}", "algo.name=sac", "env.num_envs=2", "collectors.chunk_steps=4",
                                "algo.n_step=1"])
    spec = inspect_env(env_id, {})
    assert (spec.obs_shape, spec.action_dim) == ((obs_dim,), action_dim)
    chunks = []
    collector = Collector(collector_settings(config, spec, 0), push=chunks.append, poll_weights=lambda: None)
    collector.collect_chunk()
    action = chunks[0]["action"]
    assert action.dtype == np.float32 and action.shape == (8, action_dim) and np.abs(action).max() <= 1.0
    assert chunks[0]["obs"].shape == (8, obs_dim) and collector.env_steps == 8


RECORDED_STEPS: dict[bytes, tuple[bool, bool]] = {}  # what StepRecorder saw


class StepRecorder(gym.Wrapper):
    """Every step's (terminated, truncated) by the observation it returned, in RECORDED_STEPS."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        RECORDED_STEPS[np.asarray(obs, np.float32).tobytes()] = (bool(terminated), bool(truncated))
        return obs, reward, terminated, truncated, info


def test_hopper_bootstraps_through_a_time_limit_and_not_through_a_fall():
    """Hopper ends an episode two ways: it falls (terminated: no value after it) or its time runs
    out (truncated: the value of where it stands still counts). Each transition a collector stores
    is found by its next observation among the env's own steps: discount 0 exactly where the env
    said terminated, gamma where it said truncated, and both kinds seen (random actions, episodes
    cut at 25 steps)."""
    from raypex.actors.collector import Collector
    from raypex.cluster.plan.settings import collector_settings

    gym.register("RecordedHopper-v0",
                 entry_point=lambda **kwargs: StepRecorder(gym.make("Hopper-v5", max_episode_steps=25, **kwargs)))
    config = load_config(None, ["env.id=RecordedHopper-v0", "algo.name=sac",
                                "env.num_envs=2", "collectors.chunk_steps=50", "algo.n_step=1", "algo.gamma=0.99"])
    spec = inspect_env(config.env.id, config.env.kwargs)
    RECORDED_STEPS.clear()
    chunks = []
    collector = Collector(collector_settings(config, spec, 0), push=chunks.append, poll_weights=lambda: None)
    for _ in range(6):
        collector.collect_chunk()
    ends = {"terminated": 0, "truncated": 0}
    for chunk in chunks:
        for next_obs, discount in zip(chunk["next_obs"], chunk["discount"], strict=True):
            terminated, truncated = RECORDED_STEPS[np.asarray(next_obs, np.float32).tobytes()]
            assert float(discount) == pytest.approx(0.0 if terminated else 0.99), (terminated, truncated, discount)
            ends["terminated"] += terminated
            ends["truncated"] += truncated and not terminated
    assert ends["terminated"] >= 3 and ends["truncated"] >= 3, ends


def test_collectors_act_at_random_until_trained_weights_come():
    """A fresh learner publishes its starting actor at once; acting with it (one near-constant
    action per observation plus a little noise) instead of the uniform warm-up left TD3 on
    pictures stuck in one run of three on a slower box."""
    from raypex.actors.collector import Collector
    from raypex.cluster.plan.settings import collector_settings

    config = load_config(None, ["env.id=Pendulum-v1", "algo.name=td3", "env.num_envs=16", "collectors.chunk_steps=4",
                                "algo.n_step=1", "network.hidden=[8]"])
    spec = inspect_env("Pendulum-v1", {})
    actor = ActorNetwork(spec.obs_shape, 1, [8], gaussian=False)
    for p in actor.parameters():
        nn.init.zeros_(p)  # action 0 for every observation
    published = []
    chunks = []
    collector = Collector(collector_settings(config, spec, 0), push=chunks.append,
                          poll_weights=lambda: published[-1] if published else None)
    spread = []
    graph = export_acting_graph(algorithm("td3"), actor, spec.obs_shape, spec.obs_dtype)
    for weights in (Weights(1, export_arrays(actor), untrained=True, acting_graph=graph),
                    Weights(2, export_arrays(actor), acting_graph=graph)):
        published.append(weights)
        collector.collect_chunk()
        assert collector.version == weights.version
        spread.append(float(np.abs(chunks[-1]["action"]).mean()))
    assert spread[0] > 0.3 and spread[1] < 0.1, spread  # uniform on [-1, 1]: 0.5; zero plus noise 0.1/3


def test_fp16_loss_scales_skip_only_the_step_that_overflowed():
    """fp16 for TD3/SAC: the critics' and the actor's steps each have a loss scale on the device; an
    overflow skips that step alone and halves its scale (run on the CPU here, as on CUDA)."""
    from raypex.learner.algorithms.registry import algorithm
    from raypex.learner.loss_scale import DeviceLossScale
    from raypex.learner.precision import PrecisionPolicy
    from tests.test_learner import settings

    cpu = torch.device("cpu")
    s = settings(obs_shape=(3,), num_actions=0, algo="sac", policy_delay=1, action_low=(-2.0,), action_high=(2.0,), hidden=[16],
                 target_update="polyak", micro_batch=32, accumulation_steps=2)
    step = algorithm(s.algo).build_step(s, cpu, precision=PrecisionPolicy("cpu", torch.float16, DeviceLossScale(cpu)))
    batch = {"obs": torch.randn(2, 32, 3), "action": torch.rand(2, 32, 1) * 2 - 1, "return": torch.randn(2, 32),
             "discount": torch.full((2, 32), 0.97), "next_obs": torch.randn(2, 32, 3)}
    for scale in (step.critic_scale, step.actor_scale):
        scale.scale.fill_(2.0**8)  # (at the default 2^16 these tiny networks' first steps overflow and back off)
    critic, actor = ([p.detach().clone() for p in params] for params in (step.critic_params, step.actor_params))
    step(batch)
    assert all(not torch.equal(a, b) for a, b in zip(critic, step.critic_params))  # both stepped
    assert any(not torch.equal(a, b) for a, b in zip(actor, step.actor_params))
    assert step.critic_scale.get_scale() == step.actor_scale.get_scale() == 2.0**8
    step.critic_scale.scale.fill_(2.0**100)  # every critic gradient overflows fp16 at this scale
    critic, actor = ([p.detach().clone() for p in params] for params in (step.critic_params, step.actor_params))
    alpha = float(step.objective.alpha)
    step(batch)
    assert all(torch.equal(a, b) for a, b in zip(critic, step.critic_params))  # skipped, on the device
    assert step.critic_scale.get_scale() == 2.0**99
    assert any(not torch.equal(a, b) for a, b in zip(actor, step.actor_params)) and float(step.objective.alpha) != alpha
    assert step.actor_scale.get_scale() == 2.0**8
    again = algorithm(s.algo).build_step(s, cpu, precision=PrecisionPolicy("cpu", torch.float16, DeviceLossScale(cpu)))
    again.load_state_dict(step.state_dict())
    assert again.critic_scale.get_scale() == 2.0**99 and again.actor_scale.get_scale() == 2.0**8


@pytest.mark.parametrize("algo, obs_norm", [("td3", False), ("sac", False), ("td3", True)])
def test_policy_pt2_of_published_weights_acts_in_the_env_units(algo, obs_norm, tmp_path):
    """policy.pt2 of a published version (not the learner's newest weights): the actor with
    those weights (and observation statistics), its [-1, 1] actions mapped to Pendulum's [-2, 2]."""
    from raypex.learner.policy_file import load_policy
    from raypex.learner.weights import export_arrays

    learner = continuous_learner(algo, torch.device("cpu"), obs_norm=obs_norm)
    learner.train_epoch()
    published = export_arrays(learner.policy)
    assert ("encoder.count" in published) == obs_norm
    if obs_norm:  # the statistics of every observation the epoch trained on (3 updates of 16)
        assert published["encoder.count"] == pytest.approx(48, abs=1e-3)
    learner.train_epoch()  # the learner moves on; the file holds the published version
    path = tmp_path / "policy.pt2"
    path.write_bytes(learner.export_policy(published))
    learner.policy.load_state_dict({name: torch.from_numpy(a) for name, a in published.items()})
    policy = load_policy(path)
    obs = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = 2.0 * learner.policy(torch.from_numpy(obs)).numpy()
    assert np.allclose(policy.act(obs), expected, atol=1e-5)
    assert np.allclose(policy.act(obs[4]), expected[4], atol=1e-5) and np.abs(expected).max() <= 2.0
