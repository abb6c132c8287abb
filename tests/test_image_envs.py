"""Images that carry channels (MinAtar's 10x10xC booleans, any rank-3 Box): the layout raypex stores
and trains on, and the network chosen by frame size (MinAtar through a real local Ray cluster runs
through the README's lines, tests/test_readme_lines.py)."""

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from raypex.actors.envs import UnsupportedEnv, inspect_env, make_vector_env
from raypex.actors.images import image_layout
from raypex.learner.networks import MLPQNetwork, NatureCNNQNetwork, SmallCNNQNetwork, build_q_network

ROOT = Path(__file__).parent.parent


class ChannelsFirstImage(gym.Env):
    """A 3 x 7 x 6 image (channels first) of a given dtype whose pixel (c, h, w) is c + h + w."""

    def __init__(self, dtype="float64", shape=(3, 7, 6)):
        self.observation_space = gym.spaces.Box(0, 255, shape, np.dtype(dtype))
        self.action_space = gym.spaces.Discrete(2)
        self.image = np.indices(shape).sum(axis=0).astype(dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.image, {}

    def step(self, action):
        return self.image, 0.0, False, False, {}


gym.register("RaypexTest/ChannelsFirst-v0", entry_point=ChannelsFirstImage)
gym.register("RaypexTest/TinyImage-v0", entry_point=ChannelsFirstImage, kwargs={"shape": (2, 2, 4)})


@pytest.mark.parametrize(("shape", "dtype", "channels_last", "stored", "chw"), [
    ((10, 10, 4), bool, True, "uint8", (4, 10, 10)),       # MinAtar Breakout
    ((10, 10, 10), bool, True, "uint8", (10, 10, 10)),     # MinAtar Seaquest: no smallest axis, HWC
    ((3, 7, 6), np.uint8, False, "uint8", (3, 7, 6)),      # channels first, bytes
    ((84, 84, 3), np.float64, True, "float32", (3, 84, 84)),  # an RGB float image
    ((2, 9, 9), np.float32, False, "float32", (2, 9, 9)),
])
def test_image_layout_finds_the_channel_axis_and_the_stored_dtype(shape, dtype, channels_last, stored, chw):
    layout = image_layout(shape, dtype)
    assert (layout.channels_last, layout.dtype, layout.shape) == (channels_last, stored, chw)
    obs = np.random.default_rng(0).integers(0, 2, (5, *shape)).astype(dtype)
    converted = layout.convert(obs)
    assert converted.shape == (5, *chw) and converted.dtype == np.dtype(stored)
    expected = np.moveaxis(obs, -1, 1) if channels_last else obs
    scale = 255 if dtype is bool else 1
    np.testing.assert_array_equal(converted, expected.astype(stored) * scale)
    assert image_layout((4,), np.float32) is None and image_layout((84, 84), np.uint8) is None


def test_minatar_trains_from_its_id_alone_as_channels_first_bytes():
    spec = inspect_env("MinAtar/Breakout-v1", {})
    assert (spec.obs_shape, spec.obs_dtype, spec.num_actions, spec.frame_stack) == ((4, 10, 10), "uint8", 3, 0)
    env = make_vector_env("MinAtar/Breakout-v1", 3, {}, frame_stack=4)  # frame_stack does not apply
    obs, _ = env.reset(seed=0)
    raw = gym.make("MinAtar/Breakout-v1")
    first, _ = raw.reset(seed=0)
    assert obs.shape == (3, 4, 10, 10) and obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 255}
    np.testing.assert_array_equal(obs[0], np.moveaxis(first, -1, 0).astype(np.uint8) * 255)
    obs, *_ = env.step(np.zeros(3, np.int64))
    assert obs.shape == (3, 4, 10, 10)


def test_a_process_makes_minatar_envs_without_its_display_imports_and_may_import_them_after():
    """MinAtar imports matplotlib and seaborn for its display alone (2.2 s of each process's start
    on a slow box); raypex never draws its games, and a user's code can still import both."""
    code = ("import sys\nfrom actors.envs import make_vector_env\n"
            "make_vector_env('MinAtar/Asterix-v1', 2, {}).reset(seed=0)\n"
            "print([n for n in sys.modules if n.split('.')[0] in ('matplotlib', 'seaborn')])\n"
            "import matplotlib.colors\nprint(matplotlib.colors.__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "matplotlib.colors"], done.stdout
    assert "Cannot import" not in done.stderr  # MinAtar's warning about its display stays out of the output


FAKE_MINATAR_GYM = """import seaborn  # unguarded, as a MinAtar release might import it
import gymnasium as gym
import numpy as np


class Env(gym.Env):
    observation_space = gym.spaces.Box(0, 1, (10, 10, 4), bool)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((10, 10, 4), bool), {}

    def step(self, action):
        return np.zeros((10, 10, 4), bool), 0.0, True, False, {}


def register_envs():
    gym.register("MinAtar/Breakout-v1", entry_point=Env)
"""


@pytest.mark.parametrize("installed", ["needing seaborn", "missing"])
def test_a_minatar_that_needs_its_display_imports_still_loads_and_a_missing_one_is_one_line(installed, tmp_path):
    if installed == "needing seaborn":
        (tmp_path / "minatar").mkdir()
        (tmp_path / "minatar" / "__init__.py").write_text("")
        (tmp_path / "minatar" / "gym.py").write_text(FAKE_MINATAR_GYM)
    else:  # a package that shadows MinAtar and fails as a missing one does
        (tmp_path / "minatar.py").write_text("raise ModuleNotFoundError(\"No module named 'minatar'\", name='minatar')")
    code = ("from actors.envs import UnsupportedEnv, inspect_env\ntry:\n"
            "    print(inspect_env('MinAtar/Breakout-v1', {}).obs_shape)\n"
            "except UnsupportedEnv as err:\n    print(err)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert done.returncode == 0, done.stderr
    expected = "(4, 10, 10)" if installed == "needing seaborn" else \
        "env.id 'MinAtar/Breakout-v1' needs MinAtar: pip install 'raypex[minatar]'"
    assert done.stdout.strip() == expected, done.stdout


def test_a_channels_first_float_image_env_is_kept_as_float32():
    spec = inspect_env("RaypexTest/ChannelsFirst-v0", {"dtype": "float64"})
    assert (spec.obs_shape, spec.obs_dtype) == ((3, 7, 6), "float32")
    env = make_vector_env("RaypexTest/ChannelsFirst-v0", 2, {"dtype": "float64"})
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[1], np.indices((3, 7, 6)).sum(axis=0).astype(np.float32))


def test_an_image_too_small_for_any_cnn_is_one_line_naming_the_shape():
    with pytest.raises(UnsupportedEnv, match=r"images of 2x2 \(observation shape \(2, 2, 4\)\).*at least 3x3"):
        inspect_env("RaypexTest/TinyImage-v0", {})


def test_the_network_is_chosen_by_frame_size():
    assert isinstance(build_q_network((4,), 2, [8], True), MLPQNetwork)
    assert isinstance(build_q_network((4, 10, 10), 3, [128], True), SmallCNNQNetwork)
    assert isinstance(build_q_network((4, 84, 84), 6, [512], True), NatureCNNQNetwork)
    assert isinstance(build_q_network((4, 36, 36), 3, [64], True), NatureCNNQNetwork)
    with pytest.raises(ValueError, match="at least 3x3"):
        build_q_network((1, 2, 2), 2, [8], False)


def test_uint8_images_are_scaled_by_1_over_255_and_float_images_are_not():
    torch.manual_seed(0)
    as_bytes = build_q_network((4, 10, 10), 3, [32], True, "uint8")
    as_floats = build_q_network((4, 10, 10), 3, [32], True, "float32")
    as_floats.load_state_dict(as_bytes.state_dict())
    bits = torch.randint(0, 2, (5, 4, 10, 10))
    with torch.no_grad():
        torch.testing.assert_close(as_bytes((bits * 255).to(torch.uint8)), as_floats(bits.float()))
