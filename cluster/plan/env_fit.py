"""Does the run fit its env and its working directory? Checked once, before anything starts
(cluster/launch.py `launch` calls `fit_run`).

A config is written for one env (configs/cartpole.yaml for CartPole-v1): its stop target, network,
replay and learning rate are that env's. When `env.id` names another one of a family whose tasks
share a return range (POPGym's), one line says the config serves it, stop target and all. When it
names any other, a warning says so; the
stop target becomes the new env's own (its registration's reward threshold, or none: the run trains
to stop.env_steps and keeps its best policy) unless the user set stop.eval_return too; and pixel
observations on a config written for flat ones are refused, pointing at the pixel configs, unless
the user sized the network, replay or learner for them on the command line. The
replay's memory is estimated from the env's observations, and refused in one line when it cannot
fit this machine. An env.id naming the user's code records where it was found (env.code_dir, so
that `raypex eval` finds it from any directory), and a `raypex.py` in the working directory, the one
name that would shadow raypex on the actors, is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from raypex.actors.env_ids import names_code
from raypex.actors.envs import EnvSpec, UnsupportedEnv, check_algo_fits, inspect_env
from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.loading import ConfigOrigin, config_origin, read_yaml
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.config.shipped import shipped_configs
from raypex.cluster.plan.prior import check_prior
from raypex.cluster.plan.settings import storage_spec

PIXEL_CONFIGS = "pong, breakout (ALE) or minatar"
# A replay past this share of the machine's memory is refused before anything starts: the learner,
# the collectors and Ray need the rest.
REPLAY_SHARE_OF_MEMORY = 0.9
# Overrides of these sections say the user sized the run for its env: pixels are theirs to choose.
RETUNING = ("network.", "replay.", "learner.")
# Env families whose tasks all score in one range (POPGym's returns lie in [-1, 1]): a config written
# for one of them fits the others, its stop target included.
SHARED_RETURN_RANGE = {"popgym-": "POPGym"}


def fit_run(config: RunConfig, origin: ConfigOrigin | None, on_this_machine: bool
            ) -> tuple[RunConfig, EnvSpec, list[str]]:
    """(the config to run, its env's EnvSpec, the lines to print): nothing in the working directory
    shadows raypex, the env built and stepped once, the config fitted to it (`fit_to_env`), the
    algorithm checked against its spaces and, when the run is on this machine, the replay's memory
    against where it will live (`replay_room`). UnsupportedEnv or UsageError in one line."""
    config = with_code_dir(config)
    check_nothing_shadows_raypex(config)
    env = config.env
    spec = inspect_env(env.id, env.kwargs, env.frame_stack, env.wrappers)
    config, lines = fit_to_env(config, spec, origin)
    check_algo_fits(config.algo.name, spec, env.id, config.network.flat_only)
    check_encoder(config, spec)
    check_parts_acting(config, spec)
    check_prior(config, spec)
    room = replay_room(config) if on_this_machine else None
    needed = replay_bytes(config, spec)
    if room is not None and needed > REPLAY_SHARE_OF_MEMORY * room[1]:
        raise UsageError(f"the replay would take {human_bytes(needed)}, more than {room[0]} memory "
                         f"allows ({human_bytes(room[1])} in all): lower replay.capacity (per shard) or "
                         f"{'collectors.max' if config.collectors.elastic else 'collectors.num'}")
    return config, spec, lines


def check_encoder(config: RunConfig, spec: EnvSpec) -> None:
    """network.encoder built once on the env's observations, before any actor starts: UsageError in
    one line when it does not import, build or give features [B, F] (learner/encoders.py)."""
    network = config.network
    if network.encoder is None:
        return
    from raypex.learner.encoders import EncoderError, build_encoder

    try:
        build_encoder(network.encoder, network.encoder_kwargs, spec.obs_shape, spec.obs_dtype, spec.obs_parts)
    except EncoderError as err:
        raise UsageError(str(err)) from None


def check_parts_acting(config: RunConfig, spec: EnvSpec) -> None:
    """Observations in parts act through the acting graph on each collector's CPU
    (actors/onnx_acting.py): a torch acting form or served acting asked for is UsageError in one line."""
    c = config.collectors
    asked = [f"collectors.{name} {value}" for name, value, other_form in (
        ("act_precision", c.act_precision, "bf16"), ("act_fusion", c.act_fusion, "on"), ("act_device", c.act_device, "cuda"),
        ("acting", c.acting, "served")) if value == other_form]
    if spec.obs_parts and asked:
        raise UsageError(f"{asked[0]}: env.id '{config.env.id}' has observations in parts, which each collector acts on "
                         "with the acting graph on its own CPU (collectors.acting local; act_precision, act_fusion and "
                         "act_device auto)")


def replay_room(config: RunConfig) -> tuple[str, int] | None:
    """(whose, bytes) of the memory the replay of a run on this machine lives in: the GPU's with
    replay.storage device on a GPU learner (read from nvidia-smi: no CUDA context in the driver),
    else this machine's. With `auto` a replay that does not fit the GPU stays in host memory."""
    import psutil

    if config.replay.storage == "device" and config.learner.device != "cpu":
        gpu = _gpu_memory()
        if gpu is not None:
            return "the GPU's", gpu
    return "this machine's", psutil.virtual_memory().total


def _gpu_memory() -> int | None:
    """The first GPU's memory in bytes, None without one (or without nvidia-smi)."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    answer = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                            text=True, timeout=10, check=False)
    first = answer.stdout.strip().splitlines()[:1]
    return int(float(first[0]) * 2**20) if answer.returncode == 0 and first else None



def fit_to_env(config: RunConfig, spec: EnvSpec, origin: ConfigOrigin | None) -> tuple[RunConfig, list[str]]:
    """(the config to run, the lines to print) for a config from `origin` (None: a resumed run,
    whose config is already its env's). UnsupportedEnv for pixels on a config written for flat
    observations."""
    env_id = config.env.id
    if origin is None or env_id == origin.env_id:
        return config, []
    retuned = any(key.startswith(RETUNING) for key in origin.overridden)
    if not spec.obs_parts and len(spec.obs_shape) != 1 and not retuned and _flat(origin, config):
        shape = "x".join(map(str, spec.obs_shape))
        example = f"raypex train pong env.id={env_id}" + (f" algo.name={config.algo.name}" if spec.action_dim else "")
        raise UnsupportedEnv(f"env.id '{env_id}' gives pixel observations ({shape}), and {origin.name} is written for "
                             f"{origin.env_id}'s flat ones (its replay, network and learning rate): start from a "
                             f"pixel config, {PIXEL_CONFIGS} ({example})")
    family = same_family(env_id, origin.env_id)
    if family is not None:
        return config, [(f"{origin.name} was written for {origin.env_id} and serves {family}'s other tasks: their "
                         f"returns lie in the same range, so stop.eval_return {config.stop.eval_return} holds for "
                         f"{env_id} too")]
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
    fitting = config_for_env(env_id) if env_family(env_id) != env_family(origin.env_id) else None
    if fitting is not None:
        line += f"; configs/{fitting}.yaml is written for it: raypex train {fitting}"
    return config, [line]


def env_family(env_id: str) -> str:
    """The env's name without its version (`Hopper-v5` -> `Hopper`): a config serves every version."""
    return re.sub(r"-v\d+$", "", env_id)


def config_for_env(env_id: str) -> str | None:
    """The name of the shipped config written for `env_id` (any version of it), None when none is."""
    for name, path in shipped_configs().items():
        if env_family(config_origin(name, read_yaml(path), []).env_id) == env_family(env_id):
            return name
    return None


def same_family(env_id: str, other: str) -> str | None:
    """The name of the env family both ids belong to when its tasks share one return range (so a
    config's settings and stop target carry across them), else None."""
    for prefix, name in SHARED_RETURN_RANGE.items():
        if env_id.startswith(prefix) and other.startswith(prefix):
            return name
    return None


def _flat(origin: ConfigOrigin, config: RunConfig) -> bool:
    """Whether the env the config was written for has flat observations (False when it cannot be
    inspected here: its package not installed, say)."""
    try:
        return len(inspect_env(origin.env_id, {}, config.env.frame_stack).obs_shape) == 1
    except UnsupportedEnv:
        return False


def replay_bytes(config: RunConfig, spec: EnvSpec) -> int:
    """What the replay's storage takes, every shard together (preallocated at the learner's start)."""
    return storage_spec(config, spec).column_bytes * config.collectors.shards


def replay_line(config: RunConfig, spec: EnvSpec, storage: str) -> str:
    """One line: the replay's size and where it lives (`storage`: the learner's replay backend,
    "host" or "device", its GPU's memory)."""
    total = replay_bytes(config, spec)
    shards, capacity = config.collectors.shards, config.replay.capacity
    learners = config.learner.num
    where = ("in the learner's process" if learners == 1 else f"each in its learner's process ({learners} learners)")
    where += ", in its GPU's memory" if storage == "device" else ""
    unit = "env steps" if storage_spec(config, spec).sequence_length else "transitions"
    return (f"replay: {shards} shard{'s' if shards > 1 else ''} x {capacity:,} {unit} x "
            f"{total / (shards * capacity):,.0f} B = {human_bytes(total)}, {where}")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def check_nothing_shadows_raypex(config: RunConfig) -> None:
    """UsageError when the working directory (every actor's too: Ray gives them the driver's, or
    the env's code directory) holds a `raypex.py` or `raypex/` other than this raypex or the
    checkout it comes from: the actors would import it in our place. Every other name is safe: all
    of raypex lives in the package."""
    import raypex

    ours = Path(raypex.__file__).resolve().parent
    # the checkout ours was loaded from stands in for it where it is imported (its __init__.py)
    same = {ours, ours.parent} if (ours.parent / "__init__.py").is_file() else {ours}
    for directory in {Path.cwd().resolve(), *([Path(config.env.code_dir)] if config.env.code_dir else [])}:
        found = [p for p in (directory / "raypex.py", directory / "raypex") if p.exists() and p.resolve() not in same]
        if found:
            raise UsageError(f"{found[0]} would be imported in place of raypex by the run's actors (they work in "
                             f"{directory}); rename it")


def with_code_dir(config: RunConfig) -> RunConfig:
    """The config with env.code_dir set to this working directory when env.id names code that is
    looked up there (and no directory was recorded yet): config.yaml then says where it was."""
    if config.env.code_dir is not None or not names_code(config.env.id):
        return config
    env = config.env.model_copy(update={"code_dir": str(Path.cwd().resolve())})
    return config.model_copy(update={"env": env})
