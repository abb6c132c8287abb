"""`raypex tune`'s settings, read and checked before anything starts: search spaces written as
values in the YAML or the overrides, and every mistake one line with exit 2 (nothing created)."""

from pathlib import Path

import pytest

from raypex.cluster.commands.cli import main
from raypex.cluster.config.loading import ConfigError, apply_overrides, read_yaml
from raypex.cluster.sweep.space import Domain, SweepRequest, grid_size, parse_domain, split_space


def test_with_no_value_searched_the_learning_rate_is_searched_around_the_configs():
    from raypex.cluster.sweep.space import default_space

    fixed, space = split_space(apply_overrides({}, ["learner.lr=0.02"]))
    assert space == {} and default_space(fixed) == {"learner.lr": Domain("loguniform", (0.005, 0.08))}


def test_search_spaces_are_read_from_overrides_and_yaml_values_alike(tmp_path):
    (tmp_path / "sweep.yaml").write_text("learner:\n  lr: loguniform(1e-4, 1e-1)\n  target_tau: 0.02\n"
                                         "network:\n  hidden: choice([[32, 32], [64, 64]])\n")
    data = apply_overrides(read_yaml(tmp_path / "sweep.yaml"), ["algo.n_step=grid([1, 3])", "replay.min_size=512",
                                                                "algo.gamma=uniform(0.9,0.99)", "seed=randint(0, 10)"])
    fixed, space = split_space(data)
    assert space == {"learner.lr": Domain("loguniform", (1e-4, 0.1)), "network.hidden": Domain("choice", ([32, 32], [64, 64])),
                     "algo.n_step": Domain("grid", (1, 3)), "algo.gamma": Domain("uniform", (0.9, 0.99)),
                     "seed": Domain("randint", (0, 10))}
    assert fixed == {"learner": {"target_tau": 0.02}, "network": {}, "algo": {}, "replay": {"min_size": 512}}
    assert grid_size(space) == 2
    assert parse_domain("env.id", "CartPole-v1") is None and parse_domain("env.id", "mine:Make(1)") is None
    request = SweepRequest(fixed, space, 4, "asha", True, 10, 4)
    assert SweepRequest.from_json(request.to_json()) == request


@pytest.mark.parametrize("text, says", [
    ("loguniform(1e-2)", "loguniform takes two numbers, low and high"),
    ("loguniform(0, 1)", "loguniform needs 0 < low"),
    ("uniform(2, 1)", "needs low < high"),
    ("randint(1.5, 3)", "randint takes integers"),
    ("choice([])", "give at least one value"),
    ("choice([1, 2)", "cannot read the arguments"),
])
def test_a_malformed_search_space_is_one_line_naming_the_key(text, says):
    with pytest.raises(ConfigError, match=says) as caught:
        parse_domain("learner.lr", text)
    assert str(caught.value).startswith("learner.lr") and "\n" not in str(caught.value)


BAD_TUNE_ARGS = [
    (["learner.lr=loguniform(1e-2)"], "learner.lr=loguniform(1e-2): loguniform takes two numbers"),
    (["learner.lrr=loguniform(1e-4,1e-2)"], "unknown config key 'learner.lrr'; did you mean 'learner.lr'?"),
    (["learner.lr=uniform(-1,1)"], "learner.lr=uniform(-1, 1): at -1: config error: learner.lr: Input should be greater than 0"),
    (["network.hidden=choice([[32],[64]])", "--scheduler", "pbt"], "network.hidden: a PBT exploit copies the donor's networks"),
    (["learner.lr=grid([0.01,0.02])", "--scheduler", "pbt"], "grid is not a distribution PBT can resample from"),
    (["learner.lr=0.01", "--samples", "0"], "--samples must be >= 1, got 0"),
    (["learner.lr=loguniform(1e-4,1e-2)", "--scheduler", "hyperband"], "--scheduler hyperband: choose one of none, asha, pbt"),
    (["learner.lr=loguniform(1e-4,1e-2)", "--samples", "0"], "--samples must be >= 1, got 0"),
    (["learner.lr=loguniform(1e-4,1e-2)", "--samples", "1", "--scheduler", "pbt"], "--scheduler pbt needs a population"),
    (["learner.lr=loguniform(1e-4,1e-2)", "--resume", "nowhere"], "--resume EXPERIMENT_DIR continues the sweep as it was asked"),
    (["--resume", "nowhere"], "--resume nowhere: no readable sweep.json there"),
]


@pytest.mark.parametrize("args, says", BAD_TUNE_ARGS, ids=[" ".join(a) for a, _ in BAD_TUNE_ARGS])
def test_bad_sweep_input_is_one_line_exit_2_and_nothing_started(args, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["tune", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("raypex: error: "), err
    assert says in err, err
    assert list(Path(tmp_path).iterdir()) == []  # no experiment directory, nothing else
