"""A run directory at a URI, against a real S3-compatible server (moto's, as its own process on a
local port): `raypex train --run-dir s3://...` on a real Ray cluster writes its files there (each
shard's replay by the learner, the rest by the driver), `--resume` of the URI comes back with its
replay, and `raypex eval` of the URI evaluates its policy."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import raypex as raypex_api
from tests.s3_server import files_at, read_at, uri
from tests.test_address import free_port
from tests.test_integration import SHORT


def raypex(*args: str, env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raypex", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=cwd, check=False)


def test_a_run_directory_at_an_s3_uri_trains_resumes_with_its_replay_and_evaluates(
        s3_server, joining_environment, tmp_path):
    run = uri(s3_server, "runs/cartpole")
    trained = raypex("train", "--run-dir", run, *SHORT, "stop.env_steps=4000", "checkpoint.replay=true",
                     env=joining_environment, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    files = files_at(run)
    manifests = sorted(name for name in files if name.startswith("checkpoints/") and name.endswith(".json"))
    newest = json.loads(read_at(run, manifests[-1]))
    # every file the manifest names is there, the shards' replay written by the learner
    assert all(files[f"checkpoints/{part['file']}"] == part["bytes"] for part in newest["replay"]), (files, newest)
    assert len(newest["replay"]) == 2 and {"config.yaml", "summary.json", "policy.pt2"} <= set(files)
    assert any(name.startswith("tensorboard/") for name in files)
    assert not list(tmp_path.iterdir())  # nothing of the run in the working directory
    copy = Path(re.search(r"this driver its other files from a copy uploaded as it goes, (\S+),", trained.stderr)[1])
    assert not copy.exists()  # removed once everything in it was uploaded
    summary = json.loads(read_at(run, "summary.json"))
    resumed = raypex("train", "--resume", run, f"stop.env_steps={summary['env_steps'] + 3000}",
                     env=joining_environment, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    restored = [line for line in resumed.stderr.splitlines() if line.startswith("replay restored")]
    assert restored == [(f"replay restored from the checkpoint of epoch {newest['epochs']} "
                         f"({sum(summary['replay_inserted_per_shard'])} transitions inserted by then)")], \
        resumed.stderr[-3000:]
    evaluated = raypex("eval", run, "--episodes", "3", env={}, cwd=tmp_path)
    assert evaluated.returncode == 0 and evaluated.stdout.startswith("mean return "), evaluated.stderr
    assert raypex_api.load_policy(run).act([0.0, 0.0, 0.0, 0.0]).shape == ()


def test_a_uri_nothing_answers_at_is_one_line(tmp_path):
    done = raypex("train", "--run-dir", uri(f"127.0.0.1:{free_port()}", "runs/x") + "&connect_timeout=1",
                  "stop.env_steps=1000", env={"AWS_EC2_METADATA_DISABLED": "true"}, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("raypex: error: --run-dir s3://"), done.stderr
