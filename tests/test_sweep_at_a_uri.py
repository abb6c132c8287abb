"""A sweep whose experiment directory is a URI on moto's S3 server: Tune's state (signed), the
trial's run directory (its learner's replay too) and the sweep's results are kept there, and
nothing in the working directory. Stopping and resuming a sweep, and PBT's exploits, read and write
the same files through cluster/storage.py and are checked locally in tests/test_sweep.py. A file of
its own, so `-n 2 --dist loadfile` can give it to the other worker."""

import json
import os
import subprocess
import sys

from raypex.cluster.storage import join, list_files, read_bytes
from tests.s3_server import uri

ONE_SMALL_TRIAL = ["collectors.num=1", "collectors.num_cpus=0.2", "learner.num_cpus=0.5", "env.num_envs=8",
                   "eval.episodes=5", "eval.every_env_steps=2000", "stop.eval_return=null", "stop.env_steps=3000",
                   "checkpoint.replay=true", "--samples", "1", "--report-every", "1"]


def test_a_sweep_at_an_s3_uri_keeps_everything_there(s3_server, tmp_path, joining_environment,
                                                                        monkeypatch):
    experiment = uri(s3_server, "runs/exp")
    monkeypatch.setenv("RAYPEX_KEY_FILE", str(tmp_path / "key"))
    env = {**os.environ, **joining_environment}
    swept = subprocess.run([sys.executable, "-m", "raypex", "tune", "cartpole", "learner.lr=loguniform(1e-3,3e-2)",
                            *ONE_SMALL_TRIAL, "--experiment-dir", experiment],
                           check=False, capture_output=True, text=True, env=env, timeout=400, cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    held = list_files(experiment)
    (trial,) = {name.split("/")[1] for name in held if name.startswith("trials/")}
    assert {"sweep.json", "results.json", "policy.pt2", "tune.sig"} <= set(held)
    assert any(name.startswith("tune/") for name in held)
    assert {f"trials/{trial}/{name}" for name in ("summary.json", "progress.log", "policy.pt2")} <= set(held)
    assert any(name.startswith(f"trials/{trial}/checkpoints/") and name.endswith(".npz") for name in held)
    (row,) = json.loads(read_bytes(join(experiment, "results.json")))["trials"]
    assert row["ended"] == "env_steps" and row["env_steps"] >= 3000, row
    assert set(os.listdir(tmp_path)) <= {"key"}  # nothing of the sweep in the working directory
    # the line naming the best trial says how to evaluate it, and that command works
    (best,) = [line for line in swept.stdout.splitlines() if line.startswith("best: trial")]
    command = best.split("evaluate it with: ")[1].split(" (")[0]
    assert command == f"raypex eval {row['run_dir']}"
    evaluated = subprocess.run([sys.executable, "-m", "raypex", "eval", row["run_dir"], "--episodes", "3"],
                               check=False, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert evaluated.returncode == 0 and evaluated.stdout.startswith("mean return"), evaluated.stderr
