"""`raypex tune` on a real Ray cluster with real Tune: a PBT exploit carries the donor's replay,
weights and env steps into the recipient exactly; Ctrl-C of a sweep ends every trial's run as a
stop does, and `--resume` finishes it (one sweep does both: a sweep's trials are many processes,
and the suite shares two cores)."""

import io
import json
import os
import pickle
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from raypex.learner.algorithms.registry import algorithm

from raypex.cluster.storage import copy_file, join, list_files, name_of, read_bytes, write_bytes
from raypex.learner.weights import export_arrays
from raypex.replay.digest import content_digest
from tests.test_run_safety import Payload

# Two CartPole trials side by side on two cores: small actors, one collector each.
# PBT exploits a trial only when, at its own report, it ranks below one that was checkpointed at its
# last report. Once evaluations score the trials, both often improve between reports, each ranking
# first at its own, and clean-clone runs saw both end without an exploit (with the first evaluation
# at 4,000 env steps, twice on one day). So no evaluation runs before a run's end: every report
# scores -inf, PBT's stable sort ranks the first trial last every time, and it copies the second
# at its first report after the second was checkpointed.
ENV_STEPS = 8000
SMALL_TRIALS = ["collectors.num=1", "collectors.num_cpus=0.2", "learner.num_cpus=0.5", "env.num_envs=8",
                "eval.episodes=5", f"eval.every_env_steps={10 * ENV_STEPS}", "checkpoint.every_epochs=1000"]


def test_a_pbt_exploit_carries_the_donor_exactly_and_ctrl_c_then_resume_finish_the_sweep(
        tmp_path, joining_environment, capsys, monkeypatch):
    experiment = str(tmp_path / "exp")
    monkeypatch.setenv("RAYPEX_KEY_FILE", str(tmp_path / "key"))  # the refusals below run in this process
    env = {**os.environ, **joining_environment, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "raypex", "tune", "cartpole", "learner.lr=loguniform(1e-3,3e-2)",
               "stop.eval_return=null", f"stop.env_steps={ENV_STEPS}", *SMALL_TRIALS, "--samples", "2",
               "--scheduler", "pbt", "--experiment-dir", experiment, "--report-every", "1", "--perturb-every", "1"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, cwd=tmp_path)
    seen = []
    for line in proc.stderr:  # the first exploit, once its recipient has restored it
        seen.append(line)
        if "(PBT exploit at" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(seen) + err
    assert f"continue it with: raypex tune --resume {experiment}" in err
    trials = {name.split("/")[0] for name in list_files(join(experiment, "trials"))}
    interrupted = {}
    for trial in trials:
        summary = json.loads(read_bytes(join(experiment, "trials", trial, "summary.json")))
        # each run ended as a stop does: by the Ctrl-C, or before it (its env steps, or paused by PBT)
        assert summary["ended"] in ("interrupted", "env_steps", "stopped by the sweep's scheduler"), summary
        interrupted[trial] = summary["ended"]
    resumed = subprocess.run([sys.executable, "-m", "raypex", "tune", "--resume", experiment],
                             check=False, capture_output=True, text=True, env=env, timeout=400, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads(read_bytes(join(experiment, "results.json")))
    assert len(results["trials"]) == 2 and results["interrupted"] is None
    for row in results["trials"]:
        assert row["ended"] == "env_steps" and row["env_steps"] >= ENV_STEPS, row
        log = read_bytes(join(row["run_dir"], "progress.log")).decode()
        if interrupted[row["trial"]] == "interrupted":  # it went on from a checkpoint, not from nothing
            assert "replay restored from the checkpoint" in log.split("interrupted: writing a final checkpoint")[-1]
    assert "best: trial" in resumed.stdout and "policy.pt2" in list_files(experiment)
    # the path the last line names, and the experiment directory itself, are what `raypex eval` takes
    named = resumed.stdout.split("evaluate it with: raypex eval ", 1)[1].split(" ", 1)[0]
    assert evaluated(named, capsys) == evaluated(experiment, capsys)
    records = [(row["run_dir"], json.loads(line)) for row in results["trials"]
               for line in read_lines(join(row["run_dir"], "exploits.jsonl"))]
    assert records, "no exploit in the sweep"
    for run_dir, record in records:
        assert record["replay_carried"] and len(record["donor_replay"]) == 1 and record["donor"] != name_of(run_dir)
        # what the recipient's learner holds once restored, read back from it, is the donor's checkpoint
        assert record["restored_replay"] == record["donor_replay"]
        assert record["restored_weights"] == record["donor_weights"]
        assert record["resumed_env_steps"] == record["env_steps"] > 0
    # the exploit is marked in the recipient's TensorBoard, at the donor's env steps
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, record = records[0]
    events_dir = tmp_path / "events"
    for name in list_files(join(run_dir, "tensorboard")):
        copy_file(join(run_dir, "tensorboard", name), events_dir / name)
    events = EventAccumulator(str(events_dir), size_guidance={"scalars": 0}).Reload()
    assert record["env_steps"] in [s.value for s in events.Scalars("tune/exploited_from_env_steps")]
    assert not list(tmp_path.glob("raypex-run-*")) and not (tmp_path / "runs").exists()  # nothing in the cwd
    # a pickle planted in one of Tune's copies of a checkpoint set: the sweep's resume refuses it before
    # Tune or any trial reads it
    marker = tmp_path / "ran"
    tune_copy = join(experiment, "tune", min(n for n in list_files(join(experiment, "tune")) if n.endswith(".pt")))
    original = read_bytes(tune_copy)
    write_bytes(tune_copy, pickle.dumps(Payload(marker)))
    assert refused_resume(experiment, capsys) == (
        f"raypex: error: --resume {experiment}: {tune_copy} is not plain tensors (Weights only load failed); "
        "raypex loads nothing else from a run directory")
    assert not marker.exists()
    # and one in Tune's own state, which Tune would unpickle: its signature no longer matches
    tuner_state = join(experiment, "tune", "tuner.pkl")
    write_bytes(tune_copy, original)
    write_bytes(tuner_state, pickle.dumps(Payload(marker)))
    assert refused_resume(experiment, capsys) == (
        f"raypex: error: --resume {experiment}: {join(experiment, 'tune')} is Ray Tune's pickled state, which Tune "
        "unpickles to resume (a pickle can run code), and its signature does not match (it changed since, or another "
        "user or machine signed it); if it is your own sweep: --trust-tune-state")
    assert not marker.exists()


def evaluated(run_dir: str, capsys) -> str:
    """What `raypex eval RUN_DIR --episodes 2` prints (exit 0)."""
    from raypex.cluster.commands.cli import main

    capsys.readouterr()
    assert main(["eval", run_dir, "--episodes", "2"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def refused_resume(experiment: str, capsys) -> str:
    """The one line `raypex tune --resume` refuses with (exit 2), before anything starts."""
    from raypex.cluster.commands.cli import main

    capsys.readouterr()
    code = main(["tune", "--resume", experiment])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    return lines[0]


def read_lines(location: str) -> list[str]:
    """A file's lines; none when it is not there (a trial that was never exploited has no log)."""
    try:
        return read_bytes(location).decode().splitlines()
    except OSError:
        return []


def test_asha_stops_by_env_steps_up_to_the_runs_own_end():
    """ASHA's rungs are counted in env steps (a report's epochs differ between configs), from a
    27th of stop.env_steps to stop.env_steps, each three times the one before."""
    from raypex.cluster.config.loading import load_config
    from raypex.cluster.sweep.experiment import _scheduler
    from raypex.cluster.sweep.space import Domain, SweepRequest

    config = load_config(None, ["stop.env_steps=270000"])
    request = SweepRequest({}, {"learner.lr": Domain("loguniform", (1e-3, 1e-2))}, 8, "asha", True, 5, 2)
    asha = _scheduler(request, config)
    assert (asha._time_attr, asha._max_t, asha._reduction_factor) == ("env_steps", 270000, 3)
    assert sorted(milestone for milestone, _ in asha._brackets[0]._rungs) == [10000, 30000, 90000, 270000]


SMALL_SETTINGS = {
    "dqn": {},
    "td3": {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0), "policy_delay": 2, "target_update": "polyak"},
    "sac": {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0), "policy_delay": 1, "target_update": "polyak"},
    "r2d2": {"sequence_length": 10, "burn_in": 2, "n_step": 3, "recurrent_size": 16, "target_update": "polyak"},
}


@pytest.mark.parametrize("algo", SMALL_SETTINGS)
def test_the_donor_weights_digest_is_the_checkpoints_policy(tmp_path, algo):
    """What `donor_weights` means: the policy network's arrays in the donor's checkpoint, the same
    digest the learner reports for the weights it restored (export_arrays of its policy), for every
    built-in algorithm (a PBT exploit in an r2d2 sweep once failed here with KeyError: 'r2d2')."""
    from raypex.cluster.sweep.trial import checkpoint_weights_digest
    from raypex.learner.learner_state import learner_state
    from tests.test_learner import settings

    def checkpointed(seed: int):
        torch.manual_seed(seed)
        step = algorithm(algo).build_step(settings(algo=algo, **SMALL_SETTINGS[algo]), torch.device("cpu"))
        learner = SimpleNamespace(step=step, updates=0, epochs=0, version=0)
        path = tmp_path / f"ckpt-{seed}.pt"
        buffer = io.BytesIO()
        torch.save(learner_state(learner), buffer)
        path.write_bytes(buffer.getvalue())
        return path, content_digest(export_arrays(step.policy))

    path, digest = checkpointed(0)
    assert checkpoint_weights_digest(path) == digest
    assert checkpoint_weights_digest(path) != checkpointed(3)[1]


def test_a_trial_trains_on_past_a_report_only_once_tune_has_taken_it_and_a_stop_ends_the_wait(tmp_path):
    import queue
    import threading
    from types import SimpleNamespace

    from raypex.cluster.driver.signals import StopAsked
    from raypex.cluster.sweep.trial import TrialWatch

    events: queue.Queue = queue.Queue()
    watch = TrialWatch(1, events, str(tmp_path / "no-stop-file"), tmp_path)
    metrics = SimpleNamespace(env_steps=400, last_eval=None, last_return=20.0, sps=1.0, last_loss=0.5)
    run = SimpleNamespace(metrics=metrics, epochs_done=1, config=SimpleNamespace(stop=SimpleNamespace(env_steps=8000)),
                          outcome=SimpleNamespace(ended=None, best=None, solved=None), limit_reached=lambda: None)
    ended: list[str] = []

    def driver_loop_poll() -> None:
        try:
            watch.after_poll(run)
            ended.append("went on")
        except StopAsked as asked:
            ended.append(asked.ended)

    for tune_takes_it, outcome in ((True, "went on"), (False, "stopped by the sweep's scheduler")):
        watch.after_epoch(run, 1, {})
        poll = threading.Thread(target=driver_loop_poll, daemon=True)  # a run that never goes on fails, not hangs
        poll.start()
        poll.join(1.0)
        assert poll.is_alive() and not ended  # the report is not taken: the run waits
        if tune_takes_it:
            kind, figures = watch.next_event()  # what the trial's `step` returns to Tune
            assert kind == "report" and figures["env_steps"] == 400
        else:
            watch.stop_with = "stopped by the sweep's scheduler"  # Tune's cleanup, PBT pausing the trial
        poll.join(10.0)
        assert ended.pop() == outcome
    assert events.get_nowait()[0] == "report"  # the stopped run's report, never taken


def test_a_pbt_trial_waits_at_its_first_report_for_its_population_serving_tune_and_a_stop_ends_the_wait(tmp_path):
    import queue
    import threading
    from types import SimpleNamespace

    from raypex.cluster.driver.signals import StopAsked
    from raypex.cluster.sweep.trial import Population, TrialWatch

    def trial(trial_id: str, population: int = 2):
        saves: list[int] = []
        outputs = SimpleNamespace(write_pending_checkpoint=lambda: None)
        run = SimpleNamespace(metrics=SimpleNamespace(env_steps=400, last_eval=None, last_return=20.0, sps=1.0,
                                                      last_loss=0.5),
                              epochs_done=1, config=SimpleNamespace(stop=SimpleNamespace(env_steps=8000)),
                              outcome=SimpleNamespace(ended=None, best=None, solved=None), outputs=outputs,
                              request_checkpoint=lambda: saves.append(1), progress=SimpleNamespace(message=print),
                              limit_reached=lambda: None)
        watch = TrialWatch(1, queue.Queue(), str(tmp_path / "no-stop-file"), tmp_path / trial_id,
                           Population(str(tmp_path / "started"), trial_id, population))
        return watch, run, saves

    def first_epoch(watch, run, ended: list[str]) -> threading.Thread:
        def driver_loop() -> None:
            try:
                watch.after_epoch(run, 1, {})
                watch.after_poll(run)
                ended.append("went on")
            except StopAsked as asked:
                ended.append(asked.ended)

        poll = threading.Thread(target=driver_loop, daemon=True)  # a run that never goes on fails, not hangs
        poll.start()
        assert watch.next_event()[0] == "report"  # Tune takes each report at once
        return poll

    first, first_run, first_saves = trial("t0")
    first_ended: list[str] = []
    first_poll = first_epoch(first, first_run, first_ended)
    first_poll.join(1.5)
    assert first_poll.is_alive() and not first_ended  # its report taken, it waits for the other trial
    first.checkpoint_asked.set()  # PBT saves it meanwhile
    assert first.checkpoints.get(timeout=10) is None and first_saves == [1]
    second, second_run, _ = trial("t1")
    second_ended: list[str] = []
    first_epoch(second, second_run, second_ended).join(10)
    assert second_ended == ["went on"]  # the last of the population to report waits for none
    first_poll.join(10)
    assert first_ended == ["went on"]
    first.after_epoch(first_run, 2, {})
    assert first.next_event()[0] == "report"
    first.after_poll(first_run)  # past its first report it waits for nothing but Tune
    # a trial stopped while it waits (PBT pausing it, the sweep's Ctrl-C) ends at once
    lone, lone_run, _ = trial("t2", population=5)
    ended_early, _, _ = trial("t3", population=5)
    ended_early.before_finish(None)  # a run that ended before its first report is no trial to wait for
    assert (tmp_path / "started" / "t3").exists()
    lone_ended: list[str] = []
    lone_poll = first_epoch(lone, lone_run, lone_ended)
    lone_poll.join(1.5)
    assert lone_poll.is_alive()
    lone.stop_with = "stopped by the sweep's scheduler"
    lone_poll.join(10)
    assert lone_ended == ["stopped by the sweep's scheduler"]
