"""Weights through Ray (cluster/hosts/ray_seams.py): WeightPublisher -> CollectorActor.set_weights ->
WeightInbox -> the collector's env loop, in a real local Ray cluster with a real collector actor."""

import uuid

import numpy as np
import ray
from torch import nn

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import load_config
from raypex.cluster.hosts.collector_actor import CollectorActor
from raypex.cluster.hosts.ray_seams import ChunkSink, WeightPublisher
from raypex.cluster.plan.settings import collector_settings
from raypex.learner.acting_graph import export_acting_graph
from raypex.learner.actor_critic_networks import ActorNetwork
from raypex.learner.algorithms.registry import algorithm
from raypex.learner.weights import export_arrays
from raypex.replay.contracts import Weights
from tests.polling import until


class ShardStandIn:
    """The learner actor's side of a ChunkSink (attach_writer, add_chunk, insert_room), keeping each
    chunk's mean |action| instead of storing it in a replay."""

    def __init__(self):
        self.mean_abs_actions: list[float] = []

    def attach_writer(self, shard: int) -> int:
        return 0

    def add_chunk(self, shard: int, chunk, writer_env_steps: int | None = None) -> float:
        self.mean_abs_actions.append(float(np.abs(chunk["action"]).mean()))
        return float("inf")

    def insert_room(self) -> float:
        return float("inf")

    def chunk_actions(self) -> list[float]:
        return self.mean_abs_actions


def _mean_abs_action_after(collector, shard, version: int) -> float:
    """Mean |action| of three chunks the collector began after it took weights `version`."""
    until(lambda: ray.get(collector.stats.remote()).version == version, 60, f"collector taking version {version}")
    first = len(ray.get(shard.chunk_actions.remote())) + 1  # the chunk being filled then may predate it

    def three_chunks_from_first():
        actions = ray.get(shard.chunk_actions.remote())
        return actions[first:first + 3] if len(actions) >= first + 3 else None

    return float(np.mean(until(three_chunks_from_first, 60, "three more chunks")))


def test_ray_collectors_keep_the_warm_up_random_under_a_fresh_learners_weights(kept_up_ray):
    """A fresh learner's starting actor is announced marked untrained; TD3/SAC collectors must keep
    acting uniformly at random (mean |a| 0.5) until trained weights come. Dropping the mark on the
    way through Ray (as WeightInbox once did) fills the warm-up with the starting actor's actions."""
    ray.init(address=kept_up_ray, namespace=f"weights-{uuid.uuid4().hex[:8]}")
    config = load_config(None, ["env.id=Pendulum-v1", "algo.name=td3", "env.num_envs=4", "collectors.chunk_steps=4",
                                "algo.n_step=1", "network.hidden=[8]"])
    spec = inspect_env("Pendulum-v1", {})
    actor = ActorNetwork(spec.obs_shape, 1, [8], gaussian=False)
    for p in actor.parameters():
        nn.init.zeros_(p)  # action 0 for every observation: far from uniform's mean |a| of 0.5
    arrays = export_arrays(actor)
    graph = export_acting_graph(algorithm("td3"), actor, spec.obs_shape, spec.obs_dtype)
    learner_name, collector_name = f"stand-in-{uuid.uuid4().hex[:8]}", f"collector-{uuid.uuid4().hex[:8]}"
    # Detached: owned by the GCS (tests/test_faults.py says why a test's own actors must be)
    shard = ray.remote(ShardStandIn).options(name=learner_name, lifetime="detached").remote()
    collector = ray.remote(CollectorActor).options(name=collector_name, lifetime="detached", max_concurrency=4).remote(
        collector_settings(config, spec, 0), ChunkSink(learner_name, 0, max_in_flight=2))
    try:
        running = collector.run.remote()
        publisher = WeightPublisher([collector_name])
        publisher.publish(Weights(1, arrays, untrained=True, acting_graph=graph))
        untrained = _mean_abs_action_after(collector, shard, 1)
        publisher.publish(Weights(2, arrays, acting_graph=graph))
        trained = _mean_abs_action_after(collector, shard, 2)
        ray.get(collector.stop.remote())
        assert ray.get(running) > 0
    finally:
        for handle in (collector, shard):
            ray.kill(handle, no_restart=True)
        ray.shutdown()
    assert untrained > 0.35 and trained < 0.15, (untrained, trained)  # uniform on [-1, 1]: 0.5; 0 + noise 0.1: 0.08
