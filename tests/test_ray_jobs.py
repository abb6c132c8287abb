"""`ray job submit -- raypex train ...` against a head started the way a user starts one
(`ray start --head` with RAY_AUTH_MODE=token, token authentication on): the job trains on that
cluster (not on a local one nested inside the job), with the user's own env file from the job's
working directory, streams its progress, and `ray job stop` takes the clean stop path (final
checkpoint, summary)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.polling import until
from tests.test_address import free_port
from tests.test_integration import SHORT
from tests.test_separate_hosts import MY_CARTPOLE

RAY = [sys.executable, "-m", "ray.scripts.scripts"]


@pytest.fixture(scope="module")
def head():
    """A Ray head with its job server, started by `ray start --head` once for this file's tests
    (each leaves it as it found it: its runs and jobs end); yields its dashboard URL, a job client
    and its GCS address."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield from _head(monkeypatch)
    _reread_ray_config()  # RAY_AUTH_MODE as it was


def _reread_ray_config() -> None:
    """This process's Ray reads RAY_AUTH_MODE once, at its first use (or at a ray.init): read it
    again, so that the job client and `ray.util.state` here speak as the variable now says."""
    from ray._raylet import Config

    Config.initialize("")


def _head(monkeypatch):
    port, dashboard = free_port(), free_port()
    # Ray's job supervisor gives each job's entrypoint the address in <temp dir>/ray_current_cluster,
    # which every `ray start` on the machine overwrites: with the shared /tmp/ray, a job submitted
    # here joined the kept-up cluster another pytest worker had started since, and found its CPUs
    # taken (CI at 079c5bb). A temp dir of its own holds this head's address alone.
    ray_temp = tempfile.mkdtemp(prefix="ray-jobs-")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # what a user sets to reach a token cluster
    # as README advises: `ray job stop` then waits for the final files (its 3 s default did not
    # cover a CartPole run's policy.pt2 export on a slower 2-core box: 3.1 s there)
    monkeypatch.setenv("RAY_JOB_STOP_WAIT_TIME_S", "60")
    # the job's entrypoint finds `raypex` on the PATH the head was started with
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    _reread_ray_config()
    # the dashboard agent on a free port too: on Ray's fixed default (52365) it could not start beside
    # another Ray cluster on this machine, and every submission then failed with "No available agent"
    proc = subprocess.Popen([*RAY, "start", "--head", f"--port={port}", f"--dashboard-port={dashboard}",
                             f"--dashboard-agent-listen-port={free_port()}", "--dashboard-host=127.0.0.1",
                             f"--temp-dir={ray_temp}", "--num-cpus=2", "--disable-usage-stats", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{dashboard}"
    try:
        from ray.job_submission import JobSubmissionClient

        def client():
            try:
                return JobSubmissionClient(url)
            except (ConnectionError, RuntimeError):
                return None

        yield url, until(client, 60, "job server"), f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(ray_temp, ignore_errors=True)


def test_a_job_trains_on_the_cluster_it_was_submitted_to_and_ray_job_stop_checkpoints(tmp_path, head):
    url, client, _ = head
    from ray.job_submission import JobStatus
    from ray.util.state import list_nodes

    # the user's own env, in the directory the job ships (`--working-dir`), registered nowhere
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_cartpole.py").write_text(MY_CARTPOLE)
    done = subprocess.run([*RAY, "job", "submit", "--address", url, "--working-dir", str(code), "--", "raypex",
                           "train", "cartpole", "env.id=my_cartpole:make", "--run-dir", str(tmp_path / "job"),
                           "stop.env_steps=6000", *SHORT],
                          check=False, capture_output=True, text=True, timeout=300)
    logs = done.stdout + done.stderr
    assert done.returncode == 0 and "succeeded" in logs, logs
    assert "inside a Ray job: joining its cluster" in logs and "env steps" in logs, logs  # progress streamed
    head_nodes = {node.node_id for node in list_nodes(address=url)}
    placement = json.loads((tmp_path / "job" / "placement.json").read_text())
    assert len(head_nodes) == 1 and placement["learner_node"] in head_nodes  # not a nested local cluster
    assert json.loads((tmp_path / "job" / "summary.json").read_text())["env_steps"] >= 6000

    # `ray job stop` sends SIGTERM (then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S: 3 s by default, 60 here)
    run = tmp_path / "stopped"
    job = client.submit_job(entrypoint=f"raypex train cartpole --run-dir {run} stop.env_steps=100000000 "
                            + " ".join(SHORT))
    until(lambda: "env steps" in client.get_job_logs(job), 120, "progress line in the job's logs",
           shown=lambda: client.get_job_logs(job))
    client.stop_job(job)
    until(lambda: client.get_job_status(job) in (JobStatus.STOPPED, JobStatus.FAILED), 60, "stopped job")
    logs = client.get_job_logs(job)
    assert "SIGTERM: writing a final checkpoint" in logs and "done:" in logs, logs
    result = json.loads((run / "summary.json").read_text())
    final = json.loads(max((run / "checkpoints").glob("ckpt-*.json")).read_text())
    assert result["ended"] == "terminated" and final["env_steps"] == result["env_steps"], (result, final)
    assert os.path.isfile(run / "policy.pt2")


def test_a_token_cluster_without_the_token_is_one_line_at_once(tmp_path, head):
    """Joined without the token: one line naming RAY_AUTH_MODE=token, within seconds, nothing
    written. (With the token a run joins and trains: tests/test_separate_hosts.py, whose hosts
    run with token authentication.)"""
    _, _, address = head
    command = [sys.executable, "-m", "raypex", "train", "--address", address]
    started = time.monotonic()
    refused = subprocess.run([*command, "--run-dir", str(tmp_path / "refused")], check=False, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    took = time.monotonic() - started
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "uses token authentication" in lines[0] and "RAY_AUTH_MODE=token" in lines[0], lines
    assert took < 10, took
    assert not (tmp_path / "refused").exists()
    # RAY_AUTH_MODE=token with no token anywhere (Ray's join refused it in a paragraph)
    no_token = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    refused = subprocess.run([*command, "--run-dir", str(tmp_path / "no-token")], check=False, capture_output=True,
                             text=True, timeout=60, env={**no_token, "RAY_AUTH_MODE": "token", "HOME": str(tmp_path)})
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"raypex: error: --address {address}: RAY_AUTH_MODE=token is set, but there is no token to send; copy the "
        "head's ~/.ray/auth_token here, or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH"], refused.stderr
    assert not (tmp_path / "no-token").exists()
