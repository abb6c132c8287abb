"""`pip install .` as a user does it: one package, `raypex`, in a fresh virtual environment, and a
run from a directory whose own files are named like our folders (a user's `replay.py` once broke
every actor)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLIDING = ("actors", "learner", "replay", "cluster", "raypex_configs")


def source_copy(where: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones not ignored): a build in the
    checkout itself would reuse its build/ folder, where a deleted module lives on."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    return where


def install_into_fresh_venv(venv: Path, source: Path) -> None:
    """The core install (no extras), non-editable, resolved as .ci/run resolves the suite's."""
    subprocess.run([sys.executable, "-m", "uv", "venv", "-q", str(venv), "-p", sys.executable], check=True)
    install_into_venv(venv, source)


def install_into_venv(venv: Path, source: Path) -> None:
    """`pip install SOURCE` into `venv`, resolved as .ci/run resolves the suite's."""
    wheels = ["--find-links", "/opt/wheels"] if Path("/opt/wheels").is_dir() else []
    subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *wheels,
                    "-c", str(ROOT / ".ci" / "constraints.txt"), str(source)], check=True)


def test_pip_install_gives_one_package_and_a_run_beside_files_named_like_our_folders_trains(tmp_path):
    venv = tmp_path / "venv"
    install_into_fresh_venv(venv, source_copy(tmp_path / "source"))
    site = next((venv / "lib").glob("python*/site-packages"))
    ours = {p.name for p in site.iterdir() if p.name.startswith("raypex")}
    assert ours == {"raypex", f"raypex-{version()}.dist-info"}, ours
    assert not [name for name in COLLIDING if (site / name).exists()]
    assert (site / "raypex" / "configs" / "cartpole.yaml").is_file() and not (site / "raypex" / "tests").exists()

    work = tmp_path / "work"
    work.mkdir()
    for name in COLLIDING:  # importing any of these would end the process that did
        (work / f"{name}.py").write_text(f"raise SystemExit('the user file {name}.py was imported')\n")
    python = venv / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "RAYPEX_ADDRESS")}
    said = subprocess.run([str(python), "-c", "import raypex; print(raypex.__version__)"], cwd=work, env=clean,
                          capture_output=True, text=True, check=True)
    assert said.stdout.strip() == version()
    run = subprocess.run([str(venv / "bin" / "raypex"), "train", "cartpole", "--run-dir", "runs/beside",
                          "stop.eval_return=null", "stop.env_steps=3000", "eval.episodes=4"],
                         check=False, cwd=work, env=clean, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((work / "runs" / "beside" / "summary.json").read_text())
    assert summary["ended"] == "env_steps" and summary["env_steps"] >= 3000 and summary["collector_restarts"] == 0
    assert "was imported" not in run.stderr

    # a user's own package adds an algorithm through its entry point: the built-ins stay, and it trains
    install_into_venv(venv, user_algorithm_package(tmp_path / "userq"))
    listing = "from raypex.learner.algorithms.registry import names; print(*names())"
    listed = subprocess.run([str(python), "-c", listing], cwd=work, env=clean, capture_output=True, text=True,
                            check=True)
    assert listed.stdout.split() == ["dqn", "td3", "sac", "r2d2", "qrdqn", "iqn", "user-q"]
    run = subprocess.run([str(venv / "bin" / "raypex"), "train", "cartpole", "--run-dir", "runs/user-q",
                          "algo.name=user-q", "eval.video_every=0"],
                         check=False, cwd=work, env=clean, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((work / "runs" / "user-q" / "summary.json").read_text())
    assert summary["ended"] == "solved", summary
    assert "name: user-q" in (work / "runs" / "user-q" / "config.yaml").read_text()


def user_algorithm_package(where: Path) -> Path:
    """A user's package that registers `user-q` (DQN's step and acting under its own name and class) by the
    raypex.algorithms entry point, as its pyproject.toml declares it."""
    (where / "userq").mkdir(parents=True)
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "userq"\nversion = "0.1"\n\n'
        '[project.entry-points."raypex.algorithms"]\nuser-q = "userq.algorithm:UserQ"\n')
    (where / "userq" / "__init__.py").write_text("")
    (where / "userq" / "algorithm.py").write_text(
        "from raypex.learner.algorithms.dqn import DQN\n\n\n"
        "class UserQ(DQN):\n"
        "    name = 'user-q'\n\n"
        "    def build_step(self, settings, device, gather=None, precision=None):\n"
        "        from raypex.learner.dqn_step import DQNStep\n\n"
        "        return DQNStep(settings, device, gather, precision)\n")
    return where


def version() -> str:
    text = (ROOT / "raypex" / "__init__.py").read_text()
    return text.split('__version__ = "')[1].split('"')[0]
