"""Several learners (learner.num): the plan that splits the collectors among them, what a config
may not ask of them, and a real run of two learners on hosts of their own (network namespaces, as
tests/test_separate_hosts.py makes them), one of them killed. Their exact sampling and gradient sum
are tested in tests/test_group_draw.py and tests/test_gradient_group.py."""

import json
import os
import re
import signal
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import ConfigError, load_config, validate
from raypex.cluster.plan.topology import plan_run, team_collectors
from raypex.cluster.sweep.space import check_space
from tests.test_separate_hosts import hosts_with_ray, train_until_first_checkpoint

CARTPOLE = Path(__file__).resolve().parent.parent / "configs" / "cartpole.yaml"


def test_the_collectors_are_split_among_the_learners_in_order():
    assert team_collectors(5, 2) == [[0, 1, 2], [3, 4]]
    assert team_collectors(4, 4) == [[0], [1], [2], [3]]
    config = load_config(CARTPOLE, ["collectors.num=3", "learner.num=2"])
    plan = plan_run(config, inspect_env(config.env.id, {}, 4))
    assert [(c.index, c.learner, c.shard) for c in plan.collectors] == [(0, 0, 0), (1, 0, 1), (2, 1, 0)]
    assert [(p.rank, p.collectors, p.replay.num_shards, p.replay.storage) for p in plan.learners] == [
        (0, (0, 1), 2, "host"), (1, (2,), 1, "host")]
    # each learner's replay draws with a seed of its own; the group splits each batch alike (learner.seed)
    assert plan.learners[0].replay.seed != plan.learners[1].replay.seed
    assert plan.learners[0].settings.seed == plan.learners[1].settings.seed


@pytest.mark.parametrize("overrides, said", [
    (["learner.num=3", "collectors.num=2"], "learner.num (3) must not exceed collectors.num (2)"),
    (["learner.num=2", "runtime=local"], "learner.num 2 needs the Ray runtime"),
    (["learner.num=2", "replay.storage=device"], "several learners draw from replay on the host"),
    (["learner.num=2", "learner.cuda_graphs=off", "learner.device=cuda", "learner.cuda_graphs=on"],
     "several learners' updates run eagerly"),
])
def test_what_several_learners_cannot_do_is_refused_in_one_line(overrides, said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_config(CARTPOLE, overrides)


def test_a_sweep_refuses_several_learners():
    fixed = load_config(CARTPOLE, ["learner.num=2"]).model_dump(mode="json")
    with pytest.raises(ConfigError, match="a sweep's trial runs one learner"):
        check_space(fixed, {}, "asha")
    validate({**fixed, "learner": {**fixed["learner"], "num": 1}})


def learner_process(hosts, i: int) -> int:
    """The pid of the one learner process on host i, found at once from the host's namespace and
    the title Ray gives an actor's process: a driver's ray.init and an actor call to ask it can
    take longer on a loaded box than CartPole takes to solve."""
    learners = []
    for pid in hosts.pids_on(i):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(("ray::LearnerActor", "ray::GroupLead")):
            learners.append(pid)
    assert len(learners) == 1, f"host {i} holds {len(learners)} learner processes: {learners}"
    return learners[0]


def test_two_learners_each_on_the_host_of_its_collectors_learn_and_come_back_when_one_is_killed(tmp_path):
    """learner.num=2 on three hosts: the head (the driver's, no CPUs for actors) and two of 1 CPU,
    each of which holds one learner and its collector. Each learner sits on the host of its
    collector's shard; once a checkpoint set is written, the second learner's process is killed:
    the group comes back from that set with both shards, and the run solves CartPole with rc 0
    and counts that add up."""
    if os.geteuid() != 0:
        pytest.fail("making network namespaces needs root (CI runs as root); this test does not skip")
    run = tmp_path / "two-learners"
    log = tmp_path / "driver.log"
    with ExitStack() as stack:
        hosts = hosts_with_ray(stack, [0, 1, 1])
        driver = train_until_first_checkpoint(hosts, stack, run, log, "collectors.num=2", "learner.num=2",
                                              "learner.num_cpus=0.5", "stop.env_steps=150000", "stop.eval_return=490",
                                              "eval.every_env_steps=800", "eval.episodes=10",
                                              "checkpoint.every_epochs=5")
        placement = json.loads((run / "placement.json").read_text())
        second = hosts.addresses.index(placement["node_ips"][placement["learners"][1]["learner_node"]])
        os.kill(learner_process(hosts, second), signal.SIGKILL)
        try:
            driver.wait(timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not end after a learner was killed:\n{log.read_text()[-3000:]}")
    err = log.read_text()
    assert driver.returncode == 0, err[-3000:]
    assert "the group of learners restarts from the newest checkpoint" in err, err[-3000:]
    assert "a new one continues from the checkpoint of epoch" in err and "replay restored" in err, err[-3000:]
    # each learner on the host of its collector, the two teams on the two hosts with CPUs
    node_ips = placement["node_ips"]
    learner_ips = [node_ips[entry["learner_node"]] for entry in placement["learners"]]
    collector_ips = [node_ips[c["collector_node"]] for c in placement["collectors"]]
    assert [entry["collectors"] for entry in placement["learners"]] == [[0], [1]], placement
    assert learner_ips == collector_ips and sorted(learner_ips) == sorted(hosts.addresses[1:]), placement
    result = json.loads((run / "summary.json").read_text())
    assert result["ended"] == "solved" and result["learner_restarts"] == 1, result
    assert result["env_steps"] == sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"], result
    # a set holds the model once and both shards, each written by the learner that holds it
    manifest = json.loads(max((run / "checkpoints").glob("*.json")).read_text())
    assert manifest["learner_bytes"] > 0 and [part["file"].split("-shard-")[1] for part in manifest["replay"]] == [
        "0.npz", "1.npz"], manifest
