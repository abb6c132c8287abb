"""A sweep whose experiment directory is a URI on moto's S3 server: Tune's state, the trial's run
directory and its learner's replay are kept there; Ctrl-C stops it and `--resume URI` finishes it
with the trial's replay fetched back; nothing is left in the working directory. (The PBT exploit
through a URI reads and writes the same files as a resume; tests/test_sweep.py holds PBT's own
checks, locally.) A file of its own, so `-n 2 --dist loadfile` can give it to the other worker."""

import json
import os
import signal
import subprocess
import sys

from raypex.cluster.storage import join, list_files, read_bytes
from tests.s3_server import uri

ONE_SMALL_TRIAL = ["collectors.num=1", "collectors.num_cpus=0.2", "learner.num_cpus=0.5", "env.num_envs=8",
                   "eval.episodes=5", "eval.every_env_steps=2000", "checkpoint.every_epochs=1000", "stop.eval_return=null",
                   "stop.env_steps=5000", "--samples", "1", "--report-every", "1"]


def test_a_sweep_at_an_s3_uri_stops_and_resumes_with_everything_kept_there(s3_server, tmp_path, joining_environment,
                                                                          monkeypatch):
    experiment = uri(s3_server, "runs/exp")
    monkeypatch.setenv("RAYPEX_KEY_FILE", str(tmp_path / "key"))
    env = {**os.environ, **joining_environment, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "raypex", "tune", "cartpole", "learner.lr=loguniform(1e-3,3e-2)",
               *ONE_SMALL_TRIAL, "--experiment-dir", experiment]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, cwd=tmp_path)
    seen = []
    for line in proc.stderr:  # the trial has reported: its run is training
        seen.append(line)
        if "trials: 1 running" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(seen) + err
    (trial,) = {name.split("/")[0] for name in list_files(join(experiment, "trials"))}
    run_dir = join(experiment, "trials", trial)
    assert json.loads(read_bytes(join(run_dir, "summary.json")))["ended"] == "interrupted"
    held = list_files(experiment)
    assert "tune.sig" in held and any(name.startswith("tune/") for name in held)
    assert any(name.startswith(f"trials/{trial}/checkpoints/") and name.endswith(".npz") for name in held)
    resumed = subprocess.run([sys.executable, "-m", "raypex", "tune", "--resume", experiment],
                             check=False, capture_output=True, text=True, env=env, timeout=400, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = json.loads(read_bytes(join(experiment, "results.json")))
    (row,) = results["trials"]
    assert row["ended"] == "env_steps" and row["env_steps"] >= 5000 and results["interrupted"] is None, row
    log = read_bytes(join(run_dir, "progress.log")).decode()
    assert "replay restored from the checkpoint" in log.split("interrupted: writing a final checkpoint")[-1], log
    assert "policy.pt2" in list_files(experiment)
    assert not list(tmp_path.glob("raypex-run-*")) and not (tmp_path / "runs").exists()  # nothing in the cwd
