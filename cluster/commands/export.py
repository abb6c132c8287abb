"""`raypex export RUN --onnx PATH`: a run's policy.pt2 as an ONNX model (learner/onnx_export.py), for
serving it without torch (ONNX Runtime, or any ONNX runner). `raypex export RUN --minari ID`: the
replay of the run's newest checkpoint as a local Minari dataset (replay/episodes.py rebuilds its
episodes, replay/minari_io.py writes them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.storage import atomic_write, reason


def policy_file(run: Path) -> Path:
    """RUN's policy.pt2: RUN itself when it is one, else the one in the run directory RUN."""
    run = run.resolve()
    if run.is_file():
        if run.suffix != ".pt2":
            raise UsageError(f"{run}: not a policy.pt2 or a run directory")
        return run
    if not run.is_dir():
        raise UsageError(f"{run}: no such run directory")
    if not (run / "policy.pt2").is_file():
        raise UsageError(f"{run}: no policy.pt2 (the run has not finished, or this is not a run directory)")
    return run / "policy.pt2"


def run_export(args: argparse.Namespace) -> int:
    """Write RUN's policy as ONNX to `--onnx PATH` and say what it takes and gives, or its replay
    as the Minari dataset `--minari ID`."""
    if args.minari is not None:
        return export_replay(args.run, args.minari)
    source = policy_file(args.run)
    from raypex.learner.onnx_export import io_names, onnx_bytes
    from raypex.learner.policy_file import PolicyFileError, load_policy

    try:
        policy = load_policy(source)
    except PolicyFileError as err:
        raise UsageError(str(err)) from None
    target = Path(args.onnx)
    if target.is_dir():
        raise UsageError(f"--onnx {target}: a directory; give the file to write, such as {target / 'policy.onnx'}")
    try:
        atomic_write(target, onnx_bytes(policy))
    except OSError as err:
        raise UsageError(f"--onnx {target}: not written ({reason(err)})") from None
    inputs, outputs = io_names(policy)
    shapes = policy.obs_shape if isinstance(policy.obs_shape, dict) else {"obs": policy.obs_shape}
    takes = ", ".join(f"{name if name == 'obs' else 'obs.' + name} [batch, {', '.join(map(str, shape))}]"
                      for name, shape in shapes.items())
    print(f"wrote {target}: {', '.join(inputs)} -> {', '.join(outputs)} ({takes} float32), from {source}")
    return 0


def export_replay(run: Path, dataset_id: str) -> int:
    """Write RUN's replay (its newest intact checkpoint's) as the local Minari dataset `dataset_id`."""
    from raypex.cluster.config.loading import ConfigError, saved_run_config
    from raypex.cluster.driver.checkpoints import load_latest
    from raypex.cluster.storage import UnsafeRunFile, read_replay
    from raypex.learner.algorithms.registry import algorithm
    from raypex.replay.minari_io import DatasetError, write_dataset

    try:
        config = saved_run_config(run)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    if config.algo.n_step != 1 or algorithm(config.algo.name).sequences or config.env.clip_rewards:
        raise UsageError(f"{run}: its replay holds {config.algo.n_step}-step returns, sequences or clipped rewards, "
                         "not each step's reward: --minari takes a run of a feed-forward algorithm with algo.n_step 1 "
                         "and env.clip_rewards false")
    try:
        point = load_latest(run / "checkpoints")
    except UnsafeRunFile as err:
        raise UsageError(f"{run}: {err}") from None
    if point is None or not point.replay_files:
        raise UsageError(f"{run}: no checkpoint with the replay in {run / 'checkpoints'} (checkpoint.replay on "
                         "keeps it)")
    env, spec, observation_space, action_space = _env_of(config)
    episodes = []
    for location, part in zip(point.replay_files, point.replay_parts, strict=True):
        episodes += shard_episodes(read_replay(location, part), config, spec, env)
    try:
        where = write_dataset(dataset_id, episodes, env.spec, observation_space, action_space, config.algo.name)
    except DatasetError as err:
        raise UsageError(f"--minari {dataset_id}: {err}") from None
    finally:
        env.close()
    steps = sum(e.length for e in episodes)
    print(f"wrote Minari dataset {dataset_id} in {where}: {len(episodes)} episodes, {steps} steps, from "
          f"{len(point.replay_files)} shards of {run} at {point.env_steps} env steps")
    return 0


def _env_of(config):
    """(one env of the run as its collectors make it, its EnvSpec, the observation and action spaces
    the dataset records: the env's own); UsageError unless its observations are a flat Box, stored as they come."""
    import gymnasium as gym

    from raypex.actors.env_ids import registered_id
    from raypex.actors.env_wrappers import wrapped
    from raypex.actors.envs import UnsupportedEnv, inspect_env

    e = config.env
    try:
        spec = inspect_env(e.id, e.kwargs, e.frame_stack, e.wrappers)  # registers MinAtar's and POPGym's ids too
        env = wrapped(gym.make(registered_id(e.id), **e.kwargs), e.wrappers)
    except UnsupportedEnv as err:
        raise UsageError(str(err), err.details) from None
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1 or tuple(space.shape) != tuple(spec.obs_shape):
        env.close()
        raise UsageError(f"env.id {e.id}'s observations are {space}: --minari takes flat Box observations, stored as "
                         "they come")
    return env, spec, space, env.action_space


def shard_episodes(state: dict, config, spec, env) -> list:
    """The whole episodes of one shard's saved state, actions in the env's units."""
    import numpy as np

    from raypex.actors.action_scaling import ActionScale
    from raypex.replay.episodes import rebuild_episodes, stream_order

    storage = state["storage"]
    columns = dict(storage["columns"])  # its `size` rows until the ring wraps
    capacity = config.replay.capacity
    if spec.action_dim:
        columns["action"] = ActionScale(spec.action_low, spec.action_high).to_env(columns["action"])
    order = stream_order(int(storage["size"]), int(storage["cursor"]), capacity)
    limit = env.spec.max_episode_steps if env.spec is not None else None
    episodes = rebuild_episodes(columns, order, config.env.num_envs, int(storage["total_added"]) > capacity, limit)
    dtype = env.observation_space.dtype  # stored as float32, as the networks read them
    for episode in episodes:
        episode.observations = [np.asarray(o, dtype) for o in episode.observations]
    return episodes
