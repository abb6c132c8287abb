"""`--address` checks before Ray joins a cluster (no Ray here: plain sockets stand in for the
wrong things a user may point raypex at; tests/test_integration.py joins real clusters)."""

import re
import socket
import threading

import pytest

from raypex.cluster.commands.cli import main
from raypex.cluster.ray_runtime.address import (
    ADDRESS_VARIABLE,
    JOB_VARIABLE,
    ConnectError,
    check_gcs_port,
    has_token,
    host_port,
    join_failed,
    kept_up_address,
    ray_job_address,
)


def test_addresses_ray_resolves_itself_pass_and_malformed_ones_are_named():
    assert host_port("auto") is None and host_port("ray://head:10001") is None
    assert host_port("10.0.0.5:6379") == ("10.0.0.5", 6379)
    for bad in ("10.0.0.5", "head:", ":6379", "head:port", "head:70000"):
        with pytest.raises(ConnectError, match=f"--address {bad}: expected HOST:PORT"):
            host_port(bad)


def free_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(answer: bytes | None):
    """A server socket on a free local port that answers each connection with `answer` (None:
    accepts and never answers); returns (address, close)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.recv(64)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()

    def close():
        server.close()
        for conn in held:
            conn.close()

    return f"127.0.0.1:{server.getsockname()[1]}", close


def test_nothing_listening_is_said_at_once():
    with pytest.raises(ConnectError, match="nothing listens there"):
        check_gcs_port(f"127.0.0.1:{free_port()}")


def test_a_server_that_is_not_a_gcs_is_named():
    address, close = _listening(b"HTTP/1.1 400 Bad Request\r\n\r\n")  # a dashboard or job server port
    try:
        with pytest.raises(ConnectError, match="something answers there, but not a Ray GCS"):
            check_gcs_port(address)
    finally:
        close()


def test_a_silent_server_times_out_and_an_http2_server_passes():
    address, close = _listening(None)
    try:
        with pytest.raises(ConnectError, match="no answer within 0.3s"):
            check_gcs_port(address, timeout_s=0.3)
    finally:
        close()
    address, close = _listening(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an HTTP/2 SETTINGS frame, as gRPC sends
    try:
        check_gcs_port(address)
    finally:
        close()


def test_train_with_an_address_where_nothing_listens_is_one_line_and_exit_2(tmp_path, capsys):
    port = free_port()
    run = tmp_path / "nowhere"
    assert main(["train", "--address", f"127.0.0.1:{port}", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    said = (f"raypex: error: --address 127.0.0.1:{port}: nothing listens there (connection refused); "
            "start the head with `ray start --head --port PORT` and pass its HOST:PORT")
    assert err == [said]
    assert not run.exists()


def test_raypex_address_is_the_default_address_and_a_wrong_one_is_named(tmp_path, capsys, monkeypatch):
    assert kept_up_address({}) is None and kept_up_address({ADDRESS_VARIABLE: " "}) is None
    assert kept_up_address({ADDRESS_VARIABLE: "10.0.0.5:6379", "RAY_ADDRESS": "10.0.0.6:6379"}) == "10.0.0.5:6379"
    port = free_port()
    monkeypatch.setenv(ADDRESS_VARIABLE, f"127.0.0.1:{port}")
    run = tmp_path / "nowhere"
    assert main(["train", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"raypex: error: --address 127.0.0.1:{port}: nothing listens there (connection refused); "
                       "start the head with `ray start --head --port PORT` and pass its HOST:PORT "
                       "(RAYPEX_ADDRESS in the environment)"), err
    assert not run.exists()


def test_inside_a_ray_job_the_jobs_cluster_is_joined_outside_none_is_chosen():
    assert ray_job_address({}) is None  # no --address outside a job: a fresh local cluster
    assert ray_job_address({"RAY_ADDRESS": "10.0.0.5:6379"}) is None  # RAY_ADDRESS alone does not capture a run
    assert ray_job_address({JOB_VARIABLE: "{}", "RAY_ADDRESS": "10.0.0.5:6379"}) == "10.0.0.5:6379"
    assert ray_job_address({JOB_VARIABLE: "{}"}) == "auto"


def test_a_ray_version_mismatch_is_one_line_with_both_versions():
    """Ray puts the versions on the lines after "Version mismatch: ..."; all of it is kept, on one line."""
    ray_says = RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 2.51.0\n    Python: 3.11.2\n"
                            "This process on node 10.0.0.7 was started with:\n    Ray: 2.52.1\n    Python: 3.11.2\n")
    line = str(join_failed("10.0.0.5:6379", ray_says, token_mode=True))
    assert "\n" not in line and "Ray: 2.51.0" in line and "Ray: 2.52.1" in line, line
    assert line.endswith("install the cluster's Ray and Python versions on this machine")
    other = str(join_failed("10.0.0.5:6379", ConnectionError("refused\nmore"), token_mode=False))
    assert "(refused more)" in other and "RAY_AUTH_MODE=token" in other


def test_a_local_cluster_ray_gives_up_starting_is_one_line_naming_the_load_and_leaves_no_run_dir(tmp_path, capsys,
                                                                                                 monkeypatch):
    """Ray gives a local node's raylet a fixed 30 s to register; on a busy machine it raises a bare
    Exception with a traceback. That failure (injected here: a busy machine is not a fixture) is one
    line, exit 2, and the run directory is taken back."""
    import ray

    from raypex.cluster.ray_runtime import wiring

    said = ("The current node timed out during startup. This could happen because some of the raylet failed to "
            "startup or the GCS has become overloaded.")

    def timed_out(*args, **kwargs):
        raise Exception(said)  # noqa: TRY002 - the bare Exception Ray raises

    monkeypatch.setattr(ray, "init", timed_out)
    monkeypatch.setattr(wiring, "start_reaper", lambda: None)  # no cluster to watch
    run = tmp_path / "busy"
    assert main(["train", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(
        r"raypex: error: Ray's local cluster did not start: its raylet had not registered within Ray's 30 s "
        r"\(load average \d+\.\d on \d+ cores\); try again once the machine is less busy, or join a running "
        r"cluster with --address", err[0]), err
    assert not run.exists()


def test_a_token_client_against_a_cluster_without_tokens_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch,
                                                                                      kept_up_ray):
    """RAY_AUTH_MODE=token against a cluster started without it: Ray joins, then cancels every actor
    the run asks for ("Actor creation cancelled", exit 1, a run directory with a 0-step summary and
    a --resume suggested that fails). Said before the join instead: one line, exit 2, nothing
    written. So is RAY_AUTH_MODE=token with no token to send."""
    run = tmp_path / "run"
    token = tmp_path / "auth_token"
    token.write_text("0" * 32)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    assert main(["train", "--address", kept_up_ray, "--run-dir", str(run)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"raypex: error: --address {kept_up_ray}: RAY_AUTH_MODE=token is set here, but the cluster does not use token "
        "authentication (it answers calls without one); unset RAY_AUTH_MODE, or start the cluster with "
        "RAY_AUTH_MODE=token"]
    assert not run.exists()
    token.unlink()
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token either
    assert not has_token()
    assert has_token({"RAY_AUTH_TOKEN": "abc"}) and not has_token({"RAY_AUTH_TOKEN_PATH": str(token)})
