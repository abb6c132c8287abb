"""TD3 and SAC on images with channels (any rank-3 Box observation): the networks' image encoders,
the CPU actor collectors and the evaluator act with, and a run in one process from PixelReach's
pictures to chunks, a trained epoch, published weights, an evaluation and policy.pt2 (the same
game through a real local Ray cluster: tests/test_pixels_integration.py)."""

from pathlib import Path

import numpy as np
import pytest
import torch

import tests.pixel_env  # registers PixelReach-v0
from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.learner.actor_critic_networks import ActorNetwork, TwinCritic
from raypex.learner.weights import export_arrays

IMAGE = (2, 12, 12)


def test_image_networks_encode_uint8_pictures_and_the_cpu_actor_acts_as_the_learners():
    torch.manual_seed(0)
    actor = ActorNetwork(IMAGE, 2, [32], gaussian=True, obs_dtype="uint8")
    critic = TwinCritic(IMAGE, 2, [32], obs_dtype="uint8")
    assert sum(name.endswith("convs.0.weight") for name in critic.state_dict()) == 1  # the twins share one encoder
    assert "encoder.convs.0.weight" in actor.state_dict()
    obs = np.random.default_rng(0).integers(0, 256, (5, *IMAGE)).astype(np.uint8)
    q1, q2 = critic(torch.from_numpy(obs), torch.zeros(5, 2))
    assert q1.shape == q2.shape == (5,) and not torch.equal(q1, q2)
    # uint8 0..255 is the float image 0..1: the encoder scales on the network's device
    encoder = actor.encoder
    features = encoder.norm(encoder.projection(encoder.convs(torch.from_numpy(obs) / 255.0))).tanh()
    assert torch.allclose(actor(torch.from_numpy(obs)), actor.torso(features).matmul(actor.mean.weight.T)
                          .add(actor.mean.bias).tanh(), atol=1e-6)


@pytest.mark.parametrize(("algo", "env_id"), [("td3", "PixelReach-v0"), ("sac", "PixelReach-v0"),
                                             ("td3", "PixelReachFrames-v0")])
def test_pictures_flow_collector_to_replay_to_learner_and_back_to_an_evaluation_and_policy_pt2(algo, env_id, tmp_path):
    """Images with channels are stored as they come, channels first; grayscale frames are stored
    once each and stacked 4 deep (frame-once replay, with float actions), as DQN's Atari frames."""
    from raypex.cluster.local.wiring import build_local
    from raypex.cluster.plan.topology import plan_run
    from raypex.learner.policy_file import load_policy
    from raypex.replay.contracts import Weights

    config = load_config(Path("configs/pendulum.yaml"), [
        f"env.id={env_id}", f"algo.name={algo}", "env.num_envs=4", "collectors.chunk_steps=4",
        "replay.min_size=128", "learner.micro_batch=32", "learner.updates_per_epoch=2", "network.hidden=[32]",
        "eval.episodes=2"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    frames = env_id == "PixelReachFrames-v0"
    shape = (4, 12, 12) if frames else IMAGE
    assert (spec.obs_shape, spec.obs_dtype, spec.frame_stack, spec.action_low) == (shape, "uint8", 4 * frames, (-2.0,))
    run = build_local(plan_run(config, spec))
    for _ in range(5):
        for collector in run.collectors:
            collector.collect_chunk()
    shard = run.replay.shards[0]
    stored = shard.storage.columns["frames" if frames else "obs"]
    assert stored.dtype == np.uint8 and stored.shape[1:] == (shape[1:] if frames else shape)
    action = shard.storage.columns["action"]
    assert action.dtype == np.float32 and action.shape[1:] == (1,)
    assert run.collectors[0].policy.form == "onnx"
    metrics = run.learner.train_epoch()
    pictures = run.replay.gather(run.replay.draw(1, 3))["obs"][0]  # stacks rebuilt from the frames
    assert pictures.shape == (3, *shape) and set(np.unique(pictures)) == ({0, 128, 255} if frames else {0, 255})
    assert metrics.updates_in_epoch == 2 and np.isfinite([metrics.losses["td_loss"], metrics.losses["actor_loss"]]).all()
    for collector in run.collectors:
        collector.collect_chunk()
        assert collector.version == 1  # acting with the published image actor now
    arrays = export_arrays(run.learner.policy)
    result = run.evaluator.evaluate(Weights(1, arrays, acting_graph=run.learner.acting_graph))
    assert result["complete"] and -16.0 <= result["min"] <= result["mean"] <= 0.0
    path = tmp_path / "policy.pt2"
    path.write_bytes(run.learner.export_policy(arrays))
    policy = load_policy(path)
    with torch.no_grad():
        expected = 2.0 * run.learner.policy(torch.from_numpy(pictures)).numpy()
    assert np.allclose(policy.act(pictures), expected, atol=1e-5) and np.abs(expected).max() <= 2.0
    assert policy.act(pictures[0]).shape == (1,)
    if frames:  # the evaluation's first episode as a video of the newest frame of each stack
        assert run.evaluator.evaluate(Weights(2, arrays, acting_graph=run.learner.acting_graph), record=True)["video"].channels == 1


def test_the_image_actors_hidden_units_survive_a_gradient_that_pushes_every_picture_one_way():
    """Early in a run the critic's gradient can ask for one action everywhere, then the opposite.
    On the convolutions' never-negative ReLU features, Adam moved a hidden unit's input the same way
    for every picture, and such phases killed the actor's hidden ReLUs (a stuck PixelReach run: all
    64 dead, one action for every picture). With the encoder's normalized projection most survive
    (here 0.94 of them; 0.44 without it) and the actor still learns the game's best action."""
    torch.manual_seed(0)
    env = tests.pixel_env.PixelReach()
    pictures, best = [], []
    for seed in range(256):
        picture, _ = env.reset(seed=seed)
        pictures.append(picture.transpose(2, 0, 1))
        best.append(np.clip((env.target - env.position) / 2, -1.0, 1.0))  # full speed towards the target
    obs, best = torch.from_numpy(np.stack(pictures)), torch.tensor(best, dtype=torch.float32)
    actor = ActorNetwork(IMAGE, 1, [64], gaussian=False, obs_dtype="uint8")
    optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)
    for step in range(300):
        goal = torch.full_like(best, -1.0) if step < 30 else torch.full_like(best, 1.0) if step < 60 else best
        batch = torch.randint(0, len(obs), (64,))
        optimizer.zero_grad()
        (actor(obs[batch]).squeeze(1) - goal[batch]).pow(2).mean().backward()
        optimizer.step()
    with torch.no_grad():
        hidden = actor.torso(actor.encoder(obs))
        error = (actor(obs).squeeze(1) - best).abs().mean().item()
    assert (hidden > 0).any(dim=0).float().mean().item() >= 0.75
    assert error < 0.1
