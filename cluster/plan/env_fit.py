"""Does the config fit the env the run trains on? Checked once, before anything starts.

A config is written for one env (configs/cartpole.yaml for CartPole-v1): its stop target, network,
replay and learning rate are that env's. When `env.id` names another one, a warning says so; the
stop target becomes the new env's own (its registration's reward threshold, or none: the run trains
to stop.env_steps and keeps its best policy) unless the user set stop.eval_return too; and pixel
observations on a config written for flat ones are refused, pointing at the pixel configs, unless
the user sized the network, replay or learner for them on the command line. The
replay's memory is estimated from the env's observations, and refused in one line when it cannot
fit this machine.
"""

from __future__ import annotations

from raypex.actors.envs import EnvSpec, UnsupportedEnv, inspect_env
from raypex.cluster.config.loading import ConfigOrigin
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.plan.settings import storage_spec

PIXEL_CONFIGS = "pong, breakout (ALE) or minatar"
# Overrides of these sections say the user sized the run for its env: pixels are theirs to choose.
RETUNING = ("network.", "replay.", "learner.")


def fit_to_env(config: RunConfig, spec: EnvSpec, origin: ConfigOrigin | None) -> tuple[RunConfig, list[str]]:
    """(the config to run, the lines to print) for a config from `origin` (None: a resumed run,
    whose config is already its env's). UnsupportedEnv for pixels on a config written for flat
    observations."""
    env_id = config.env.id
    if origin is None or env_id == origin.env_id:
        return config, []
    retuned = any(key.startswith(RETUNING) for key in origin.overridden)
    if len(spec.obs_shape) != 1 and not retuned and _flat(origin, config):
        shape = "x".join(map(str, spec.obs_shape))
        example = f"raypex train pong env.id={env_id}" + (f" algo.name={config.algo.name}" if spec.action_dim else "")
        raise UnsupportedEnv(f"env.id '{env_id}' gives pixel observations ({shape}), and {origin.name} is written for "
                             f"{origin.env_id}'s flat ones (its replay, network and learning rate): start from a "
                             f"pixel config, {PIXEL_CONFIGS} ({example})")
    line = f"warning: env.id {env_id} is not {origin.env_id}, which {origin.name} was written for: its settings may not fit"
    if "stop.eval_return" not in origin.overridden and config.stop.eval_return != spec.reward_threshold:
        target = spec.reward_threshold
        stop = config.stop.model_copy(update={"eval_return": target})
        config = config.model_copy(update={"stop": stop})
        if target is None:
            line += (f"; stop.eval_return null ({env_id} names no reward threshold): it trains to stop.env_steps "
                     "and keeps its best policy")
        else:
            line += f"; stop.eval_return {target:g}, {env_id}'s reward threshold"
    return config, [line]


def _flat(origin: ConfigOrigin, config: RunConfig) -> bool:
    """Whether the env the config was written for has flat observations (False when it cannot be
    inspected here: its package not installed, say)."""
    try:
        return len(inspect_env(origin.env_id, {}, config.env.frame_stack).obs_shape) == 1
    except UnsupportedEnv:
        return False


def replay_bytes(config: RunConfig, spec: EnvSpec) -> int:
    """What the replay's storage takes, every shard together (preallocated at the learner's start)."""
    return storage_spec(config, spec).column_bytes * config.collectors.num


def replay_line(config: RunConfig, spec: EnvSpec) -> str:
    """One line: the replay's size and where it lives."""
    total = replay_bytes(config, spec)
    shards, capacity = config.collectors.num, config.replay.capacity
    where = "in the learner's process" + ("" if config.learner.device == "cpu" else
                                          ", on its GPU if it has one and the replay fits there")
    return (f"replay: {shards} shard{'s' if shards > 1 else ''} x {capacity:,} transitions x "
            f"{total / (shards * capacity):,.0f} B = {human_bytes(total)}, {where}")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"
