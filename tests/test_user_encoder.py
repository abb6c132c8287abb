"""A user's encoder from a package of theirs, installed beside raypex in a fresh virtual environment
as a user installs both: CartPole solves with it, MinAtar learns with its CNN, `raypex eval` plays
the policy.pt2 it gave, and an encoder of the wrong output or an unimportable path is one line,
exit 2, before anything is written."""

import json
import os
import subprocess
from pathlib import Path

from tests.test_install import install_into_fresh_venv, install_into_venv, source_copy
from tests.test_readme_lines import block_holding

# the guide's encoders, as a user saves them, and one whose output is not [B, F]
ENCODERS = block_holding("# myencoders/__init__.py") + '''


class Unflattened(nn.Module):
    def __init__(self, observation_space):
        super().__init__()
        self.net = nn.Conv2d(observation_space.shape[0], 4, 3)

    def forward(self, obs):
        return self.net(obs)
'''


def encoder_package(where: Path) -> Path:
    (where / "myencoders").mkdir(parents=True)
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "myencoders"\nversion = "0.1"\n')
    (where / "myencoders" / "__init__.py").write_text(ENCODERS)
    return where


def test_an_encoder_from_the_users_installed_package_learns_cartpole_and_minatar(tmp_path):
    venv = tmp_path / "venv"
    install_into_fresh_venv(venv, Path(f"{source_copy(tmp_path / 'source')}[minatar]"))
    install_into_venv(venv, encoder_package(tmp_path / "myencoders"))
    work = tmp_path / "work"
    work.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "RAYPEX_ADDRESS")}

    def raypex(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "raypex"), *args], check=False, cwd=work, env=clean,
                              capture_output=True, text=True, timeout=400)

    solved = raypex("train", "cartpole", "network.encoder=myencoders:Flat", "network.encoder_kwargs={features: 32}",
                    "--run-dir", "runs/flat")
    assert solved.returncode == 0, solved.stderr[-3000:]
    summary = json.loads((work / "runs" / "flat" / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
    played = raypex("eval", "runs/flat", "--episodes", "10")
    assert played.returncode == 0 and float(played.stdout.split()[2]) >= 400, (played.stdout, played.stderr[-2000:])

    learned = raypex("train", "minatar", "network.encoder=myencoders:SmallConv", "stop.env_steps=200000",
                     "--run-dir", "runs/conv")
    assert learned.returncode == 0, learned.stderr[-3000:]
    summary = json.loads((work / "runs" / "conv" / "summary.json").read_text())
    # a random policy scores about 0.5 on Breakout; 200,000 env steps of the config's QR-DQN reach 3 to 7 here
    assert summary["final_eval_return"] >= 2.5, summary
    assert "myencoders" in (work / "runs" / "conv" / "config.yaml").read_text()

    wrong = raypex("train", "minatar", "--run-dir", "runs/wrong", "network.encoder=myencoders:Unflattened")
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines() == [
        "raypex: error: network.encoder myencoders:Unflattened must map a batch [2, 4, 10, 10] to float features "
        "[2, F]; it gave [2, 4, 8, 8]"], wrong.stderr
    missing = raypex("train", "cartpole", "--run-dir", "runs/missing", "network.encoder=my_encoders:Flat")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "raypex: error: network.encoder my_encoders:Flat: my_encoders cannot be imported (No module named "
        "'my_encoders'); install the package that holds it on every node"], missing.stderr
    assert not (work / "runs" / "wrong").exists() and not (work / "runs" / "missing").exists()
