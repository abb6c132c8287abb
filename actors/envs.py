"""Environment construction and the check that raypex can handle an env's spaces.

Collectors and the evaluator build their vector envs here, so every env goes through the same
path. `inspect_env` runs in the driver before any actor starts: an unknown id or a space we cannot
learn on is a one-line `UnsupportedEnv`, not a crash deep inside an actor.

These kinds of observation are supported: flat float vectors (CartPole); symbols (a Discrete or
MultiDiscrete space: POPGym's memory tasks), which the vector env hands on one-hot
(actors/one_hot.py); 2-D uint8 frames (grayscale pixels), which the vector env returned here stacks
(`FrameStackVectorEnv`) so the network sees the last `frame_stack` frames; and images that already
carry channels (rank 3, in either channel order, any dtype: MinAtar's 10x10xC booleans), which it
hands on channels-first (actors/images.py), bool as uint8 0/255, other dtypes as uint8 or float32. A
Dict or Tuple observation is seen as its parts, each converted as a whole observation of its kind
would be (actors/observation_parts.py). `ALE/<Game>-v5` ids get ALE's own threaded vector env with
the DQN preprocessing built in (frame skip 4 with max-pooling, 84x84 grayscale, noop starts); raypex
stacks its frames and clips rewards itself, so the raw game score is what gets reported.
Ids that name a user's code (`module:Name`, `path/to/file.py:Name`) resolve through
actors/env_ids.py and are checked by actors/env_check.py before any actor starts;
`MinAtar/<Game>-v1` ids register MinAtar's games (the `minatar` extra), `popgym-<Task>-v0` ids
POPGym's memory tasks (the `popgym` extra).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import TransformObservation

from raypex.actors.action_spaces import action_fields
from raypex.actors.env_check import check_user_env
from raypex.actors.env_ids import UnsupportedEnv, names_code, registered_id
from raypex.actors.env_wrappers import resolve_wrappers, wrapped
from raypex.actors.frames import FrameStacker
from raypex.actors.images import image_layout
from raypex.actors.minatar_ids import register_minatar
from raypex.actors.mujoco_quiet import quiet_known_mujoco_warnings
from raypex.actors.observation_parts import MIN_IMAGE_SIDE, PartsConversion, observation_parts
from raypex.actors.one_hot import one_hot_for
from raypex.actors.popgym_ids import register_popgym

# Keyword arguments raypex sets on ALE's vector env itself; env.kwargs may not override them.
ALE_RESERVED = {"game", "num_envs", "stack_num", "reward_clipping", "autoreset_mode", "episodic_life",
                "life_loss_info", "batch_size", "continuous", "grayscale"}


# The most one episode can score where that is a fact of the env with its default kwargs:
# CartPole pays 1 per step up to its time limit, Pong ends at 21 points. Evaluations use it to stop
# as soon as the stop target is out of reach (eval.max_return: auto).
KNOWN_MAX_RETURNS = {"CartPole-v0": 200.0, "CartPole-v1": 500.0, "ALE/Pong-v5": 21.0}


def known_max_return(env_id: str, kwargs: dict[str, Any]) -> float | None:
    """The env's highest possible episode return, when it is known and no kwargs could change it."""
    return None if kwargs else KNOWN_MAX_RETURNS.get(env_id)


@dataclass(frozen=True)
class EnvSpec:
    """What the networks and the replay storage need to know about an environment.

    For pixel envs `obs_shape` is the stacked shape (frame_stack, H, W) and `frame_stack` > 0;
    for vector observations and images with channels (C, H, W) `frame_stack` is 0. A Dict or
    Tuple observation has `obs_parts` (key, shape, dtype), no `obs_shape`, and `frame_stack` 1:
    replay stores each step's parts once, as it stores a frame (replay/frames.py).
    """

    obs_shape: tuple[int, ...]
    obs_dtype: str
    num_actions: int  # Discrete actions (0 for a Box action space)
    frame_stack: int = 0
    action_low: tuple[float, ...] = ()  # a Box action space's bounds (empty for Discrete)
    action_high: tuple[float, ...] = ()
    reward_threshold: float | None = None  # the return its registration calls solved, if it names one
    obs_parts: tuple[tuple[str, tuple[int, ...], str], ...] = ()

    @property
    def action_dim(self) -> int:
        """Dimensions of a continuous action; 0 for Discrete actions."""
        return len(self.action_low)


def check_algo_fits(algo: str, spec: EnvSpec, env_id: str, flat_only: tuple[str, ...] = ()) -> None:
    """One line when `algo` cannot learn on the env `spec` describes: an actor head needs Box
    actions, a Q-network Discrete ones (its plug-in says which: learner/algorithms/; every
    observation `inspect_env` accepts serves them all); the options named in `flat_only`
    (NetworkConfig.flat_only: network.obs_norm, network.sale) need flat observations."""
    from raypex.learner.algorithms.registry import algorithm, names

    box = algorithm(algo).box_actions
    if box != bool(spec.action_dim):
        fitting = " or ".join(name for name in names() if algorithm(name).box_actions != box)
        if box:
            raise UnsupportedEnv(f"algo.name {algo} needs a Box action space; env.id '{env_id}' has "
                                 f"{spec.num_actions} Discrete actions: use algo.name {fitting}")
        raise UnsupportedEnv(f"algo.name {algo} needs Discrete actions; env.id '{env_id}' has a Box action "
                             f"space of shape ({spec.action_dim},): use algo.name {fitting} "
                             "(configs/pendulum.yaml has settings for both)")
    if algorithm(algo).sequences and spec.frame_stack > 1:
        raise UnsupportedEnv(f"algo.name {algo} stores every step's observation in its sequences, so a stack of "
                             f"{spec.frame_stack} frames would store each frame {spec.frame_stack} times; its LSTM is its "
                             f"memory: set env.frame_stack 1 for env.id '{env_id}'")
    if spec.obs_parts and flat_only:
        raise UnsupportedEnv(f"{flat_only[0]} is for one observation array; env.id '{env_id}' has observations in parts "
                             f"({', '.join(key for key, _, _ in spec.obs_parts)})")
    if flat_only and len(spec.obs_shape) != 1:
        raise UnsupportedEnv(f"{flat_only[0]} is for flat observations; env.id '{env_id}' has images of shape "
                             f"{spec.obs_shape}, which their encoder scales")


def is_ale(env_id: str) -> bool:
    """True for ids served by ALE's vector env (`ALE/<Game>-v5`)."""
    return env_id.startswith("ALE/")


def ale_game(env_id: str) -> str:
    """The ROM name of an ALE id: ALE/MsPacman-v5 -> ms_pacman."""
    name = env_id.split("/", 1)[1].rsplit("-v", 1)[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class FrameStackVectorEnv(gym.vector.VectorWrapper):
    """A vector env of single frames [E, H, W] (or [E, 1, H, W]) seen as stacks [E, k, H, W].

    With NEXT_STEP autoreset the step after an episode ended returns the new episode's first
    frame; that frame fills its env's whole stack (the rule replay/frames.py rebuilds stacks by).
    """

    def __init__(self, env: gym.vector.VectorEnv, frame_stack: int, frame_shape: tuple[int, int]):
        super().__init__(env)
        self.frame_shape = frame_shape
        self.single_observation_space = gym.spaces.Box(0, 255, (frame_stack, *frame_shape), np.uint8)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.stacker = FrameStacker(self.num_envs, frame_stack, frame_shape)
        self.episode_ended = np.zeros(self.num_envs, bool)

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs).reshape(self.num_envs, *self.frame_shape)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Reset every env; each stack holds its first frame `frame_stack` times."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode_ended[:] = False
        return self.stacker.reset(self._frames(obs)), info

    def step(self, actions: np.ndarray):
        """Step every env; returns stacked observations and the inner env's other outputs."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        stacks = self.stacker.push(self._frames(obs), self.episode_ended)
        self.episode_ended = np.asarray(terminated) | np.asarray(truncated)
        return stacks, reward, terminated, truncated, info


def _frame_shape(space: gym.spaces.Space) -> tuple[int, ...] | None:
    """(H, W) when `space` holds single grayscale frames (uint8, 2-D once size-1 axes are
    dropped, as ALE's [1, H, W] is), else None."""
    if not isinstance(space, gym.spaces.Box) or np.dtype(space.dtype) != np.uint8:
        return None
    frame = tuple(s for s in space.shape if s != 1)
    return frame if len(frame) == 2 else None


def _make_ale(env_id: str, num_envs: int, kwargs: dict[str, Any]):
    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError:
        raise UnsupportedEnv(f"env.id '{env_id}' needs ale-py: pip install 'raypex[atari]'") from None
    reserved = sorted(ALE_RESERVED & set(kwargs))
    if reserved:
        raise UnsupportedEnv(f"env.kwargs {reserved} are set by raypex for ALE envs "
                             "(see env.frame_stack, env.clip_rewards, env.terminal_on_life_loss)")
    options = {"num_threads": 1, **kwargs}  # one thread per collector: scale out with collectors.num
    return AtariVectorEnv(ale_game(env_id), num_envs, stack_num=1, reward_clipping=False, **options)


def make_raw_vector_env(env_id: str, num_envs: int, kwargs: dict[str, Any], wrappers: Sequence = ()):
    """The vector env itself, without frame stacking (what `raypex bench` compares collectors to).
    `wrappers`: env.wrappers, around each env (which steps them one after another, Gymnasium's
    sync mode, even where the env has a vectorized implementation of its own)."""
    if is_ale(env_id):
        if wrappers:
            raise UnsupportedEnv(ALE_NOT_WRAPPED)
        return _make_ale(env_id, num_envs, kwargs)
    env_id = registered_id(env_id)
    register_minatar(env_id)
    register_popgym(env_id)
    quiet_known_mujoco_warnings(env_id)
    if wrappers:
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                            wrappers=resolve_wrappers(wrappers), **kwargs)
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=None, **kwargs)


ALE_NOT_WRAPPED = ("env.wrappers: an ALE env steps as ale-py's own vector env, which Gymnasium's wrappers do not "
                   "wrap; its settings are env.frame_stack, env.clip_rewards, env.terminal_on_life_loss and env.kwargs")


def make_vector_env(env_id: str, num_envs: int, kwargs: dict[str, Any], frame_stack: int = 4,
                    wrappers: Sequence = ()):
    """A vector env with NEXT_STEP autoreset. Envs with a native vectorized implementation (CartPole,
    ALE) get it; others are stepped in-process one after another (Gymnasium's sync mode), which needs no
    extra processes inside an actor. Pixel envs come back frame-stacked, images with channels come back
    channels-first, symbols one-hot and Dict or Tuple observations as {key: part} (Gymnasium's
    TransformObservation). It comes back not reset: the caller resets it with its own seed once (a
    seeded ALE reset reloads each env, about 80 ms per env, so a second one cost a 32-env collector
    2.7 s at every start)."""
    env = make_raw_vector_env(env_id, num_envs, kwargs, wrappers)
    space = env.single_observation_space
    encode = one_hot_for(space)
    if encode is not None:
        return TransformObservation(env, encode, single_observation_space=encode.encoded_space)
    parts = observation_parts(space, env_id)
    if parts is not None:
        convert = PartsConversion(parts)
        return TransformObservation(env, convert, single_observation_space=convert.space)
    frame_shape = _frame_shape(space)
    if frame_shape is not None:
        return FrameStackVectorEnv(env, frame_stack, frame_shape)
    layout = image_layout(space.shape, space.dtype)
    if layout is not None:
        return TransformObservation(env, layout.convert, single_observation_space=layout.space)
    return env


def _inspect_ale(env_id: str, kwargs: dict[str, Any], frame_stack: int) -> EnvSpec:
    from ale_py import roms

    game = ale_game(env_id)
    if roms.get_rom_path(game) is None:
        raise UnsupportedEnv(f"env.id '{env_id}': ale-py has no ROM '{game}'")
    try:
        env = _make_ale(env_id, 1, kwargs)
    except TypeError as err:
        raise UnsupportedEnv(f"env.kwargs are not accepted by ALE's vector env: {err}") from None
    try:
        frame = _frame_shape(env.single_observation_space)
        return EnvSpec((frame_stack, *frame), "uint8", int(env.single_action_space.n), frame_stack)
    finally:
        env.close()


def inspect_env(env_id: str, kwargs: dict[str, Any], frame_stack: int = 4, wrappers: Sequence = ()) -> EnvSpec:
    """Check that `env_id` exists and has an action space raypex learns on (Discrete, or a bounded
    1-D Box) and an observation it learns on: a flat Box vector, a Discrete or MultiDiscrete one
    (one-hot), 2-D uint8 frames (stacked `frame_stack` deep), rank-3 images (their channels are
    the network's input channels; `frame_stack` does not apply), or a Dict or Tuple of those (its
    parts, not stacked). `wrappers` (env.wrappers) are
    applied first: what they make of the env is what is checked."""
    if is_ale(env_id):
        if wrappers:
            raise UnsupportedEnv(ALE_NOT_WRAPPED)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ale-py warns before it returns None for unknown ROMs
            return _inspect_ale(env_id, kwargs, frame_stack)
    if names_code(env_id):
        check_user_env(env_id, kwargs)
    given, env_id = env_id, registered_id(env_id)
    register_minatar(env_id)
    register_popgym(env_id)
    if env_id not in gym.envs.registry:
        close = difflib.get_close_matches(env_id, list(gym.envs.registry), n=1, cutoff=0.8)
        similar = [name for name in gym.envs.registry if name.lower().startswith(env_id.split("-")[0].lower())]
        hint = (f"; did you mean '{close[0]}'?" if close
                else f"; similar: {', '.join(sorted(similar)[:5])}" if similar else "")
        raise UnsupportedEnv(f"env.id '{env_id}' is not a registered Gymnasium environment{hint}")
    quiet_known_mujoco_warnings(env_id)
    try:
        env = gym.make(env_id, **kwargs)
    except TypeError as err:
        raise UnsupportedEnv(f"env.kwargs are not accepted by '{given}': {err}") from None
    except gym.error.Error as err:  # a missing optional dependency (box2d, mujoco), say
        reason = str(err).strip().splitlines()[0]
        if "mujoco is not installed" in reason.lower():
            reason = "MuJoCo is not installed: pip install 'raypex[mujoco]'"
        raise UnsupportedEnv(f"env.id '{given}' cannot be made: {reason}") from None
    try:
        env = wrapped(env, wrappers)
        obs_space, act_space = env.observation_space, env.action_space
        threshold = env.spec.reward_threshold if env.spec is not None else None
    finally:
        env.close()
    fields = {**action_fields(given, act_space), "reward_threshold": None if threshold is None else float(threshold)}
    encode = one_hot_for(obs_space)
    if encode is not None:
        return EnvSpec((encode.size,), "float32", **fields)
    parts = observation_parts(obs_space, given)
    if parts is not None:
        return EnvSpec((), "parts", frame_stack=1, obs_parts=tuple(part.layout for part in parts), **fields)
    if not isinstance(obs_space, gym.spaces.Box):
        raise UnsupportedEnv(
            f"env.id '{given}' has a {type(obs_space).__name__} observation space ({obs_space}); raypex learns "
            "on Box, Discrete (one-hot), MultiDiscrete (one-hot per part), Dict and Tuple observations"
        )
    frame = _frame_shape(obs_space)
    if frame is not None:
        return EnvSpec((frame_stack, *frame), "uint8", frame_stack=frame_stack, **fields)
    layout = image_layout(obs_space.shape, obs_space.dtype)
    if layout is not None:
        if min(layout.shape[1:]) < MIN_IMAGE_SIDE:
            raise UnsupportedEnv(f"env.id '{given}' has images of {layout.shape[1]}x{layout.shape[2]} "
                                 f"(observation shape {obs_space.shape}); raypex's CNNs need at least "
                                 f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}")
        return EnvSpec(layout.shape, layout.dtype, **fields)
    if len(obs_space.shape) != 1:
        raise UnsupportedEnv(
            f"env.id '{given}' has observations of shape {obs_space.shape} ({obs_space.dtype}); "
            "raypex supports flat (1-D) vectors, 2-D uint8 frames and rank-3 images (HWC or CHW)"
        )
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype).name, **fields)
