"""Per-call time of a DQN Q-network's acting forms on one collector's batch (16 observations, one
thread): the acting graph in ONNX Runtime against torch's fp32 forms that ActingPolicy times when a
collector starts (eager, and the oneDNN-fused trace), for MinAtar's CNN and Pong's Nature CNN. It is
why a Q collector on images acts in torch (actors/onnx_acting.py, q_acts_with_graph).

    python -m benchmarks.acting_forms [--rounds 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

NETWORKS = {"minatar": ((4, 10, 10), [128]), "pong": ((4, 84, 84), [512])}
BATCH = 16


def forms(shape: tuple[int, ...], hidden: list[int]) -> dict:
    """Each form's call on one batch of random frames, all with the same published weights."""
    import torch

    from raypex.actors.acting import ActingPolicy
    from raypex.actors.onnx_acting import GraphForward
    from raypex.actors.q_policy import q_network
    from raypex.actors.settings import CollectorSettings
    from raypex.learner.algorithms.registry import algorithm
    from raypex.learner.weights import export_arrays
    from raypex.replay.contracts import Weights

    torch.set_num_threads(1)
    s = CollectorSettings(index=0, num_collectors=1, env_id="x", env_kwargs={}, num_envs=BATCH, obs_shape=shape,
                          obs_dtype="uint8", num_actions=6, hidden=hidden, dueling=True, n_step=3, gamma=0.99,
                          chunk_steps=16, epsilon_base=0.4, epsilon_alpha=7.0, epsilon_anneal_steps=0, seed=0)
    plugin = algorithm("dqn")
    network = plugin.acting_network(s)
    weights = Weights(1, export_arrays(network), acting_graph=plugin.acting_graph(network, shape, "uint8"))
    obs = np.random.default_rng(0).integers(0, 255, (BATCH, *shape), dtype=np.uint8)
    graph = GraphForward()
    graph.load(weights)
    timed = {"onnx": lambda: graph.run(obs=obs)}
    for fusion in ("off", "on"):
        policy = ActingPolicy(q_network(s), "fp32", obs, fusion)
        policy.load(weights)
        timed[f"torch, fusion {fusion}"] = lambda policy=policy: policy.greedy(obs)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for name, (shape, hidden) in NETWORKS.items():
        timed = forms(shape, hidden)
        calls = 200 if shape[1] < 20 else 30
        for _ in range(args.rounds):  # alternating, so that a noisy moment does not fall on one form
            for form, call in timed.items():
                for _ in range(calls // 10):
                    call()
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                print(f"{name:8} {form:18} {(time.perf_counter() - start) / calls * 1e6:8.0f} us per call", flush=True)


if __name__ == "__main__":
    main()
