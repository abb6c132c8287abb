"""A user's own env: `env.id` as module:Class, module:factory, module:RegisteredId or
path/to/file.py:Name, found from the working directory; the check it passes before any actor
starts (each fault one line naming the env and its file, exit 2). A run on a user's file from its
directory, and `raypex eval` of its policy, are README lines (tests/test_readme_lines.py runs them
with the console script, as a user types them); a cluster whose nodes never see the file is
tests/test_separate_hosts.py."""

import json
import re
import subprocess
import sys

import gymnasium as gym
import pytest

from raypex.actors.env_ids import UnsupportedEnv, code_to_ship, registered_id
from raypex.actors.envs import inspect_env
from raypex.cluster.commands.cli import main

CORRIDOR = '''import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right to the end of a corridor."""

    def __init__(self, length: int = 6):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = self.steps = 0

    def _obs(self):
        return np.array([self.position / self.length, self.steps / 40], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        self.steps += 1
        arrived = self.position >= self.length
        return self._obs(), 1.0 if arrived else -0.01, arrived, self.steps >= 40, {}


def make_corridor(length: int = 6):
    return Corridor(length)


gym.register("Corridor-v0", entry_point=Corridor)
'''

GOOD = '''import gymnasium as gym
import numpy as np


class Env(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}
'''

# Each fault: (what replaces GOOD's text, the line the driver must print)
FAULTS = {
    "import_error": (GOOD.replace("import numpy as np", "import numpy as np\nnoise = 1 / 0"),
                     "importing import_error failed at import_error.py:3: ZeroDivisionError: division by zero"),
    "missing_package": ("import not_installed_anywhere\n" + GOOD,
                        "failed at missing_package.py:1: ModuleNotFoundError: No module named 'not_installed_anywhere'"),
    "wrong_space": (GOOD.replace("self.action_space = gym.spaces.Discrete(2)", "self.action_space = 2"),
                    "(wrong_space.py): action_space is int, not a gymnasium.spaces.Space"),
    "no_seed": (GOOD.replace("def reset(self, *, seed=None, options=None):\n        super().reset(seed=seed)",
                             "def reset(self):"),
                "(no_seed.py): reset() takes no seed argument"),
    "wrong_shape": (GOOD.replace("return np.zeros(2, np.float32), 0.0", "return np.zeros(3, np.float32), 0.0"),
                    "(wrong_shape.py): step() returned an observation of shape (3,), where observation_space says (2,)"),
    "old_api": (GOOD.replace("0.0, False, False, {}", "0.0, False, {}"),
                "(old_api.py): step() returned 4 values, expected 5"),
    "raises_in_step": (GOOD.replace("return np.zeros(2, np.float32), 0.0, False, False, {}", "return self.nothing"),
                       "step() failed at raises_in_step.py:15: AttributeError"),
}


@pytest.fixture
def in_dir(tmp_path, monkeypatch):
    """The test's working directory, holding corridor.py, with Python's path as a user's is."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    (tmp_path / "corridor.py").write_text(CORRIDOR)
    yield tmp_path
    for name in ["corridor", *FAULTS]:
        sys.modules.pop(name, None)


def test_each_form_of_env_id_builds_the_env_and_names_what_to_ship(in_dir):
    for env_id in ("corridor:Corridor", "corridor:make_corridor", "corridor:Corridor-v0",
                   f"{in_dir / 'corridor.py'}:Corridor", "corridor.py:make_corridor"):
        env = gym.make(registered_id(env_id))
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2,) and env.action_space.n == 2, env_id
        assert inspect_env(env_id, {}).obs_shape == (2,)
        assert code_to_ship(env_id) == in_dir.resolve(), env_id
    assert gym.make(registered_id("corridor:make_corridor"), length=2).unwrapped.length == 2  # env.kwargs reach it
    # code installed on the path travels with the install, not with the run
    assert code_to_ship("gymnasium.envs.classic_control.cartpole:CartPoleEnv") is None
    assert code_to_ship("CartPole-v1") is None and code_to_ship("ALE/Pong-v5") is None
    with pytest.raises(UnsupportedEnv, match="corridor.py has no 'Nowhere'"):
        registered_id("corridor:Nowhere")
    with pytest.raises(UnsupportedEnv, match="no file elsewhere/hallway.py"):
        registered_id("elsewhere/hallway.py:Hallway")


@pytest.mark.parametrize("name", FAULTS)
def test_an_env_file_with_a_fault_is_one_line_naming_it_and_exit_2(name, in_dir, capsys):
    text, expected = FAULTS[name]
    (in_dir / f"{name}.py").write_text(text)
    assert main(["train", f"env.id={name}:Env"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"raypex: error: env.id '{name}:Env'"), err
    assert expected in err, err
    assert not (in_dir / "runs").exists()  # nothing half-written


def test_debug_shows_the_users_own_traceback_before_the_line(in_dir, capsys):
    text, expected = FAULTS["raises_in_step"]
    (in_dir / "raises_in_step.py").write_text(text)
    assert main(["train", "env.id=raises_in_step:Env", "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and 'raises_in_step.py", line 15, in step' in err, err
    assert err.strip().splitlines()[-1].startswith("raypex: error:") and expected in err


@pytest.mark.parametrize("env_id", ["corridor:Corridor", "envs/corridor.py:Corridor"])
def test_eval_finds_the_runs_own_env_code_from_any_directory(env_id, in_dir, tmp_path_factory):
    """config.yaml records where the code was found (env.code_dir): `raypex eval` in a fresh
    process elsewhere builds the same env, with an epsilon and a video of its first episode."""
    (in_dir / "envs").mkdir()
    (in_dir / "envs" / "corridor.py").write_text(CORRIDOR)
    assert main(["train", "--local", "--run-dir", "runs/c", f"env.id={env_id}", "stop.env_steps=1500",
                 "replay.min_size=300", "eval.episodes=4", "eval.every_env_steps=2000"]) == 0
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    evaluated = subprocess.run([sys.executable, "-m", "raypex", "eval", str(in_dir / "runs" / "c"), "--episodes", "6",
                                "--epsilon", "0.1", "--video", "first.png"], cwd=elsewhere, capture_output=True,
                               text=True, timeout=120, check=False)
    assert evaluated.returncode == 0, evaluated.stderr
    assert re.fullmatch(r"mean return -?\d+\.\d\d over 6 episodes \(min .*\)\nno video: this env has no pictures\n",
                        evaluated.stdout), evaluated.stdout
    assert "code_dir: " + str(in_dir) in (in_dir / "runs" / "c" / "config.yaml").read_text()
    # the policy file itself, as a sweep's last line names its best policy
    by_file = subprocess.run([sys.executable, "-m", "raypex", "eval", str(in_dir / "runs" / "c" / "policy.pt2"),
                              "--episodes", "6", "--epsilon", "0.1"], cwd=elsewhere, capture_output=True, text=True,
                             timeout=120, check=False)
    assert by_file.returncode == 0 and by_file.stdout.splitlines()[0] == evaluated.stdout.splitlines()[0], by_file


def test_an_env_that_never_ends_an_episode_is_evaluated_to_the_cap_in_a_run_and_by_raypex_eval(in_dir, capsys):
    """GOOD's episodes never end (no time limit, never terminated): the run's evaluations and
    raypex eval stop each episode at eval.max_episode_steps and say so, where both ran forever."""
    (in_dir / "endless.py").write_text(GOOD)
    assert main(["train", "--local", "--run-dir", "runs/endless", "env.id=endless:Env", "stop.env_steps=600",
                 "replay.min_size=300", "eval.episodes=2", "eval.every_env_steps=300", "eval.max_episode_steps=40"]) == 0
    summary = json.loads((in_dir / "runs" / "endless" / "summary.json").read_text())
    assert summary["final_eval_return"] == 0.0, summary
    capsys.readouterr()
    assert main(["eval", "runs/endless", "--episodes", "3"]) == 0
    assert capsys.readouterr().out == ("mean return 0.00 over 3 episodes (min 0.00, max 0.00, std 0.00; 3 of them "
                                       "stopped at eval.max_episode_steps, 40 steps, scored so far)\n")


def test_an_env_raising_mid_run_in_one_process_ends_it_in_one_line_naming_its_line(in_dir, capsys):
    """`--local`: the env's error (its type, message and line) is the run's one failure line, the
    final files are written, the traceback goes to error.log, and no resume is suggested (it would
    meet the same error)."""
    late = GOOD.replace("        return np.zeros(2, np.float32), 0.0, False, False, {}",
                        "        self.steps = getattr(self, 'steps', 0) + 1\n"
                        "        if self.steps > 40:\n"
                        "            raise RuntimeError(f'the late env broke at step {self.steps}')\n"
                        "        return np.zeros(2, np.float32), 0.0, False, self.steps % 10 == 0, {}")
    (in_dir / "late.py").write_text(late)
    capsys.readouterr()
    assert main(["train", "--local", "--run-dir", "runs/late", "env.id=late:Env", "replay.min_size=256"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    line = late.splitlines().index("            raise RuntimeError(f'the late env broke at step {self.steps}')") + 1
    assert last == (f"raypex: run failed: RuntimeError: the late env broke at step 41 (late.py:{line}); "
                    f"its traceback: {in_dir / 'runs' / 'late' / 'error.log'}".replace(str(in_dir) + "/", "")), last
    run = in_dir / "runs" / "late"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == f"failed: RuntimeError: the late env broke at step 41 (late.py:{line})"
    assert f'late.py", line {line}' in (run / "error.log").read_text()
