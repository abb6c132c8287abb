"""`raypex bench [CONFIG] [--json PATH] [--quick | --soak MINUTES] [--window SECONDS] [--profile] [key=value ...]`.

Every stage of the pipeline measured beside its own reference, in one process tree on a local Ray
cluster, so ratios hold even when the machine's absolute speed drifts:

  env_raw        vector env alone                      (report)
  env_policy     + action selection and folding        (report; the most one collector can do)
  collect        collectors -> replay through Ray       vs env_policy x collectors the cores run at once
  env_raw_all    pixels: the env alone in every         vs env_raw x the same collectors
                 collector's place at once
  collect_vs_env_raw  pixels: collect                   vs env_raw_all (ALE alone on the collectors' cores)
  learner_feed   learner fed by the replay beside it    vs the same loop fed from memory (samples/s)
  broadcast      ray.put -> last collector acting       vs one ray.put + ray.get
  acting_requests_per_forward  collectors.acting served: collectors' requests each forward of the
                 acting servers answered in the collect window (report)
  e2e_*          a training run of the config           (report; replay ratio held vs asked)
  warmup         the first 10% of its env steps vs the last 10% (env steps/s)
  linearity      the run at 5T env steps vs at T
  memory         actors' resident memory at the end vs when replay was full

`--stage collect` stops after broadcast (the collectors' rows, with the acting precision each
collector chose). `--stage learner` measures only the learner on its device (the GPU when the
cluster has one), per precision x CUDA-graph capture: fed by the replay with collectors running at a
high replay ratio (`learner_<precision>_<capture>` vs the same loop fed from batches already made,
on a GPU replay indices already on the GPU), and the GPU's busy fraction while fed.
`--stage startup` runs `raypex train` itself (3 times; --quick: once): each start-up moment's seconds.

With `--address` (or RAYPEX_ADDRESS, as `raypex train` reads it) the stages join that cluster, kept
up between runs, instead of starting a local one; `--soak` always starts its own, since it measures
that cluster's own processes.

`--stage learners` times one learner against a group of them (learner.num, 2 when it is 1), each in
a training run of the config at a high replay ratio: learner samples/s, and the share of the
group's update spent summing gradients across its learners.

`--stage priorities` measures what prioritized replay costs: the replay's add, draw and update
per transition with and without priorities (one process, real chunks of the config's env), and
the learner's samples/s fed by the replay with and without (`learner_feed_prioritized`, bar: at
most 1.3x the uniform path's cost).

`--soak MINUTES` is one training run of that long (no stop on evaluation or env steps):
`soak_rss_<process>` is each process's resident memory at the end vs when every shard was full
and a first evaluation had come back (Ray's GCS, raylet and agents included), with the object
store's peak use and spilling.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from raypex.actors.device_errors import NoGpuHere
from raypex.cluster.bench.joining import bench_on_a_cluster, checked_address
from raypex.cluster.bench.learner_variants import learner_rows, learner_variants, parse_variants, runnable_variants
from raypex.cluster.bench.local_stages import local_rates
from raypex.cluster.bench.report import BenchRow, format_table, linearity_note, write_json
from raypex.cluster.config.arguments import UsageError, split_positional
from raypex.cluster.config.loading import ConfigError, config_to_yaml, load_config
from raypex.cluster.driver.progress import ProgressLine
from raypex.learner.algorithms.registry import algorithm


@dataclass(frozen=True)
class BenchPlan:
    """How long each stage runs: `--quick` (under 2 minutes here) or the full bench."""

    local_s: float  # env_raw and env_policy windows
    collect_s: float
    feed_s: float  # learner_feed: each way
    learner_s: float  # --stage learner: each way, per variant
    broadcasts: int
    linearity_steps: int  # T; the e2e run is the 5T run

    @classmethod
    def choose(cls, quick: bool) -> BenchPlan:
        """The quick or the full plan."""
        if quick:
            return cls(local_s=1.0, collect_s=3.0, feed_s=3.0, learner_s=3.0, broadcasts=10, linearity_steps=6_000)
        return cls(local_s=3.0, collect_s=8.0, feed_s=8.0, learner_s=8.0, broadcasts=30, linearity_steps=40_000)

    def with_window(self, seconds: float | None) -> BenchPlan:
        """This plan with every measuring window `seconds` long (`--window`; the one-process env
        windows no longer than that); the training runs keep their env steps."""
        if seconds is None:
            return self
        return dataclasses.replace(self, local_s=min(self.local_s, seconds), collect_s=seconds, feed_s=seconds,
                                   learner_s=seconds)


def machine_info() -> dict:
    """Cores, CPU model and the versions that matter, for the results page and the JSON. The versions
    come from the installed packages' metadata: importing torch only to read its version cost every
    `--json` bench 2.5 s at its end on the 2-core box."""
    from importlib.metadata import version

    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            **{name: version(name) for name in ("ray", "torch", "numpy", "gymnasium")}}


def run_bench(args: argparse.Namespace) -> int:
    """The whole `raypex bench` command; returns the exit code."""
    config_path, overrides = split_positional(args.args)
    try:
        config = load_config(config_path, overrides)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    if args.json is not None and not args.json.parent.is_dir():
        raise UsageError(f"--json {args.json}: directory {args.json.parent} does not exist")
    if config.collectors.elastic:
        raise UsageError("collectors.num auto: the bench measures a fixed number of collectors; set collectors.num")
    from raypex.actors.envs import UnsupportedEnv, check_algo_fits, inspect_env

    try:
        spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack, config.env.wrappers)
        check_algo_fits(config.algo.name, spec, config.env.id, config.network.flat_only)
    except UnsupportedEnv as err:
        raise UsageError(str(err)) from None
    wanted_variants = parse_variants(args.variants) if args.variants else None
    if args.variants and args.stage != "learner":
        raise UsageError("--variants needs --stage learner")
    if args.address is not None and args.soak is not None:
        raise UsageError("--address ADDRESS does not go with --soak (a soak measures the processes of a local "
                         "cluster of its own)")
    if args.soak is not None and (args.soak <= 0 or args.stage != "all" or args.quick or args.profile):
        raise UsageError("--soak MINUTES takes a positive number of minutes and no --stage, --quick or --profile")
    progress = ProgressLine(sys.stderr)
    if args.window is not None and (not args.window > 0 or args.soak is not None or args.stage == "startup"):
        raise UsageError("--window SECONDS takes a positive number of seconds, and not with --soak or "
                         "--stage startup (they have no measuring windows)")
    plan = BenchPlan.choose(args.quick).with_window(args.window)
    address = checked_address(args.address, args.soak is not None)

    from raypex.cluster.ray_runtime.address import ADDRESS_VARIABLE
    from raypex.cluster.plan.settings import collector_settings

    rows: list[BenchRow] = []
    details: dict = {"config": config_to_yaml(config), "quick": args.quick}
    if args.soak is not None:
        from raypex.cluster.bench.soak import soak

        if address is not None:
            progress.message(f"bench: --soak starts a local Ray cluster of its own ({ADDRESS_VARIABLE} not followed)")
        bench = bench_on_a_cluster(config, spec, progress, None)
        try:
            with tempfile.TemporaryDirectory(prefix="raypex-soak-") as scratch:
                rows, soak_details = soak(bench, Path(scratch) / "soak", args.soak)
        finally:
            bench.leave_cluster()
        details.update(soak_details)
        return _report(rows, details, args, progress)
    if args.stage == "startup":
        from raypex.cluster.bench.startup import startup_rows

        rows, startup_details = startup_rows(args.args, config.replay.min_size, 1 if args.quick else 3, progress,
                                             address)
        details.update(startup_details)
        return _report(rows, details, args, progress)
    if args.stage == "priorities":
        rows, priority_details = _priority_rows(config, spec, plan, progress, address)
        details.update(priority_details)
        return _report(rows, details, args, progress)
    if args.stage == "learners":
        from raypex.cluster.bench.learner_group import group_rows

        learners = max(2, config.learner.num)
        if learners > config.collectors.num:
            raise UsageError(f"--stage learners compares 1 learner with {learners}, each hosting its own collectors' "
                             f"shards: set collectors.num to {learners} or more")
        bench = bench_on_a_cluster(config, spec, progress, address)
        try:
            rows, group_details = group_rows(bench, config, learners, plan.learner_s)
        finally:
            bench.leave_cluster()
        details.update(group_details)
        return _report(rows, details, args, progress)
    if args.stage == "learner":
        bench = bench_on_a_cluster(config, spec, progress, address)
        try:
            from raypex.learner.cpu_features import cpu_has_bf16_units

            variants = learner_variants(bench.device, wanted_variants, cpu_has_bf16_units())
            if len(variants) < len(runnable_variants(bench.device)) and not wanted_variants:  # it left bf16 out
                progress.message("bench: bf16 left out: this machine's CPU has no bf16 units, so a learner's "
                                 "precision auto is fp32 (--variants bf16:off times it anyway)")
            results = bench.learner_variants(variants, plan.learner_s)
        finally:
            bench.leave_cluster()
        rows = learner_rows(results)
        details["device"], details["learner_variants"] = bench.device, results
        return _report(rows, details, args, progress)

    progress.message("bench: env_policy, env_raw (one process, no Ray)")
    try:  # collectors.act_device cuda acts on this process's GPU too (auto: on its CPU, as a CPU node would)
        local = local_rates(collector_settings(config, spec, 0), plan.local_s)
    except NoGpuHere as err:  # said before any measuring: env_policy is first
        raise UsageError(str(err)) from None
    policy, raw = local.policy, local.raw
    rows.append(BenchRow("env_raw", raw, "env steps/s"))
    rows.append(BenchRow.against("env_policy", policy, "env steps/s", raw, None))
    details["env_policy_phases"] = local.phases
    progress.message(f"bench: env_policy acted in {local.form}")
    if algorithm(config.algo.name).sequences:
        rows.append(sequence_bytes_row(config, spec))

    bench = bench_on_a_cluster(config, spec, progress, address)
    try:
        details["device"] = bench.device
        concurrent = min(config.collectors.num, os.cpu_count() or 1)
        collect, latency_ms, put_get_ms, pause_ms = bench.collect_and_broadcast(plan.collect_s, plan.broadcasts)
        rows.append(BenchRow.against("collect", collect, "env steps/s", policy * concurrent, ">= 0.8"))
        rows.append(BenchRow.against("broadcast", latency_ms, "ms", put_get_ms, "<= 1.5"))
        rows.append(BenchRow("broadcast_env_loop_pause", pause_ms, "ms"))
        if bench.requests_per_forward is not None:
            rows.append(BenchRow("acting_requests_per_forward", bench.requests_per_forward, "requests"))
        if spec.frame_stack:  # pixels: what the collectors keep of the env's own speed (ALE alone)
            raw_all = bench.raw_envs_at_once(plan.collect_s)
            rows.append(BenchRow.against("env_raw_all", raw_all, "env steps/s", raw * concurrent, None))
            rows.append(BenchRow.against("collect_vs_env_raw", collect, "env steps/s", raw_all, ">= 0.8"))
        details["act_precision"], details["act_form"] = bench.act_precisions, bench.act_forms
        if args.stage == "collect":
            return _report(rows, details, args, progress)
        progress.message(f"bench: learner_feed ({plan.feed_s:g}s each way)")
        feed = bench.learner_feed(plan.feed_s)
        fed, from_memory = feed["fed"], feed["memory"]
        rows.append(BenchRow.against("learner_feed", fed["samples_per_s"], "samples/s", from_memory["samples_per_s"],
                                     ">= 0.9"))
        rows.append(BenchRow("learner_samples", fed["samples_per_s"], "samples/s"))
        rows.append(BenchRow("learner_wait_fraction", fed["wait_fraction"], "fraction"))
        if fed["gpu_busy"] is not None:
            rows.append(BenchRow("learner_gpu_busy", fed["gpu_busy"], "fraction"))
        with tempfile.TemporaryDirectory(prefix="raypex-bench-") as scratch:
            short = bench.training_run(Path(scratch) / "T", plan.linearity_steps)
            long = bench.training_run(Path(scratch) / "5T", 5 * plan.linearity_steps)
        rows += long.e2e_rows(config)
        rows.append(BenchRow.against("warmup", long.first_tenth_rate, "env steps/s", long.last_tenth_rate, ">= 0.9"))
        rows.append(BenchRow.against("linearity", long.train_wall_s, "s for 5T env steps",
                                     short.train_wall_s, "<= 5.5"))
        rows.append(BenchRow.against("memory", long.rss_end_total, "bytes", long.rss_full_total, "<= 1.05"))
        rows.append(BenchRow("replay_bytes_per_transition", long.bytes_per_transition, "bytes"))
        details["memory_per_actor"] = long.rss_detail
        details["linearity_wall_s"] = {"T": short.train_wall_s, "5T": long.train_wall_s,
                                       "T_env_steps": plan.linearity_steps}
        details["env_steps_per_s_by_tenth"] = {"T": short.tenth_rates, "5T": long.tenth_rates}
        details["linearity_note"] = linearity_note(plan.linearity_steps, short.fill_steps, config.replay.samples_per_insert)
        if args.profile:
            profile_rows, bound = long.profile_rows()
            rows += profile_rows
            details["bound_by"] = bound
    finally:
        bench.leave_cluster()
    return _report(rows, details, args, progress)


def _priority_rows(config, spec, plan: BenchPlan, progress: ProgressLine,
                   address: str | None) -> tuple[list[BenchRow], dict]:
    """`--stage priorities`: replay costs in one process, then the learner fed both ways in a run."""
    from raypex.cluster.bench.priority_costs import replay_costs
    from raypex.cluster.bench.ray_stages import LEARNER_STAGE_RATIO
    from raypex.cluster.config.loading import with_overrides

    progress.message("bench: replay add, draw and update with and without priorities (one process, no Ray)")
    costs = replay_costs(config, spec, plan.local_s)
    rows = [BenchRow.against(f"replay_{what}_prioritized", costs["prioritized"][f"{what}_us"], "us/transition",
                             costs["uniform"][f"{what}_us"], None) for what in ("add", "sample")]
    rows.append(BenchRow("replay_update_prioritized", costs["prioritized"]["update_us"], "us/transition"))
    fed = {}
    bench = bench_on_a_cluster(config, spec, progress, address)
    try:
        for name, on in (("uniform", "false"), ("prioritized", "true")):
            progress.message(f"bench: learner fed by the replay, {name} ({plan.feed_s:g}s)")
            both = with_overrides(config, [f"replay.prioritized={on}", f"replay.samples_per_insert={LEARNER_STAGE_RATIO}",
                                           *(["replay.initial_priority=max"] if spec.action_dim else [])])
            fed[name] = bench.learner_feed(plan.feed_s, both, from_memory=False)["fed"]
    finally:
        bench.leave_cluster()
    rows.append(BenchRow.against("learner_feed_prioritized", fed["prioritized"]["samples_per_s"], "samples/s",
                                 fed["uniform"]["samples_per_s"], ">= 0.77"))
    return rows, {"priority_replay_costs": costs, "priority_learner_fed": fed}


def sequence_bytes_row(config, spec) -> BenchRow:
    """Bytes per stored env step of the sequence replay against the flat replay's (n-step
    transitions) for the same observations: what storing sequences costs."""
    from raypex.cluster.plan.settings import storage_spec
    from raypex.replay.shard import StorageSpec

    sequences = storage_spec(config, spec)
    flat = StorageSpec(config.replay.capacity, spec.obs_shape, spec.obs_dtype, 0, config.env.num_envs, spec.action_dim)
    return BenchRow.against("replay_bytes_per_step", sequences.bytes_per_step, "bytes", flat.bytes_per_step, "<= 1.15")


def _report(rows: list[BenchRow], details: dict, args: argparse.Namespace, progress: ProgressLine) -> int:
    progress.message("\n" + format_table(rows))
    if details.get("linearity_note"):
        progress.message(details["linearity_note"])
    if "bound_by" in details:
        progress.message(f"throughput is bound by: {details['bound_by']}")
    if args.json is not None:
        write_json(rows, args.json, {**machine_info(), "details": details})
        progress.message(f"wrote {args.json}")
    return 0
