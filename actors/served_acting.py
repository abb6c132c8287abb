"""Served acting (`collectors.acting: served`): one acting server per node runs the acting graph
for every collector on that node, one forward for all the requests waiting, instead of one forward
per collector.

Only the network's forward is served. Exploration stays in each collector's policy (its epsilon,
its noise, its random stream, each env's recurrent state), so a served policy chooses the actions
a local one would for the same weights, observations and random stream: the policy holds a
ServedForward where it would hold a GraphForward (actors/onnx_acting.py), with the same interface.

The server learns of each weights version from the requests: each carries the version its
collector acts with, a server without weights as new answers NEEDS_WEIGHTS, and the collector then
hands them over (ServedForward.run). So a restarted server, which starts with none, needs nothing
resent. No Ray here: requests cross processes over the node's socket (actors/acting_line.py), and
the local runtime calls the server in process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from raypex.actors.onnx_acting import GraphForward
from raypex.replay.contracts import Weights, fields

NEEDS_WEIGHTS = "needs weights"  # the server's answer when it has no weights as new as the request's


def static_rows(rows: int) -> int:
    """The batch size a forward over `rows` rows runs at: the next power of two, so that a server
    sees a handful of shapes (each one a graph a GPU can capture) however its requests come."""
    return 1 << max(0, rows - 1).bit_length()


class ActingServer:
    """The acting graph of the newest weights it was given, run over several requests at once."""

    def __init__(self, forward=None):
        """`forward`: what runs the network (by default the acting graph in ONNX Runtime on this
        process's CPU; on a GPU, actors/torch_serving.py's TorchForward)."""
        self.forward = forward or GraphForward()
        self.version = -1
        self.forwards = 0  # forward passes run
        self.requests = 0  # requests answered (requests / forwards: how many each forward served)
        self._lock = threading.Lock()  # a host may take weights on one thread while another runs forwards

    def take(self, weights: Weights) -> None:
        """Act with `weights` from now on, when newer than those it has."""
        with self._lock:
            if weights.version > self.version:
                self.forward.load(weights)
                self.version = weights.version

    def run(self, requests: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """Each request's outputs (the graph's, in order), from one forward over every request's
        rows, padded with zeros to `static_rows`."""
        sizes = [len(next(iter(request.values()))) for request in requests]
        rows = sum(sizes)
        padded = static_rows(rows)
        data = {}
        for name in requests[0]:
            parts = [request[name] for request in requests]
            if padded > rows:
                parts.append(np.zeros((padded - rows, *parts[0].shape[1:]), parts[0].dtype))
            data[name] = np.concatenate(parts) if len(parts) > 1 else parts[0]
        with self._lock:
            outputs = self.forward.run(**data)
        self.forwards += 1
        self.requests += len(requests)
        cuts = np.cumsum(sizes)[:-1]
        return [list(parts) for parts in zip(*(np.split(output[:rows], cuts) for output in outputs))]


# A request from a collector to its server: (data, the newest weights version it took) -> the
# graph's outputs for its rows, or NEEDS_WEIGHTS
Serve = Callable[[dict[str, np.ndarray], int], "list[np.ndarray] | str"]


class ServedForward:
    """GraphForward's interface for a collector's policy, its forward run by the node's server.

    `serve` carries one request to the server and back; `send_weights` gives the server the
    newest weights this collector took (the host sends what it received, not the arrays again)."""

    form = "onnx, served"

    def __init__(self, serve: Serve, send_weights: Callable[[Weights], None]):
        self.serve, self.send_weights = serve, send_weights
        self.weights: Weights | None = None

    @property
    def loaded(self) -> bool:
        return self.weights is not None

    def load(self, weights: Weights) -> None:
        """Act with these weights from the next call on: the server gets them with that call."""
        self.weights = weights

    def run(self, **data: np.ndarray | dict[str, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs for these rows, computed by the server with weights at least as new
        as this collector's (observations in parts travel as one array per part: `obs.<key>`)."""
        data = {field: array for name, value in data.items() for field, array in fields(name, value).items()}
        outputs = self.serve(data, self.weights.version)
        # A server that has not seen this version, or a new process: Ray may restart the server
        # between it taking the weights and the next request, so hand them over until it answers.
        # Each round is one weights call and one request, each waiting for a restarting server
        # no longer than the collector's come-back time.
        while isinstance(outputs, str):
            self.send_weights(self.weights)
            outputs = self.serve(data, self.weights.version)
        return outputs


def served_in_process(server: ActingServer) -> ServedForward:
    """A collector's line to a server in its own process (the local runtime's, whose collectors
    take turns: one request per forward)."""

    def serve(data: dict[str, np.ndarray], version: int) -> list[np.ndarray] | str:
        return NEEDS_WEIGHTS if server.version < version else server.run([data])[0]

    return ServedForward(serve, server.take)
