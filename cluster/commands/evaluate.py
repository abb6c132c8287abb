"""`raypex eval RUN_DIR`: the return of a run's exported policy (policy.pt2), through the Python
API's `evaluate`."""

from __future__ import annotations

import argparse

from raypex.cluster.api import evaluate


def run_eval(args: argparse.Namespace) -> int:
    """Play `--episodes` episodes of RUN_DIR/policy.pt2, print their mean return (and the video's path)."""
    result = evaluate(args.run_dir, args.episodes, epsilon=args.epsilon, seed=args.seed, video=args.video)
    print(result.line())
    if result.video is not None:
        print(f"video of the first episode: {result.video}")
    elif args.video is not None:
        print("no video: this env has no pictures")
    return 0
