"""`raypex bench --stage learners`: one learner against a group of them (learner.num), each in a
training run of the config on the same cluster, with a replay ratio high enough that the learners,
not the collectors, set the pace: the group's learner samples/s against one learner's, and the
share of the group's update spent summing gradients across its learners (the all-reduce)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from raypex.cluster.bench.ray_stages import LEARNER_STAGE_RATIO, ClusterBench
from raypex.cluster.bench.report import BenchRow
from raypex.cluster.config.loading import with_overrides
from raypex.cluster.config.schema import RunConfig
from raypex.cluster.driver.observer import RunObserver

_SKIPPED_EPOCHS = 2  # the first epochs after warm-up are not timed


class GroupWindow(RunObserver):
    """Ends the run `seconds` after its learners are ready; keeps each epoch's samples/s and all-reduce share."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.samples_per_s: list[float] = []
        self.allreduce: list[float] = []

    def after_poll(self, run) -> None:
        if run.collect_start is not None and time.time() - run.collect_start > self.seconds:
            run.end_soon("the bench's window is over")

    def after_epoch(self, run, epoch: int, scalars: dict[str, float]) -> None:
        if "learner/samples_per_s" in scalars:
            self.samples_per_s.append(scalars["learner/samples_per_s"])
        if "learner/allreduce_fraction" in scalars:
            self.allreduce.append(scalars["learner/allreduce_fraction"])


def group_rows(bench: ClusterBench, config: RunConfig, learners: int, seconds: float) -> tuple[list[BenchRow], dict]:
    """The rows for 1 learner against `learners`, `seconds` of training each."""
    figures = {}
    with tempfile.TemporaryDirectory(prefix="raypex-bench-learners-") as scratch:
        for num in (1, learners):
            bench.progress.message(f"bench: learner.num={num} ({seconds:g}s of training)")
            run_config = with_overrides(config, [f"learner.num={num}", "stop.eval_return=null",
                                                 f"replay.samples_per_insert={LEARNER_STAGE_RATIO}"])
            window = GroupWindow(seconds)
            bench.observed_run(run_config, Path(scratch) / f"learners-{num}", window)
            timed = window.samples_per_s[_SKIPPED_EPOCHS:] or window.samples_per_s
            figures[num] = {"samples_per_s": statistics.median(timed) if timed else 0.0,
                            "allreduce_fraction": statistics.mean(window.allreduce) if window.allreduce else None,
                            "epochs": len(window.samples_per_s)}
    group = figures[learners]
    rows = [BenchRow("learners_1", figures[1]["samples_per_s"], "samples/s"),
            BenchRow.against(f"learners_{learners}", group["samples_per_s"], "samples/s",
                             figures[1]["samples_per_s"], None)]
    if group["allreduce_fraction"] is not None:
        rows.append(BenchRow(f"learners_{learners}_allreduce", group["allreduce_fraction"], "fraction of an update"))
    return rows, {"learners": figures}
