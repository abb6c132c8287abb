"""`raypex eval RUN_DIR`: the greedy return of a run's exported policy (policy.pt2)."""

from __future__ import annotations

import argparse

from cluster.config.arguments import UsageError
from cluster.config.loading import ConfigError, read_yaml, validate


def run_eval(args: argparse.Namespace) -> int:
    """Load RUN_DIR/policy.pt2, play `--episodes` greedy episodes, print their mean return."""
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    policy_path = args.run_dir / "policy.pt2"
    if not policy_path.is_file():
        raise UsageError(f"{args.run_dir}: no policy.pt2 (the run has not finished, or this is not a run directory)")
    try:
        config = validate(read_yaml(args.run_dir / "config.yaml"))
    except ConfigError as err:
        raise UsageError(str(err)) from None

    import numpy as np
    import torch

    from actors.evaluator import Evaluator
    from learner.policy_file import PolicyFileError, load_policy

    torch.set_num_threads(1)
    try:
        policy = load_policy(policy_path)
    except PolicyFileError as err:
        raise UsageError(str(err)) from None

    def greedy(obs: np.ndarray) -> np.ndarray:  # a batch: one observation per evaluation env
        return policy.act(obs)

    from actors.envs import UnsupportedEnv

    try:
        evaluator = Evaluator(config.env.id, config.env.kwargs, args.episodes, args.seed, config.env.frame_stack,
                              config.eval.epsilon)
    except UnsupportedEnv as err:  # a user's env file that is not where the run found it
        raise UsageError(str(err), err.details) from None
    returns = evaluator.evaluate(greedy)
    evaluator.close()
    # one precision for all four: "mean 0.95 (min 0.9, max 0.9)" once read as if the mean were out of range
    print(f"mean return {returns.mean():.2f} over {args.episodes} episodes "
          f"(min {returns.min():.2f}, max {returns.max():.2f}, std {returns.std():.2f})")
    return 0
