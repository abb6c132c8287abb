"""Several learners (learner.num): the plan that splits the collectors among them and what a config
may not ask of them. A real run of two learners on two hosts, one of them killed, is in
tests/test_separate_hosts.py; their exact sampling and gradient sum in tests/test_group_draw.py and
tests/test_gradient_group.py."""

import re
from pathlib import Path

import pytest

from raypex.actors.envs import inspect_env
from raypex.cluster.config.loading import ConfigError, load_config, validate
from raypex.cluster.plan.topology import plan_run, team_collectors
from raypex.cluster.sweep.space import check_space

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
