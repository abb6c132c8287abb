"""Served acting (actors/served_acting.py, actors/acting_line.py): a collector whose forward runs on
its node's acting server chooses the actions it would choose acting locally, for the same weights,
observations and random stream, with every built-in policy (recurrent state included); one forward
answers every request waiting on the node's socket; a server that lost its weights (restarted) gets
them with its first answer."""

import socket
import threading
import uuid

import numpy as np
import pytest
import torch

from raypex.actors.acting_line import (NEEDS_WEIGHTS_TAG, OK, LineClient, LineServer, decode, encode, receive,
                                       socket_address)
from raypex.actors.onnx_acting import DATA_INPUTS
from raypex.actors.served_acting import ActingServer, ServedForward, served_in_process, static_rows
from raypex.actors.settings import CollectorSettings
from raypex.actors.torch_serving import TorchForward
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights
from tests.test_acting_graph import _obs, _trained_looking


def settings(algo: str, shape, dtype, index: int = 0, **extra) -> CollectorSettings:
    return CollectorSettings(index=index, num_collectors=2, env_id="x", env_kwargs={}, num_envs=5, obs_shape=shape,
                             obs_dtype=dtype, num_actions=extra.pop("num_actions", 0), hidden=[32], dueling=True,
                             n_step=1, gamma=0.99, chunk_steps=8, epsilon_base=0.4, epsilon_alpha=7.0,
                             epsilon_anneal_steps=0, seed=0, algo=algo, act_precision="fp32", act_fusion="off",
                             **extra)


def published(s: CollectorSettings, version: int = 1) -> Weights:
    plugin = algorithm(s.algo)
    network = _trained_looking(plugin.acting_network(s), version)
    return Weights(version, export_arrays(network),
                   acting_graph=export_acting_graph(plugin, network, tuple(s.obs_shape), s.obs_dtype))


POLICIES = [("dqn", (4,), "float32", {"num_actions": 3, "td_priorities": True}),
            ("dqn", (4, 10, 10), "uint8", {"num_actions": 3}),
            ("r2d2", (4,), "float32", {"num_actions": 3, "recurrent_size": 8}),
            ("td3", (3,), "float32", {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0), "action_noise": 0.2}),
            ("sac", (3,), "float32", {"action_low": (-1.0, -1.0), "action_high": (1.0, 1.0)})]


def test_a_batch_runs_at_a_power_of_two_rows():
    assert [static_rows(rows) for rows in (1, 2, 3, 5, 16, 17, 32, 33)] == [1, 2, 4, 8, 16, 32, 32, 64]


@pytest.mark.parametrize("server_forward", ["onnx", "torch"])
@pytest.mark.parametrize(("algo", "shape", "dtype", "extra"), POLICIES, ids=lambda v: str(v))
def test_a_served_policy_acts_as_the_local_one(algo, shape, dtype, extra, server_forward):
    """Two collectors on one server, each beside its local twin: same weights (a second version
    midway), observations and random streams give the same actions, extras and states, whether the
    server runs the acting graph or the plug-in's module in torch (a GPU server's, here on the
    CPU). (Before the first weights a policy acting in torch explores with its own initial
    network, where the acting graph, which comes with the weights, acts at random: so the weights
    come first.)"""
    plugin = algorithm(algo)
    server = ActingServer(TorchForward(settings(algo, shape, dtype, **dict(extra)), "cpu")
                          if server_forward == "torch" else None)
    pairs = []
    for index in range(2):
        s = settings(algo, shape, dtype, index, **dict(extra))
        local = plugin.policy(s, _obs(shape, dtype, 5), 7 + index, np.random.default_rng(index))
        served = plugin.policy(s, _obs(shape, dtype, 5), 7 + index, np.random.default_rng(index),
                               served=served_in_process(server))
        pairs.append((s, local, served, [local.initial_state(5), served.initial_state(5)]))
    assert "served" in pairs[0][2].form
    for step in range(6):
        if step in (0, 3):
            weights = published(pairs[0][0], version=step + 1)  # one version, as the learner publishes it
        for s, local, served, states in pairs:
            if step in (0, 3):
                local.load(weights)
                served.load(weights)
            obs = _obs(shape, dtype, 5, seed=100 * step + s.index)
            acted_locally, extras_locally, states[0] = local.act(obs, states[0], 1000 * step)
            acted_served, extras_served, states[1] = served.act(obs, states[1], 1000 * step)
            np.testing.assert_allclose(acted_served, acted_locally, rtol=1e-5, atol=1e-5)
            assert extras_served.keys() == extras_locally.keys()
            for name, value in extras_locally.items():
                np.testing.assert_allclose(extras_served[name], value, rtol=1e-4, atol=1e-4)
            if states[0] is not None:
                np.testing.assert_allclose(states[1], states[0], rtol=1e-5, atol=1e-5)
    assert server.version == 4 and server.forwards == server.requests == 2 * 6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a GPU server's captured forward needs CUDA")
@pytest.mark.parametrize(("algo", "shape", "dtype", "extra"), POLICIES, ids=lambda v: str(v))
def test_a_gpu_server_captures_each_batch_shape_and_follows_new_weights(algo, shape, dtype, extra):
    """On a GPU each padded batch shape runs as a CUDA graph: its outputs are the module's on the
    CPU, for two shapes, and again after a new version lands in the parameters the graphs read."""
    s = settings(algo, shape, dtype, **dict(extra))
    gpu, cpu = TorchForward(s, "cuda"), TorchForward(s, "cpu")
    for version in (1, 2):
        weights = published(s, version)
        gpu.load(weights)
        cpu.load(weights)
        for rows in (4, 16):
            data = {"obs": _obs(shape, dtype, rows, seed=rows + version)}
            if "state" in algorithm(algo).acting_inputs:
                data["state"] = np.random.default_rng(rows).normal(size=(rows, 2 * s.recurrent_size)).astype(np.float32)
            for on_gpu, on_cpu in zip(gpu.run(**data), cpu.run(**data), strict=True):
                np.testing.assert_allclose(on_gpu, on_cpu, rtol=1e-3, atol=1e-3)
    assert len(gpu._captured) == 2 and all(captured is not None for captured in gpu._captured.values())


def test_one_forward_answers_every_request_waiting_each_its_own_rows():
    """The node's socket: requests that are waiting when the server comes to them are answered by
    one forward (padded to 16 rows), each with the outputs of its own rows; a request newer than
    the server's weights is answered NEEDS_WEIGHTS."""
    s = settings("dqn", (4,), "float32", num_actions=3)
    weights = published(s)
    alone, server = ActingServer(), ActingServer()
    alone.take(weights)
    server.take(weights)
    line = LineServer(server, socket_address(f"raypex-test-{uuid.uuid4().hex[:8]}"))
    requests = [{"obs": _obs((4,), "float32", rows, seed=rows)} for rows in (5, 3, 1, 4)]
    collectors = []
    try:
        for version, request in zip((1, 1, 1, 2), requests):
            collector = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            collector.connect(line.path)
            collector.sendall(encode(version, [(DATA_INPUTS.index("obs"), request["obs"])]))
            collectors.append(collector)
        line.serve_once(timeout=5)  # the four connect
        line.serve_once(timeout=5)  # their requests, all waiting
        answers = [decode(receive(collector, bytearray(16))) for collector in collectors]
    finally:
        for collector in collectors:
            collector.close()
        line.close()
    assert server.forwards == 1 and server.requests == 3
    for request, (tag, named) in zip(requests[:3], answers):
        ((_, q),) = named
        assert tag == OK and q.shape == (len(request["obs"]), 3)
        np.testing.assert_allclose(q, alone.run([request])[0][0], rtol=1e-5, atol=1e-5)
    assert answers[3] == (NEEDS_WEIGHTS_TAG, [])


def test_a_collector_waits_for_a_restarted_server_and_sends_it_the_weights():
    """The line's client against a server in a thread: the server goes away and a new one (with
    no weights) listens at the same address; the client's next request reaches it, is answered
    NEEDS_WEIGHTS, and the ServedForward sends the weights and asks again."""
    s = settings("dqn", (4,), "float32", num_actions=3)
    weights = published(s, version=2)
    address = socket_address(f"raypex-test-{uuid.uuid4().hex[:8]}")
    sent = []

    def start(server):
        line = LineServer(server, address)
        thread = threading.Thread(target=line.serve_forever, daemon=True)
        thread.start()
        return line, thread

    first = ActingServer()
    line, thread = start(first)
    forward = ServedForward(LineClient(address, come_back_s=30).serve,
                            lambda w: (sent.append(w.version), current.take(w)))
    current = first
    forward.load(weights)
    obs = _obs((4,), "float32", 5)
    (q,) = forward.run(obs=obs)
    line.close()
    thread.join()
    current = ActingServer()
    line, thread = start(current)
    try:
        np.testing.assert_allclose(forward.run(obs=obs)[0], q)
    finally:
        line.close()
        thread.join()
    assert sent == [2, 2] and current.requests == 1


def test_a_server_without_the_collectors_weights_gets_them_with_its_first_answer():
    s = settings("dqn", (4,), "float32", num_actions=3)
    server, sent = ActingServer(), []
    line = served_in_process(server)
    forward = ServedForward(line.serve, lambda weights: (sent.append(weights.version), server.take(weights)))
    forward.load(published(s, version=3))
    obs = _obs((4,), "float32", 5)
    (q,) = forward.run(obs=obs)
    assert sent == [3] and server.version == 3 and q.shape == (5, 3)
    restarted = ActingServer()  # a new process: no weights until the next request says so
    line = served_in_process(restarted)
    forward.serve, forward.send_weights = line.serve, lambda weights: (sent.append(weights.version),
                                                                       restarted.take(weights))
    np.testing.assert_allclose(forward.run(obs=obs)[0], q)
    assert sent == [3, 3]


def test_a_collector_whose_weights_went_to_a_server_that_then_died_sends_them_again():
    """Ray may restart the server between the collector handing it weights and asking again: the
    new process answers NEEDS_WEIGHTS once more, and the collector hands them over again rather
    than taking that answer for actions (which once stopped both collectors of a served run)."""
    s = settings("dqn", (4,), "float32", num_actions=3)
    processes = [ActingServer(), ActingServer()]  # the second starts when the first took the weights
    sent = []

    def serve(data, version):
        return served_in_process(processes[0]).serve(data, version)

    def send_weights(weights):
        sent.append(weights.version)
        processes[0].take(weights)
        if len(processes) > 1:
            processes.pop(0)  # killed right after taking them

    forward = ServedForward(serve, send_weights)
    forward.load(published(s, version=4))
    (q,) = forward.run(obs=_obs((4,), "float32", 5))
    assert sent == [4, 4] and q.shape == (5, 3) and processes[0].requests == 1


class _TakingMeanwhile(ActingServer):
    """A server that takes a collector's newer weights (on Ray's thread) while its line answers:
    its version reads 1, then 2."""

    reads = 0

    @property
    def version(self):
        self.reads += 1
        return 1 if self.reads == 1 else 2

    @version.setter
    def version(self, value):
        pass


def test_a_request_is_answered_when_the_server_takes_newer_weights_while_answering():
    """Each request gets an answer, whatever version the server reaches while it answers: a
    request it was not current for when it looked is told NEEDS_WEIGHTS (the collector sends them
    and asks again), never left unanswered, which once held a collector's loop for good."""
    line = LineServer(_TakingMeanwhile(), socket_address(f"raypex-test-{uuid.uuid4().hex[:8]}"))
    collector = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        collector.connect(line.path)
        collector.settimeout(10)
        collector.sendall(encode(2, [(DATA_INPUTS.index("obs"), _obs((4,), "float32", 2))]))
        line.serve_once(timeout=5)  # it connects
        line.serve_once(timeout=5)  # its request
        assert decode(receive(collector, bytearray(16))) == (NEEDS_WEIGHTS_TAG, [])
    finally:
        collector.close()
        line.close()
