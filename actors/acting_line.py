"""The line between collectors and their node's acting server (actors/served_acting.py): a Unix
domain socket per collector, each request and each answer one message, its arrays' bytes as they
are in memory.

Why not a Ray actor call: one costs about 3.5 ms here, round trip, where the forward it carries
takes 20-130 us, so served CartPole collected 9k env steps/s against 90k acting locally. A Unix
socket's round trip with CartPole's observations is 24 us (49 us with MinAtar's 25 kB). The
socket lives on the node (collectors and their server are on one node by construction).

A message is a length, then int64 words: a tag (a weights version in a request; OK,
NEEDS_WEIGHTS_TAG or FAILED_TAG in an answer), the number of arrays, and per array its name's code, dtype code,
rank and shape (a request's arrays are named by their place in DATA_INPUTS, an answer's by their
place among the graph's outputs); then each array's bytes. `LineServer.serve_forever` answers every request that
is waiting with one forward.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import tempfile
import time

import numpy as np

from raypex.actors.onnx_acting import DATA_INPUTS
from raypex.actors.served_acting import NEEDS_WEIGHTS, ActingServer

DTYPES = (np.float32, np.float64, np.uint8, np.int64, np.int32, np.bool_)
OK, NEEDS_WEIGHTS_TAG, FAILED_TAG = 0, -1, -2  # FAILED: the forward raised; the answer holds its error line
_LENGTH = 8
_RETRY_S = 0.05  # between tries at a server that is being restarted


class ActingServerError(RuntimeError):
    """The server's forward raised on a request (its error, said to the collector that sent it)."""


def encode(tag: int, named: list[tuple[int, np.ndarray]]) -> bytes:
    """One message: its length and header words, then each array's bytes."""
    words = [tag, len(named)]
    arrays = []
    for code, array in named:
        array = np.ascontiguousarray(array)
        words += [code, DTYPES.index(array.dtype.type), array.ndim, *array.shape]
        arrays.append(array)
    header = np.array(words, np.int64).tobytes()
    length = len(header) + sum(a.nbytes for a in arrays)
    return b"".join([length.to_bytes(_LENGTH, "little"), header, *(memoryview(a).cast("B") for a in arrays)])


def decode(payload: memoryview) -> tuple[int, list[tuple[int, np.ndarray]]]:
    """(tag, [(name code, array)]) of a message's payload; the arrays are copies."""
    def word(index: int) -> int:
        return int.from_bytes(payload[8 * index:8 * index + 8], "little", signed=True)

    tag, count = word(0), word(1)
    at, shapes = 2, []
    for _ in range(count):
        code, dtype, ndim = word(at), word(at + 1), word(at + 2)
        shapes.append((code, DTYPES[dtype], tuple(word(at + 3 + d) for d in range(ndim))))
        at += 3 + ndim
    offset, named = at * 8, []
    for code, dtype, shape in shapes:
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        named.append((code, np.frombuffer(payload[offset:offset + size], dtype).reshape(shape).copy()))
        offset += size
    return tag, named


def receive(sock: socket.socket, buffer: bytearray) -> memoryview | None:
    """One message's payload (a view of `buffer`, grown to fit), or None at the end of the stream."""
    head = _read_exactly(sock, bytearray(_LENGTH), _LENGTH)
    if head is None:
        return None
    length = int.from_bytes(head, "little")
    if len(buffer) < length:
        buffer.extend(bytes(length - len(buffer)))
    if _read_exactly(sock, buffer, length) is None:
        return None
    return memoryview(buffer)[:length]


def _read_exactly(sock: socket.socket, buffer: bytearray, size: int) -> bytearray | None:
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:size])
        if n == 0:
            return None
        got += n
    return buffer


def socket_address(name: str) -> str:
    """Where a server named `name` listens: on Linux in the abstract namespace (no file to leave
    behind when a process dies, and a restarted server takes the name again), elsewhere a file in
    the temporary directory."""
    if sys.platform == "linux":
        return "\0" + name
    return os.path.join(tempfile.gettempdir(), f"{name}.sock")


class LineServer:
    """Listens at `path`; answers each waiting request with the server's forward over all of them."""

    def __init__(self, server: ActingServer, path: str):
        self.server, self.path = server, path
        if not path.startswith("\0") and os.path.exists(path):  # a previous process's (Ray restarted this server)
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.listener.setblocking(False)  # accept every waiting collector, then go on
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.buffers: dict[socket.socket, bytearray] = {}
        self.stopped = False
        self._serving = False

    def serve_forever(self) -> None:
        """Serve until `close` (its thread then lets go of every socket)."""
        self._serving = True
        try:
            while not self.stopped:
                self.serve_once(timeout=0.5)
        finally:
            self._release()

    def serve_once(self, timeout: float | None = None) -> None:
        """Take the collectors that connected, then answer every request that is waiting (one forward)."""
        waiting = []
        for key, _ in self.selector.select(timeout=timeout):
            if key.fileobj is self.listener:
                self._accept()
                continue
            request = self._read(key.fileobj)
            if request is not None:
                waiting.append((key.fileobj, *request))
        if waiting:
            self._answer(waiting)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except BlockingIOError:
                return
            connection.setblocking(True)
            self.selector.register(connection, selectors.EVENT_READ)
            self.buffers[connection] = bytearray(1 << 16)

    def _read(self, sock: socket.socket):
        try:
            payload = receive(sock, self.buffers[sock])
        except OSError:
            payload = None
        if payload is None:  # the collector's end closed (it restarted, or the run ends)
            self.selector.unregister(sock)
            del self.buffers[sock]
            sock.close()
            return None
        version, named = decode(payload)
        return version, {DATA_INPUTS[code]: array for code, array in named}

    def _answer(self, waiting: list) -> None:
        have = self.server.version  # read once: a collector may hand the server newer weights meanwhile
        current = [(sock, data) for sock, version, data in waiting if version <= have]
        for sock, version, _ in waiting:
            if version > have:
                self._send(sock, encode(NEEDS_WEIGHTS_TAG, []))
        if not current:
            return
        try:
            outputs = self.server.run([data for _, data in current])
        except Exception as err:  # noqa: BLE001 - each collector gets the error to raise, the server serves on
            line = np.frombuffer(f"{type(err).__name__}: {err}".encode()[:2000], np.uint8)
            for sock, _ in current:
                self._send(sock, encode(FAILED_TAG, [(0, line)]))
            return
        for (sock, _), rows in zip(current, outputs):
            self._send(sock, encode(OK, list(enumerate(rows))))

    @staticmethod
    def _send(sock: socket.socket, message: bytes) -> None:
        try:
            sock.sendall(message)
        except OSError:
            pass  # the collector went away; its end is closed when the selector next reads it

    def close(self) -> None:
        """Stop serving: the collectors' ends see theirs closed, as when the process dies."""
        self.stopped = True
        if not self._serving:
            self._release()

    def _release(self) -> None:
        for sock in list(self.buffers):
            sock.close()
        self.buffers.clear()
        self.selector.close()
        self.listener.close()
        if not self.path.startswith("\0") and os.path.exists(self.path):
            os.unlink(self.path)


class LineClient:
    """A collector's end of the line: `serve` as ServedForward takes it. A server that is being
    restarted is waited for up to `come_back_s` (the request is sent again to the new process)."""

    def __init__(self, path: str, come_back_s: float):
        self.path, self.come_back_s = path, come_back_s
        self.sock: socket.socket | None = None
        self.buffer = bytearray(1 << 16)

    def serve(self, data: dict[str, np.ndarray], version: int):
        message = encode(version, [(DATA_INPUTS.index(name), array) for name, array in data.items()])
        deadline = time.monotonic() + self.come_back_s
        while True:
            try:
                if self.sock is None:
                    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self.sock.connect(self.path)
                self.sock.sendall(message)
                payload = receive(self.sock, self.buffer)
                if payload is not None:
                    tag, named = decode(payload)
                    if tag == FAILED_TAG:
                        raise ActingServerError(f"the acting server's forward raised {bytes(named[0][1]).decode()}")
                    return NEEDS_WEIGHTS if tag == NEEDS_WEIGHTS_TAG else [array for _, array in named]
            except OSError:
                pass
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if time.monotonic() > deadline:
                raise ConnectionError(f"the acting server at {self.path} did not answer within {self.come_back_s:g}s")
            time.sleep(_RETRY_S)
