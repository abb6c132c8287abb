"""The driver keeps its loop going while the learner waits inside an epoch (a real local Ray
cluster, the real TrainingRun and actors; only the learner's host is a subclass that waits).

A learner waits inside an epoch when it has no data: a collector died and its shard stopped
growing, say. The driver must keep polling then (it is what restarts the dead collector's loop);
it once blocked on a checkpoint queued behind the waiting epoch, and the run hung for good.
"""

import json
import sys
import threading
import time
from pathlib import Path

import ray
from ray import cloudpickle

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.driver.observer import RunObserver
from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.ray_runtime.runtime import RayRuntime
from raypex.cluster.driver.run import TrainingRun
from raypex.cluster.driver.signals import EXIT_INTERRUPTED
from raypex.cluster.ray_runtime.wiring import connect, shutdown
from raypex.cluster.hosts.learner_actor import LearnerActor

EPOCHS_BEFORE_WAITING = 2
POLLS_WHILE_WAITING = 6  # three seconds of the driver's loop

# Ray's workers cannot import this test module by name: ship its classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class WaitingLearnerActor(LearnerActor):
    """Trains two epochs, then waits inside the third until the run asks it to stop."""

    def __init__(self, *args):
        super().__init__(*args)
        self.epochs_served = 0
        self.released = threading.Event()

    @ray.method(concurrency_group="control")  # as the parent's: served beside the waiting epoch
    def request_stop(self) -> None:
        super().request_stop()  # first: a released epoch that ran before the stop was noted would count
        self.released.set()

    def train_epoch(self) -> dict:
        self.epochs_served += 1
        if self.epochs_served > EPOCHS_BEFORE_WAITING:
            self.released.wait()
        return super().train_epoch()


class PressCtrlC(RunObserver):
    """A RunObserver that counts the driver's polls once the learner waits, then interrupts the
    run the way Ctrl-C does (once)."""

    def __init__(self):
        self.polls_while_waiting = 0
        self.pressed = threading.Event()

    def after_poll(self, run: TrainingRun) -> None:
        if run.epochs_done >= EPOCHS_BEFORE_WAITING and not self.pressed.is_set():
            self.polls_while_waiting += 1
            if self.polls_while_waiting == POLLS_WHILE_WAITING:
                self.pressed.set()
                raise KeyboardInterrupt

    def before_finish(self, run: TrainingRun) -> None:
        pass


def test_the_driver_keeps_polling_while_the_learner_waits_and_stops_cleanly(tmp_path: Path):
    config = load_config(None, ["stop.eval_return=null", "replay.min_size=500", "checkpoint.every_epochs=1",
                                "eval.every_env_steps=100000000", "eval.episodes=4"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    connect(None)
    try:
        observer = PressCtrlC()
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        codes: list[int] = []
        with open(run_dir / "progress.log", "w") as log:
            runtime = RayRuntime(connected_device="cpu", learner_host=WaitingLearnerActor)
            run = TrainingRun(config, spec, run_dir, runtime, time.time(), ProgressLine(log), observers=(observer,))
            # The run on a thread: a driver that blocks cannot be interrupted inside ray.get, so the
            # test waits for the polls with a deadline and, past it, releases the learner itself.
            driver = threading.Thread(target=lambda: codes.append(run.execute(config_text="test")), daemon=True)
            driver.start()
            kept_polling = observer.pressed.wait(timeout=120)
            if not kept_polling:
                ray.get(run.actors.learner.request_stop.remote())
            driver.join(timeout=120)
    finally:
        shutdown()  # as raypex train ends a local cluster: at once, not with Ray's graceful wait
    assert kept_polling, "the driver stopped polling while the learner waited inside an epoch"
    assert codes == [EXIT_INTERRUPTED]
    assert run.summary()["epochs"] == EPOCHS_BEFORE_WAITING
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))
    assert checkpoints and (run_dir / "policy.pt2").is_file() and (run_dir / "summary.json").is_file()


class KillTheLearnerAtTheEnd(RunObserver):
    """Kills the learner's process as the run's end begins (a node lost then): Ray restarts it.
    A checkpoint the loop asked for is written first, so that the newest set holds replay (one
    killed mid-write is a set without it, and the revival would refill replay instead)."""

    def before_finish(self, run: TrainingRun) -> None:
        run.outputs.write_pending_checkpoint()
        ray.kill(run.actors.learner, no_restart=False)


def test_a_learner_that_dies_as_the_run_ends_is_revived_and_exports_the_policy(tmp_path: Path):
    """The learner's node lost during the final checkpoint or export: the run revives it from the
    newest checkpoint set (its replay too), exports policy.pt2 from it, ends with rc 0, and the
    counts add up: each env step a transition the new replay holds, or one lost with the old one."""
    config = load_config(None, ["stop.eval_return=null", "replay.min_size=500", "checkpoint.every_epochs=1",
                                "checkpoint.replay=true", "stop.env_steps=3000", "eval.every_env_steps=100000000",
                                "eval.episodes=2"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    connect(None)
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        with open(run_dir / "progress.log", "w") as log:
            run = TrainingRun(config, spec, run_dir, RayRuntime(connected_device="cpu"), time.time(),
                              ProgressLine(log), observers=(KillTheLearnerAtTheEnd(),))
            code = run.execute(config_text="test")
    finally:
        shutdown()
    said = (run_dir / "progress.log").read_text()
    assert code == 0, said
    assert "the learner died; a new one continues from the checkpoint of epoch" in said, said
    assert "replay restored from the checkpoint" in said, said
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner_restarts"] == 1 and summary["ended"] == "env_steps", summary
    stored, lost = sum(summary["replay_inserted_per_shard"]), summary["replay_lost_transitions"]
    # what the collectors sent after the restored set went with the old process (none, when that
    # set was written after their last chunk)
    assert summary["env_steps"] == stored + lost, summary
    assert (run_dir / "policy.pt2").is_file()
    manifests = sorted((run_dir / "checkpoints").glob("ckpt-*.json"))
    assert manifests and all(m.with_suffix(".pt").is_file() for m in manifests)
