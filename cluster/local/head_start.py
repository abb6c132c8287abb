"""The head start: a run's first seconds of training, in a process forked from the driver while
its local Ray cluster starts.

Starting a local cluster and the run's actors takes seconds before the learner can update
(BENCHMARKS.md, "CartPole: where a run's seconds go": 5-6 s of `ray.init` and 3-4 s of actors
importing torch on a 2-core laptop). The same collectors, replay and learner as the run's, wired
in one process (cluster/local/wiring.py's parts, in lockstep as cluster/local/lockstep.py runs
them), train meanwhile: the collectors step at random before torch is even imported, the learner
updates as soon as replay holds `replay.min_size`. With `stop.eval_return` it also evaluates its
weights after an epoch (the run's evaluator class and settings, in this process), and its first
evaluation that reaches the target ends its training: the run is solved then, before its learner
actor exists, and those weights are the ones the run exports; it tells the driver at once (the
driver then asks for no actors, or stops waiting for them) and sends its result once it has
exported them. When the run's learner actor is built the driver asks for what it made
(`hand_over`, answered after the epoch in progress): the learner's state (networks, optimizer,
counters), every shard's replay and the env steps go to the actors as a resume's checkpoint does,
and the process ends. No Ray here: the driver's side is cluster/driver/handover.py.

Which runs get one (`learner.head_start: auto`, `maybe_head_start`): only a run that starts its
own local cluster on this machine, whose start is what the head start hides (a joined cluster's
driver may run on a small head node whose cores are not the learner's); with flat observations
(an MLP trains fast on a CPU core, a CNN would only take the cores Ray's start needs); not a
resumed run (its checkpoint is ahead already). The process is forked before the driver imports
Ray, so it shares the driver's other imports and starts in milliseconds; a fork is only safe from
a process with one thread and no torch loaded (the `raypex` command) and on Linux; the Python API
in a process that has either, and other platforms, start without a head start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from actors.collector import Collector
from actors.envs import EnvSpec
from cluster.config.schema import RunConfig
from cluster.config.topology import plan_run
from cluster.local.cores import CoreSplit
from cluster.local.seams import WeightBoard
from replay.contracts import Weights

HAND_OVER = "hand over"
SOLVED = "solved"  # sent before the export of the solving weights, which takes seconds


@dataclass
class HeadStartResult:
    """What the head start made, or why it made nothing (`error`)."""

    learner_state: bytes = b""
    replay_states: list[dict] = field(default_factory=list)
    replay_stats: list[dict] = field(default_factory=list)  # every shard's counters, as the learner actor reports them
    env_steps: int = 0
    epochs: int = 0
    updates: int = 0
    first_step_at: float | None = None  # wall clock, as the actors' start-up moments
    first_update_at: float | None = None
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (env steps, td loss, q value) per epoch
    weights: Weights | None = None  # the newest it published (the solving ones when it solved)
    # (wall clock when it finished, env steps, WeightsEvaluator.evaluate's result) of each complete evaluation
    evaluations: list[tuple[float, int, dict]] = field(default_factory=list)
    policy: bytes = b""  # policy.pt2 of the solving weights: the run writes it as its own
    error: str | None = None

    @property
    def solved(self) -> tuple[float, int, dict] | None:
        """Its evaluation that reached stop.eval_return (its last: it stops training there), if any."""
        return self.evaluations[-1] if self.evaluations and self.evaluations[-1][2].get("solved") else None


def available() -> tuple[bool, str]:
    """(whether this process may fork a head start, why not when it may not)."""
    if "torch" in sys.modules:
        return False, "torch is loaded in this process (a fork would share its threads)"
    if threading.active_count() > 1:
        return False, "this process runs other threads (a fork could copy a held lock)"
    if not sys.platform.startswith("linux"):  # macOS's system libraries are not safe to use after a fork
        return False, f"it forks the driver, which raypex does only on Linux (this is {sys.platform})"
    return True, ""


def maybe_head_start(config: RunConfig, spec: EnvSpec, starts_local_cluster: bool, resuming: bool,
                     message) -> HeadStart | None:
    """A HeadStart training in a forked process, when this run gets one (the module docstring says
    which do); `message` says why not when only this process is the reason."""
    if config.learner.head_start == "off" or not starts_local_cluster or resuming or len(spec.obs_shape) != 1:
        return None
    may_fork, why_not = available()
    if not may_fork:
        message(f"learner.head_start auto: none ({why_not}); training starts once the actors are up")
        return None
    return HeadStart(config, spec)


class HeadStart:
    """A forked process training the run's parts until `hand_over` asks for them, on a core that
    Ray's processes stay off until it ends (cluster/local/cores.py)."""

    def __init__(self, config: RunConfig, spec: EnvSpec):
        context = multiprocessing.get_context("fork")
        self._conn, child_conn = context.Pipe()
        self._cores = CoreSplit()
        self._process = context.Process(target=_child, args=(config, spec, child_conn, os.getpid(), self._cores),
                                         name="raypex-head-start", daemon=True)
        self._process.start()
        child_conn.close()
        self._cores.keep_driver_off()
        self._solved = False  # it said it solved the run
        self._result: HeadStartResult | None = None  # what it sent, once it has

    def solved(self) -> bool:
        """Whether it has solved the run: it says so before it exports its policy, so the driver
        need not ask for actors the run will not use (its result follows)."""
        self._receive(0.0)
        return self._solved

    def ended(self) -> bool:
        """Whether it has stopped by itself (solved the run, reached stop.env_steps, or failed):
        its result is waiting, and the learner actor has nothing to wait for."""
        self._receive(0.0)
        return self._result is not None

    def hand_over(self, timeout_s: float) -> HeadStartResult:
        """Stop training after the epoch in progress and return what was made (its `error` says
        why nothing was: the process failed, or did not answer within `timeout_s`). A signal while
        it waits leaves the process as it is, so the driver, stopping, can ask again (a solved
        one's export takes seconds, and its result is the run's end)."""
        try:
            self._conn.send(HAND_OVER)
        except OSError:
            pass  # it ended already (solved, reached stop.env_steps, or failed): its result may be waiting
        self._receive(timeout_s)  # raising (a signal), it leaves the process be; `launch` closes it at the end
        self.close()
        return self._result or HeadStartResult(error=f"no answer within {timeout_s:g}s")

    def _receive(self, timeout_s: float) -> None:
        """Read what the process has sent, waiting up to `timeout_s` for its result: the solved
        notice, then the result (one saying why, when the process ended without one)."""
        deadline = time.monotonic() + timeout_s
        try:
            while self._result is None and self._conn.poll(max(0.0, deadline - time.monotonic())):
                message = self._conn.recv()
                if message == SOLVED:
                    self._solved = True
                else:
                    self._result = message
        except (EOFError, OSError):
            if self._result is None:
                self._result = HeadStartResult(
                    error=f"its process ended without a result (exit code {self._process.exitcode})")

    def close(self) -> None:
        """End the process (at once, whatever it is doing) and wait for it; the driver's CPUs go
        back to Ray's processes."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout=5)
        self._conn.close()
        self._cores.rejoin()


def _child(config: RunConfig, spec: EnvSpec, conn, driver_pid: int, cores: CoreSplit) -> None:
    # Ctrl-C and a SIGTERM to the whole group (timeout, SLURM) reach the driver too, which hands over
    # before it ends the run, and then ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent(driver_pid)
    cores.pin_this_process()
    try:
        result = _train_until_asked(config, spec, conn, lambda: cores.rejoin(driver_pid))
    except BaseException as err:  # noqa: BLE001 - reported to the driver, which goes on without it
        result = HeadStartResult(error=f"{type(err).__name__}: {err}")
    try:
        conn.send(result)
    except OSError:
        pass  # the driver is gone


def _die_with_parent(driver_pid: int) -> None:
    """The kernel kills this process when the driver dies (kill -9 included)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != driver_pid:  # the driver died before the line above: nobody will ask
        os._exit(0)


def _train_until_asked(config: RunConfig, spec: EnvSpec, conn, training_ended=lambda: None) -> HeadStartResult:
    """The forked process's work: collect at random, import torch, then epochs in lockstep until
    the driver asks for the handover (or stop.env_steps, or a solve); the newest weights when it
    asks for them. `training_ended` is called when training has ended (before the result is made)."""
    plan = plan_run(config, spec)
    board = WeightBoard()
    early: list[tuple[int, dict]] = []  # chunks collected before the replay exists
    replay = None

    def push_to(index: int):
        def push(chunk) -> None:
            if replay is None:
                early.append((index, chunk))
            else:
                replay.add(index, chunk)
        return push

    collectors = [Collector(c.settings, push_to(c.index), board.reader()) for c in plan.collectors]
    # At random (no weights yet), before torch is imported: what the limiter lets the run's
    # collectors insert ahead of the learner's first update.
    ahead = config.replay.min_size + config.replay.error_buffer
    while sum(c.env_steps for c in collectors) < ahead:
        for collector in collectors:
            collector.collect_chunk()
    import torch

    from learner.learner import Learner

    torch.set_num_threads(1)
    replay, _ = plan.learner.replay.build(torch.device("cpu"))
    for index, chunk in early:
        replay.add(index, chunk)

    def every_collector_collects() -> None:
        for collector in collectors:
            collector.collect_chunk()

    learner = Learner(plan.learner.settings, torch.device("cpu"), replay, board.publish,
                      starved=every_collector_collects)
    learner.publish_weights()
    evaluate = _evaluation(config, plan)
    curve, evaluations = [], []
    env_steps = 0
    training_s = evaluating_s = 0.0
    while env_steps < config.stop.env_steps:
        started = time.perf_counter()
        while replay.insert_room() > 0:
            every_collector_collects()
        metrics = learner.train_epoch()
        env_steps = sum(c.env_steps for c in collectors)
        curve.append((env_steps, float(metrics["td_loss"]), float(metrics["q_values"])))
        trained = time.perf_counter()
        training_s += trained - started
        # After every epoch while evaluating has taken no longer than training (not every
        # eval.every_epochs): an evaluation here holds up only this loop, one that gives up early
        # costs a few dozen env steps, and one with long episodes cannot take more than half of the
        # head start (BENCHMARKS.md, "The head start solves").
        if evaluate is not None and evaluating_s <= training_s:
            result = evaluate(board.latest, conn.poll)  # the driver asking for the handover ends it
            evaluating_s += time.perf_counter() - trained
            if result["complete"]:
                evaluations.append((time.time(), env_steps, result))
                if result["solved"]:
                    break  # the run is solved: training on would only take the cores Ray's start needs
        if conn.poll():  # the handover asked for, or EOF: the driver is gone
            break
    training_ended()  # the driver's other processes may have its core now
    # Transitions still inside the collectors' n-step windows are not handed over: their env
    # steps are not counted, as a collector counts only what reached replay.
    result = HeadStartResult(
        learner_state=learner.state_bytes(), replay_states=[replay.get_state(i) for i in range(len(collectors))],
        replay_stats=replay.stats(), env_steps=env_steps, epochs=learner.epochs, updates=learner.updates,
        first_step_at=min(c.first_step_at for c in collectors), first_update_at=learner.first_update_at,
        curve=curve, weights=board.latest, evaluations=evaluations)
    if result.solved is not None:
        # The run ends with this result, and the export (torch.export's first use takes seconds) is
        # its last piece: the driver, told now, need not start actors that would share the cores.
        with contextlib.suppress(OSError):  # the driver is gone
            conn.send(SOLVED)
        result.policy = learner.export_policy(board.latest.arrays)
    return result


def _evaluation(config: RunConfig, plan):
    """The run's evaluation (its evaluator's class and settings, giving up once stop.eval_return is
    out of reach) as a function of published weights, marking the result that reaches
    stop.eval_return `solved`; None for a run with no stop.eval_return."""
    target = config.stop.eval_return
    if target is None:
        return None
    from cluster.config.settings import eval_give_up
    from cluster.hosts.weights_evaluator import WeightsEvaluator  # no Ray: the head start has none

    evaluator, give_up = WeightsEvaluator(*plan.evaluator_args), eval_give_up(config)

    def evaluate(weights: Weights, stop_if) -> dict:
        result = evaluator.evaluate(weights, give_up, stop_if=stop_if)
        result["solved"] = bool(result["complete"] and result["mean"] >= target)
        return result

    return evaluate
