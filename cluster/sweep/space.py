"""Search spaces written where values go: in the YAML or on the command line, a value that reads
`loguniform(1e-4, 1e-2)`, `uniform(0.9, 0.99)`, `randint(1, 5)`, `choice([64, 128])` or
`grid([1, 3, 5])` is searched instead of set (`raypex tune configs/cartpole.yaml
learner.lr=loguniform(1e-4,1e-2)`).

Pure logic, no Ray: a sweep's settings are read and checked here before anything starts, each
mistake one line naming the key (an unknown key, bad bounds, a value the schema refuses at a
bound or for a choice); cluster/sweep/experiment.py turns the domains into Tune's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.config.loading import ConfigError, apply_values, as_number_if_numeric, validate

SCHEDULERS = ("none", "asha", "pbt")
KINDS = ("loguniform", "uniform", "randint", "choice", "grid")
_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.DOTALL)


@dataclass(frozen=True)
class Domain:
    """One searched key's values: `kind` (one of KINDS) and its arguments (bounds, or the values)."""

    kind: str
    args: tuple

    def text(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.args))})"

    def corners(self) -> list[Any]:
        """The values a check tries: each bound, or each listed value."""
        if self.kind == "randint":
            return [self.args[0], self.args[1] - 1]
        return list(self.args)


def parse_domain(key: str, text: str) -> Domain | None:
    """The domain `text` writes, or None when it is a plain value; ConfigError for a search
    expression that is malformed."""
    match = _CALL.match(text)
    if match is None or match.group(1) not in KINDS:
        return None
    kind, inner = match.group(1), match.group(2)
    try:
        args = yaml.safe_load(f"[{inner}]")
    except yaml.YAMLError:
        raise ConfigError(f"{key}: cannot read the arguments of {kind}({inner})") from None
    if kind in ("choice", "grid") and len(args) == 1 and isinstance(args[0], list):
        args = args[0]
    args = [as_number_if_numeric(a) for a in args]  # YAML 1.1 reads 1e-4 (no dot) as text
    where = f"{key}={kind}({inner})"
    if kind in ("choice", "grid"):
        if not args:
            raise ConfigError(f"{where}: give at least one value, e.g. {kind}([64, 128])")
        return Domain(kind, tuple(args))
    if len(args) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
        raise ConfigError(f"{where}: {kind} takes two numbers, low and high, e.g. {kind}(1e-4, 1e-2)")
    low, high = args
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"{where}: needs low < high, both finite")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: loguniform needs 0 < low")
    if kind == "randint" and not (isinstance(low, int) and isinstance(high, int)):
        raise ConfigError(f"{where}: randint takes integers (high excluded), e.g. randint(1, 5)")
    return Domain(kind, (low, high))


def split_space(data: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, Domain]]:
    """(the config data with every searched value taken out, {dotted key: Domain})."""
    fixed: dict[str, Any] = {}
    space: dict[str, Domain] = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            inner, found = split_space(value, f"{key}.")
            fixed[name] = inner
            space.update(found)
        elif isinstance(value, str) and (domain := parse_domain(key, value)) is not None:
            space[key] = domain
        else:
            fixed[name] = value
    return fixed, space


# PBT copies a donor's networks and replay into another trial: what shapes them cannot differ.
FIXED_UNDER_PBT = ("env.", "network.", "collectors.num", "replay.capacity", "algo.name", "seed")


LR_SPREAD = 4.0  # the default search: the config's learning rate divided or multiplied by up to this


def default_space(fixed: dict[str, Any]) -> dict[str, Domain]:
    """What a sweep searches when nothing is written as a search space: the learning rate, log-uniform
    from the config's divided by LR_SPREAD to multiplied by it (the setting that most often decides
    whether an off-policy run learns, and one PBT may change between a donor and its recipient)."""
    lr = validate(fixed).learner.lr
    return {"learner.lr": Domain("loguniform", (lr / LR_SPREAD, lr * LR_SPREAD))}


def check_space(fixed: dict[str, Any], space: dict[str, Domain], scheduler: str) -> None:
    """ConfigError in one line unless every searched value makes a valid config (each domain's
    corners tried with the rest at the config's values) and, for PBT, every key may differ
    between a donor and a recipient."""
    config = validate(fixed)
    if "learner.num" in space or config.learner.num > 1:
        raise ConfigError("learner.num: a sweep's trial runs one learner in the placement group Tune reserves for it; "
                          "set learner.num 1 (several learners are for `raypex train`)")
    for key, domain in space.items():
        if scheduler == "pbt" and (key.startswith(FIXED_UNDER_PBT)):
            raise ConfigError(f"{key}: a PBT exploit copies the donor's networks and replay into the recipient, so "
                              f"{key} cannot be searched with --scheduler pbt (use asha, or none)")
        if scheduler == "pbt" and domain.kind == "grid":
            raise ConfigError(f"{key}: grid is not a distribution PBT can resample from; use choice")
        for value in domain.corners():
            try:
                validate(apply_values(fixed, {key: value}))
            except ConfigError as err:
                raise ConfigError(f"{key}={domain.text()}: at {value!r}: {err}") from None


def grid_size(space: dict[str, Domain]) -> int:
    """How many trials one sample of the space makes (grid keys multiply)."""
    return math.prod(len(d.args) for d in space.values() if d.kind == "grid")


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep runs: the config (searched keys taken out), the space and how to search it."""

    base: dict[str, Any]  # the config's data, JSON-able, fitted to its env
    space: dict[str, Domain]
    samples: int  # samples of the space (each grid key multiplies them)
    scheduler: str  # none | asha | pbt
    carry_replay: bool  # a PBT exploit copies the donor's replay too
    report_every_epochs: int  # epochs per Tune iteration (a report)
    perturb_every: int  # PBT: reports between perturbations

    def to_json(self) -> dict:
        return {"base": self.base, "space": {k: [d.kind, list(d.args)] for k, d in self.space.items()},
                "samples": self.samples, "scheduler": self.scheduler, "carry_replay": self.carry_replay,
                "report_every_epochs": self.report_every_epochs, "perturb_every": self.perturb_every}

    @classmethod
    def from_json(cls, data: dict) -> SweepRequest:
        space = {k: Domain(kind, tuple(args)) for k, (kind, args) in data["space"].items()}
        return cls(data["base"], space, data["samples"], data["scheduler"], data["carry_replay"],
                   data["report_every_epochs"], data["perturb_every"])


def check_request(fixed: dict, space: dict[str, Domain], samples: int, scheduler: str, report_every: int,
                  perturb_every: int) -> None:
    """UsageError in one line for settings a sweep cannot run with (nothing started yet)."""
    if scheduler not in SCHEDULERS:
        raise UsageError(f"--scheduler {scheduler}: choose one of {', '.join(SCHEDULERS)}")
    for name, value in (("--samples", samples), ("--report-every", report_every), ("--perturb-every", perturb_every)):
        if value < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")
    if (fixed.get("collectors") or {}).get("num") == "auto":
        raise UsageError("collectors.num auto: a sweep's trials each reserve a fixed number of collectors; set a number")
    if scheduler == "pbt" and samples * grid_size(space) < 2:
        raise UsageError("--scheduler pbt needs a population: --samples 2 or more")
    try:
        check_space(fixed, space, scheduler)
    except ConfigError as err:
        raise UsageError(str(err)) from None
