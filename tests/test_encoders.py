"""network.encoder: a user's observation encoder as the torso of every algorithm's networks (the
learner's, the acting network collectors and the evaluator load published weights into, the
acting graph and policy.pt2), its mistakes one line each before anything starts."""

import sys
import textwrap

import numpy as np
import pytest
import torch

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.learner.encoders import EncoderError, build_encoder

ENCODERS = '''
import torch
from torch import nn


class Flat(nn.Module):
    """Flattens any observation into `features` tanh units; records the largest input it saw."""

    def __init__(self, observation_space, features=24):
        super().__init__()
        self.space = observation_space
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(observation_space.shape).prod()), features),
                                 nn.Tanh())
        self.largest_input = 0.0

    def forward(self, obs):
        self.largest_input = max(self.largest_input, float(obs.abs().max()))
        return self.net(obs)


class Conv(nn.Module):
    def __init__(self, observation_space, channels=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(observation_space.shape[0], channels, 3), nn.ReLU(), nn.Flatten())

    def forward(self, obs):
        return self.net(obs)


class ThreeDims(nn.Module):
    def __init__(self, observation_space):
        super().__init__()
        self.net = nn.Linear(observation_space.shape[0], 8)

    def forward(self, obs):
        return self.net(obs).unsqueeze(1)


class Raises(nn.Module):
    def __init__(self, observation_space):
        super().__init__()

    def forward(self, obs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


class ByParts(nn.Module):
    """Observations in parts: each part flattened, side by side; records each part's largest input."""

    def __init__(self, observation_space):
        super().__init__()
        self.space = observation_space
        width = sum(int(torch.tensor(part.shape).prod()) for part in observation_space.spaces.values())
        self.net = nn.Linear(width, 8)
        self.largest = {}

    def forward(self, obs):
        self.largest = {key: float(part.abs().max()) for key, part in obs.items()}
        return self.net(torch.cat([part.flatten(1) for part in obs.values()], dim=1))


def not_a_class(observation_space):
    return None


NOT_A_MODULE = 3
'''


@pytest.fixture(scope="module", autouse=True)
def user_encoders(tmp_path_factory):
    """The module `my_encoders` importable, as an installed package of the user's is."""
    where = tmp_path_factory.mktemp("user")
    (where / "my_encoders.py").write_text(textwrap.dedent(ENCODERS))
    sys.path.insert(0, str(where))
    yield
    sys.path.remove(str(where))
    sys.modules.pop("my_encoders", None)


def settings(algo: str, *overrides: str):
    """Collector 0's settings for a run of `algo` on flat observations of 4 with my_encoders:Flat."""
    from raypex.actors.envs import EnvSpec
    from raypex.cluster.plan.settings import collector_settings

    box = algo in ("td3", "sac")
    spec = EnvSpec((4,), "float32", 0 if box else 2, 0, *(((-1.0,), (1.0,)) if box else ((), ())))
    config = load_config(None, [f"algo.name={algo}", "network.encoder=my_encoders:Flat", "network.recurrent_size=8",
                                "network.hidden=[16]", *overrides])
    return collector_settings(config, spec, 0)


@pytest.mark.parametrize("algo", ["dqn", "r2d2", "td3", "sac"])
def test_every_algorithms_acting_network_sits_on_the_users_encoder_and_exports_its_acting_graph(algo):
    from raypex.learner.algorithms.registry import algorithm

    plugin = algorithm(algo)
    network = plugin.acting_network(settings(algo, "network.encoder_kwargs={features: 24}"))
    names = [name for name, _ in network.named_parameters()]
    assert any(".inner.net.1.weight" in name for name in names), names
    width = next(p for name, p in network.named_parameters() if name.endswith("inner.net.1.weight")).shape[0]
    assert width == 24
    graph = plugin.acting_graph(network, (4,), "float32")  # what collectors and the evaluator act with
    assert isinstance(graph, bytes) and len(graph) > 0


def test_the_actor_and_the_critics_each_have_their_own_encoder():
    from raypex.learner.actor_critic_networks import ActorNetwork, TwinCritic
    from raypex.learner.encoders import user_encoder

    s = settings("sac")
    actor = ActorNetwork((4,), 1, [16], True, encoder=user_encoder(s))
    critic = TwinCritic((4,), 1, [16], encoder=user_encoder(s))
    assert actor.encoder is not critic.encoder
    assert actor.encoder.inner.net[1].weight.data_ptr() != critic.encoder.inner.net[1].weight.data_ptr()
    q1, q2 = critic(torch.zeros(3, 4), torch.zeros(3, 1))
    assert q1.shape == q2.shape == (3,) and actor(torch.zeros(3, 4)).shape == (3, 1)


def test_pixels_reach_the_encoder_scaled_to_one_and_its_space_says_so():
    from raypex.learner.networks import build_q_network

    encoder = build_encoder("my_encoders:Conv", {}, (2, 10, 10), "uint8")
    space = build_encoder("my_encoders:Flat", {}, (2, 10, 10), "uint8").inner.space
    assert (space.low.min(), space.high.max(), space.dtype, space.shape) == (0.0, 1.0, np.float32, (2, 10, 10))
    network = build_q_network((2, 10, 10), 3, [16], True, "uint8", encoder=encoder)
    assert network(torch.full((5, 2, 10, 10), 255, dtype=torch.uint8)).shape == (5, 3)
    flat = build_encoder("my_encoders:Flat", {}, (2, 10, 10), "uint8")
    flat(torch.full((1, 2, 10, 10), 255, dtype=torch.uint8))
    assert flat.inner.largest_input == pytest.approx(1.0)


def test_observations_in_parts_reach_the_encoder_as_a_dict_space_and_a_dict_with_pixels_scaled():
    import gymnasium as gym

    parts = (("image", (1, 5, 5), "uint8"), ("where", (3,), "float32"))
    encoder = build_encoder("my_encoders:ByParts", {}, (), "parts", parts)
    space = encoder.inner.space
    assert isinstance(space, gym.spaces.Dict) and list(space.spaces) == ["image", "where"]
    assert (space["image"].high.max(), space["image"].dtype, space["where"].shape) == (1.0, np.float32, (3,))
    out = encoder({"image": torch.full((2, 1, 5, 5), 255, dtype=torch.uint8), "where": torch.full((2, 3), 7.0)})
    assert out.shape == (2, 8) and encoder.inner.largest == {"image": pytest.approx(1.0), "where": 7.0}
    with pytest.raises(EncoderError, match=r"^network.encoder my_encoders:Flat cannot be built as Flat\(observation_space, "
                                           r"\*\*\{\}\): RuntimeError: Could not infer dtype of NoneType$"):
        build_encoder("my_encoders:Flat", {}, (), "parts", parts)  # reads a Box's shape: a Dict has none
    with pytest.raises(EncoderError, match=r"^network.encoder my_encoders:Raises failed on a batch of 2 observations of "
                                           r"shape \{image: \[2, 1, 5, 5\], where: \[2, 3\]\}: RuntimeError: "):
        build_encoder("my_encoders:Raises", {}, (), "parts", parts)


def test_a_bf16_acting_copy_runs_the_encoder_in_bf16():
    from raypex.learner.networks import acting_copy, build_q_network

    network = build_q_network((4,), 2, [16], True, "float32", encoder=build_encoder("my_encoders:Flat", {}, (4,),
                                                                                     "float32"))
    copy = acting_copy(network, torch.bfloat16)
    assert copy(torch.ones(3, 4)).dtype == torch.bfloat16


@pytest.mark.parametrize(("path", "kwargs", "said"), [
    ("my_encoders:ThreeDims", {}, r"^network.encoder my_encoders:ThreeDims must map a batch \[2, 4\] to float "
                                  r"features \[2, F\]; it gave \[2, 1, 8\]$"),
    ("my_encoders:Raises", {}, r"^network.encoder my_encoders:Raises failed on a batch of 2 observations of shape \[4\]: "
                               r"RuntimeError: mat1 and mat2"),
    ("my_encoders:not_a_class", {}, r"^network.encoder my_encoders:not_a_class is a function, not a torch.nn.Module "
                                    r"class$"),
    ("my_encoders:NOT_A_MODULE", {}, r"is a int, not a torch.nn.Module class$"),
    ("my_encoders:Flatt", {}, r"^network.encoder my_encoders:Flatt: my_encoders has no Flatt; did you mean "
                              r"my_encoders:Flat\?$"),
    ("nowhere.encoders:Flat", {}, r"^network.encoder nowhere.encoders:Flat: nowhere.encoders cannot be imported \(No "
                                  r"module named 'nowhere'\); install the package that holds it on every node$"),
    ("my_encoders:Flat", {"width": 3}, r"^network.encoder my_encoders:Flat cannot be built as "
                                       r"Flat\(observation_space, \*\*\{'width': 3\}\): .*unexpected keyword"),
])
def test_an_encoder_that_cannot_serve_is_one_line_naming_it_and_what_was_expected(path, kwargs, said):
    with pytest.raises(EncoderError, match=said) as raised:
        build_encoder(path, kwargs, (4,), "float32")
    assert "\n" not in str(raised.value)


def test_the_run_checks_its_encoder_on_the_envs_observations_before_anything_starts():
    from raypex.actors.envs import inspect_env
    from raypex.cluster.plan.env_fit import check_encoder

    spec = inspect_env("CartPole-v1", {}, 0)
    check_encoder(load_config(None, ["network.encoder=my_encoders:Flat"]), spec)
    with pytest.raises(UsageError, match=r"^network.encoder my_encoders:ThreeDims must map a batch \[2, 4\]"):
        check_encoder(load_config(None, ["network.encoder=my_encoders:ThreeDims"]), spec)


@pytest.mark.parametrize(("overrides", "said"), [
    (["network.encoder=my_encoders"], "'my_encoders' is not an import path of the form package.module:Class"),
    (["network.encoder_kwargs={features: 3}"], "encoder_kwargs: set network.encoder too"),
    (["algo.name=td3", "network.encoder=my_encoders:Flat", "network.sale=true", "algo.n_step=1"],
     "encoder takes the observations itself: drop network.sale"),
    (["algo.name=sac", "network.encoder=my_encoders:Flat", "network.obs_norm=true"],
     "encoder takes the observations itself: drop network.obs_norm"),
])
def test_encoder_settings_that_cannot_go_together_are_refused_in_the_config(overrides, said):
    with pytest.raises(ConfigError, match=said):
        load_config(None, overrides)


def test_a_resume_may_not_change_the_encoder():
    from raypex.cluster.driver.run_dir import SHAPE_KEYS

    assert {"network.encoder", "network.encoder_kwargs"} <= set(SHAPE_KEYS)
