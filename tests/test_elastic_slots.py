"""The slots of collectors that follow the cluster (cluster/plan/elastic.py): pure logic."""

import numpy as np
import pytest

from raypex.actors.envs import inspect_env
from raypex.actors.exploration import collector_epsilon
from raypex.cluster.config.arguments import config_path
from raypex.cluster.config.loading import load_config
from raypex.cluster.plan.elastic import CollectorSlots, Node, spread_order
from raypex.cluster.plan.settings import collector_settings


def test_each_node_with_room_gets_per_node_collectors_up_to_the_slots():
    slots = CollectorSlots(slots=5, per_node=2, collector_cpus=0.5)
    nodes = [Node("head", cpus=2, reserved=1.5), Node("a", cpus=4), Node("b", cpus=0.9)]
    changes = slots.changes(nodes)
    # the head has room for one beside the learner, a for two (per_node), b for one
    assert changes.start == [(0, "head"), (1, "a"), (2, "a"), (3, "b")] and not changes.drain and not changes.lost
    for slot, node in changes.start:
        slots.took(slot, node)
    assert slots.changes(nodes).start == []  # nothing more: every node holds what it can
    assert slots.changes([*nodes, Node("c", cpus=8), Node("d", cpus=8)]).start == [(4, "c")]  # 5 slots in all


def test_a_draining_node_gets_none_and_its_collectors_leave_once():
    slots = CollectorSlots(slots=4, per_node=1, collector_cpus=1)
    for slot, node in slots.changes([Node("a", 2), Node("b", 2)]).start:
        slots.took(slot, node)
    changes = slots.changes([Node("a", 2), Node("b", 2, draining=True)])
    assert changes.drain == [1] and changes.start == [] and changes.lost == []
    slots.leave(1)
    after = slots.changes([Node("a", 2), Node("b", 2, draining=True)])
    assert after.drain == [] and after.start == []  # told once, and no collector replaces it there
    slots.free(1)
    assert slots.taken == [0]


def test_a_node_gone_without_notice_has_its_slots_settled_and_a_joining_node_takes_the_lowest_free():
    slots = CollectorSlots(slots=3, per_node=1, collector_cpus=1)
    for slot, node in slots.changes([Node("a", 1), Node("b", 1), Node("c", 1)]).start:
        slots.took(slot, node)
    changes = slots.changes([Node("a", 1), Node("c", 1)])
    assert changes.lost == [1] and changes.start == []
    slots.free(1)
    assert slots.changes([Node("a", 1), Node("c", 1), Node("d", 1)]).start == [(1, "d")]


def test_the_slots_taken_first_span_the_exploration_rates_from_most_exploring_to_greediest():
    for slots in (1, 2, 3, 4, 7, 16, 100):
        order = spread_order(slots)
        assert sorted(order) == list(range(slots)) and order[:2] == [0, slots - 1][:slots]
    assert spread_order(8) == [0, 7, 3, 1, 5, 2, 4, 6]  # each next one halves a widest gap
    config = load_config(config_path("cartpole"), ["collectors.num=auto", "collectors.max=4"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    rates = [collector_epsilon(collector_settings(config, spec, i), np.random.default_rng(0)).final_epsilon
             for i in range(4)]
    # two collectors (slots 0 and 1) explore as a fixed run of two does: Ape-X's two ends
    assert rates[0] == 0.4 and rates[1] == min(rates) == pytest.approx(0.4 ** 8) and rates[2] > rates[3] > rates[1]
