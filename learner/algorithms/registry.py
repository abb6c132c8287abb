"""The algorithm registry: every algorithm raypex runs is one plug-in, found by `algo.name`.

A plug-in (one module here per algorithm) says everything that differs between algorithms, so
that the learner, the run loop, the collectors and the evaluator ask it and never name an
algorithm:
- `acting_network`, `acting_module`, `policy`, `greedy_policy`: how it acts. The network its
  published weights are the state dict of, freshly initialized; what of it collectors run (a
  module of that network from `acting_inputs` to `acting_outputs`, which the learner exports once
  as the acting graph, learner/acting_graph.py); the batched policy a collector explores with, and
  the one the evaluator acts greedily with (actors/policy.py: one `act` for every env at once,
  exploration and any recurrent state included). The built-ins' policies live in actors/
  (q_policy.py, recurrent_acting.py, continuous_acting.py); a plug-in may give its own;
- `box_actions`: whether it acts on a Box action space rather than Discrete actions;
- `acts_on_gpu`: whether its collectors' acting gains from a GPU for image observations
  (collectors.act_device auto);
- `collector_noise`: whether collectors add Gaussian action noise (spread over the collectors);
- `default_policy_delay`: critic updates per actor update when `algo.policy_delay` is auto;
- `sequences`: whether it trains on replayed sequences (replay/sequences.py) rather than n-step
  transitions folded by the collectors;
- `batch_spec`: the fields it trains on, each one's shape per sample and dtype (transitions:
  obs, action, return, discount, next_obs; sequences: their steps and state; and weight under
  prioritized replay);
- `capturable`: whether its update runs as captured CUDA graphs on a GPU (else eagerly);
- `build_step`: its update step (learner/algorithm.py AlgorithmStep), which owns networks,
  optimizers, losses, targets, checkpoint state, the captured CUDA-graph form and the export.

The built-ins (PLUGINS) are always there, and so is every algorithm a user's installed package
names under the `raypex.algorithms` entry point group: `my-q = my_package.algorithms:MyQ` in its
pyproject.toml's `[project.entry-points."raypex.algorithms"]`, the value an Algorithm subclass (or a
module whose import registers one). Both load on the first lookup, in every process that looks
(the driver, each collector, the evaluator), so an installed plug-in needs no edit to raypex; an
algorithm registered before that lookup (a test's, a notebook's) sits beside them and hides none.

Plug-in modules import nothing heavy at module level (the command line validates a config with
the registry before torch is imported); their steps import torch when built.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

    from raypex.actors.policy import Policy
    from raypex.actors.served_acting import ServedForward
    from raypex.actors.settings import CollectorSettings, EvaluatorSettings
    from raypex.learner.algorithm import AlgorithmStep, Gather
    from raypex.learner.precision import PrecisionPolicy
    from raypex.learner.settings import LearnerSettings

PLUGINS = ("dqn", "td3", "sac", "r2d2", "qrdqn", "iqn")  # modules of this package, each registering one algorithm
ENTRY_POINT_GROUP = "raypex.algorithms"

_registry: dict[str, Algorithm] = {}
_loaded = False  # the built-ins and the installed packages' entry points have been loaded


class PluginError(ValueError):
    """An installed package's `raypex.algorithms` entry point that does not give an algorithm."""


def observation_spec(settings: LearnerSettings, names: tuple[str, ...],
                     steps: tuple[int, ...] = ()) -> dict[str, tuple[tuple[int, ...], str]]:
    """batch_spec's observation fields `names` ([*steps, *shape], dtype each): one per name, or one
    per name and part (`name.key`) for observations in parts."""
    if settings.obs_parts:
        return {f"{name}.{key}": ((*steps, *shape), dtype) for key, shape, dtype in settings.obs_parts
                for name in names}
    return {name: ((*steps, *settings.obs_shape), settings.obs_dtype) for name in names}


class Algorithm:
    """One algorithm's plug-in (see the module docstring); subclasses set the class attributes,
    `build_step` and how it acts."""

    name: str
    box_actions: bool = False
    acts_on_gpu: bool = False
    collector_noise: bool = False
    default_policy_delay: int = 1
    sequences: bool = False
    capturable: bool = True  # its update can be captured as CUDA graphs (learner.cuda_graphs auto turns it on)
    acting_inputs: tuple[str, ...] = ("obs",)  # and "state", [batch, state_size], for a recurrent acting module
    acting_outputs: tuple[str, ...] = ("q_values",)

    def batch_spec(self, settings: LearnerSettings) -> dict[str, tuple[tuple[int, ...], str]]:
        """Each field a batch holds for its step: (shape per sample, dtype), [G, B] in front.
        Transitions: what every algorithm raypex has trains on (observations in parts as one field
        per part, replay/contracts.py)."""
        spec = {**observation_spec(settings, ("obs", "next_obs")), "action": ((settings.action_dim,), "float32") if self.box_actions else ((), "int64"),
                "return": ((), "float32"), "discount": ((), "float32")}
        if settings.prioritized:
            spec["weight"] = ((), "float32")  # importance-sampling weights
        return spec

    def build_step(self, settings: LearnerSettings, device: torch.device, gather: Gather | None = None,
                   precision: PrecisionPolicy | None = None) -> AlgorithmStep:
        """Its update step for these settings (`gather` and `precision` as learner/algorithm.py
        build_step's)."""
        raise NotImplementedError

    def acting_network(self, settings: CollectorSettings) -> torch.nn.Module:
        """The network a collector with these settings acts with, freshly initialized: what the
        learner publishes is its state dict."""
        raise NotImplementedError

    def acting_module(self, network: torch.nn.Module) -> torch.nn.Module:
        """What collectors run of the published `network`: a module holding only its parameters,
        from `acting_inputs` to `acting_outputs` (a module taking `state` says its `state_size`).
        By default the network itself: observations in, Q-values out."""
        return network

    def acting_graph(self, network: torch.nn.Module, obs_shape: tuple[int, ...], obs_dtype: str,
                     parts: tuple = ()) -> bytes:
        """The acting graph of `network`'s acting module (learner/acting_graph.py): what the learner
        publishes with its weights, and what a collector times against torch's forms; `parts`:
        observations in parts' (key, shape, dtype)."""
        from raypex.learner.acting_graph import export_acting_graph

        return export_acting_graph(self, network, tuple(obs_shape), obs_dtype, tuple(parts))

    def policy(self, settings: CollectorSettings, example_obs: np.ndarray, seed: int,
               rng: np.random.Generator, served: ServedForward | None = None) -> Policy:
        """The policy a collector explores with (`example_obs`: a first batch of observations, to
        choose the fastest form; `seed`: its own initial weights; `rng`: its exploration). With
        `served` (collectors.acting served) its forward runs on the node's acting server: `served`
        takes the place of the acting graph in its process (actors/served_acting.py)."""
        raise NotImplementedError

    def greedy_policy(self, settings: EvaluatorSettings) -> Policy:
        """The policy the evaluator acts with: the published weights' greedy actions."""
        raise NotImplementedError


def register(plugin: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: put one instance of the plug-in in the registry under its name."""
    _registry[plugin.name] = plugin()
    return plugin


def _load_entry_point(point) -> None:
    where = f"the {ENTRY_POINT_GROUP} entry point {point.name} = {point.value}"
    try:
        loaded = point.load()
    except Exception as err:  # a user's package: whatever its import raises is one line
        raise PluginError(f"{where} does not load ({type(err).__name__}: {err})") from None
    if isinstance(loaded, type) and issubclass(loaded, Algorithm):
        if getattr(loaded, "name", None) not in _registry or type(_registry[loaded.name]) is not loaded:
            register(loaded)
    elif not isinstance(loaded, type(importlib)):  # a module registers its algorithms as it is imported
        raise PluginError(f"{where} is a {type(loaded).__name__}; it must name an Algorithm subclass "
                          "(raypex.learner.algorithms.registry.Algorithm) or a module that registers one")


def _load() -> dict[str, Algorithm]:
    global _loaded
    if not _loaded:
        _loaded = True  # set first: a plug-in whose import looks an algorithm up must not load them again
        try:
            for module in PLUGINS:
                importlib.import_module(f"{__package__}.{module}")
            for point in entry_points(group=ENTRY_POINT_GROUP):
                _load_entry_point(point)
        except BaseException:
            _loaded = False  # the next lookup says the same again
            raise
    return _registry


def names() -> tuple[str, ...]:
    """Every registered algorithm's name: the built-ins first, then the others as they were registered."""
    plugins = _load()
    return tuple(sorted(plugins, key=lambda name: PLUGINS.index(name) if name in PLUGINS else len(PLUGINS)))


def algorithm(name: str) -> Algorithm:
    """The plug-in registered as `name`; ValueError, in one line naming the others, for none."""
    plugins = _load()
    if name not in plugins:
        raise ValueError(f"algo.name {name} is not an algorithm raypex has; one of {', '.join(names())}")
    return plugins[name]
