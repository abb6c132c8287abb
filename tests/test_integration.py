"""raypex train/eval end to end on real Ray clusters (a local one, and three simulated nodes).

Each test runs the real command, in this process or (joining the suite's kept-up cluster,
tests/kept_up_cluster.py) in one of its own. The runs are short (a few thousand env steps);
the README's own lines (solving CartPole, the bench stages) run as a user types them in
tests/test_readme_lines.py.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import ray
from ray.cluster_utils import Cluster
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmarks import curves
from raypex.cluster.commands.cli import main
from raypex.cluster.driver.reference import SUMMARY_FIELDS, undocumented_tags
from raypex.cluster.driver.startup import PHASES
from tests.kept_up_cluster import raypex_joined

# A short run: learning starts early and every epoch evaluates and checkpoints often.
SHORT = ["stop.eval_return=null", "replay.min_size=500", "eval.every_env_steps=400",
         "eval.episodes=4", "checkpoint.every_epochs=5"]

CPU_TAGS = {
    "charts/episodic_return", "charts/episodic_length", "charts/SPS", "eval/return_mean", "losses/td_loss",
    "losses/q_values", "learner/updates_per_s", "learner/samples_per_s", "learner/wait_fraction",
    "replay/size", "replay/insert_rate", "replay/sample_rate", "replay/replay_ratio", "collector/epsilon",
    "perf/policy_lag_mean", "perf/policy_lag_max", "perf/broadcast_ms",
}


def scalars(run_dir: Path) -> dict[str, list]:
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_short_run_writes_tags_checkpoints_and_resumes(tmp_path, capsys, joining_environment):
    run = tmp_path / "run"
    done = raypex_joined(["train", "--run-dir", str(run), "--seed", "3", "stop.env_steps=4000", *SHORT,
                          "eval.video_every=3"], joining_environment)
    assert done.returncode == 0, done.stderr[-3000:]
    first = summary(run)
    assert first["env_steps"] >= 4000 and first["seed"] == 3 and first["time_to_solve_s"] is None
    assert min(first["replay_size_per_shard"]) > 0  # every collector's shard is filled
    assert first["learner_samples_per_s"] > 0 and 0 <= first["learner_wait_fraction"] < 1
    # where the start went (raypex bench --stage startup): every moment, each after what it needs
    start = first["startup_s"]
    assert list(start) == list(PHASES), start
    driver = [start[p] for p in ("env_checked", "ray_connected", "resources_reserved", "actors_asked")]
    assert driver == sorted(driver) and driver[0] > 0, start
    assert start["collector_constructed"] <= start["first_env_step"] < first["wall_s"], start
    assert start["learner_constructed"] <= start["learner_warmed_up"] <= start["first_update"] < first["wall_s"], start
    for name in ("config.yaml", "policy.pt2", "placement.json"):
        assert (run / name).is_file(), name
    checkpoints = sorted((run / "checkpoints").glob("ckpt-*.pt"))
    assert checkpoints and all(p.with_suffix(".json").is_file() for p in checkpoints)

    tags = scalars(run)
    assert CPU_TAGS <= set(tags), CPU_TAGS - set(tags)
    # the run-directory reference is generated from these: what the run wrote is what it documents
    assert set(first) == set(SUMMARY_FIELDS), set(first) ^ set(SUMMARY_FIELDS)
    assert not undocumented_tags(set(tags)), undocumented_tags(set(tags))
    assert "learner/grad_scale" not in tags  # no scaler in fp32 on CPU
    assert max(e.step for e in tags["charts/SPS"]) >= 4000  # plotted against global env steps
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert "learner:" in acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
    # the HPARAMS tab's entry, the custom-scalars layout, one curve per collector
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(acc.PluginTagToContent("hparams"))
    assert "custom_scalars__config__" in acc.PluginTagToContent("custom_scalars")
    assert {"collector/0/epsilon", "collector/1/epsilon", "collector/0/episodic_return"} <= set(tags)
    assert tags["hparams/final_eval_return"][-1].value == pytest.approx(first["final_eval_return"])
    # every 3rd evaluation's first episode as an animated PNG, in the run directory and TensorBoard
    videos = sorted((run / "videos").glob("eval-v*.png"))
    assert videos and videos[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"acTL" in videos[0].read_bytes()
    assert "eval/video" in acc.Tags()["images"]
    # the results page's curves: this run's evaluations beside another library's CSV and a paper's point
    other = tmp_path / "other.csv"
    other.write_text("env_steps,seconds,eval_return_mean\n1000,2.5,20.0\n3000,6.0,60.0\n")
    published = tmp_path / "published.csv"  # a paper's per-sample curve: no seconds
    published.write_text("env_steps,eval_return_mean,seeds\n0,9.0,10\n5000,150.0,10\n")
    drawn = tmp_path / "curves.png"
    assert curves.main([str(drawn), f"raypex={run}", f"other={other}", f"paper={published}",
                        "--published", "paper=4000:100"]) == 0
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    steps, seconds, returns = curves.eval_curve(run)
    assert steps == [e.step for e in tags["eval/return_mean"]] and seconds == sorted(seconds) and seconds[0] > 0
    assert returns == [e.value for e in tags["eval/return_mean"]]
    # policy.pt2 is the best-evaluated version, not whatever the last epoch left
    assert first["policy_eval_return"] == pytest.approx(max(e.value for e in tags["eval/return_mean"]))
    first_policy = (run / "policy.pt2").read_bytes()
    # the resumes train 4,000 env steps past where the first run ended: it counts on until its
    # collectors stop, and under load (CI's suite) 4,000 became 8,459, past a fixed 8,000
    next_stop = first["env_steps"] + 4000

    # A newest checkpoint whose networks this raypex's learner cannot take (an older raypex's, say:
    # intact, its manifest agrees) is refused once the learner has it, in one line, and the run
    # directory is left as it was: the final checkpoint of the learner that refused it once
    # replaced it under the same name.
    assert len(checkpoints) >= 2
    with_other_networks(checkpoints[-1])
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    refused = raypex_joined(["train", "--resume", str(run), f"stop.env_steps={next_stop}"], joining_environment)
    said = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and said[-1].startswith(f"raypex: error: --resume {run}: this checkpoint's "
                                                           "networks do not fit"), refused.stderr[-3000:]
    assert said[-1].endswith(f"nothing in {run} was changed") and "Traceback" not in refused.stderr
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before

    # Resume from a damaged newest checkpoint (cut short): it falls back to the one before, and
    # counters continue from there; the run goes on to the new stop.
    checkpoints[-1].write_bytes(checkpoints[-1].read_bytes()[:1000])
    last = json.loads(checkpoints[-2].with_suffix(".json").read_text())
    resumed_at = time.time()
    resumed = raypex_joined(["train", "--resume", str(run), f"stop.env_steps={next_stop}"], joining_environment)
    err = resumed.stderr
    assert resumed.returncode == 0, err[-3000:]
    assert f"checkpoint {checkpoints[-1].stem} is damaged" in err
    # replay came back with the set: the shards went on from what they held then
    restored = re.search(rf"replay restored from the checkpoint of epoch {last['epochs']} \((\d+) transitions", err)
    assert restored, err
    assert sum(summary(run)["replay_inserted_per_shard"]) > int(restored.group(1)) > 0
    second = summary(run)
    # counters go on from the checkpoint it fell back to, not from where the first run ended
    assert second["env_steps"] >= next_stop and second["epochs"] > last["epochs"]
    # the resumed run's curve starts from the checkpoint's count (the first run's own points can
    # pass 4,000: it counted on until its collectors stopped)
    resumed_steps = [e.step for e in scalars(run)["losses/td_loss"] if e.wall_time >= resumed_at]
    assert max(resumed_steps) >= next_stop and min(resumed_steps) >= last["env_steps"]
    assert f"stop:\n  env_steps: {next_stop}" in (run / "config.yaml").read_text()
    # the done line tells this command's time from the run's whole
    took = re.search(r"^done: \d+ env steps in this command ([\d.]+)s, the run ([\d.]+)s,", err, re.MULTILINE)
    # the run's time is summary.json's, printed to a tenth
    assert took and float(took.group(1)) < float(took.group(2)), err
    assert took.group(2) == f"{second['wall_s']:.1f}", err
    # The resumed run exports its best evaluation only when it beats the policy.pt2 it found.
    best = max(e.value for e in scalars(run)["eval/return_mean"])
    assert second["policy_eval_return"] == pytest.approx(max(best, first["policy_eval_return"]))
    if second["policy_eval_return"] == first["policy_eval_return"]:
        assert "policy.pt2 kept" in err and (run / "policy.pt2").read_bytes() == first_policy, err

    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "5"]) == 0
    assert re.match(r"mean return \d+\.\d+ over 5 episodes", capsys.readouterr().out)


def with_other_networks(checkpoint: Path) -> None:
    """Rewrite a DQN checkpoint so that its first layer has 3 units, with a manifest that agrees
    (size and SHA-256): intact, but of networks the run's learner does not build."""
    import hashlib
    import io

    import torch

    state = torch.load(checkpoint, weights_only=False)
    online = state["step"]["online"]
    first = next(key for key in online if key.endswith("weight"))
    online[first] = torch.zeros(3, *online[first].shape[1:])
    buffer = io.BytesIO()
    torch.save(state, buffer)
    checkpoint.write_bytes(buffer.getvalue())
    manifest = checkpoint.with_suffix(".json")
    written = json.loads(manifest.read_text())
    written.update(learner_bytes=len(buffer.getvalue()), learner_sha256=hashlib.sha256(buffer.getvalue()).hexdigest())
    manifest.write_text(json.dumps(written))


def train_on_three_one_cpu_nodes(run: Path, *overrides: str) -> int:
    """`raypex train --address` with 3 collectors on a simulated cluster of three 1-CPU nodes;
    the exit code, once the run has left the cluster (disconnected, the cluster still up)."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        code = main(["train", "--address", cluster.address, "--run-dir", str(run), "collectors.num=3", *overrides])
        assert not ray.is_initialized()  # a joined run disconnects: this process may join again
    finally:
        ray.shutdown()
        cluster.shutdown()
    return code


def test_three_one_cpu_nodes_hold_the_learner_and_three_pairs(tmp_path):
    """The learner fills one node; three 0.4-CPU collectors need the other two, two on one of them:
    STRICT_SPREAD over three nodes (which once made this run fail) cannot hold them."""
    run = tmp_path / "packed"
    code = train_on_three_one_cpu_nodes(run, "learner.num_cpus=1", "stop.env_steps=4000", *SHORT)
    assert code == 0
    placement = json.loads((run / "placement.json").read_text())
    assert placement["pair_strategy"] == "SPREAD"
    pair_nodes = [c["collector_node"] for c in placement["collectors"]]
    assert placement["learner_node"] not in pair_nodes and len(set(pair_nodes)) == 2
    assert summary(run)["env_steps"] >= 4000


def test_unplaceable_request_fails_fast_and_writes_nothing(tmp_path, capsys):
    """More CPUs than this machine has: refused before a local cluster starts. A GPU this machine
    lacks, which only Ray detects: refused once the cluster is up, and the cluster shut down."""
    run = tmp_path / "big"
    code = main(["train", "--run-dir", str(run), "collectors.num=8", "collectors.num_cpus=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("raypex: error: the run needs 9 CPUs")
    assert "lower collectors.num or collectors.num_cpus" in err[-1]
    assert not run.exists() and not ray.is_initialized()
    import torch

    if torch.cuda.is_available():
        return  # the GPU half needs a machine without one
    assert main(["train", "--run-dir", str(run), "learner.device=cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "raypex: error: learner.device is cuda but the Ray cluster has no GPU; use learner.device=auto " \
                      "or cpu", err
    assert not run.exists() and not ray.is_initialized()


# `raypex ARGS` in a process of its own whose torch release reads 0.0.1, and which checks that it
# left Ray once the command returned (tests/kept_up_cluster.py: a test process cannot join in-process)
OTHER_TORCH = """
import sys
import ray
from raypex.cluster.ray_runtime import versions
real_release = versions._release
versions._release = lambda name: "0.0.1" if name == "torch" else real_release(name)
from raypex.cluster.commands.cli import main
code = main(sys.argv[1:])
assert not ray.is_initialized()
sys.exit(code)
"""


def test_a_joined_cluster_with_other_software_is_refused_in_one_line(tmp_path, joining_environment):
    """`raypex train` and `raypex bench` joining a cluster whose nodes run another torch release
    than the driver: one line naming the node and what differs, exit 2, nothing written. The
    driver's release is changed here; the nodes' probes report what they really run."""
    address = joining_environment["RAYPEX_ADDRESS"]
    differs = r"raypex: error: node \S+ has torch \S+ \(the driver has 0\.0\.1\); install the same versions on every node"

    def with_other_torch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", OTHER_TORCH, *args], env={**os.environ, **joining_environment},
                              capture_output=True, text=True, timeout=300, check=False)

    run = tmp_path / "run"
    done = with_other_torch("train", "--address", address, "--run-dir", str(run))
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert re.fullmatch(differs, err[-1]), err
    assert not run.exists()
    bench_json = tmp_path / "bench.json"
    done = with_other_torch("bench", "--stage", "learner", "--address", address, "--json", str(bench_json))
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert re.fullmatch(differs, err[-1]), err
    assert not bench_json.exists()


def _blocked_signals(pid: int) -> set[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def test_ctrl_c_checkpoints_flushes_and_exits_130(tmp_path):
    """Ctrl-C, which a terminal sends to every process of the run (Ray's raylet and GCS included),
    takes the clean path: final checkpoint with every shard's replay, TensorBoard flushed,
    summary.json and policy.pt2, no new evaluation. The run is prioritized: the epochs cut short
    and their priorities still count at the end. (SIGTERM to the whole group: the test below;
    SIGTERM to the driver alone, as `ray job stop` sends it: tests/test_ray_jobs.py.)"""
    run = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "-m", "raypex", "train", "--run-dir", str(run), "stop.env_steps=100000000", *SHORT,
         "replay.prioritized=true"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    seen = []
    # the first progress line that shows a loss: the learner has trained, so there are priorities
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("[") and re.search(r"loss -?\d", line):
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, "".join(seen) + rest
    assert "Ctrl-C: writing a final checkpoint" in rest and "Traceback" not in rest, rest
    assert "died" not in rest and "stopped" not in rest, rest
    newest = max((run / "checkpoints").glob("ckpt-*.pt"))
    assert len(list(newest.parent.glob(f"{newest.stem}-shard-*.npz"))) == 2  # the set has both shards' replay
    assert (run / "policy.pt2").is_file() and (run / "summary.json").is_file()
    assert "replay/size" in scalars(run)  # the TensorBoard file was flushed
    first = summary(run)
    assert first["ended"] == "interrupted"
    final = json.loads(max((run / "checkpoints").glob("*.json")).read_text())
    assert first["epochs"] == final["epochs"]
    # the final checkpoint and the summary agree, and env steps are exactly what replay took in
    assert final["env_steps"] == first["env_steps"] == sum(first["replay_inserted_per_shard"]), (final, first)
    # every transition the learner trained on has its new priority accounted for
    accounted = sum(first[f"priority_updates_{kind}"] for kind in ("applied", "stale", "unsent"))
    assert accounted == first["learner_samples"] > 0, first


def _train_until(run: Path, line_starts: str, *extra: str, joining: dict | None = None
                 ) -> tuple[subprocess.Popen, list[str]]:
    """`raypex train` in a session of its own, read until a line starting with `line_starts`;
    `joining`: the environment that makes it join the kept-up cluster, else it starts its own."""
    proc = subprocess.Popen([sys.executable, "-m", "raypex", "train", "--run-dir", str(run), "stop.eval_return=null",
                             *extra], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(joining or {}), "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(line_starts):
            break
    return proc, seen


def test_sigterm_to_the_group_during_rays_start_and_during_training_ends_as_a_stop(tmp_path, joining_environment):
    """SIGTERM to the whole group (as `timeout`, SLURM and systemd send it), Ray's raylet and GCS
    included. While Ray's local cluster starts: exit 143, one line, summary.json saying
    `terminated`, no stack dump (ray.init's own handler never sees it). During training: the
    raylet and GCS outlive it (started with SIGTERM blocked), the run ends with its final
    checkpoint and every shard's replay, and a resume counts on from that checkpoint."""
    starting = tmp_path / "starting"
    proc = subprocess.Popen([sys.executable, "-m", "raypex", "train", "--run-dir", str(starting)],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while not {"raylet", "gcs_server"} & {p.name() for p in psutil.Process(proc.pid).children(recursive=True)}:
        assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
        time.sleep(0.02)  # polling the process tree, not waiting for a moment to pass
    os.killpg(proc.pid, signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 143, "".join(seen) + rest
    assert "SIGTERM: writing a final checkpoint" in rest and "Traceback" not in rest, rest
    assert "SIGTERM received" not in rest and "learner ready" not in rest, rest
    assert summary(starting)["ended"] == "terminated"
    assert rest.strip().splitlines()[-1].endswith(f"wrote {starting / 'summary.json'}"), rest  # no policy.pt2 claimed

    run = tmp_path / "run"
    proc, seen = _train_until(run, "learner ready")
    # what keeps the raylet (and with it every actor) alive through a signal to all: it was started
    # with SIGTERM blocked
    blocked = {p.name(): _blocked_signals(p.pid) for p in psutil.Process(proc.pid).children(recursive=True)}
    for name in ("raylet", "gcs_server"):
        assert signal.SIGTERM in blocked[name], blocked
    os.killpg(proc.pid, signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 143, "".join(seen) + rest
    assert "SIGTERM: writing a final checkpoint" in rest and "Traceback" not in rest and "died" not in rest, rest
    result = summary(run)
    final = json.loads(max((run / "checkpoints").glob("*.json")).read_text())
    assert result["ended"] == "terminated" and final["env_steps"] == result["env_steps"], (final, result)
    assert sum(result["replay_inserted_per_shard"]) == result["env_steps"], result
    newest = max((run / "checkpoints").glob("ckpt-*.pt"))
    assert len(list(newest.parent.glob(f"{newest.stem}-shard-*.npz"))) == 2  # the set has both shards' replay
    resumed = raypex_joined(["train", "--resume", str(run), f"stop.env_steps={final['env_steps'] + 2000}"],
                            joining_environment)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = summary(run)
    assert second["env_steps"] >= final["env_steps"] + 2000 and second["ended"] == "env_steps", second
    assert sum(second["replay_inserted_per_shard"]) == second["env_steps"], second


def test_sigterm_before_the_learner_has_warmed_up_waits_for_it_and_ends_with_a_final_checkpoint(tmp_path,
                                                                                               joining_environment):
    """SIGTERM as soon as the run directory is said: the learner is still being made or warming up,
    and until warm it refuses what a checkpoint asks of it, as the process Ray restarts in place of a
    dead learner does. The end waits for the warm-up instead of taking the refusal for a death (no
    'the learner died', no revival, no Ray error), then writes its final checkpoint and policy."""
    run = tmp_path / "run"
    proc, seen = _train_until(run, "run directory:", joining=joining_environment)
    os.killpg(proc.pid, signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=180) == 143, "".join(seen) + rest
    assert "SIGTERM: writing a final checkpoint" in rest, rest
    assert "died" not in rest and "Traceback" not in rest and "Unhandled error" not in rest, rest
    result = summary(run)
    final = json.loads(max((run / "checkpoints").glob("*.json")).read_text())
    assert result["ended"] == "terminated" and final["env_steps"] == result["env_steps"], (final, result)
    assert sum(result["replay_inserted_per_shard"]) + result["replay_lost_transitions"] == result["env_steps"], result
    assert (run / "policy.pt2").is_file()


def test_a_second_ctrl_c_right_after_the_first_still_writes_the_summary(tmp_path):
    """Ctrl-C twice, 50 ms apart, while the run trains: the second skips what is left of the end,
    and the run directory still has summary.json; the done line names only files that exist."""
    run = tmp_path / "run"
    proc, seen = _train_until(run, "learner ready")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)  # the gap between the two signals is what this test is about, not a wait for anything
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, "".join(seen) + rest
    assert "Traceback" not in rest, rest
    result = summary(run)
    assert result["ended"].startswith("interrupted"), result
    done = rest.strip().splitlines()[-1]
    assert done.startswith("done: ") and f"wrote {run / 'summary.json'}" in done, rest
    assert ("policy.pt2" in done) == (run / "policy.pt2").is_file(), (done, list(run.iterdir()))
