"""cluster.api from a script: a run started without blocking hands each epoch to its callback and
stops cleanly when asked; Ctrl-C (a notebook's interrupt) ends a blocking run cleanly and returns
its result, and the process's next run starts as usual; mistakes raise the command's one-line UsageError before anything is
written. (The README's example, run by tests/test_readme_lines.py, covers a blocking run.)"""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import yaml

from raypex.cluster.api import RunFailed, RunningRun, UsageError, resolve_run_config, train
from tests.test_integration import SHORT


def test_a_run_without_blocking_reports_its_epochs_and_stops_when_asked(tmp_path):
    first_epoch = threading.Event()
    epochs = []

    def on_epoch(metrics):
        epochs.append(metrics)
        first_epoch.set()

    handler = signal.getsignal(signal.SIGINT)
    running = train("cartpole", [*SHORT, "stop.env_steps=100000000"], run_dir=tmp_path / "run", on_epoch=on_epoch,
                    block=False)
    assert isinstance(running, RunningRun) and not running.done()
    assert first_epoch.wait(120), "no epoch within 120 s"
    running.stop()
    result = running.wait(120)
    assert running.done() and result.ended == "stopped" and result.exit_code == 0, result.summary
    assert result.summary == json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [m["epoch"] for m in epochs] == list(range(1, result.summary["epochs"] + 1))
    assert all("losses/td_loss" in m and m["env_steps"] > 0 for m in epochs)
    assert result.policy.act([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    assert signal.getsignal(signal.SIGINT) is handler  # the caller's Ctrl-C handler is its own again


def test_a_stop_callback_ends_a_run_cleanly_and_resume_continues_it_with_its_evaluations_reported(tmp_path):
    run_dir, standings, evaluations = tmp_path / "run", [], []

    def past_3000(standing):
        standings.append(standing)
        return standing["env_steps"] >= 3000

    stopped = train("cartpole", [*SHORT, "stop.env_steps=100000000"], run_dir=run_dir, stop_when=past_3000,
                    on_eval=evaluations.append)
    assert (stopped.ended, stopped.exit_code) == ("stopped", 0), stopped.summary
    assert 3000 <= stopped.summary["env_steps"] < 100000000 and (run_dir / "policy.pt2").is_file()
    assert standings[-1]["env_steps"] >= 3000 > standings[0]["env_steps"]
    assert set(standings[-1]) == {"env_steps", "wall_s", "epochs", "episode_return", "eval_return"}
    first = stopped.summary["env_steps"]
    assert [e["return_mean"] for e in evaluations][-1] == stopped.summary["final_eval_return"]
    assert all(e["return_min"] <= e["return_mean"] and e["weights_version"] >= 1 for e in evaluations)

    with pytest.raises(UsageError, match="resume=RUN_DIR takes the config from RUN_DIR"):
        train("cartpole", resume=run_dir)
    evaluations.clear()
    resumed = train(resume=run_dir, overrides={"stop.env_steps": first + 2000}, on_eval=evaluations.append)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert resumed.run_dir == run_dir and resumed.summary == summary
    assert (resumed.ended, resumed.exit_code) == ("env_steps", 0) and summary["env_steps"] >= first + 2000, summary
    assert summary["epochs"] > stopped.summary["epochs"] and evaluations  # it went on from the checkpoint
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["stop"]["env_steps"] == first + 2000 and saved["replay"]["min_size"] == 500  # its own, overridden


def test_a_callback_that_raises_fails_the_run_with_its_final_files_written(tmp_path):
    def broken(metrics):
        if metrics["epoch"] == 3:
            raise KeyError("no_such_metric")

    with pytest.raises(RunFailed, match=r"^the on_epoch callback raised KeyError: 'no_such_metric'$") as failed:
        train("cartpole", [*SHORT, "stop.env_steps=100000000"], run_dir=tmp_path / "run", on_epoch=broken)
    assert isinstance(failed.value.__cause__, KeyError) and "raise KeyError" in failed.value.log.read_text()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ended"] == "failed: the on_epoch callback raised KeyError: 'no_such_metric'", summary
    assert (tmp_path / "run" / "policy.pt2").is_file() and list((tmp_path / "run" / "checkpoints").glob("ckpt-*"))


def test_configs_come_as_names_dicts_or_configs_and_mistakes_raise_one_line(tmp_path):
    from_name = resolve_run_config("cartpole", {"learner.lr": 0.01, "env.kwargs": {"sutton_barto_reward": True}}, seed=3)
    assert (from_name.learner.lr, from_name.seed, from_name.env.kwargs) == (0.01, 3, {"sutton_barto_reward": True})
    from_dict = resolve_run_config({"learner": {"lr": 0.02}}, ["collectors.num=3"])
    assert (from_dict.learner.lr, from_dict.collectors.num) == (0.02, 3)
    assert resolve_run_config(from_dict, {"seed": 5}).collectors.num == 3
    with pytest.raises(UsageError, match=r"learner.lr: Input should be greater than 0 \(got -1\)"):
        train("cartpole", {"learner.lr": -1}, run_dir=tmp_path / "bad")
    with pytest.raises(UsageError, match=r"env.id 'nowhere:Env': no module 'nowhere'"):
        train("cartpole", {"env.id": "nowhere:Env"}, run_dir=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written


def test_ctrl_c_ends_a_blocking_run_cleanly_and_returns_its_result(tmp_path, joining_environment):
    """On a cluster kept up between runs (RAYPEX_ADDRESS), as a sweep script's runs: after the
    interrupted run, the same process's next run joins again."""
    run, again = tmp_path / "run", tmp_path / "again"
    script = (f"from raypex.cluster.api import train\n"
              f"result = train('cartpole', {[*SHORT, 'stop.env_steps=100000000']!r}, run_dir={str(run)!r})\n"
              "print('ended', result.ended, result.exit_code, result.policy.act([0.0, 0.0, 0.0, 0.0]))\n"
              f"second = train('cartpole', {[*SHORT, 'stop.env_steps=1000']!r}, run_dir={str(again)!r})\n"
              "print('then', second.ended, second.summary['env_steps'])\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **joining_environment})
    seen = []
    try:
        for line in proc.stderr:  # the first progress line: training has started
            seen.append(line)
            if "env steps" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
    err = "".join(seen) + rest
    assert proc.returncode == 0 and out.startswith("ended interrupted 130 "), (out, err[-3000:])
    then, ended, steps = out.splitlines()[1].split()
    assert (then, ended) == ("then", "env_steps") and int(steps) >= 1000, out
    assert err.count(f"RAYPEX_ADDRESS: joining the Ray cluster at {joining_environment['RAYPEX_ADDRESS']}") == 2, err
    assert json.loads((run / "summary.json").read_text())["ended"] == "interrupted"
    assert list((run / "checkpoints").glob("ckpt-*.json"))  # the final checkpoint was written
