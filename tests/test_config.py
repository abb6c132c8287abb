"""Config loading and the CLI's handling of user mistakes: one line, exit code 2, nothing written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

from raypex.actors.envs import inspect_env
from raypex.cluster.commands.cli import main
from raypex.cluster.config.loading import (
    ConfigError,
    apply_overrides,
    config_origin,
    load_config,
    saved_config_upgraded,
    saved_run_config,
    validate,
)
from raypex.cluster.config.schema import RunConfig, config_warnings
from raypex.cluster.plan.env_fit import check_nothing_shadows_raypex, fit_to_env

ROOT = Path(__file__).resolve().parent.parent


def _needs_a_missing_package(**kwargs):
    raise gym.error.DependencyNotInstalled('Box2D is not installed, you can install it by run `pip install swig` '
                                           'followed by `pip install "gymnasium[box2d]"`')


# an env whose package is not installed (as CarRacing-v3 without the box2d extra), whatever is installed here
gym.register("NeedsAMissingPackage-v0", entry_point=_needs_a_missing_package)


def test_cartpole_yaml_spells_out_the_schema_defaults():
    """`raypex train` without a file uses the defaults; they must be configs/cartpole.yaml."""
    from_file = load_config(ROOT / "configs" / "cartpole.yaml", [])
    assert from_file == RunConfig()


def test_every_shipped_config_is_valid():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        load_config(path, [])


def test_dotted_overrides_are_parsed_as_yaml():
    data = apply_overrides({"learner": {"lr": 1.0}}, ["learner.lr=3e-4", "collectors.num=4", "network.hidden=[8, 8]",
                                                       "stop.eval_return=null"])
    assert data == {"learner": {"lr": 3e-4}, "collectors": {"num": 4}, "network": {"hidden": [8, 8]},
                    "stop": {"eval_return": None}}
    config = load_config(None, ["learner.lr=3e-4", "collectors.num=4"])
    assert config.learner.lr == 3e-4 and config.collectors.num == 4


BAD_TRAIN_ARGS = [
    (["learner.lrr=0.1"], "unknown config key 'learner.lrr'; did you mean 'learner.lr'?"),
    (["leaner.lr=0.1"], "unknown config key 'leaner'; did you mean 'learner'?"),
    (["bogus.x=1"], "unknown config key 'bogus'"),
    (["stop.env_steps=20000", "replay.min_size=50000", "replay.capacity=50000"],
     "stop.env_steps (20000) is below replay.min_size (50000): the run would end before learning starts"),
    (["learner.lr=fast"], "learner.lr: Input should be a valid number"),
    (["learner.lr=-1"], "learner.lr: Input should be greater than 0"),
    (["replay.capacity=-5"], "replay.capacity: Input should be greater than or equal to 1"),
    (["collectors.epsilon_base=1.5"], "collectors.epsilon_base: Input should be less than or equal to 1"),
    (["eval.max_return=100"], "eval.max_return (100) must be at least stop.eval_return (490)"),
    (["eval.max_return=lots"], "eval.max_return: must be a number, auto or null (got 'lots')"),
    (["learner.micro_batch=512", "replay.capacity=256"], "learner.micro_batch (512) must not exceed replay.capacity"),
    (["learner.precision=fp8"], "learner.precision: Input should be 'auto', 'fp32', 'bf16' or 'fp16'"),
    (["learner.device=tpu"], "learner.device: Input should be 'auto', 'cpu' or 'cuda'"),
    (["env.id=CartPole-v9"], ("env.id 'CartPole-v9' is not a registered Gymnasium environment; did you mean "
                             "'CartPole-v1'?")),
    (["env.id=Acrobat-v1"], ("env.id 'Acrobat-v1' is not a registered Gymnasium environment; did you mean "
                            "'Acrobot-v1'?")),
    (["learner.learning_rate=1e-3"], "unknown config key 'learner.learning_rate'; did you mean 'learner.lr'?"),
    (["algo.batch_size=64"], "unknown config key 'algo.batch_size'; did you mean 'learner.micro_batch'?"),
    (["env.id=Pendulum-v1"], "algo.name dqn needs Discrete actions; env.id 'Pendulum-v1' has a Box action space"),
    (["env.id=CartPole-v1", "algo.name=td3"], "algo.name td3 needs a Box action space; env.id 'CartPole-v1' has 2"),
    (["collectors.num=0"], "collectors.num: must be auto or a whole number from 1 to 1024"),
    (["learner.lr"], "'learner.lr' is neither a config file, a shipped config"),
    (["=3"], "override '=3' must look like section.key=value"),
    (["network.hidden=[64, 0]"], "hidden: every layer size must be >= 1"),
    (["configs/does-not-exist.yaml"], "config file not found: configs/does-not-exist.yaml"),
    (["--seed", "abc"], "train: argument --seed: invalid int value: 'abc'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--seed", "1", "learner.lr=-1"], "learner.lr: Input should be greater than 0"),  # override after an option
    (["learner.precision=fp16", "learner.device=cpu"], "fp16 needs CUDA"),
    (["learner.cuda_graphs=on", "learner.device=cpu"], "cuda_graphs on needs CUDA"),
    (["a.yaml", "b.yaml"], "'b.yaml' is neither the config file"),
    (["--resume", "/nonexistent/run"], "--resume /nonexistent/run: no such directory"),
    (["--resume", "configs"], "--resume configs: no config.yaml there (not a raypex run directory)"),
    (["stop.eval_return=None"], "(got 'None'); YAML writes no value as null"),
    (["env.terminal_on_life_loss=true"], "terminal_on_life_loss needs an ALE/ env id"),
    (["env.id=ALE/NotAGame-v5"], "env.id 'ALE/NotAGame-v5': ale-py has no ROM 'not_a_game'"),
    (["env.id=ALE/Pong-v5", "env.kwargs={stack_num: 2}"], "env.kwargs ['stack_num'] are set by raypex"),
    (["env.id=ALE/Pong-v5", "env.kwargs={frame_skip: 2}"], "env.kwargs are not accepted by ALE's vector env"),
    (["env.id=ALE/Pong-v5", "env.frame_stack=0"], "env.frame_stack: Input should be greater than or equal to 1"),
    (["env.id=no_such_module:Env-v0"], "no module 'no_such_module' in "),
    (["env.id=ALE/Pong-v5"], ("env.id 'ALE/Pong-v5' gives pixel observations (4x84x84), and the default config "
                              "is written for CartPole-v1's flat ones")),
    # env.wrappers: an entry's form when the config is read, its import and arguments before anything starts
    (["env.wrappers=[ClipReward]"], "env.wrappers: 'ClipReward' is not an import path of the form package.module:Name"),
    (["env.wrappers=[gymnasium.wrappers:ClipRewrd]"], ("env.wrappers: 'gymnasium.wrappers:ClipRewrd': gymnasium.wrappers "
                                                       "has no ClipRewrd; did you mean gymnasium.wrappers:ClipReward?")),
    (["env.wrappers=[no_such_package.wrappers:Clip]"], "env.wrappers: 'no_such_package.wrappers:Clip': "
                                                       "no_such_package.wrappers cannot be imported"),
    (["env.wrappers=[{gymnasium.wrappers:ClipReward: {maximum: 1}}]"],
     "env.wrappers: 'gymnasium.wrappers:ClipReward' does not take {'maximum': 1}"),
    (["env.id=ALE/Pong-v5", "env.wrappers=[gymnasium.wrappers:ClipReward]"], "env.wrappers: an ALE env steps as "
                                                                            "ale-py's own vector env"),
    (["replay.capacity=2000000000"], "the replay would take 192 GB, more than this machine's memory allows"),
    (["env.id=NeedsAMissingPackage-v0"], "env.id 'NeedsAMissingPackage-v0' cannot be made: Box2D is not installed"),
    # NaN or infinity is never a value; a NaN target once reported a false "solved"
    (["configs/pendulum.yaml", "algo.policy_delay=0"], "algo.policy_delay: Input should be greater than or equal to 1"),
    (["stop.eval_return=nan"], "stop.eval_return: Input should be a finite number (got nan)"),
    (["eval.max_return=nan"], "eval.max_return: Input should be a finite number (got nan)"),
    (["learner.lr=inf"], "learner.lr: Input should be a finite number (got inf)"),
    # settings under which a run could never progress (they once stalled without a word)
    (["replay.samples_per_insert=1e30"], "replay.samples_per_insert (1e+30) x stop.env_steps (500000) = 5e+35"),
    (["collectors.chunk_steps=100000"], "(100000 x 16 = 1600000 transitions per chunk) must not exceed replay.capacity"),
    (["learner.updates_per_epoch=1000000000"], "= 2.56e+11 samples per epoch; at most 1e+09 are accepted"),
    # prioritized replay
    (["replay.alpha=1.5"], "replay.alpha: Input should be less than or equal to 1"),
    (["replay.beta=-0.1"], "replay.beta: Input should be greater than or equal to 0"),
    (["replay.priority_epsilon=0"], "replay.priority_epsilon: Input should be greater than 0"),
    (["replay.beta_anneal_updates=0"], "replay.beta_anneal_updates: Input should be greater than or equal to 1"),
    (["replay.initial_priority=mean"], "replay.initial_priority: Input should be 'td' or 'max'"),
    (["replay.prioritized=maybe"], "replay.prioritized: Input should be a valid boolean"),
    # collectors acting on a GPU
    (["collectors.act_device=gpu"], "collectors.act_device: Input should be 'auto', 'cpu' or 'cuda'"),
    (["collectors.num_gpus=0"], "collectors.num_gpus: must be auto or a share of one GPU from 0.0001 to 1"),
    (["collectors.act_device=cuda", "collectors.act_fusion=on"], "act_fusion on is oneDNN's, for CPUs"),
    (["collectors.act_device=cuda", "learner.device=cpu"], "collectors.act_device cuda shares the learner's GPU"),
    (["configs/pendulum.yaml", "collectors.act_device=cuda"], "collectors.act_device cuda is for dqn; algo.name sac"),
    (["configs/popgym.yaml", "collectors.act_device=cuda"], "collectors.act_device cuda is for dqn; algo.name r2d2"),
]


@pytest.mark.parametrize("args,expected", BAD_TRAIN_ARGS, ids=[" ".join(a[0]) for a in BAD_TRAIN_ARGS])
def test_bad_train_input_is_one_line_and_exit_2(args, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("raypex: error: "), err
    assert expected in err
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_settings_that_work_but_surprise_are_warned_in_one_line_each():
    quiet = load_config(None, [])
    assert config_warnings(quiet) == []
    loud = load_config(None, ["learner.updates_per_epoch=100000", "collectors.chunk_steps=64"])
    found = config_warnings(loud)
    assert [w.split(":")[0] for w in found] == ["learner.updates_per_epoch", "collectors.chunk_steps"]
    assert all("\n" not in w for w in found)


def test_a_tab_in_yaml_is_named_with_its_line(tmp_path, capsys):
    (tmp_path / "tab.yaml").write_text("learner:\n  lr: 0.01\n\tmicro_batch: 64\n")
    assert main(["train", str(tmp_path / "tab.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 3 has a tab, and YAML indents with spaces only" in err, err


def test_bare_raypex_prints_its_usage(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "usage: raypex" in err and "train" in err and "eval" in err and "bench" in err


def test_bad_yaml_and_non_mapping(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("learner: {lr: [1,\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert main(["train", str(tmp_path / "broken.yaml")]) == 2
    assert "not valid YAML (line" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "list.yaml")]) == 2
    assert "the top level must be a mapping" in capsys.readouterr().err


def test_existing_run_dir_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("mine")
    assert main(["train", "--run-dir", str(tmp_path / "run")]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (tmp_path / "run" / "keep.txt").read_text() == "mine"


def test_eval_of_a_missing_run(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert "no policy.pt2" in capsys.readouterr().err


def test_console_script_exits_2_without_traceback(tmp_path):
    """The real process: exit status 2 and a single stderr line, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "raypex", "train", "learner.lr=-3"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "raypex: error: config error: learner.lr: Input should be greater than 0 (got -3)"]
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


def built_page(name: str) -> str:
    """A docs page's markdown as the site build renders it (docs/hooks.py fills its tables)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.on_page_markdown((ROOT / "docs" / name).read_text())


def test_the_config_reference_page_lists_every_key_of_the_schema():
    from raypex.cluster.config.reference import _fields
    from raypex.cluster.config.schema import RunConfig

    page = built_page("reference/config.md")
    listed = re.findall(r"^\| `([\w.]+)` \|", page, re.MULTILINE)
    assert listed == [key for key, _ in _fields(RunConfig)] and len(listed) > 50


def test_the_cli_reference_page_lists_every_command_and_argument_of_the_parser():
    import argparse

    from raypex.cluster.commands.cli import build_parser

    page = built_page("reference/cli.md")
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert re.findall(r"^## raypex (\w+)$", page, re.MULTILINE) == list(commands)
    for name, command in commands.items():
        section = page.split(f"## raypex {name}\n", 1)[1].split("\n## raypex ", 1)[0]
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                shown = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
                assert f"| `{shown}" in section, (name, shown)



def test_the_python_api_page_documents_every_public_member_of_what_raypex_exports():
    import inspect

    import raypex

    page = built_page("reference/python-api.md")
    assert re.findall(r"^## `raypex\.(\w+)`$", page, re.MULTILINE) == [n for n in raypex.__all__ if n != "__version__"]
    documented = re.findall(r"^### `(\w+)\.(\w+)`\n\n```python\n.*\n```\n\n(.*)$", page, re.MULTILINE)
    for name, member, doc in documented:
        assert doc.strip(), f"{name}.{member} has no description"
    listed = {f"{name}.{member}" for name, member, _ in documented}
    assert {"RunningRun.stop", "RunningRun.wait", "EvalResult.mean", "ExportedPolicy.act", "RunResult.policy",
            "RunFailed.resumable", "SweepOutcome.table", "RunningRun.run_dir", "EvalResult.returns"} <= listed
    for name in raypex.__all__:  # every public method and property of each class
        cls = getattr(raypex, name)
        if inspect.isclass(cls):
            own = {m for klass in cls.__mro__ if klass.__module__.startswith("raypex.") for m, v in vars(klass).items()
                   if not m.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}
            assert {f"{name}.{m}" for m in own} <= listed, name
    assert "def train(" not in page and "train(config: str | Path | Mapping | RunConfig | None = None" in page

BAD_BENCH_ARGS = [
    (["learner.lr=-1"], "learner.lr: Input should be greater than 0"),
    (["env.id=Pendulum-v1"], "needs Discrete actions"),
    (["--json", "/nonexistent/dir/out.json"], "--json /nonexistent/dir/out.json: directory /nonexistent/dir does not exist"),
    (["--quick", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--stage", "learner", "--variants", "fp8:on"],
     "--variants: 'fp8:on' is not PRECISION:GRAPHS with PRECISION fp32, bf16 or fp16 and GRAPHS on or off"),
    (["--stage", "learner", "--variants", "fp32"], "--variants: 'fp32' is not PRECISION:GRAPHS"),
    (["--variants", "fp32:off"], "--variants needs --stage learner"),
    (["--window", "0"], "--window SECONDS takes a positive number of seconds"),
    (["--window", "1", "--stage", "startup"], "not with --soak or --stage startup"),
    (["--window", "1", "--soak", "1"], "not with --soak or --stage startup"),
    (["--address", "127.0.0.1:6379", "--soak", "1"], "--address ADDRESS does not go with --soak"),
    (["--stage", "collect", "--address", "127.0.0.1:1"], "127.0.0.1:1"),  # nothing answers there
]


def test_a_bench_window_sets_every_measuring_window_and_keeps_the_training_runs():
    from raypex.cluster.commands.bench import BenchPlan

    quick, full = BenchPlan.choose(True), BenchPlan.choose(False)
    assert quick.with_window(None) == quick
    short = full.with_window(1.5)
    assert (short.collect_s, short.feed_s, short.learner_s, short.local_s) == (1.5, 1.5, 1.5, 1.5)
    assert (short.linearity_steps, short.broadcasts) == (full.linearity_steps, full.broadcasts)
    assert full.with_window(20.0).local_s == full.local_s  # the one-process windows are never lengthened


@pytest.mark.parametrize(("args", "expected"), BAD_BENCH_ARGS)
def test_bench_rejects_bad_input_in_one_line(args, expected, capsys):
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("raypex: error: ") and expected in err[0], err


@pytest.mark.parametrize(("override", "expected"), [
    ("learner.cuda_graphs=off", "off"), ("learner.cuda_graphs=on", "on"), ("learner.cuda_graphs=auto", "auto")])
def test_cuda_graphs_takes_on_and_off_that_yaml_reads_as_booleans(override, expected):
    from raypex.cluster.config.loading import load_config

    assert load_config(None, [override]).learner.cuda_graphs == expected


def test_shipped_configs_are_found_by_name_from_any_directory(tmp_path, monkeypatch, capsys):
    from raypex.cluster.config.arguments import UsageError, split_positional

    monkeypatch.chdir(tmp_path)  # no configs/ here
    for item in ("pong", "pong.yaml", "configs/pong.yaml"):
        path, overrides = split_positional([item, "collectors.num=2"])
        assert path.read_text() == (ROOT / "configs" / "pong.yaml").read_text() and overrides == ["collectors.num=2"]
    with pytest.raises(UsageError, match="did you mean 'pong'"):
        split_positional(["pongg"])
    assert main(["train", "configs/nope.yaml"]) == 2
    assert ("shipped configs, by name from any directory: ant, breakout, cartpole, halfcheetah, hopper, humanoid, minatar, "
            "pendulum, pong, popgym, walker2d"
            in capsys.readouterr().err)


def test_raypex_configs_lists_each_shipped_config_on_one_line(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line.split()[1] for line in lines[:11]}
    assert listed == {"ant": "Ant-v5", "breakout": "ALE/Breakout-v5", "cartpole": "CartPole-v1",
                      "halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "humanoid": "Humanoid-v5",
                      "minatar": "MinAtar/Breakout-v1",
                      "pendulum": "Pendulum-v1", "pong": "ALE/Pong-v5", "popgym": "popgym-RepeatPreviousEasy-v0",
                      "walker2d": "Walker2d-v5"}
    assert {p.stem for p in (ROOT / "configs").glob("*.yaml")} == set(listed)


def test_config_show_prints_every_key_marking_the_ones_that_differ(capsys):
    from raypex.cluster.config.reference import markdown_reference

    assert main(["config", "show", "pong", "collectors.num=4"]) == 0
    out = capsys.readouterr().out.splitlines()[1:]
    keys = [line[2:].split()[0] for line in out]
    assert keys == [row.split("`")[1] for row in markdown_reference().splitlines()[2:]]  # every key, in order
    shown = {line[2:].split()[0]: line for line in out}
    assert shown["collectors.num"].startswith("* ") and "(default 2)" in shown["collectors.num"]
    assert shown["algo.gamma"].startswith("  ") and "(default" not in shown["algo.gamma"]
    assert main(["config", "show", "pong", "lerner.lr=1"]) == 2
    assert "did you mean 'learner'" in capsys.readouterr().err


def test_output_into_a_closed_pipe_ends_quietly():
    """`raypex config show | head -1`: the reader leaves early; no BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        done = subprocess.run([sys.executable, "-c", "from raypex.cluster.commands.cli import console; console()", "config",
                               "show", "pong"], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                              check=False)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and done.stderr == "", done.stderr


def test_every_option_of_every_subcommand_says_what_it_does_and_its_default():
    import argparse

    from raypex.cluster.commands.cli import build_parser

    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in subcommands.choices.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or not action.option_strings:
                continue
            text = action.help or ""
            shows_default = isinstance(parser.formatter_class, type) and issubclass(
                parser.formatter_class, argparse.ArgumentDefaultsHelpFormatter)
            has_default = "default" in text or shows_default or action.required  # a required option has none
            assert text and has_default, f"raypex {name} {action.option_strings[0]}: {text!r}"


def test_bench_acting_on_a_gpu_this_machine_lacks_is_one_line_before_measuring(capsys):
    """collectors.act_device cuda in the bench's in-process stage, on a machine without a GPU."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the stage would measure, not refuse")
    assert main(["bench", "--stage", "collect", "collectors.act_device=cuda", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "raypex: error: collectors.act_device cuda: this collector's process sees no GPU " \
                      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})", err


@pytest.mark.parametrize(("overrides", "target"), [
    (["env.id=Acrobot-v1"], -100.0),  # the env's own reward threshold, not CartPole's 490
    (["env.id=MountainCar-v0"], -110.0),
    (["env.id=Acrobot-v1", "stop.eval_return=-80"], -80.0),  # set by the user: kept
    (["env.id=Pendulum-v1", "algo.name=td3"], None),  # no threshold: train to stop.env_steps, keep the best
])
def test_another_env_than_the_configs_gets_a_warning_line_and_its_own_stop_target(overrides, target):
    config = load_config(None, overrides)
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    fitted, lines = fit_to_env(config, spec, config_origin("the default config", {}, overrides))
    assert fitted.stop.eval_return == target
    assert len(lines) == 1 and lines[0].startswith(f"warning: env.id {config.env.id} is not CartPole-v1, which the "
                                                   "default config was written for"), lines
    assert ("stop.eval_return" in lines[0]) == ("stop.eval_return=-80" not in overrides)


@pytest.mark.parametrize(("overrides", "pointed_at"), [
    (["env.id=Pendulum-v1", "algo.name=td3"], "pendulum"),
    (["env.id=ALE/Pong-v5", "network.hidden=[64]"], "pong"),
    (["env.id=HalfCheetah-v4", "algo.name=td3"], "halfcheetah"),  # written for v5: it serves every version
    (["env.id=Hopper-v5", "algo.name=sac"], "hopper"),
    (["env.id=Walker2d-v4", "algo.name=sac"], "walker2d"),
    (["env.id=Ant-v5", "algo.name=td3"], "ant"),
    (["env.id=Humanoid-v4", "algo.name=sac"], "humanoid"),
    (["env.id=Acrobot-v1"], None),  # no shipped config is written for it
    (["env.id=CartPole-v0"], None),  # another version of the config's own env: no other config to point at
])
def test_the_warning_names_the_shipped_config_written_for_the_env(overrides, pointed_at):
    config = load_config(None, overrides)
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    _, (line,) = fit_to_env(config, spec, config_origin("the default config", {}, overrides))
    if pointed_at is None:
        assert "raypex train" not in line, line
    else:
        assert line.endswith(f"; configs/{pointed_at}.yaml is written for it: raypex train {pointed_at}"), line


def test_the_configs_own_env_keeps_its_settings_and_says_nothing():
    config = load_config(ROOT / "configs" / "pendulum.yaml", ["stop.env_steps=5000"])
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    assert fit_to_env(config, spec, config_origin("the pendulum config", {"env": {"id": "Pendulum-v1"}}, [])) == (config, [])
    assert fit_to_env(config, spec, None) == (config, [])  # a resumed run's config is its env's already


def test_a_file_named_raypex_in_the_working_directory_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    """The one name a user's file could shadow us by (every part of raypex is inside the package)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raypex.py").write_text("x = 1\n")
    assert main(["train", "--local"]) == 2
    err = capsys.readouterr().err
    assert err == (f"raypex: error: {tmp_path / 'raypex.py'} would be imported in place of raypex by the run's actors "
                   f"(they work in {tmp_path}); rename it\n")
    assert not (tmp_path / "runs").exists()


def test_pixels_on_a_flat_config_pass_once_the_user_sized_the_run_for_them():
    """Refused as the config stands (the bad-input table above); with the network, replay or learner
    set on the command line the choice is the user's, and only the warning line remains."""
    overrides = ["env.id=ALE/Pong-v5", "network.hidden=[64]", "replay.capacity=20000"]
    config = load_config(None, overrides)
    spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
    fitted, lines = fit_to_env(config, spec, config_origin("the default config", {}, overrides))
    assert len(lines) == 1 and lines[0].startswith("warning: env.id ALE/Pong-v5 is not CartPole-v1") and \
        fitted.stop.eval_return is None  # ALE names no reward threshold


def test_the_replay_is_measured_against_the_memory_it_will_live_in():
    """Host memory, except replay.storage device on a GPU learner, where the GPU's (as nvidia-smi
    reports it: the driver opens no CUDA context to ask)."""
    import shutil

    import psutil

    from raypex.cluster.plan.env_fit import replay_room

    host = ("this machine's", psutil.virtual_memory().total)
    assert replay_room(load_config(None, [])) == host
    assert replay_room(load_config(None, ["replay.storage=device", "learner.device=cpu"])) == host
    on_gpu = replay_room(load_config(None, ["replay.storage=device", "learner.device=cuda"]))
    if shutil.which("nvidia-smi") is None:
        assert on_gpu == host
    else:
        assert on_gpu[0] == "the GPU's" and 2**30 < on_gpu[1] < host[1] * 64


def test_the_replays_size_is_said_in_one_line():
    """Shards x capacity x bytes each, and where it lives (refused before anything starts when it
    does not fit: BAD_TRAIN_ARGS above)."""
    from raypex.cluster.plan.env_fit import replay_line

    config = load_config(None, ["collectors.num=2", "replay.capacity=1000"])
    spec = inspect_env("CartPole-v1", {}, 4)
    line = replay_line(config, spec, "host")  # a CPU learner's, or a GPU learner's when replay did not fit there
    assert line == "replay: 2 shards x 1,000 transitions x 48 B = 96 KB, in the learner's process", line
    assert replay_line(config, spec, "device").endswith("in the learner's process, in its GPU's memory")


def test_an_older_runs_evaluation_period_in_epochs_becomes_the_env_steps_they_held(tmp_path, capsys):
    """A run directory from before evaluations were due by env steps resumes and evaluates as it
    did; a config written now with eval.every_epochs is told what replaced it."""
    pendulum = {"learner": {"updates_per_epoch": 50, "micro_batch": 256}, "replay": {"samples_per_insert": 256},
                "eval": {"every_epochs": 5, "episodes": 20}}
    upgraded = saved_config_upgraded(pendulum)
    assert upgraded["eval"] == {"every_env_steps": 250, "episodes": 20} and pendulum["eval"]["every_epochs"] == 5
    assert validate(upgraded).eval.every_env_steps == 250
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(pendulum))
    assert saved_run_config(tmp_path).eval.every_env_steps == 250  # what eval, export and resume read
    with pytest.raises(ConfigError, match="no config.yaml there"):
        saved_run_config(tmp_path / "elsewhere")
    assert saved_config_upgraded({"eval": {"every_epochs": 2}})["eval"] == {"every_env_steps": 800}  # CartPole's defaults
    unlimited = saved_config_upgraded({"replay": {"samples_per_insert": 0}, "eval": {"every_epochs": 2}})
    assert unlimited["eval"] == {}  # no limiter: an epoch's env steps are unknown, the default period applies
    code = main(["config", "show", "cartpole", "eval.every_epochs=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("raypex: error: config key 'eval.every_epochs' was removed: evaluations "
                                            "are due by env steps (eval.every_env_steps")


def test_the_hard_target_period_is_counted_in_samples_and_an_older_runs_updates_become_samples(capsys):
    """learner.target_update_every_samples holds when the batch shape changes (MinAtar's 1,000
    updates of 128 are 62 of 512x4); a run directory that counted it in updates keeps its period."""
    from raypex.cluster.plan.settings import target_update_every

    minatar = load_config(Path("configs/minatar.yaml"), [])
    assert target_update_every(minatar.learner) == 62
    small = load_config(Path("configs/minatar.yaml"), ["learner.micro_batch=128", "learner.accumulation_steps=1"])
    assert target_update_every(small.learner) == 1000
    tiny = load_config(Path("configs/minatar.yaml"), ["learner.target_update_every_samples=1"])
    assert target_update_every(tiny.learner) == 1  # at least every update
    older = {"learner": {"micro_batch": 128, "accumulation_steps": 4, "target_update_every": 2500}}
    upgraded = saved_config_upgraded(older)
    assert upgraded["learner"] == {"micro_batch": 128, "accumulation_steps": 4, "target_update_every_samples": 1280000}
    assert target_update_every(validate(upgraded).learner) == 2500
    code = main(["config", "show", "minatar", "learner.target_update_every=500"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("raypex: error: config key 'learner.target_update_every' was removed: "
                                            "the hard target period is counted in samples")


@pytest.mark.parametrize(("algo", "norm", "allowed"), [("dqn", "batch_renorm", "none or layer_norm"),
                                                       ("qrdqn", "batch_renorm", "none or layer_norm")])
def test_each_algorithm_is_told_which_critic_norms_it_has(algo, norm, allowed, capsys):
    env = "Pendulum-v1" if algo != "dqn" else "CartPole-v1"
    code = main(["config", "show", "cartpole", f"algo.name={algo}", f"env.id={env}", f"network.critic_norm={norm}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (f"raypex: error: config error: network.critic_norm {norm} is not for algo.name "
                                     f"{algo}; use {allowed}"), err


def test_the_api_is_listed_for_completion_and_each_eval_default_is_said_once(capsys):
    """dir(raypex) names what `raypex.` completes to (imported on first use), and every option of
    `raypex eval --help` states its default once."""
    import raypex

    assert {"train", "evaluate", "load_policy", "tune", "RunFailed", "UsageError"} <= set(dir(raypex))
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--episodes EPISODES", "--epsilon EPSILON", "--seed SEED", "--video FILE.png"):
        described = text.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert described.count("default") == 1, (option, described)


def test_a_script_beside_a_clone_imports_the_clones_raypex_and_runs_there_are_not_refused(tmp_path, monkeypatch):
    """`git clone` names the checkout raypex/: a script beside it imported that folder, an empty
    namespace ("cannot import name 'load_policy' from 'raypex' (unknown location)"). The checkout's
    root now stands in for its package, and the run's check for what would shadow raypex lets it be."""
    (tmp_path / "raypex").symlink_to(ROOT, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "from raypex import load_policy; import raypex, raypex.actors.envs; "
                           "print(raypex.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "raypex" / "__init__.py")
    monkeypatch.chdir(tmp_path)
    check_nothing_shadows_raypex(load_config(None, []))
