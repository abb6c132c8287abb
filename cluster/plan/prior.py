"""replay.prior: a local Minari dataset as transitions the learner draws beside the collectors'.

`check_prior` reads the dataset's metadata before anything starts and says in one line what does
not fit the run's env (its observations and actions, its size against replay.capacity); the
plan's `prior_transitions` then reads its steps as one-step transitions in replay's layout: Box
actions mapped to [-1, 1] as collectors store theirs, the discount gamma (0 where an episode
terminated). They go to the learner with its plan and live in a block of replay's columns of their
own (replay/sharded.py), never overwritten and never checkpointed: a resumed run reads them again.
"""

from __future__ import annotations

import numpy as np

from raypex.actors.envs import EnvSpec
from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.schema import RunConfig


def check_prior(config: RunConfig, spec: EnvSpec) -> None:
    """UsageError in one line when replay.prior names no local dataset or one that does not fit."""
    dataset_id = config.replay.prior
    if dataset_id is None:
        return
    from raypex.replay.minari_io import DatasetError, dataset_spaces

    where = f"replay.prior {dataset_id}"
    if spec.frame_stack:
        stored = "observation parts" if spec.obs_parts else "pixel frames"
        raise UsageError(f"{where}: {config.env.id}'s {stored} are stored once each; replay.prior takes flat "
                         "observations")
    try:
        observation_space, action_space, steps = dataset_spaces(dataset_id)
    except DatasetError as err:
        raise UsageError(f"{where}: {err}") from None
    shape = tuple(getattr(observation_space, "shape", None) or ())
    if shape != tuple(spec.obs_shape):
        raise UsageError(f"{where}: its observations are {observation_space}, and {config.env.id}'s networks take "
                         f"shape {tuple(spec.obs_shape)}")
    actions = getattr(action_space, "n", None)
    if spec.action_dim:
        fits = tuple(getattr(action_space, "shape", ())) == (spec.action_dim,) and np.allclose(
            action_space.low, spec.action_low) and np.allclose(action_space.high, spec.action_high)
    else:
        fits = actions is not None and int(actions) == spec.num_actions
    if not fits:
        raise UsageError(f"{where}: its actions are {action_space}; {config.env.id}'s do not match")
    if steps > config.replay.capacity:
        raise UsageError(f"{where} holds {steps} transitions, more than replay.capacity ({config.replay.capacity}, "
                         "what its block of replay holds): raise replay.capacity")


def prior_transitions(config: RunConfig, spec: EnvSpec) -> dict[str, np.ndarray] | None:
    """replay.prior's steps in replay's transition layout (replay/ring.py), or None without one."""
    if config.replay.prior is None:
        return None
    from raypex.actors.action_scaling import ActionScale
    from raypex.replay.minari_io import read_dataset

    data = read_dataset(config.replay.prior)
    action = (ActionScale(spec.action_low, spec.action_high).to_unit(data.action) if spec.action_dim
              else data.action.astype(np.int64))
    gamma = np.float32(config.algo.gamma)
    return {"obs": data.obs.astype(spec.obs_dtype), "action": action, "return": data.reward.astype(np.float32),
            "discount": np.where(data.terminated, np.float32(0.0), gamma).astype(np.float32),
            "next_obs": data.next_obs.astype(spec.obs_dtype)}
