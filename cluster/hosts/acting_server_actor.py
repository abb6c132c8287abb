"""ActingServerActor: the Ray shell of a node's acting server (actors/served_acting.py), which
answers its node's collectors over Unix sockets (actors/acting_line.py) on a thread of its own;
and WeightsToServer, a collector's way to hand it weights.

Requests and answers do not go through Ray: an actor call costs about 3.5 ms here, a socket round
trip 24 us. Only weights do, once per version: a collector whose request the server cannot answer
yet (a new version, or a server Ray restarted) sends the ref of the Weights it received, and the
server fetches them from the object store.
"""

from __future__ import annotations

import os
import threading
import time

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from raypex.actors.acting_line import LineServer
from raypex.actors.served_acting import ActingServer
from raypex.actors.settings import CollectorSettings

_RETRY_S = 0.05  # between tries at a server Ray is restarting


class ActingServerActor:
    """One node's acting server: its socket at `path`, one forward per batch of waiting requests."""

    def __init__(self, path: str, settings: CollectorSettings, device: str = "cpu"):
        """`device`: cpu (the acting graph in ONNX Runtime) or cuda (the plug-in's module on the
        GPU Ray gave this actor, built from a collector's `settings`: actors/torch_serving.py)."""
        forward = None
        if device == "cuda":
            from raypex.actors.torch_serving import TorchForward

            forward = TorchForward(settings, device)
        self.server = ActingServer(forward)
        self.line = LineServer(self.server, path)
        threading.Thread(target=self.line.serve_forever, name="acting-line", daemon=True).start()

    def take(self, weights_in_list: list) -> int:
        """Act with the announced Weights (a ref in a list, fetched here) when newer; the version it acts with."""
        self.server.take(ray.get(weights_in_list[0]))
        return self.server.version

    def counts(self) -> dict:
        """Forwards run and requests answered (requests per forward: the batching it achieved)."""
        return {"forwards": self.server.forwards, "requests": self.server.requests}

    def pid(self) -> int:
        """This actor's process id (fault tests kill it)."""
        return os.getpid()


class WeightsToServer:
    """A collector's way to give its node's server the newest Weights it received (their ref): a
    server Ray is restarting is waited for up to `come_back_s`."""

    def __init__(self, server_name: str, come_back_s: float, newest_weights_ref):
        self.server_name, self.come_back_s = server_name, come_back_s
        self.newest_weights_ref = newest_weights_ref  # () -> the ref of the newest Weights this collector received
        self._server = None

    def __call__(self, weights) -> None:
        deadline = time.monotonic() + self.come_back_s
        while True:
            try:
                if self._server is None:
                    self._server = ray.get_actor(self.server_name)
                ray.get(self._server.take.remote([self.newest_weights_ref()]))
                return
            except (ActorUnavailableError, RayActorError, ValueError):
                # a call in flight when the process died fails even when Ray restarts it: only time says
                if time.monotonic() > deadline:
                    raise
                time.sleep(_RETRY_S)
