"""The `raypex` command: its parser and entry point for `raypex train`, `tune`, `eval`, `bench`,
`configs` and `config show`.

Every user mistake (arguments, config, env, run directory, cluster address, resources) ends in
one line on stderr and exit code 2, before anything is written or started. Only the entry point
reads arguments; components get explicit values.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from raypex.cluster.config.arguments import UsageError
from raypex.cluster.driver.signals import exit_code, install_stop_signals, signal_name
from raypex.cluster.process_clock import process_start_time
from raypex.cluster.storage import run_location

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as one line instead of usage + message."""

    def error(self, message: str):  # argparse calls this for every parse mistake
        command = self.prog.removeprefix("raypex").strip()
        raise UsageError(f"{command}: {message}" if command else message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(prog="raypex", description="Distributed Ape-X style off-policy RL on Ray: DQN, TD3 and SAC.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser(
        "train", help="train with DQN, TD3 or SAC (starts a local Ray cluster unless --address or --local)",
        epilog="CONFIG is a YAML file or a shipped config's name (`raypex configs` lists them: raypex train pong). "
        "Every key with its value, default and meaning: `raypex config show [CONFIG]` (and the docs' "
        "config reference). Overrides are dotted: learner.lr=1e-3 collectors.num=4.")
    train.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]",
                       help="YAML file or shipped config name (default: the CartPole config) and dotted overrides")
    train.add_argument("--local", action="store_true", help="run every part in this process, without Ray (same as "
                       "runtime=local: debugging, notebooks, the fastest start for small envs; default: Ray)")
    train.add_argument("--address", help="join this Ray cluster (e.g. ray://host:10001 or host:6379; default: "
                       "$RAYPEX_ADDRESS when set, else the job's cluster inside `ray job submit`, else a local one "
                       "started for the run)")
    train.add_argument("--run-dir", type=run_location, help="where to write the run: a path, or a URI such as "
                       "s3://bucket/run (must not exist yet; default: runs/ENV-DATE-TIME-sSEED)")
    train.add_argument("--seed", type=int, help="seed (same as seed=N; default: the config's, 0 in the shipped ones)")
    train.add_argument("--debug", action="store_true", help="with an error in your own env's code, print its "
                       "traceback before the one-line error (default: the line alone)")
    train.add_argument("--resume", type=run_location, metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint, with its config and these "
                       "overrides (default: a new run)")
    bench = sub.add_parser("bench", help="measure every stage against its own reference")
    bench.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]",
                       help="YAML config (default configs/cartpole.yaml) and dotted overrides")
    bench.add_argument("--json", type=Path, help="also write the rows to this JSON file (default: only the table on stderr)")
    bench.add_argument("--quick", action="store_true", help="shorter windows: about 1 minute on 2 cores instead of 2 (default: off)")
    bench.add_argument("--window", type=float, metavar="SECONDS",
                       help="each measuring window's length, per way and variant (default: 8; 3 with --quick); "
                       "shorter is noisier")
    bench.add_argument("--profile", action="store_true", help="add where collectors' and learner's time goes, and what bounds throughput (default: off)")
    bench.add_argument("--stage", choices=["all", "collect", "learner", "learners", "priorities", "startup"],
                       default="all",
                       help="collect: only env_raw, env_policy, collect and broadcast; learner: only the learner "
                       "on its device, per precision x CUDA-graph capture; learners: learner samples/s of one learner "
                       "against the config's learner.num (2 when it is 1), and the all-reduce's share of their "
                       "update; priorities: shard and learner "
                       "costs of prioritized replay against uniform; startup: `raypex train` from its start to the "
                       "learner's first update, phase by phase; all (the default): every stage")
    bench.add_argument("--soak", type=float, metavar="MINUTES",
                       help="one training run of MINUTES; every process's memory growth once replay is full "
                       "(default: no soak)")
    bench.add_argument("--address", help="join this Ray cluster, kept up between runs (`ray start --head`), instead "
                       "of starting a local one; not with --soak, which measures a cluster of its own (default: "
                       "$RAYPEX_ADDRESS when set, as `raypex train` does, else a local cluster)")
    bench.add_argument("--variants", metavar="PRECISION:GRAPHS,...",
                       help="with --stage learner: which, e.g. fp16:on,bf16:on (default: all)")
    sweep = sub.add_parser(
        "tune", help="a sweep of runs as Ray Tune trials: random search, ASHA or PBT (replay carried through exploits)",
        epilog="A value written as loguniform(a,b), uniform(a,b), randint(a,b), choice([...]) or grid([...]), in the "
        "YAML or as an override, is searched: raypex tune cartpole 'learner.lr=loguniform(1e-4,1e-1)' --samples 4 "
        "--scheduler pbt. Everything goes to one experiment directory; Ctrl-C ends every trial's run as a stop does, "
        "and --resume continues the sweep.")
    sweep.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]",
                       help="YAML file or shipped config name (default: the CartPole config) and dotted overrides, "
                       "some of them search spaces")
    sweep.add_argument("--samples", type=int, default=4, help="trials drawn from the space (each grid key "
                       "multiplies them; default: 4)")
    sweep.add_argument("--scheduler", default="none", help="none (every trial to its end), asha (stops the worst "
                       "early, by env steps) or pbt (the worst copy the best, then perturb; default: none)")
    sweep.add_argument("--experiment-dir", type=run_location, help="where to write the sweep: a path, or a pyarrow "
                       "filesystem URI such as s3://bucket/sweep (must not hold files yet; default: runs/tune-ENV-DATE-TIME)")
    sweep.add_argument("--no-replay-carry", action="store_true", help="PBT: an exploit copies the donor's weights and "
                       "optimizer but not its replay (as RLlib's checkpoints do; default: replay carried)")
    sweep.add_argument("--report-every", type=int, default=5, metavar="EPOCHS",
                       help="epochs between a trial's reports to Tune (one Tune iteration; default: 5)")
    sweep.add_argument("--perturb-every", type=int, default=2, metavar="REPORTS",
                       help="PBT: reports between exploit/explore steps (default: 2)")
    sweep.add_argument("--address", help="join this Ray cluster (default: a local one started for the sweep)")
    sweep.add_argument("--resume", type=run_location, metavar="EXPERIMENT_DIR",
                       help="continue the sweep in EXPERIMENT_DIR (its unfinished trials from their newest checkpoints; "
                       "default: a new sweep)")
    sweep.add_argument("--trust-tune-state", action="store_true",
                       help="with --resume: let Ray Tune unpickle the sweep's state although raypex did not sign it "
                       "(a sweep of yours whose command was killed); never for a sweep from someone else; default: only state it "
                       "signed")
    sub.add_parser("configs", help="list the shipped configs (raypex train NAME runs one from any directory)",
                   description="The configs that ship with raypex: name, env id and purpose. `raypex train NAME` "
                   "runs one from any directory; `raypex config show NAME` prints its every key.")
    config = sub.add_parser("config", help="show a config: every key, its value, default and meaning")
    config.add_argument("action", choices=["show"], help="show: print the resolved config key by key")
    config.add_argument("args", nargs="*", metavar="[CONFIG] [key=value ...]",
                        help="a YAML file or shipped config name (default: the CartPole defaults) and overrides")
    ev = sub.add_parser("eval", help="the return of a run's saved policy.pt2, from any directory")
    ev.add_argument("run_dir", type=run_location, metavar="RUN_DIR",
                    help="a run directory holding policy.pt2 and config.yaml, a sweep's experiment directory "
                    "(its best trial's policy; a path, or a URI), or the policy.pt2 of either")
    ev.add_argument("--episodes", type=int, default=100, help="episodes to average (default: 100)")
    ev.add_argument("--epsilon", type=float, default=None,
                    help="share of random actions (default: the run's eval.epsilon, 0 for greedy)")
    ev.add_argument("--seed", type=int, default=12345, help="seed of the evaluation envs (default: 12345)")
    ev.add_argument("--video", type=Path, default=None, metavar="FILE.png",
                    help="write the first episode as an animated PNG (default: none)")
    export = sub.add_parser("export", help="a run's policy.pt2 as ONNX, for serving without torch, or its replay "
                            "as a Minari dataset")
    export.add_argument("run", type=Path, metavar="RUN",
                        help="a run directory (or, with --onnx, a policy.pt2)")
    written = export.add_mutually_exclusive_group(required=True)
    written.add_argument("--onnx", type=Path, metavar="PATH",
                         help="the ONNX model to write (inputs obs, and state for a recurrent policy); this or "
                         "--minari (default: neither, and one is needed)")
    written.add_argument("--minari", metavar="DATASET_ID",
                         help="write the replay of the run's newest checkpoint as this local Minari dataset "
                         "(namespace/env/name-v0; in MINARI_DATASETS_PATH, else ~/.minari/datasets): its whole "
                         "episodes, the env's spec recorded (default: none)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    clock_start = process_start_time()
    install_stop_signals()  # SIGINT and SIGTERM stop a run cleanly (cluster/driver/signals.py)
    debug = False
    try:
        parser = build_parser()
        if not (sys.argv[1:] if argv is None else argv):
            parser.print_help(sys.stderr)  # bare `raypex`: what it can do
            return EXIT_USAGE
        args = parse_command_line(parser, argv)
        debug = getattr(args, "debug", False)
        if args.command == "train":
            from raypex.cluster.commands.train import run_train

            return run_train(args, clock_start)
        if args.command == "tune":
            from raypex.cluster.commands.tune import run_tune

            return run_tune(args)
        if args.command in ("configs", "config"):
            from raypex.cluster.commands.configs import run_config_show, run_configs

            if args.command == "config":
                return run_config_show(args)
            return run_configs(args)
        if args.command == "bench":
            from raypex.cluster.commands.bench import run_bench
            from raypex.cluster.driver.run_errors import RunFailed

            try:
                return run_bench(args)
            except RunFailed as err:  # a training run the bench started (e2e, soak) failed
                print(f"raypex: bench failed: a training run it started failed: {err}", file=sys.stderr)
                return 1
        if args.command == "export":
            from raypex.cluster.commands.export import run_export

            return run_export(args)
        from raypex.cluster.commands.evaluate import run_eval

        return run_eval(args)
    except UsageError as err:
        if debug and err.details:
            print(err.details.rstrip(), file=sys.stderr)
        print(f"raypex: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as interrupt:
        print(f"raypex: stopped by {signal_name(interrupt)}", file=sys.stderr)
        return exit_code(interrupt)


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed arguments, `key=value` overrides given after options included (UsageError for
    anything else argparse leaves over)."""
    args, extra = parser.parse_known_args(argv)
    # argparse takes no positionals after options: `train CONFIG --seed 1 lr=...` leaves the
    # overrides over. Take them back; anything else left over is a real mistake.
    takes_overrides = args.command in ("train", "bench", "config", "tune")
    unknown = [item for item in extra if not takes_overrides or item.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if takes_overrides:
        args.args += extra
    return args


def console() -> None:
    """The console-script wrapper: exit with main's code. Output piped into a reader that stops
    early (`raypex configs | head`) ends quietly, as other command-line tools do.

    It exits without the interpreter's teardown: with torch.export's modules loaded (`raypex eval`
    loads policy.pt2 with them, the bench imports torch) tearing them down took about a second on
    a 2-core box after everything was written (`raypex eval RUN --episodes 10`: 3.6 s before, 2.7 s
    after). Ray is disconnected, logs and both streams flushed first; every file of ours is
    closed by then (written whole, then renamed)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the failed flush of stdout at exit: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # what a shell reports for a command killed by SIGPIPE
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # a joined cluster: disconnect as Ray's atexit would
        ray.shutdown()
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)
