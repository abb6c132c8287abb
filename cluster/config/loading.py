"""Turn a YAML file plus `key=value` overrides into a validated RunConfig, or one error line.

Every user mistake becomes a `ConfigError` whose message names the field and what is allowed;
the CLI prints it and exits 2. Nothing is started or written before this succeeds.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from raypex.cluster.config.schema import RunConfig

_UNION_MEMBER_TAGS = {"float", "int", "str", "bool", "none", "list", "dict", "constrained-int"}


class ConfigError(Exception):
    """A user mistake in the config or its overrides; the message is one line for the terminal."""


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping from `path`; missing files and syntax errors become ConfigError."""
    if not path.is_file():
        from raypex.cluster.config.shipped import shipped_configs

        names = ", ".join(shipped_configs())
        hint = f" (shipped configs, by name from any directory: {names})" if names else ""
        raise ConfigError(f"config file not found: {path}{hint}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        tabbed = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if "\t" in line]
        if tabbed:
            why = f": line {tabbed[0]} has a tab, and YAML indents with spaces only"
        else:
            why = f": {err.problem}" if getattr(err, "problem", None) else ""
        raise ConfigError(f"{path}: not valid YAML{where}{why}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def saved_config_upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """A run directory's saved config as this raypex reads it: the keys it no longer has
    (RETIRED_KEYS) dropped, an evaluation period in epochs turned into the env steps those epochs
    held (updates x batch / samples per insert) and a target period in updates into the samples
    they held, so an older run resumes and evaluates as it did."""
    result = _deep_copy(data)
    learner, replay, default = result.get("learner") or {}, result.get("replay") or {}, RunConfig()
    batch = learner.get("micro_batch", default.learner.micro_batch) \
        * learner.get("accumulation_steps", default.learner.accumulation_steps)
    evaluation = result.get("eval")
    if isinstance(evaluation, dict) and "every_epochs" in evaluation and "every_env_steps" not in evaluation:
        samples = learner.get("updates_per_epoch", default.learner.updates_per_epoch) * batch
        ratio = replay.get("samples_per_insert", default.replay.samples_per_insert)
        if ratio:  # 0: no limiter, an epoch's env steps unknown: the default period
            evaluation["every_env_steps"] = max(1, round(evaluation["every_epochs"] * samples / ratio))
    if "target_update_every" in learner and "target_update_every_samples" not in learner:
        learner["target_update_every_samples"] = learner["target_update_every"] * batch
    for dotted in RETIRED_KEYS:
        section, _, key = dotted.partition(".")
        if isinstance(result.get(section), dict):
            result[section].pop(key, None)
    return result


def saved_run_config(run_dir: Path) -> RunConfig:
    """The config a run directory was trained with, as this raypex reads it (`saved_config_upgraded`);
    ConfigError when it has no config.yaml or the file no longer validates."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no config.yaml there (not a raypex run directory)")
    return validate(saved_config_upgraded(read_yaml(path)))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted `section.key=value` overrides (values parsed as YAML scalars) to a copy of data."""
    result = _deep_copy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override '{item}' must look like section.key=value, e.g. learner.lr=3e-4")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            raise ConfigError(f"override '{item}': the value is not valid YAML") from None
        _set_dotted(result, key, as_number_if_numeric(value), item)
    return result


def apply_values(data: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of data with each dotted key set to its value (the Python API's overrides, given as
    values, not text)."""
    result = _deep_copy(data)
    for key, value in values.items():
        _set_dotted(result, key, value, f"{key}={value!r}")
    return result


def _set_dotted(data: dict[str, Any], key: str, value: Any, item: str) -> None:
    """Set `section.key` in data (in place); `item`: how the override is named in errors."""
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{item}' must look like section.key=value, e.g. learner.lr=3e-4")
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{item}': {part} is not a section")
        node = child
    node[parts[-1]] = value


def validate(data: dict[str, Any]) -> RunConfig:
    """Validate a raw mapping into a RunConfig; the first problem becomes a one-line ConfigError."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


# Keys that configs written for earlier versions may still carry, and why they went.
RETIRED_KEYS = {
    "learner.prefetch": "replay lives in the learner's process now, so no batch is requested ahead",
    "learner.feed_threads": "replay lives in the learner's process now, so no thread fetches batches",
    "replay.num_cpus": "shards are no longer actors of their own (replay lives in the learner's process)",
    "learner.head_start": "the forked head start is gone; `raypex train --local` runs every part in one process",
    "learner.target_update_every": "the hard target period is counted in samples "
                                   "(learner.target_update_every_samples = updates x micro_batch x accumulation_steps), "
                                   "so that it holds when the batch shape changes",
    "eval.every_epochs": "evaluations are due by env steps (eval.every_env_steps; an epoch's env steps change with "
                         "the batch shape and the replay ratio) or by time (eval.every_s)",
}


def format_validation_error(err: ValidationError) -> str:
    """One line naming the dotted field, what is allowed and what was given."""
    first = err.errors(include_url=False)[0]
    # A union's member adds its type to the location (eval.max_return.float): not part of the key.
    field = ".".join(str(part) for part in first["loc"] if str(part) not in _UNION_MEMBER_TAGS
                     and not str(part).startswith(("literal[", "function-")))
    kind = first["type"]
    if kind == "extra_forbidden":
        if field in RETIRED_KEYS:
            return f"config key '{field}' was removed: {RETIRED_KEYS[field]}; delete it from the config"
        return f"unknown config key '{field}'{_suggestion(first['loc'])}"
    message = first["msg"].removeprefix("Value error, ")
    if kind == "value_error" and not field:
        return f"config error: {message}"
    given = first.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    if isinstance(given, str) and given.lower() in ("none", "nil"):
        shown += "; YAML writes no value as null"  # key=None is Python's spelling, a string to YAML
    return f"config error: {field}: {message}{shown}"


# Names other RL libraries give these keys (Stable-Baselines3, CleanRL, RLlib): a user typing
# one is pointed at ours, wherever in the config they put it.
OTHER_LIBRARIES_NAMES = {
    "learning_rate": "learner.lr", "batch_size": "learner.micro_batch", "train_batch_size": "learner.micro_batch",
    "gamma": "algo.gamma", "buffer_size": "replay.capacity", "n_step": "algo.n_step", "tau": "learner.target_tau",
    "num_workers": "collectors.num", "num_env_runners": "collectors.num", "total_timesteps": "stop.env_steps",
    "learning_starts": "replay.min_size",
}


def _suggestion(loc: tuple) -> str:
    """ "; did you mean 'learner.lr'?" for a misspelt key or another library's name for it, else ""."""
    known = OTHER_LIBRARIES_NAMES.get(str(loc[-1]))
    if known is not None and known != ".".join(map(str, loc)):
        return f"; did you mean '{known}'?"
    model = RunConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return ""
        model = field.annotation
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f"; did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?" if close else ""


@dataclass(frozen=True)
class ConfigOrigin:
    """What a run's config was written for, and which keys the user set on top of it: a config
    carries one env's settings, so another env.id (an override) gets a warning and that env's own
    stop target unless stop.eval_return was set too (cluster/plan/env_fit.py)."""

    name: str  # "configs/cartpole.yaml", "the default config", ...
    env_id: str  # the env.id it names
    overridden: frozenset[str]  # dotted keys the user set on top of it


def config_origin(name: str, data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> ConfigOrigin:
    """The origin of a config read as `data` (before `overrides`, key=value strings or a dict)."""
    env_id = (data.get("env") or {}).get("id") or RunConfig.model_fields["env"].default_factory().id
    keys = overrides.keys() if isinstance(overrides, dict) else [item.partition("=")[0] for item in overrides]
    return ConfigOrigin(name, str(env_id), frozenset(keys))


def load_config(path: Path | None, overrides: list[str]) -> RunConfig:
    """Load `path`, apply overrides and validate. Without a path the schema's defaults are used:
    they are the CartPole config (configs/cartpole.yaml spells them out; a test keeps the two equal),
    so `raypex train` works from any install, with or without the repository's configs/."""
    data = read_yaml(path) if path is not None else {}
    return validate(apply_overrides(data, overrides))


def with_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """`config` with dotted overrides applied and validated again (raypex bench adjusts stop and
    replay per stage this way)."""
    return validate(apply_overrides(config.model_dump(mode="json"), overrides))


def config_to_yaml(config: RunConfig) -> str:
    """The resolved config as YAML text, the form written to the run directory and TensorBoard."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def as_number_if_numeric(value: Any) -> Any:
    """YAML 1.1 reads '3e-4' (no dot) as a string; users mean the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}
