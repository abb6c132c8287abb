"""Fault injection on real `raypex train` runs (a local Ray cluster, CartPole, short and small):
kill -9 of a collector, the evaluator, the learner (which holds the replay), and the driver itself.

Each test starts the real command, waits for a line it prints, joins its Ray cluster to kill one
actor's process, and checks how the run ended: what it printed, its exit code, summary.json. One
drives the driver's evaluation scheduler itself against an evaluator that Ray restarts slowly.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import ray
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from raypex.cluster.driver import signals
from raypex.cluster.driver.evaluation import EvaluationScheduler
from raypex.cluster.ray_runtime.runtime import RayRuntime
from raypex.cluster.ray_runtime.reaper import cluster_processes, still_running
from raypex.cluster.driver.run_errors import describe_failure, error_line
from raypex.cluster.hosts.learner_host import LearnerRestarted

SHORT = ["stop.eval_return=null", "replay.min_size=500", "eval.every_env_steps=400", "eval.episodes=4",
         "checkpoint.every_epochs=5"]


# r2d2 on CartPole at a size two cores train quickly: short sequences, a small LSTM and batch
SMALL_R2D2 = ["algo.name=r2d2", "replay.sequence_length=20", "replay.sequence_overlap=10", "algo.burn_in=5",
              "network.recurrent_size=32", "learner.micro_batch=16", "replay.samples_per_insert=4"]


class RunningTrain:
    """`raypex train` in a subprocess whose stderr is read line by line."""

    def __init__(self, run_dir: Path, *overrides: str, env: dict | None = None, cwd: Path | None = None):
        self.run_dir = run_dir
        # no token auth on this throwaway cluster, so the test process can join it to kill actors
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raypex", "train", "--run-dir", str(run_dir), *SHORT, *overrides],
            stderr=subprocess.PIPE, text=True, cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled", **(env or {})})
        self.lines: list[str] = []

    def read_until(self, prefix: str) -> str:
        """Read stderr until a line starting with `prefix`; returns it."""
        try:
            for line in self.proc.stderr:
                self.lines.append(line)
                if line.startswith(prefix):
                    return line
        except TimeoutError:  # the suite's per-test alarm: say what the run printed
            raise AssertionError(f"still waiting for {prefix!r}; the run printed:\n{self.output}") from None
        raise AssertionError(f"run ended before {prefix!r}:\n{self.output}")

    @contextlib.contextmanager
    def joined(self):
        """This process joined to the run's Ray cluster (from placement.json); yields the prefix of
        the run's actor names ("raypex-<run id>")."""
        placement = json.loads((self.run_dir / "placement.json").read_text())
        ray.init(address=placement["ray_address"], namespace=placement["namespace"])
        try:
            yield f"raypex-{placement['run_id']}"
        finally:
            ray.shutdown()

    def wait_for_inserts(self, shard: int, beyond: int, timeout_s: float = 60) -> None:
        """Until shard `shard` has taken more than `beyond` transitions (its restarted collector
        writes), asking the learner's replay; fails after `timeout_s`."""
        with self.joined() as prefix:
            learner = ray.get_actor(f"{prefix}-learner")
            deadline = time.monotonic() + timeout_s
            while ray.get(learner.replay_stats.remote())[shard].inserted <= beyond:
                assert time.monotonic() < deadline, f"shard {shard} took nothing new in {timeout_s}s:\n{self.output}"
                time.sleep(0.05)  # a poll's pace, not synchronization: the loop ends on the counter

    def kill_actor(self, role: str, restarted: bool = True) -> list[dict]:
        """kill -9 (no restart asked) the process of actor `role` (e.g. "collector-0"); returns
        every shard's counters read just after from the learner's replay, with the driver still
        running (nothing for the learner itself, or with `restarted` False: not waiting for Ray to
        restart it)."""
        with self.joined() as prefix:
            actor = ray.get_actor(f"{prefix}-{role}")
            if role == "learner" or not restarted:  # the driver decides whether the run goes on
                os.kill(ray.get(actor.pid.remote()), signal.SIGKILL)
                return []
            self._kill_process(actor)
            return ray.get(ray.get_actor(f"{prefix}-learner").replay_stats.remote())

    @staticmethod
    def _kill_process(actor) -> None:
        """SIGKILL a restartable actor's process, then wait until Ray has a new one running (its
        pid answers)."""
        old = ray.get(actor.pid.remote())
        os.kill(old, signal.SIGKILL)
        for _ in range(100):  # calls fail while Ray notices the death; then they wait for the restart
            try:
                if ray.get(actor.pid.remote(), timeout=60) != old:
                    return
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                continue
        raise AssertionError("the killed actor was not restarted")

    def finish(self, timeout: float = 120) -> int:
        """The exit code, once the run has ended (everything left on stderr read)."""
        self.lines.append(self.proc.stderr.read())
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:  # never leave a run behind to slow the rest of the suite
            self.proc.kill()
            self.proc.wait()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


@pytest.fixture
def running(tmp_path, joining_environment):
    """Starts `raypex train` runs that join the suite's kept-up cluster (RAYPEX_ADDRESS), or with
    `own_cluster` start their own local one."""
    runs: list[RunningTrain] = []

    def start(*overrides: str, env: dict | None = None, own_cluster: bool = False, cwd: Path | None = None) -> RunningTrain:
        joining = {} if own_cluster else joining_environment
        runs.append(RunningTrain(tmp_path / f"run{len(runs)}", *overrides, env={**joining, **(env or {})}, cwd=cwd))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()


def env_step_axis(run_dir: Path, tag: str = "charts/SPS") -> list[int]:
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return [event.step for event in acc.Scalars(tag)]


def evaluations_after(run_dir: Path, env_steps: int) -> int:
    """How many evaluations TensorBoard holds (flushed every few seconds) past `env_steps`."""
    return sum(step > env_steps for step in env_step_axis(run_dir, "eval/return_mean"))


def test_collectors_and_the_evaluator_killed_are_restarted_and_counted_and_a_fourth_death_ends_the_run(running):
    """Kill the evaluator once, then collector 0's process three times, then a fourth, in one run.

    The evaluator: Ray restarts it, the run loses at most the evaluation it was running, and the
    next ones go to the new process. Collector 0: Ray restarts it on its shard (whose data survives
    and keeps growing), env steps count on from what its shard stored, every restart is counted.
    Its fourth death (README: a collector is restarted 3 times) ends the run: exit 1, one line naming
    it and the resume command, after the final checkpoint, policy.pt2 and summary.json.

    With one collector gone the learner soon waits for data, and a checkpoint is due every epoch:
    the driver must keep polling (and restart the collector's loop) while the learner waits, not
    block on the checkpoint behind the waiting epoch, which once hung the run for good.

    The run is r2d2's (sequence replay): each kill takes a collector mid-sequence, and its unsent
    steps are never counted, so env steps stay exactly what the shards stored."""
    run = running("stop.env_steps=100000000", "checkpoint.every_epochs=1", *SMALL_R2D2)
    run.read_until("[")  # first progress line: training has started
    at_evaluator_kill = sum(shard.inserted for shard in run.kill_actor("evaluator"))
    for _ in range(3):
        at_kill = run.kill_actor("collector-0")[0]
        run.read_until("collector 0 died; restarting it on its shard")  # the driver saw the death
    run.wait_for_inserts(0, beyond=at_kill.inserted)  # the last restarted collector writes
    # Two, since one that ended just before the kill may be taken (and plotted) just after it.
    deadline = time.monotonic() + 60
    while evaluations_after(run.run_dir, at_evaluator_kill) < 2:
        assert time.monotonic() < deadline, f"no two evaluations after the evaluator's restart:\n{run.output}"
        time.sleep(0.5)  # the pace of reading TensorBoard's file; the loop ends on what it holds
    run.kill_actor("collector-0", restarted=False)
    assert run.finish() == 1, run.output
    line = "collector 0 died after 3 restarts (a collector is restarted 3 times)"
    assert run.output.strip().splitlines()[-1] == \
        f"raypex: run failed: {line}; continue it with: raypex train --resume {run.run_dir}", run.output
    result = run.summary()
    assert result["ended"] == f"failed: {line}" and result["collector_restarts"] == 3, result
    assert result["evaluations_lost"] <= 1, result
    assert "Traceback" not in run.output and (run.run_dir / "policy.pt2").is_file()
    assert list((run.run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert result["replay_size_per_shard"][0] >= at_kill.size > 0  # the shard kept its data
    assert result["replay_inserted_per_shard"][0] > at_kill.inserted  # the new collector writes to it
    # Env steps count the transitions that reached replay (a restarted collector counts on from
    # what its shard stored), so they are exactly what the shards inserted.
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    axis = env_step_axis(run.run_dir)
    assert axis == sorted(axis), "the env-step axis went backwards"


@ray.remote(max_restarts=-1)
class SlowToRestartEvaluator:
    """An evaluator whose restart takes seconds, as a real one's does on a busy 2-core box."""

    def __init__(self):
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(3)  # the restart's slowness, not synchronization: nothing waits on it

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, weights, give_up=None, record=False) -> dict:
        return {"weights": weights, "pid": os.getpid()}


def test_an_evaluation_due_while_the_evaluator_restarts_waits_for_the_new_process(kept_up_ray):
    """The evaluator killed: the evaluation it ran is lost, and the next one is not started while
    Ray restarts it (Ray refuses calls to a restarting actor at once: it would be lost too), but
    goes to the new process once that is up; so is the run's final evaluation."""
    ray.init(address=kept_up_ray, namespace=f"restart-{uuid.uuid4().hex[:8]}")
    # Detached: owned by the GCS, not by this process. A local cluster an earlier test started in
    # this process leaves its token authentication in the process's Ray, which then refuses the
    # GCS's questions about actors it owns, and the GCS destroys them at once.
    evaluator = SlowToRestartEvaluator.options(lifetime="detached").remote()
    try:
        evaluations_wait_for_the_restarted_evaluator(evaluator)
    finally:
        ray.kill(evaluator, no_restart=True)
        ray.shutdown()


def evaluations_wait_for_the_restarted_evaluator(evaluator) -> None:
    """The test's steps, in this process joined to the kept-up cluster."""
    first = ray.get(evaluator.pid.remote())
    weights = ray.put("weights v1")
    evaluations = EvaluationScheduler(RayRuntime(connected_device="cpu"), evaluator, every_env_steps=100, every_s=None,
                                      give_up=None, newest_weights=lambda: weights)

    def an_epoch_and_a_mark(epoch: int) -> None:
        evaluations.on_epoch()
        evaluations.on_env_steps(100 * epoch)

    evaluations.on_env_steps(0)
    os.kill(first, signal.SIGKILL)
    an_epoch_and_a_mark(1)
    evaluations.maybe_start()  # sent to the dead process: lost
    assert evaluations.take()[:2] == (None, weights) and evaluations.lost == 1
    an_epoch_and_a_mark(2)
    evaluations.maybe_start()
    assert evaluations.pending is None  # not started while the evaluator restarts
    deadline = time.monotonic() + 60
    while evaluations.pending is None:
        assert time.monotonic() < deadline, "the due evaluation never started"
        time.sleep(0.05)  # the driver loop's pace; the loop ends on the scheduler's own state
        evaluations.maybe_start()
    result, _, _ = evaluations.take()
    assert result["weights"] == "weights v1" and result["pid"] != first and evaluations.lost == 1
    os.kill(result["pid"], signal.SIGKILL)
    an_epoch_and_a_mark(3)
    evaluations.maybe_start()
    assert evaluations.take()[0] is None and evaluations.lost == 2
    final = evaluations.evaluate_now(weights)  # waits for the restart, then runs
    assert final is not None and final["pid"] not in (first, result["pid"]) and evaluations.lost == 2


@ray.remote
class RestartedLearner:
    """A learner process Ray restarted, not yet revived by the driver: it refuses its weights."""

    def published_weights(self):
        raise LearnerRestarted("this learner process was not warmed up: it replaces one that died")


def test_an_evaluation_of_weights_a_restarted_learner_refused_is_lost_not_the_runs_end(kept_up_ray):
    """An evaluation can start between the learner's death and the driver noticing it: its weights
    are asked of the process Ray restarted, which refuses. That evaluation is counted lost, as when
    the evaluator dies, and so is the run's final one; the run goes on."""
    ray.init(address=kept_up_ray, namespace=f"refused-{uuid.uuid4().hex[:8]}")
    learner = RestartedLearner.options(lifetime="detached").remote()  # detached: see the test above
    evaluator = SlowToRestartEvaluator.options(lifetime="detached").remote()
    try:
        evaluations = EvaluationScheduler(RayRuntime(connected_device="cpu"), evaluator, every_env_steps=100,
                                          every_s=None, give_up=None,
                                          newest_weights=lambda: learner.published_weights.remote())
        evaluations.on_env_steps(0)
        evaluations.on_epoch()
        evaluations.on_env_steps(100)
        evaluations.maybe_start()
        assert evaluations.take()[0] is None and evaluations.lost == 1
        assert evaluations.evaluate_now(learner.published_weights.remote()) is None and evaluations.lost == 2
    finally:
        ray.kill(learner, no_restart=True)
        ray.kill(evaluator, no_restart=True)
        ray.shutdown()


DIVERGING_ENV = '''import gymnasium as gym
import numpy as np
import ray


class Env(gym.Env):
    """Steps for a while, then raises at every step, in collectors only (the evaluator's copy
    never does): an env whose process lives on while the collector's loop fails. Its errors
    alternate between two kinds, so that no two in a row are the same (a repeat ends the run at
    once: the next test)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.steps = 0
        name = ray.get_runtime_context().get_actor_name() if ray.is_initialized() else None
        self.in_collector = "collector" in (name or "")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.in_collector and self.steps > 300 and self.steps % 2:
            raise RuntimeError(f"the simulator diverged at step {self.steps}")
        if self.in_collector and self.steps > 300:
            raise FloatingPointError(f"the simulator overflowed at step {self.steps}")
        return np.zeros(2, np.float32), 0.0, self.steps % 50 == 0, False, {}
'''


def failed_with_env(running, tmp_path, name: str, text: str):
    """A run on the env file `name` (holding `text`) that ends as failed: (the run, its last line)."""
    (tmp_path / name).write_text(text)
    run = running(f"env.id={name}:Env", "stop.env_steps=100000000", cwd=tmp_path)
    assert run.finish() == 1, run.output
    return run, run.output.strip().splitlines()[-1]


def test_an_env_that_raises_in_a_live_collector_is_restarted_three_times_then_ends_the_run(running, tmp_path):
    """README: a collector's loop that raises is started again on its shard, as often as a dead
    collector is restarted; the fourth error ends the run in one line naming it, with the final
    files written and the counts adding up."""
    run, last = failed_with_env(running, tmp_path, "diverging.py", DIVERGING_ENV)
    failed = re.fullmatch(r"raypex: run failed: (collector (\d) raised 4 times; last error: \w+Error: the simulator "
                          r"\w+ at step 30\d \(diverging.py:\d+\)); its traceback: (\S+); continue it with: "
                          r"raypex train --resume (\S+)", last)
    assert failed and failed[4] == str(run.run_dir) and failed[3] == str(run.run_dir / "error.log"), run.output
    restarts = [line for line in run.output.splitlines() if line.startswith(f"collector {failed[2]} stopped")]
    assert len(restarts) == 3 and re.search(r"Error: the simulator \w+ at step \d+ \(diverging.py:\d+\)\)",
                                            restarts[0]), run.output
    result = run.summary()
    assert result["ended"] == f"failed: {failed[1]}" and result["collector_restarts"] == 0, result
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    assert "Traceback" not in run.output and (run.run_dir / "policy.pt2").is_file()


def test_an_env_that_raises_the_same_error_after_a_restart_ends_the_run_at_once_naming_it(running, tmp_path):
    """A deterministic fault in a user's env: the second identical error (type and the line of the
    env's code that raised it) ends the run in one line naming both, without spending the rest of
    the restarts or suggesting a resume that would meet it again; the traceback is in error.log."""
    run, last = failed_with_env(running, tmp_path, "stuck.py", DIVERGING_ENV.replace("and self.steps % 2", ""))
    failed = re.fullmatch(r"raypex: run failed: collector (\d)'s env raised the same error again after a restart, so no "
                          r"restart or resume can fix it: RuntimeError: the simulator diverged at step 30\d "
                          r"\(stuck.py:(\d+)\); its traceback: (\S+)", last)
    assert failed and "--resume" not in last, run.output
    assert int(failed[2]) == DIVERGING_ENV.splitlines().index(
        '            raise RuntimeError(f"the simulator diverged at step {self.steps}")') + 1
    assert len([line for line in run.output.splitlines() if line.startswith(f"collector {failed[1]} stopped")]) == 1
    logged = Path(failed[3]).read_text()
    assert "stuck.py" in logged and logged.rstrip().endswith("RuntimeError: the simulator diverged at step " + last[
        last.index("step ") + 5:last.index(" (stuck")])
    assert run.summary()["ended"].startswith("failed: collector") and "Traceback" not in run.output


def test_served_acting_goes_on_through_a_restart_of_its_acting_server(running):
    """collectors.acting served: the collectors' forwards run on the node's acting server. Killed
    mid-run, Ray restarts it; the collectors wait for it, hand the new process their weights with
    their next request and go on: every shard takes more than the chunk acted before the kill.
    Ended by Ctrl-C, the run's env steps are what the shards stored (a collector waiting on its
    server loses nothing).

    The test ends the run itself: a run that stopped on solving CartPole could end within a chunk
    of the restart, before the new process had acted for every collector."""
    run = running("collectors.acting=served", "stop.env_steps=10000000")
    run.read_until("[")  # first progress line: training has started
    at_kill = run.kill_actor("acting-0")  # read once the new process answers
    chunk = 16 * 16  # cartpole.yaml's chunk: one acted before the kill may land after it
    for shard, stats in enumerate(at_kill):  # acting again through the new process
        run.wait_for_inserts(shard, beyond=stats.inserted + chunk)
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == signals.EXIT_INTERRUPTED, run.output
    result = run.summary()
    assert result["ended"] == "interrupted" and result["collector_restarts"] == 0, result
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    assert "Traceback" not in run.output and "restarting it on its shard" not in run.output, run.output


def test_a_killed_learner_is_replaced_from_its_newest_checkpoint(running):
    """An r2d2 run (sequence replay, whose collectors' streams go on past what the restored replay
    holds): the new learner takes the replay back and the counts add up."""
    run = running("stop.env_steps=20000", "checkpoint.every_epochs=2", *SMALL_R2D2)
    run.read_until("[")
    run.kill_actor("learner")
    revived = run.read_until("the learner died; a new one continues from")
    assert run.finish() == 0, run.output
    result = run.summary()
    assert result["ended"] == "env_steps" and result["env_steps"] >= 20000 and result["learner_restarts"] == 1
    assert "Traceback" not in run.output
    # the replay died with the learner: it came back from the checkpoint set, or refilled; either
    # way the summary counts what collectors sent that died with it, and the counts add up
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    if "(no checkpoint yet)" in revived:
        assert "was lost with it and refills" in revived and result["replay_lost_transitions"] > 0, revived
    else:
        assert "replay restored from the checkpoint of epoch" in revived, revived
    # the run went on past the checkpoint it continued from, and saved its work at the end
    start = int(revived.split("epoch ")[1].split(":")[0]) if "epoch " in revived else 0
    final = json.loads(max((run.run_dir / "checkpoints").glob("*.json")).read_text())
    assert result["epochs"] == final["epochs"] > start and (run.run_dir / "policy.pt2").is_file()


def test_collectors_that_follow_the_cluster_take_the_weights_of_a_revived_learner(running):
    """collectors.num auto: a learner Ray restarts announces weights only to the collectors it is
    told have joined; the driver tells it, so they act with its new weights (without, their lag
    grew to 98 versions)."""
    run = running("collectors.num=auto", "collectors.max=2", "stop.env_steps=40000", "checkpoint.every_epochs=2")
    run.read_until("[")
    run.kill_actor("learner")
    run.read_until("the learner died; a new one continues from")
    assert run.finish() == 0, run.output
    result = run.summary()
    assert result["learner_restarts"] == 1 and result["policy_lag_max"] <= 5, result
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result


def test_a_learner_that_dies_again_at_once_ends_the_run_in_one_line_with_the_resume_command(running):
    run = running("stop.env_steps=100000000", "checkpoint.every_epochs=1000")
    run.read_until("[")
    run.kill_actor("learner")
    run.read_until("the learner died; a new one continues from its initial weights (no checkpoint yet)")
    run.kill_actor("learner")  # again (Ray restarted it), before its first checkpoint window is over
    assert run.finish() == 1, run.output
    last = run.output.strip().splitlines()[-1]
    expected = f"raypex: run failed: the learner died; continue it with: raypex train --resume {run.run_dir}"
    assert last == expected, run.output
    assert "Traceback" not in run.output and "RayTaskError" not in run.output
    result = run.summary()
    assert result["ended"] == "failed: the learner died" and result["learner_restarts"] == 1


def test_killing_the_driver_leaves_no_process_of_the_run(running, tmp_path):
    """kill -9 of `raypex train` itself, started outside the checkout as an installed user starts
    it: within 15 s no process of its Ray cluster is left (every process it started, directly or
    through Ray, inherits the marker in its environment, or descends from one that did: Ray's
    agents overwrite theirs with their process title)."""
    marker = f"RAYPEX_FAULT_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    run = running("stop.env_steps=100000000", env={key: value}, own_cluster=True, cwd=tmp_path)
    run.read_until("[")
    started = cluster_processes(marker)
    assert "watchdog" not in run.output, run.output
    names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in started}
    # The GCS, the raylet, Ray's agents (found as the raylet's children), the actors, the watchdog.
    assert {"gcs_server", "raylet", "ray::RuntimeEnv"} <= names and len(started) > 8, names
    run.proc.kill()
    run.proc.wait()
    deadline = time.monotonic() + 15
    left = still_running(started)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)  # waiting out a deadline, not synchronizing: Ray's processes exit on their own
        left = still_running(started)
    assert not left, f"still running 15 s after the driver died: {left}"


@ray.remote
def fail_as_cuda_does():
    raise RuntimeError("CUDA error: operation failed due to a previous error during capture\n"
                       "CUDA kernel errors might be asynchronously reported at some other API call\n"
                       "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")


def test_an_error_raised_in_an_actor_is_named_by_its_own_first_line(kept_up_ray):
    """Ray's first line says where an error was raised and CUDA's last ones give advice; the run's
    one line (and a collector's restart line) carries the error itself."""
    ray.init(address=kept_up_ray, namespace=f"errors-{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(ray.exceptions.RayTaskError) as raised:
            ray.get(fail_as_cuda_does.remote())
    finally:
        ray.shutdown()
    assert str(raised.value).strip().splitlines()[0] != str(raised.value).strip().splitlines()[-1]
    expected = "RuntimeError: CUDA error: operation failed due to a previous error during capture"
    assert error_line(raised.value) == expected
    # raised by code that is not raypex's (this file, as a user's env would be): where, from Ray's text
    raise_line = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                      if line.startswith('    raise RuntimeError("CUDA error: operation failed'))
    assert describe_failure(raised.value, role_of=lambda actor_id: "?") == f"{expected} (test_faults.py:{raise_line})"


@ray.remote
def terminate(pid: int) -> None:
    """SIGTERM to `pid` (the driver, waiting in ray.get on this very call), then no answer."""
    os.kill(pid, signal.SIGTERM)
    time.sleep(600)


def test_a_sigterm_that_ray_turns_into_a_plain_keyboard_interrupt_still_exits_143(kept_up_ray):
    """Inside ray.get and ray.wait Ray runs the signal handler and raises a plain KeyboardInterrupt in
    place of what it raised (Terminated: cluster/driver/signals.py), so the type alone cannot say
    which signal stopped a run; the signal noted on its way in does."""
    ray.init(address=kept_up_ray, namespace=f"signals-{uuid.uuid4().hex[:8]}")
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals.install_stop_signals()
    try:
        ref = terminate.remote(os.getpid())
        with pytest.raises(KeyboardInterrupt) as caught:
            ray.get(ref, timeout=120)
        ray.cancel(ref, force=True)
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
        ray.shutdown()
    assert signals.exit_code(caught.value) == 143 and signals.signal_name(caught.value) == "SIGTERM", caught


GOING_BAD_ENV = '''import os
import time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class Env(CartPoleEnv):
    """CartPole until its 300th step, then the fault `mode` names, in every copy (collectors and
    evaluator alike), or with `collectors_only` in the collectors' copies alone; the first copy to
    go bad notes when, in NOTE (each actor's working directory is a copy of the run's)."""

    def __init__(self, mode="nan", collectors_only=False):
        super().__init__()
        self.mode, self.steps = mode, 0
        import ray

        name = ray.get_runtime_context().get_actor_name() if ray.is_initialized() else None
        self.goes_bad = not collectors_only or "collector" in (name or "")

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps <= 300 or not self.goes_bad:
            return obs, reward, terminated, truncated, info
        if not os.path.exists("NOTE"):
            with open("NOTE", "w") as note:
                note.write(str(time.time()))
        if self.mode == "hang":
            time.sleep(3600)
        if self.mode == "hold":  # a C call that keeps Python's lock: no thread of the process runs
            import ctypes

            ctypes.PyDLL(None).sleep(3600)
        if self.mode == "nan":
            reward = float("nan")
        return obs, reward, terminated, truncated, info
'''


WENT_BAD = (r"(collector \d's env raised the same error again after a restart, so no restart or resume can fix it: |"
            r"EvaluatorActor.evaluate raised )EnvWentBad: env.id going_bad.py:Env: env \d+ of (collector \d|the evaluator) "
            r"returned {} at step \d+ of its episode; its traceback: \S+")


COLLECTOR_WENT_BAD = (r"collector \d's env raised the same error again after a restart, so no restart or resume can "
                     r"fix it: EnvWentBad: env.id going_bad.py:Env: env \d+ of collector \d returned {} at step \d+ "
                     r"of its episode; its traceback: \S+")


@pytest.mark.parametrize(("mode", "cause"), [
    ("nan", WENT_BAD.format("a reward of nan")),
    ("{mode: nan, collectors_only: true}", COLLECTOR_WENT_BAD.format("a reward of nan")),
    ("hang", (r"collector \d: a step of env.id going_bad.py:Env has not returned for \d+s \(env.step_timeout_s: 3\); "
             r"the env hangs")),
    ("hold", (r"collector \d has not answered for \d+s \(env.step_timeout_s: 3\), its process alive but held \(a step "
             r"of env.id going_bad.py:Env that does not return and lets no other thread run\); the env hangs")),
])
def test_an_env_that_goes_bad_mid_run_ends_it_in_one_line_within_a_minute(running, tmp_path, mode, cause):
    """A CartPole that turns bad after 300 steps: a NaN reward (met by the evaluator, or by a
    collector, which restarts once, meets it again and ends the run), or a step that never returns
    (env.step_timeout_s), the process left free to answer or held by a C call that keeps Python's
    lock. The run ends within 60 s of the fault, exit 1, its last line naming the cause and
    suggesting no resume (it would meet the fault again), with summary.json and counts that add up.
    An infinite observation or one of another shape takes the NaN's path from the same check
    (actors/step_check.py), whose every line tests/test_step_check.py asserts."""
    (tmp_path / "going_bad.py").write_text(GOING_BAD_ENV.replace("NOTE", str(tmp_path / "went_bad.txt")))
    kwargs = mode if mode.startswith("{") else f"{{mode: {mode}}}"
    run = running("env.id=going_bad.py:Env", f"env.kwargs={kwargs}", "env.step_timeout_s=3",
                  "stop.env_steps=100000000", cwd=tmp_path)
    assert run.finish() == 1, run.output
    ended = time.time()
    last = run.output.strip().splitlines()[-1]
    assert re.fullmatch(f"raypex: run failed: {cause}", last), run.output
    assert ended - float((tmp_path / "went_bad.txt").read_text()) < 60
    if "collectors_only" in mode:  # the collector that ended it was restarted once and met the same fault
        ender = re.match(r"raypex: run failed: collector (\d)", last)[1]
        assert len([line for line in run.output.splitlines() if line.startswith(f"collector {ender} stopped")]) == 1
    result = run.summary()
    assert result["ended"] == "failed: " + last.removeprefix("raypex: run failed: ").split("; its traceback")[0]
    assert "Traceback" not in run.output and "--resume" not in last
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result


def test_an_env_step_that_hangs_in_a_local_run_ends_it_in_one_line(tmp_path, monkeypatch, capsys):
    """`--local` steps the envs in the run's own thread: a watcher thread interrupts a step that has
    not returned for env.step_timeout_s (cluster/local/hang_watch.py), and the run ends as for any
    env fault, its counts adding up."""
    from raypex.cluster.commands.cli import main

    (tmp_path / "going_bad.py").write_text(GOING_BAD_ENV.replace("NOTE", str(tmp_path / "went_bad.txt")))
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--local", "env.id=going_bad.py:Env", "env.kwargs={mode: hang}", "env.step_timeout_s=2",
                 "stop.env_steps=100000000", "--run-dir", "run"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert re.fullmatch(r"raypex: run failed: EnvWentBad: (collector \d|the evaluator): a step of env.id going_bad.py:Env "
                        r"has not returned for \d+s \(env.step_timeout_s: 2\); the env hangs \(going_bad.py:\d+\); "
                        r"its traceback: \S+", err.strip().splitlines()[-1]), err
    result = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
