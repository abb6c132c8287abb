"""raypex: distributed Ape-X style off-policy RL (DQN, TD3, SAC) on Ray.

    import raypex
    result = raypex.train("cartpole", {"stop.env_steps": 30000}, seed=1)
    raypex.evaluate(result.run_dir, episodes=20)
    policy = raypex.load_policy(result.run_dir)
    outcome = raypex.tune("cartpole", ["learner.lr=loguniform(1e-4,1e-1)"], samples=4, scheduler="pbt")

Everything raypex installs lives under this one package, so a user's `replay.py` or `learner.py`
shadows nothing of ours: raypex.actors, raypex.learner, raypex.replay and raypex.cluster are the
repository's top-level folders of those names, and raypex.configs its configs/ (pyproject.toml maps
them). In a source checkout used without installing it (PYTHONPATH pointing at it) the package
finds those folders beside this one.

The API is imported on first use: a worker process that imports raypex.actors never loads the
driver's modules.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

_HERE = Path(__file__).resolve().parent
if (_HERE.parent / "pyproject.toml").is_file() and (_HERE.parent / "cluster" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # a source checkout: raypex.actors is <checkout>/actors

__all__ = [
    "EvalResult",
    "ExportedPolicy",
    "RunFailed",
    "RunResult",
    "RunningRun",
    "SweepOutcome",
    "UsageError",
    "__version__",
    "evaluate",
    "load_policy",
    "train",
    "tune",
]
_API = set(__all__) - {"__version__", "tune", "ExportedPolicy", "SweepOutcome"}  # each from raypex.cluster.api


def __getattr__(name: str):
    if name == "tune":  # a sweep: raypex.cluster.sweep.api
        from raypex.cluster.sweep.api import tune

        return tune
    if name == "ExportedPolicy":  # what load_policy and RunResult.policy give
        from raypex.learner.policy_file import ExportedPolicy

        return ExportedPolicy
    if name == "SweepOutcome":  # what tune gives
        from raypex.cluster.sweep.experiment import SweepOutcome

        return SweepOutcome
    if name in _API:
        from raypex.cluster import api

        return getattr(api, name)
    raise AttributeError(f"module 'raypex' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API's names too, for completion: they are imported on first use (`__getattr__`)."""
    return sorted(set(globals()) | set(__all__))
