"""`raypex tune`: a sweep of runs as Ray Tune trials, through the Python API's `tune`
(cluster/sweep/api.py); the results table, the best trial and its policy at the end."""

from __future__ import annotations

import argparse
import sys

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.signals import EXIT_INTERRUPTED, EXIT_TERMINATED
from raypex.cluster.storage import join
from raypex.cluster.sweep.api import tune


def run_tune(args: argparse.Namespace) -> int:
    """Run or resume the sweep; 0 when every trial ended, 130/143 when a signal stopped it, 1 when a
    trial failed."""
    if args.trust_tune_state and args.resume is None:
        raise UsageError("--trust-tune-state goes with --resume EXPERIMENT_DIR (a new sweep has no state to trust)")
    if args.resume is not None and args.args:
        raise UsageError("--resume EXPERIMENT_DIR continues the sweep as it was asked; give no CONFIG or overrides")
    config = args.args[0] if args.args and "=" not in args.args[0] else "cartpole"
    overrides = args.args[1:] if args.args and "=" not in args.args[0] else list(args.args)
    outcome = tune(config, overrides, samples=args.samples, scheduler=args.scheduler,
                   experiment_dir=args.experiment_dir, carry_replay=not args.no_replay_carry,
                   report_every_epochs=args.report_every, perturb_every=args.perturb_every, address=args.address,
                   resume=args.resume, trust_tune_state=args.trust_tune_state, progress=ProgressLine(sys.stderr))
    print(outcome.table())
    where = outcome.experiment_dir
    if outcome.best is not None:
        best = outcome.best
        # a trial an exploit restarted counts its time to solve from that restart: its lineage's is its run time
        solve = ("" if best["time_to_solve_s"] is None else f", solved in {best['time_to_solve_s']:.1f}s"
                 + (f" after its last exploit ({best['wall_s']:.1f}s of training in its line)" if best["exploits"] else ""))
        # its run directory is what `raypex eval` takes (its config and policy); the sweep keeps a copy of the policy
        print(f"best: trial {best['trial']} {best['params']}: eval {best['best_eval']}{solve}; "
              f"evaluate it with: raypex eval {best['run_dir']} (its policy is copied to {join(str(where), 'policy.pt2')})")
    print(f"results: {join(str(where), 'results.json')}; TensorBoard: tensorboard --logdir {join(str(where), 'trials')}")
    if outcome.interrupted is not None:
        print(f"raypex: sweep stopped by {outcome.interrupted}; continue it with: raypex tune --resume {where}",
              file=sys.stderr)
        return EXIT_TERMINATED if outcome.interrupted == "SIGTERM" else EXIT_INTERRUPTED
    failed = [row for row in outcome.rows if row["error"] or row["ended"] is None or row["ended"].startswith("failed")]
    for row in failed:
        print(f"raypex: trial {row['trial']} failed: {row['error'] or row['ended']} (its run directory: {row['run_dir']})",
              file=sys.stderr)
    if failed:
        return 1
    return 0
