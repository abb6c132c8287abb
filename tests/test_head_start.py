"""The head start (cluster/local/head_start.py): a forked process trains the run's parts while Ray
starts, hands over a learner state and replay the run's own classes load, ends itself at
stop.env_steps or at its evaluation that solves the run, reports a failure instead of hanging, and
dies with the driver.

Each test drives it from a fresh Python process, as `raypex train` does: the pytest process has
torch loaded and more than one thread, where the driver would not fork one (`available()`).
"""

import json
import os
import pickle
import subprocess
import sys
import time
import uuid

import pytest

from actors.envs import inspect_env
from cluster.config.loading import load_config
from cluster.config.topology import plan_run
from cluster.driver.reaper import cluster_processes, still_running
from cluster.local.head_start import available

SMALL = ["replay.capacity=2000", "env.num_envs=4", "collectors.chunk_steps=8", "replay.min_size=64", "replay.error_buffer=64",
         "learner.micro_batch=32", "learner.updates_per_epoch=5"]

DRIVER = """
import pickle, sys
from actors.envs import inspect_env
from cluster.config.loading import load_config
from cluster.local.head_start import HeadStart, available

mode, overrides = sys.argv[1], sys.argv[2:]
config = load_config(None, overrides)
spec = inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack)
assert available() == (True, ""), available()
head = HeadStart(config, spec)
if mode == "orphan":
    print(head._process.pid, flush=True)
    sys.stdin.read()  # until the test kills this process
if mode == "after_its_end":  # it stops by itself (stop.env_steps, a failure) and sends before it is asked
    print("sent before asked:", head._conn.poll(120), file=sys.stderr)
if mode == "cores":  # a process started meanwhile (as Ray's are), with a second thread
    import os, subprocess
    started = subprocess.Popen([sys.executable, "-c", "import sys, threading; threading.Thread(target=sys.stdin.read)"
                                ".start(); print('ready', flush=True); sys.stdin.read()"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    started.stdout.readline()
    def cpus():  # the driver's, and each thread's of the process it started
        threads = [int(tid) for tid in os.listdir(f"/proc/{started.pid}/task")]
        return [sorted(os.sched_getaffinity(0)), [sorted(os.sched_getaffinity(tid)) for tid in threads]]
    split, during = [head._cores.core, sorted(head._cores.cpus)], cpus()
if mode == "interrupted":  # a signal (as the driver's handlers raise it) while it exports the solving weights
    import signal
    assert head._conn.poll(120)  # its notice that it solved: the export has begun
    def interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        head.hand_over(60)
        print("not interrupted", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted; solved:", head.solved(), "alive:", head._process.is_alive(), file=sys.stderr)
result = head.hand_over(60)
if mode == "cores":
    import json
    print(json.dumps({"split": split, "during": during, "after": cpus()}), file=sys.stderr)
    started.stdin.close()
assert not head._process.is_alive()
sys.stdout.buffer.write(pickle.dumps(result))
"""


def run_driver(mode: str, overrides: list[str], env: dict | None = None):
    done = subprocess.run([sys.executable, "-c", DRIVER, mode, *overrides], check=False, capture_output=True,
                          timeout=180,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return pickle.loads(done.stdout), done.stderr.decode()


def test_the_handover_is_a_learner_state_and_replay_the_runs_own_classes_load():
    result, _ = run_driver("at_once", SMALL)
    assert result.error is None, result.error
    # asked at once: it stops after its first epoch, at random before that (min_size + error_buffer ahead)
    assert result.epochs == 1 and result.updates == 5 and len(result.curve) == 1
    assert result.env_steps >= 128 and result.first_step_at < result.first_update_at
    import torch

    from learner.learner import Learner

    config = load_config(None, SMALL)
    plan = plan_run(config, inspect_env(config.env.id, config.env.kwargs, config.env.frame_stack))
    replay, _ = plan.learner.replay.build(torch.device("cpu"))
    for shard, state in enumerate(result.replay_states):
        replay.set_state(shard, state)
    assert replay.inserted == result.env_steps and replay.sampled == 5 * 32
    learner = Learner(plan.learner.settings, torch.device("cpu"), replay, lambda weights: None)
    learner.load_state_bytes(result.learner_state)
    assert learner.updates == 5 and learner.epochs == 1
    assert learner.train_epoch()["updates_in_epoch"] == 5  # trains on from the handed-over replay


def test_it_ends_by_itself_at_stop_env_steps_and_its_result_waits():
    result, err = run_driver("after_its_end", [*SMALL, "stop.env_steps=1000", "stop.eval_return=null"])
    assert err.strip().splitlines()[-1] == "sent before asked: True"
    assert result.error is None and 1000 <= result.env_steps < 1000 + 2 * 4 * 8 + 200, result.env_steps
    assert result.evaluations == [] and result.solved is None  # no stop.eval_return: nothing to evaluate for
    assert result.policy == b""  # nor a policy to make ahead
    assert result.curve[-1][0] == result.env_steps
    assert result.weights.version == result.epochs + 1  # its newest weights: a version per epoch


def test_it_evaluates_as_the_run_does_and_ends_at_the_evaluation_that_solves(tmp_path):
    """With stop.eval_return it evaluates its weights between epochs (the run's evaluator class,
    episodes and give-up bound) and stops at the first complete evaluation that reaches the target,
    handing over those weights: the run is solved before its learner actor exists."""
    result, err = run_driver("after_its_end", [*SMALL, "eval.episodes=10", "stop.eval_return=30"])
    assert err.strip().splitlines()[-1] == "sent before asked: True"  # it ended by itself, solved
    assert result.error is None and result.solved is not None and result.solved == result.evaluations[-1]
    finished_at, env_steps, solving = result.solved
    assert solving["complete"] and solving["mean"] >= 30 and solving["solved"]
    assert all(not evaluation["solved"] and evaluation["mean"] < 30 for _, _, evaluation in result.evaluations[:-1])
    # it trained no further than the solving evaluation: those are the weights it hands over
    assert solving["version"] == result.weights.version == result.epochs + 1 and env_steps == result.env_steps
    assert result.first_update_at < finished_at < time.time()
    # it exported those weights while the driver waited for its actors: the run's policy.pt2
    import numpy as np

    from learner.numpy_mlp import NumpyMLPQ
    from learner.policy_file import load_policy

    (tmp_path / "policy.pt2").write_bytes(result.policy)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    actions = np.asarray(load_policy(tmp_path / "policy.pt2").act(obs))
    assert np.array_equal(actions, NumpyMLPQ(result.weights.arrays).greedy_actions(obs))


def test_ray_and_the_driver_stay_off_its_core_until_the_handover():
    """While it trains, the driver and every process it starts (Ray's, the actors) run on the other
    CPUs, every thread of them; the handover gives them all back (cluster/local/cores.py)."""
    _, err = run_driver("cores", SMALL)
    seen = json.loads(err.strip().splitlines()[-1])
    (core, cpus), during, after = seen["split"], seen["during"], seen["after"]
    assert cpus == sorted(os.sched_getaffinity(0))
    assert after == [cpus, [cpus, cpus]], after
    if len(cpus) == 1:  # nothing to split
        assert core is None and during == after
        return
    others = [c for c in cpus if c != core]
    assert core == max(cpus) and during == [others, [others, others]], during


def test_a_signal_while_it_exports_the_solving_weights_leaves_the_result_coming():
    """The driver waits seconds for a solved head start's export when it asked for no actors; a
    Ctrl-C then ends the run with that result (hand_over_before_stopping asks again), so the wait
    it interrupts must leave the process be."""
    result, err = run_driver("interrupted", [*SMALL, "eval.episodes=10", "stop.eval_return=30"])
    assert "interrupted; solved: True alive: True" in err, err[-3000:]
    assert result.error is None and result.solved is not None and result.policy, result.error


def test_a_failure_in_it_comes_back_as_one_line(tmp_path):
    (tmp_path / "breaks_later.py").write_text(
        "import gymnasium as gym\n"
        "class Breaks(gym.Wrapper):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(gym.make('CartPole-v1'))\n"
        "        self.steps = 0\n"
        "    def step(self, action):\n"
        "        self.steps += 1\n"
        "        if self.steps > 200:\n"
        "            raise RuntimeError('the env broke')\n"
        "        return self.env.step(action)\n")
    result, _ = run_driver("after_its_end", [*SMALL, "env.id=breaks_later:Breaks"],
                           env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert result.error is not None and "the env broke" in result.error and "\n" not in result.error
    assert result.learner_state == b"" and result.replay_states == []


def test_it_dies_with_the_driver():
    marker = f"RAYPEX_HEAD_START_TEST={uuid.uuid4().hex}"
    key, value = marker.split("=")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, "orphan", *SMALL], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, key: value})
    try:
        pid = int(driver.stdout.readline())
        # the driver and its fork carry the marker: the fork's pid and start time, as the reaper knows them
        head_start = {p: started for p, started in cluster_processes(marker).items() if p == pid}
        assert list(head_start) == [pid] and still_running(head_start) == [pid]
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 10
    while still_running(head_start) and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting out a deadline: the kernel delivers the death signal on its own
    assert still_running(head_start) == [], f"the head start ({pid}) outlived its driver"


def test_this_pytest_process_may_not_fork_one():
    """Where torch is loaded (here, by other tests' imports) a fork would share its thread pools:
    `available()` refuses and says why, and `raypex train` goes on without a head start."""
    import torch  # noqa: F401

    may, why = available()
    assert may is False and "torch is loaded" in why


@pytest.mark.parametrize("value", ["on", "true"])
def test_head_start_takes_auto_or_off(value):
    from cluster.config.loading import ConfigError

    with pytest.raises(ConfigError, match="learner.head_start"):
        load_config(None, [f"learner.head_start={value}"])
    assert load_config(None, ["learner.head_start=off"]).learner.head_start == "off"
