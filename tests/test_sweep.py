"""`raypex tune` on a real Ray cluster with real Tune: a PBT exploit carries the donor's replay,
weights and env steps into the recipient exactly; Ctrl-C of a sweep ends every trial's run as a
stop does, and `--resume` finishes it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from raypex.learner.weights import export_arrays
from raypex.replay.digest import content_digest

# Two CartPole trials side by side on two cores: small actors, one collector each.
SMALL_TRIALS = ["collectors.num=1", "collectors.num_cpus=0.2", "learner.num_cpus=0.5", "env.num_envs=8",
                "eval.episodes=10", "checkpoint.every_epochs=1000"]


def test_a_pbt_exploit_carries_the_donors_replay_weights_and_env_steps_exactly(tmp_path, kept_up_ray, monkeypatch):
    import raypex

    for key, value in {"RAY_AUTH_MODE": "disabled"}.items():
        monkeypatch.setenv(key, value)
    outcome = raypex.tune("cartpole", ["learner.lr=loguniform(1e-3,3e-2)", "stop.eval_return=null",
                                       "stop.env_steps=16000", *SMALL_TRIALS],
                          samples=2, scheduler="pbt", report_every_epochs=2, perturb_every=2,
                          experiment_dir=tmp_path / "exp", address=kept_up_ray)
    assert outcome.interrupted is None and len(outcome.rows) == 2
    logs = [Path(row["run_dir"]) / "exploits.jsonl" for row in outcome.rows]
    records = [(log.parent, json.loads(line)) for log in logs if log.is_file() for line in log.read_text().splitlines()]
    assert records, "no exploit in the sweep"
    for run_dir, record in records:
        assert record["replay_carried"] and len(record["donor_replay"]) == 1
        # what the recipient's learner holds once restored, read back from it, is the donor's checkpoint
        assert record["restored_replay"] == record["donor_replay"]
        assert record["restored_weights"] == record["donor_weights"]
        assert record["resumed_env_steps"] == record["env_steps"] > 0
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["env_steps"] >= record["env_steps"] and summary["ended"] in ("env_steps", "solved")
        assert record["donor"] != run_dir.name
    # the exploit is visible in the recipient's TensorBoard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, record = records[0]
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    marks = [s.value for s in events.Scalars("tune/exploited_from_env_steps")]
    assert record["env_steps"] in marks
    assert (tmp_path / "exp" / "policy.pt2").is_file() and (tmp_path / "exp" / "results.json").is_file()


def test_the_donor_weights_digest_is_the_checkpoints_policy(tmp_path):
    """What `donor_weights` means: the policy network's arrays in the donor's checkpoint, the same
    digest the learner reports for the weights it restored (export_arrays of its policy)."""
    from raypex.cluster.sweep.trial import checkpoint_weights_digest
    from tests.test_learner import make_learner

    learner, _ = make_learner()
    learner.train_epoch()
    (tmp_path / "ckpt.pt").write_bytes(learner.state_bytes())
    assert checkpoint_weights_digest(tmp_path / "ckpt.pt") == content_digest(export_arrays(learner.step.policy))
    fresh, _ = make_learner(seed=3)
    assert checkpoint_weights_digest(tmp_path / "ckpt.pt") != content_digest(export_arrays(fresh.step.policy))


def test_ctrl_c_ends_every_trials_run_as_a_stop_and_resume_finishes_the_sweep(tmp_path, joining_environment):
    experiment = tmp_path / "exp"
    env = {**os.environ, **joining_environment, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "raypex", "tune", "cartpole", "learner.lr=choice([0.01,0.02])",
               "stop.eval_return=null", "stop.env_steps=6000", *SMALL_TRIALS, "--samples", "2",
               "--scheduler", "asha", "--experiment-dir", str(experiment), "--report-every", "2"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    seen = []
    for line in proc.stderr:  # the sweep's status line comes once trials have reported
        seen.append(line)
        if "trials:" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(seen) + err
    assert f"continue it with: raypex tune --resume {experiment}" in err
    started = [d for d in (experiment / "trials").iterdir() if (d / "progress.log").is_file()]
    assert started
    before = {}
    for run_dir in started:
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["ended"] == "interrupted", summary
        before[run_dir.name] = summary["env_steps"]
    resumed = subprocess.run([sys.executable, "-m", "raypex", "tune", "--resume", str(experiment)],
                             check=False, capture_output=True, text=True, env=env, timeout=400)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads((experiment / "results.json").read_text())
    assert len(results["trials"]) == 2 and results["interrupted"] is None
    for row in results["trials"]:
        assert row["ended"] in ("env_steps", "solved", "stopped by the sweep's scheduler"), row
        assert row["env_steps"] >= before.get(row["trial"], 0)
    assert "best: trial" in resumed.stdout and (experiment / "policy.pt2").is_file()
