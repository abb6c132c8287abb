"""Checks on `--address` before Ray is asked to join a cluster, so that a wrong address is one line
within seconds: Ray's own join retries for about a minute, printing GCS warnings, when nothing or
the wrong thing answers there.

- nothing listens at HOST:PORT (refused), or nobody answers (timeout): said at once;
- something answers that does not speak HTTP/2, as a Ray GCS (gRPC) does (a dashboard or job
  server port, say): said at once, with where the GCS port comes from;
- the GCS wants a token (a cluster started with RAY_AUTH_MODE=token) and this process is not set
  up to send one: said after one refused call, with the variables to set (Ray's own join retries
  for about 20 s first);
- this process is set up to send a token (RAY_AUTH_MODE=token) and the GCS answers without one:
  Ray 2.60 joins, then every actor the run asks for is cancelled ("Actor creation cancelled"), so
  it is said before the join; and RAY_AUTH_MODE=token with no token to send, which Ray's join
  refuses in a paragraph.
Turning token authentication on whenever a token file exists on this machine was tried and not
kept: against a cluster started without it, the run's workers died at once.
"""

from __future__ import annotations

import os
import socket

CONNECT_TIMEOUT_S = 3.0
# The default for --address, for a cluster kept up between runs (`ray start --head` once, then
# every run joins it and skips a local cluster's start). Ray's own RAY_ADDRESS is not followed:
# a `ray start` left running, or a variable exported for another tool, must not capture a run.
ADDRESS_VARIABLE = "RAYPEX_ADDRESS"
# Set by Ray's job supervisor in the environment of a job's entrypoint (with RAY_ADDRESS, the
# cluster's GCS address): `ray job submit -- raypex train ...` runs raypex inside a job.
JOB_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"
# An HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server answers with its own
# SETTINGS frame (frame type 4 in the 4th byte of the 9-byte frame header).
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4


class ConnectError(Exception):
    """The Ray cluster at --address cannot be reached (one-line message)."""


def ray_job_address(environ=os.environ) -> str | None:
    """The address of the cluster when this process is a Ray job's entrypoint, else None: a job
    joins the cluster it was submitted to, where outside one no --address means a local cluster."""
    if JOB_VARIABLE not in environ:
        return None
    return environ.get("RAY_ADDRESS") or "auto"


def kept_up_address(environ=os.environ) -> str | None:
    """RAYPEX_ADDRESS when it is set and not empty, else None."""
    return environ.get(ADDRESS_VARIABLE, "").strip() or None


def connect_error_line(err: Exception, from_variable: bool) -> str:
    """The one line for an address that does not answer: naming RAYPEX_ADDRESS when the address
    came from it, as the user typed no --address to look for."""
    return f"{err} ({ADDRESS_VARIABLE} in the environment)" if from_variable else str(err)


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a HOST:PORT address; None for what Ray resolves itself ("auto", ray://)."""
    if address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConnectError(f"--address {address}: expected HOST:PORT of the Ray head's GCS (e.g. 10.0.0.5:6379) "
                           "or auto")
    return host, int(port)


def check_gcs_port(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ConnectError unless a gRPC server answers at `address` within `timeout_s`."""
    target = host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s) as sock:
            sock.sendall(_HTTP2_HELLO)
            reply = b""
            while len(reply) < 4 and (more := sock.recv(9 - len(reply))):
                reply += more
    except ConnectionRefusedError:
        raise ConnectError(f"--address {address}: nothing listens there (connection refused); start the head "
                           "with `ray start --head --port PORT` and pass its HOST:PORT") from None
    except TimeoutError:
        raise ConnectError(f"--address {address}: no answer within {timeout_s:g}s (host down, or a firewall)") from None
    except OSError as err:
        raise ConnectError(f"--address {address}: cannot connect ({err.strerror or err})") from None
    if len(reply) < 4 or reply[3] != _SETTINGS_FRAME:
        raise ConnectError(f"--address {address}: something answers there, but not a Ray GCS; use the port "
                           "`ray start --head` printed (6379 unless --port was given), not the dashboard's")


TOKEN_HINT = ("set RAY_AUTH_MODE=token with the head's token in ~/.ray/auth_token, RAY_AUTH_TOKEN or "
              "RAY_AUTH_TOKEN_PATH")
TOKEN_FILE = "~/.ray/auth_token"  # where `ray get-auth-token --generate` writes one, and Ray looks last


def has_token(environ=os.environ) -> bool:
    """Whether Ray would find a token to send: RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names,
    or ~/.ray/auth_token."""
    if environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser(TOKEN_FILE)
    return os.path.isfile(path)


def _refuses_without_token(target: tuple[str, int], timeout_s: float) -> bool:
    """Whether the GCS at `target` refuses a call that carries no token."""
    import grpc  # Ray's own dependency

    with grpc.insecure_channel(f"{target[0]}:{target[1]}") as channel:
        # an empty request is a valid message of every type: the call needs no Ray protobufs
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId",
                                   request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)
        try:
            call(b"", timeout=timeout_s)
        except grpc.RpcError as err:
            return err.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def check_gcs_auth(address: str, timeout_s: float = CONNECT_TIMEOUT_S, environ=os.environ) -> None:
    """Raise ConnectError when this process and the GCS at `address` disagree on token
    authentication (see the module docstring), or this process would send a token it lacks."""
    target = host_port(address)
    if target is None:
        return
    token_mode = environ.get("RAY_AUTH_MODE", "").lower() == "token"
    refuses = _refuses_without_token(target, timeout_s)
    if refuses and not token_mode:
        raise ConnectError(f"--address {address}: the cluster uses token authentication (it was started with "
                           f"RAY_AUTH_MODE=token); {TOKEN_HINT}")
    if token_mode and not refuses:
        raise ConnectError(f"--address {address}: RAY_AUTH_MODE=token is set here, but the cluster does not use token "
                           "authentication (it answers calls without one); unset RAY_AUTH_MODE, or start the cluster "
                           "with RAY_AUTH_MODE=token")
    if token_mode and not has_token(environ):
        raise ConnectError(f"--address {address}: RAY_AUTH_MODE=token is set, but there is no token to send; copy the "
                           f"head's {TOKEN_FILE} here, or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")


def join_failed(address: str, err: Exception, token_mode: bool) -> ConnectError:
    """One line for Ray's refusal to join `address`: Ray's whole message on one line (a version
    mismatch puts the versions on the lines after its first), and what to do about it."""
    reason = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    if reason.startswith("Version mismatch"):
        hint = "; install the cluster's Ray and Python versions on this machine"
    elif not token_mode:
        hint = f"; if the cluster uses token authentication (started with RAY_AUTH_MODE=token), {TOKEN_HINT}"
    else:
        hint = ""
    return ConnectError(f"--address {address}: cannot connect to a Ray cluster ({reason}){hint}")
