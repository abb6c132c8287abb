"""Dict and Tuple observations, part by part (no Ray): their spaces checked and converted, their
steps checked, replay storing each step's parts once (checked against whole transitions folded by
a reference), the batch a learner gathers, the default encoder, the acting graph and policy.pt2
taking the same parts."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from raypex.actors.adders import EnvStep, FrameAdder
from raypex.actors.env_ids import UnsupportedEnv
from raypex.actors.envs import make_vector_env
from raypex.actors.nstep import NStepFolder
from raypex.actors.observation_parts import observation_parts
from raypex.actors.onnx_acting import GraphForward
from raypex.actors.sequence_adder import SequenceAdder
from raypex.actors.step_check import EnvWentBad, StepCheck
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.networks import ConvFeatures, build_q_network
from raypex.learner.parts_encoder import PartsEncoder
from raypex.learner.policy_file import export_policy_archive, load_policy
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights, nested
from raypex.replay.frames import frame_bytes_per_slot
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.ring import RingStorage, transition_layout
from raypex.replay.sequences import SequenceStorage
from raypex.replay.shard import StorageSpec
from raypex.replay.sharded import ShardedReplay

PARTS = (("image", (1, 5, 5), "uint8"), ("where", (3,), "float32"))


def test_each_kind_of_part_is_converted_as_a_whole_observation_of_its_kind_is():
    space = gym.spaces.Dict({
        "pixels": gym.spaces.Box(0, 255, (6, 7), np.uint8),  # a 2-D frame: one channel
        "board": gym.spaces.Box(0, 1, (5, 5, 2), bool),  # HWC booleans: channels first, 0/255
        "speed": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
        "mode": gym.spaces.Discrete(3),  # one-hot
    })
    parts = observation_parts(space, "Mine-v0")
    assert [p.layout for p in parts] == [("board", (2, 5, 5), "uint8"), ("mode", (3,), "float32"),  # the space's order
                                         ("pixels", (1, 6, 7), "uint8"), ("speed", (2,), "float32")]
    obs = {"pixels": np.full((2, 6, 7), 9, np.uint8), "board": np.ones((2, 5, 5, 2), bool),
           "speed": np.zeros((2, 2)), "mode": np.array([2, 0])}
    converted = {p.key: p.convert(obs[p.source]) for p in parts}
    assert converted["pixels"].shape == (2, 1, 6, 7) and converted["board"].shape == (2, 2, 5, 5)
    assert converted["board"].max() == 255 and converted["speed"].dtype == np.float32
    np.testing.assert_array_equal(converted["mode"], [[0, 0, 1], [1, 0, 0]])
    tuple_parts = observation_parts(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (4,)))), "T-v0")
    assert [p.layout for p in tuple_parts] == [("0", (2,), "float32"), ("1", (4,), "float32")]
    assert observation_parts(gym.spaces.Box(0, 1, (4,)), "B-v0") is None


@pytest.mark.parametrize(("space", "line"), [
    (gym.spaces.Dict({"a": gym.spaces.Dict({"b": gym.spaces.Discrete(2)})}),
     "env.id 'Mine-v0': observation part 'a' is a Dict space"),
    (gym.spaces.Dict({"tiny": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)}),
     "env.id 'Mine-v0': observation part 'tiny' has images of 2x2; raypex's CNNs need at least 3x3"),
    (gym.spaces.Tuple((gym.spaces.Box(0, 1, (2, 3, 4, 5)),)),
     "env.id 'Mine-v0': observation part '0' has shape (2, 3, 4, 5)"),
])
def test_a_part_raypex_cannot_learn_on_is_one_line(space, line):
    with pytest.raises(UnsupportedEnv) as caught:
        observation_parts(space, "Mine-v0")
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)


def test_a_bad_part_in_a_step_is_one_line_naming_the_part():
    check = StepCheck("Mine-v0", {"image": np.zeros((2, 1, 5, 5), np.uint8), "where": np.zeros((2, 3), np.float32)},
                      "collector 0")
    check({"image": np.zeros((2, 1, 5, 5), np.uint8), "where": np.ones((2, 3), np.float32)}, np.zeros(2), np.zeros(2))
    bad = np.ones((2, 3), np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(EnvWentBad, match=r"^env.id Mine-v0: env 1 of collector 0 returned an observation part 'where' "
                                         r"holding nan \(at flat index 2\) at step 1 of its episode$"):
        check({"image": np.zeros((2, 1, 5, 5), np.uint8), "where": bad}, np.zeros(2), np.zeros(2))
    with pytest.raises(EnvWentBad, match="observations part 'image' of shape \\[1, 4, 5\\], where its space has "):
        check({"image": np.zeros((2, 1, 4, 5), np.uint8), "where": bad}, np.zeros(2), np.zeros(2))


class RandomPartsEnv:
    """A vector env of random parts (PARTS); each env step ends an episode with probability p."""

    def __init__(self, num_envs: int, seed: int, p_end: float = 0.1):
        self.rng = np.random.default_rng(seed)
        self.num_envs, self.p_end = num_envs, p_end
        self.ended = np.zeros(num_envs, bool)

    def obs(self) -> dict[str, np.ndarray]:
        return {"image": self.rng.integers(0, 256, (self.num_envs, 1, 5, 5), dtype=np.uint8),
                "where": self.rng.normal(size=(self.num_envs, 3)).astype(np.float32)}

    def step(self):
        reward = np.where(self.ended, 0.0, self.rng.normal(size=self.num_envs))
        end = (self.rng.random(self.num_envs) < self.p_end) & ~self.ended
        terminated = end & (self.rng.random(self.num_envs) < 0.5)
        truncated = end & ~terminated
        self.ended = terminated | truncated
        return self.obs(), reward, terminated, truncated


def test_replay_stores_each_steps_parts_once_and_gives_back_whole_transitions():
    num_envs, n, chunk_steps, steps = 3, 3, 5, 300
    env = RandomPartsEnv(num_envs, seed=4)
    spec = StorageSpec(120, (), "parts", 1, num_envs, obs_parts=PARTS)
    replay = ShardedReplay(1, spec, SamplesPerInsertLimiter(1e9, 1, 1e9), seed=0)
    storage = replay.shards[0].storage
    # the reference: whole transitions of each part, folded apart with the same steps
    references = {key: NStepFolder(n, 0.9, num_envs, shape, np.dtype(dtype), chunk_steps, with_env=True)
                  for key, shape, dtype in PARTS}
    rings = {key: RingStorage(10 * steps * num_envs, transition_layout(shape, dtype)) for key, shape, dtype in PARTS}
    obs = env.obs()
    adder = FrameAdder(n, 0.9, num_envs, chunk_steps, obs)
    keys: list[tuple[int, int]] = []
    rng = np.random.default_rng(1)
    for t in range(steps):
        action = rng.integers(0, 4, num_envs)
        next_obs, reward, terminated, truncated = env.step()
        for key, folder in references.items():
            folder.add_step(obs[key], action, reward, terminated, truncated, next_obs[key])
        adder.add(EnvStep(obs, action, reward, terminated, truncated, next_obs))
        obs = next_obs
        if (t + 1) % chunk_steps == 0:
            chunk = adder.pop()
            assert set(chunk) >= {"frames.image", "frames.where"} and "frames" not in chunk
            for key, folder in references.items():
                rings[key].add(folder.pop())
            keys += list(zip(chunk["env"].tolist(), chunk["obs"].tolist()))
            replay.add(0, chunk)
    index = {key: row for row, key in enumerate(keys)}
    draw = replay.draw(2, 64)
    batch = nested(replay.gather(draw))
    assert set(batch["obs"]) == {"image", "where"} and batch["obs"]["image"].shape == (2, 64, 1, 5, 5)
    env_of, start = storage.keys(draw.index["row"].reshape(-1))
    rows = np.array([index[(e, s)] for e, s in zip(env_of.tolist(), start.tolist())])
    for key, _, _ in PARTS:
        expected = rings[key].gather(rows)
        for name in ("obs", "next_obs"):
            np.testing.assert_array_equal(batch[name][key].reshape(len(rows), -1), expected[name].reshape(len(rows), -1),
                                          err_msg=f"{name}.{key}")
        for name in ("action", "return", "discount"):
            np.testing.assert_array_equal(batch[name].reshape(-1), expected[name], err_msg=name)
    # one observation per transition: the image's 25 bytes and the vector's 12 once, not twice as a ring's
    assert spec.column_bytes / spec.rows == 25 + 12 + 8 + 4 + 4
    assert frame_bytes_per_slot((), 0, PARTS) == 25 + 12 + 8 + 4 + 4 + 4 + 8 + 2 + 1
    ring_bytes = sum(int(np.prod(shape)) * dtype.itemsize
                     for shape, dtype in transition_layout((1, 5, 5), "uint8").values()) + 12 * 2
    assert ring_bytes == 25 * 2 + 12 * 2 + 16


def test_sequences_store_each_steps_parts_in_their_own_columns():
    num_envs, length, period = 2, 8, 4
    env = RandomPartsEnv(num_envs, seed=0)
    storage = SequenceStorage(400, num_envs, length, length - period, (), "parts", 6, parts=PARTS)
    assert set(storage.columns) == {"obs.image", "obs.where", "action", "reward", "discount", "first", "state"}
    adder = SequenceAdder(num_envs, 0.9, period)
    obs, shown = env.obs(), []
    for t in range(40):
        next_obs, reward, terminated, truncated = env.step()
        shown.append(obs)
        adder.add(EnvStep(obs, np.arange(num_envs) + t, reward, terminated, truncated, next_obs,
                          state=np.full((num_envs, 6), t, np.float32)))
        obs = next_obs
        if (t + 1) % 5 == 0:
            storage.add(adder.pop())
    rows = storage.sampleable_rows()
    got = nested(storage.gather(rows))
    assert got["obs"]["image"].shape == (len(rows), length, 1, 5, 5) and len(rows) >= 10
    for i, row in enumerate(rows.tolist()):
        env_index, start = row // storage.slots_per_env, int(storage.start[row])
        for k in range(length):
            for key, _, _ in PARTS:
                np.testing.assert_array_equal(got["obs"][key][i, k], shown[start + k][key][env_index])
            assert got["action"][i, k] == env_index + start + k


def q_network(num_actions: int = 4):
    torch.manual_seed(0)
    return build_q_network((), num_actions, [16], True, "parts", encoder=PartsEncoder(PARTS, ConvFeatures)).eval()


def sample_obs(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"image": rng.integers(0, 256, (batch, 1, 5, 5), dtype=np.uint8),
            "where": rng.normal(size=(batch, 3)).astype(np.float32)}


def test_the_default_encoder_reads_every_part():
    network = q_network()
    obs = {key: torch.from_numpy(value) for key, value in sample_obs(4).items()}
    q = network(obs)
    assert q.shape == (4, 4)
    for key in obs:  # change one part: the Q-values change
        changed = dict(obs, **{key: obs[key] + 1 if key == "where" else 255 - obs[key]})
        assert not torch.allclose(network(changed), q), key
    assert network.encoder.width == 16 * 3 * 3 + 3


def test_the_acting_graph_and_policy_file_take_the_parts_and_agree_with_torch(tmp_path):
    network = q_network()
    obs = sample_obs(5)
    with torch.no_grad():
        expected = network({key: torch.from_numpy(value) for key, value in obs.items()}).numpy()
    graph = algorithm("dqn").acting_graph(network, (), "parts", PARTS)
    forward = GraphForward()
    forward.load(Weights(1, export_arrays(network), acting_graph=graph))
    np.testing.assert_allclose(forward.run(obs=obs)[0], expected, rtol=1e-5, atol=1e-5)
    path = tmp_path / "policy.pt2"
    path.write_bytes(export_policy_archive(network, (), parts=PARTS))
    policy = load_policy(path)
    assert policy.obs_shape == {"image": (1, 5, 5), "where": (3,)}
    np.testing.assert_allclose(policy.q_values(obs).numpy(), expected, rtol=1e-5, atol=1e-5)
    one = {key: value[2] for key, value in obs.items()}
    assert int(policy.act(one)) == int(expected[2].argmax())
    with pytest.raises(ValueError, match=r"^policy.pt2 takes observations in parts \{image: \[1, 5, 5\], where: \[3\]\}"):
        policy.act({"image": obs["image"]})


def test_a_tuple_envs_policy_takes_a_tuple(tmp_path):
    parts = (("0", (1, 5, 5), "uint8"), ("1", (3,), "float32"))
    torch.manual_seed(0)
    network = build_q_network((), 2, [8], False, "parts", encoder=PartsEncoder(parts, ConvFeatures)).eval()
    path = tmp_path / "policy.pt2"
    path.write_bytes(export_policy_archive(network, (), parts=parts))
    policy = load_policy(path)
    obs = sample_obs(3)
    as_tuple, as_dict = (obs["image"], obs["where"]), {"0": obs["image"], "1": obs["where"]}
    np.testing.assert_array_equal(policy.act(as_tuple), policy.act(as_dict))


@pytest.mark.parametrize("algo", ["dqn", "qrdqn", "iqn", "r2d2", "td3", "sac"])
def test_every_algorithm_trains_on_parts_and_exports_its_acting_graph_and_policy(algo, tmp_path):
    from raypex.actors.envs import EnvSpec
    from raypex.cluster.config.loading import load_config
    from raypex.cluster.plan.settings import learner_settings
    from raypex.learner.synthetic import synthetic_batch

    box = algorithm(algo).box_actions
    spec = EnvSpec((), "parts", 0 if box else 4, 1, (-1.0,) * box, (1.0,) * box, obs_parts=PARTS)
    config = load_config(None, [f"algo.name={algo}", "learner.micro_batch=8", "replay.sequence_length=6",
                                "replay.sequence_overlap=2", "algo.burn_in=2", "network.recurrent_size=8"])
    s = learner_settings(config, spec)
    step = algorithm(algo).build_step(s, torch.device("cpu"))
    batch = synthetic_batch(s, torch.device("cpu"), np.random.default_rng(0))
    assert {"obs.image", "obs.where"} <= set(batch)
    before = [p.detach().clone() for p in step.policy.parameters()]
    for _ in range(2):  # TD3 steps its actor every second update
        step(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, step.policy.parameters())), "nothing trained"
    graph = algorithm(algo).acting_graph(step.policy, (), "parts", PARTS)
    forward = GraphForward()
    forward.load(Weights(1, export_arrays(step.policy), acting_graph=graph))
    data = {"obs": sample_obs(3)}
    if algo == "r2d2":
        data["state"] = np.zeros((3, 16), np.float32)
    assert len(forward.run(**data)[0]) == 3
    module, outputs = step.exportable(step.policy.cpu().eval())
    (tmp_path / "policy.pt2").write_bytes(export_policy_archive(module, (), outputs, getattr(module, "state_size", 0)
                                                                if algo == "r2d2" else 0, parts=PARTS))
    policy = load_policy(tmp_path / "policy.pt2")
    acted = policy.act(sample_obs(3), policy.initial_state(3)) if policy.recurrent else policy.act(sample_obs(3))
    assert len(acted[0] if policy.recurrent else acted) == 3


def test_the_vector_env_hands_on_parts_of_a_dict_and_of_a_tuple():
    for tuple_space in (False, True):
        env = make_vector_env("tests.parts_env:QuadrantTurn", 2, {"tuple_space": tuple_space})
        parts = observation_parts(env.unwrapped.single_observation_space, "QuadrantTurn")
        obs, _ = env.reset(seed=0)
        assert {key: value.shape for key, value in obs.items()} == {parts[0].key: (2, 1, 8, 8), parts[1].key: (2, 4)}
        assert obs[parts[0].key].sum() == 2 * 255  # one lit pixel each, channels first
        assert env.observation_space.contains(obs) and env.observation_space.contains(env.step([0, 1])[0])
        env.close()
