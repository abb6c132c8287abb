"""Every command line of README.md and of the configs' headers, typed as a user types it.

PLAN names, for each documented line, how CI proves it (tests/readme_lines.py has the kinds): run
here in a shell, in README order, from one empty working directory that all lines share like a
user's session (a line reads the `runs/cp-s1` an earlier line wrote), with text appended only
where the line is meant for a bigger machine or a longer run, then checked; or proven by another
test or by .ci/run where it needs several machines; or not run, where it needs what CI cannot
reach. A documented line that PLAN does not name fails, and so does a PLAN entry that is no longer
documented. README.md's table of all this is `markdown_table(PLAN)`.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from raypex.cluster.driver.reference import SUMMARY_FIELDS, TENSORBOARD_TAGS
from raypex.replay.frames import frame_bytes_per_slot
from raypex.replay.ring import transition_layout
from tests.readme_lines import ROOT, Elsewhere, NotRun, Ran, Run, documented_commands, markdown_table


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def scalars(run: Path) -> dict[str, list[float]]:
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def the_run(ran: Ran) -> Path:
    assert len(ran.new_runs) == 1, ran.new_runs
    return ran.new_runs[0]


def rows(path: Path) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads(path.read_text())["rows"]}


def with_ratio(row: dict) -> None:
    assert row["value"] > 0 and row["reference"] > 0 and row["ratio"] == pytest.approx(row["value"] / row["reference"])


# ---- checks: what each line's sentence says it does

def solved(ran: Ran) -> dict:
    """CartPole solved within the config's generous stop.env_steps, no shard starved and every
    collector kept taking new weights (a shard the learner never sampled once left its collector
    throttled, acting with stale weights)."""
    result = summary(the_run(ran))
    assert result["ended"] == "solved" and result["time_to_solve_s"] is not None, result
    sizes = result["replay_size_per_shard"]
    # Three busy processes on two cores: the scheduler sometimes leaves one collector a core of its
    # own and the other a shared one, so 2:1 is an ordinary split here (CI saw 4,760 to 10,886);
    # a throttled collector's shard stays a few chunks deep.
    assert min(sizes) >= 0.25 * max(sizes), sizes
    # A lucky run solves in under 10 epochs (CI saw 9), where a bound of 10 says nothing; runs here
    # show a lag of at most 2, so half the epochs (never under 2) still catches a stale collector.
    assert result["policy_lag_max"] <= min(10, max(2, result["epochs"] // 2)), result
    return result


# README's "Watch it" tags that a CartPole run on CPU with uniform replay does not write (fp16 only,
# prioritized replay only).
NOT_FOR_CARTPOLE = {"learner/grad_scale", "learner/gpu_busy_fraction", "learner/allreduce_fraction",
                    "replay/priority_mean", "replay/priority_max", "replay/is_weight_min", "replay/beta"}
# what the reference's placeholders stand for in a CartPole run (DQN, two collectors)
CARTPOLE_PLACEHOLDERS = {"<i>": ("0", "1"), "<rate>": ("epsilon",), "<name>": ("td_loss", "q_values")}


def readme_scalar_tags() -> set[str]:
    """Every scalar tag the run directory's reference documents (cluster/driver/reference.py, the
    page the "Watch a run" guide links), with its placeholders as a CartPole run fills them."""
    tags = {tag for tag, meaning in TENSORBOARD_TAGS if not meaning.startswith("image")}
    for placeholder, values in CARTPOLE_PLACEHOLDERS.items():
        tags = {tag.replace(placeholder, value) for tag in tags for value in values}
    return tags


def solved_on_a_cluster_of_its_own(ran: Ran) -> None:
    """The first line: solved on a local cluster it started, though RAY_ADDRESS named the one
    `ray start` left running on the machine, and every scalar README lists for such a run is in
    its TensorBoard, plotted against env steps up to the run's."""
    result = solved(ran)
    placement = json.loads((the_run(ran) / "placement.json").read_text())
    ran_on = placement["ray_address"]
    assert ran_on.rpartition(":")[2] != ran.ray_address.rpartition(":")[2], (ran_on, ran.ray_address)
    start = result["startup_s"]
    assert start["ray_connected"] < start["first_env_step"] and start["learner_warmed_up"] <= start["first_update"], start
    events = EventAccumulator(str(the_run(ran) / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    written = set(events.Tags()["scalars"])
    wanted = readme_scalar_tags() - NOT_FOR_CARTPOLE
    assert len(wanted) >= 25 and wanted <= written, sorted(wanted - written)
    assert max(e.step for e in events.Scalars("charts/SPS")) <= result["env_steps"]
    assert set(result) <= set(SUMMARY_FIELDS), set(result) - set(SUMMARY_FIELDS)


def solved_in_one_process(ran: Ran) -> None:
    """`--local`: solved with every part in the command's process (no Ray started), and the same
    TensorBoard scalars as a Ray run."""
    result = solved(ran)
    placement = json.loads((the_run(ran) / "placement.json").read_text())
    assert placement["runtime"] == "local" and "ray_address" not in placement, placement
    assert "ray_connected" not in result["startup_s"], result["startup_s"]
    events = EventAccumulator(str(the_run(ran) / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    missing = readme_scalar_tags() - NOT_FOR_CARTPOLE - set(events.Tags()["scalars"])
    assert not missing, sorted(missing)


def configs_listed(ran: Ran) -> None:
    for name, env_id in (("breakout", "ALE/Breakout-v5"), ("cartpole", "CartPole-v1"),
                         ("halfcheetah", "HalfCheetah-v5"), ("minatar", "MinAtar/Breakout-v1"),
                         ("pendulum", "Pendulum-v1"), ("pong", "ALE/Pong-v5")):
        assert re.search(rf"^\s*{name}\s+{re.escape(env_id)}", ran.out, re.MULTILINE), ran.out


def config_shown(ran: Ran) -> None:
    assert re.search(r"^\*?\s*collectors\.num\s+4\s", ran.out, re.MULTILINE), ran.out
    assert re.search(r"^\*?\s*learner\.lr\s+\S+\s+\(default \S+\) Adam", ran.out, re.MULTILINE), ran.out


def seed_1_solved_with_the_overrides(ran: Ran) -> None:
    """The seed and run directory chosen, and the dotted overrides in the run's config and in its
    shape: three collectors, each with its shard."""
    assert the_run(ran) == ran.workdir / "runs" / "cp-s1"
    result = solved(ran)
    assert result["seed"] == 1 and len(result["replay_size_per_shard"]) == 3, result
    written = yaml.safe_load((the_run(ran) / "config.yaml").read_text())["collectors"]
    assert (written["num"], written["num_cpus"]) == (3, 0.3), written


def more_steps_for_cp_s1(workdir: Path) -> str:
    return f"stop.env_steps={summary(workdir / 'runs' / 'cp-s1')['env_steps'] + 2000}"


def trained_past_the_solve(ran: Ran) -> None:
    result = summary(ran.workdir / "runs" / "cp-s1")
    assert result["ended"] == "env_steps" and result["env_steps"] >= int(ran.extra.split("=")[1]), result
    assert result["policy_eval_return"] >= 490, result  # the solved policy is never lost


def evaluated(ran: Ran) -> None:
    # The run stopped at a 100-episode mean of 490; over 100 fresh episodes the saved policies of
    # seeds 0-6 scored 500 here. 450 catches a saved policy that is not the solved one, without
    # failing on the sampling noise of a policy whose true mean sits near 480.
    assert float(re.match(r"mean return (\S+) over 100 episodes", ran.out).group(1)) >= 450, ran.out


POLICY_BLOCK = """import torch
from raypex import load_policy

q = torch.export.load("runs/cp-s1/policy.pt2").module()(torch.zeros(8, 4))  # plain torch: a float32 batch
assert q.shape == (8, 2)
policy = load_policy("runs/cp-s1/policy.pt2")
print(policy.act([0.01, -0.02, 0.03, 0.0]), policy.act(torch.zeros(8, 4)))  # one observation, then a batch"""


def onnx_acts_as_policy_pt2(ran: Ran) -> None:
    import numpy as np
    import onnxruntime

    from raypex.learner.policy_file import load_policy

    assert ran.out.startswith("wrote runs/cp-s1/policy.onnx: obs -> q_values"), ran.out
    session = onnxruntime.InferenceSession(str(ran.workdir / "runs/cp-s1/policy.onnx"), providers=["CPUExecutionProvider"])
    obs = np.random.default_rng(0).uniform(-1.0, 1.0, (100, 4)).astype(np.float32)
    q = session.run(["q_values"], {"obs": obs})[0]
    assert np.array_equal(q.argmax(axis=1), load_policy(ran.workdir / "runs/cp-s1/policy.pt2").act(obs))


def one_action_then_eight(ran: Ran) -> None:
    assert re.fullmatch(r"[01] \[[01]( [01]){7}\]", ran.out.strip()), ran.out


def tensorboard_serves_the_runs(ran: Ran) -> None:
    with urllib.request.urlopen(ran.url + "data/runs", timeout=30) as response:
        listed = json.loads(response.read())
    assert "cartpole/tensorboard" in listed, listed  # README's first run, the line before


def prioritized_solved(ran: Ran) -> None:
    """Collector priorities, draws by priority mass across shards, importance weights and the
    learner's updates to the replay beside it learn CartPole."""
    result = solved(ran)
    trained = result["learner_samples"]
    assert (result["epochs"] - 1) * 25 * 256 < trained <= result["epochs"] * 25 * 256  # 25 updates of 256 an epoch
    # every trained transition's new priority is accounted for: applied, stale (overwritten), or never applied
    assert result["priority_updates_applied"] + result["priority_updates_stale"] + \
        result["priority_updates_unsent"] == trained, result
    assert result["priority_updates_applied"] > 0.5 * trained, result
    tags = scalars(the_run(ran))
    beta = tags["replay/beta"]
    assert beta[0] >= 0.4 and beta == sorted(beta) and beta[-1] > beta[0]  # annealing toward 1
    assert all(0 < w <= 1 for w in tags["replay/is_weight_min"]) and min(tags["replay/priority_mean"]) > 0
    assert max(tags["replay/priority_max"]) >= max(tags["replay/priority_mean"])


def refused_in_one_line(ran: Ran) -> None:
    """A line sized for a bigger machine: one line naming the CPUs missing, nothing written."""
    errors = [line for line in ran.err.splitlines() if line.startswith("raypex: error:")]
    assert len(errors) == 1 and "CPUs" in errors[0] and "the Ray cluster has" in errors[0], ran.err
    assert "Traceback" not in ran.err and not ran.new_runs


def pong_trained_on_a_small_box(ran: Ran) -> None:
    """Real Pong at 2-core size: frame-once shards, prioritized replay as the config has it."""
    run = the_run(ran)
    result = summary(run)
    assert 10000 <= result["env_steps"] < 12000 and result["ended"] == "env_steps"  # stopped near the cap
    assert result["epochs"] > 0 and result["learner_samples_per_s"] > 0
    assert result["replay_bytes_per_transition"] == frame_bytes_per_slot((84, 84)) <= 1.1 * 7056
    tags = scalars(run)
    returns = tags["charts/episodic_return"]
    # 1,250 steps per env: every env finishes a game (a random policy loses 0-21 in about 800)
    assert returns and all(-21 <= r <= 21 for r in returns) and min(returns) < -1  # raw Pong scores
    assert -21 <= result["final_eval_return"] <= 21 and np.isfinite(tags["losses/td_loss"]).all()
    assert (run / "policy.pt2").is_file() and list((run / "checkpoints").glob("ckpt-*.pt"))
    assert result["priority_updates_applied"] > 0 and min(tags["replay/priority_mean"]) > 0
    assert 0 < min(tags["replay/is_weight_min"]) <= 1


def minatar_dqn_trained(ran: Ran) -> None:
    """The MinAtar DQN line: a DQN run with batches of 128 in fp32, collectors acting and the
    evaluator evaluating with the layer-normalized Q-network the learner trains, and policy.pt2
    holding its LayerNorms."""
    import torch

    run = the_run(ran)
    result = summary(run)
    assert result["env_id"] == "MinAtar/Breakout-v1" and result["ended"] == "env_steps" and result["epochs"] > 0
    assert result["final_eval_return"] is not None and result["collector_restarts"] == 0, result
    assert "layer_norm" in str(torch.export.load(str(run / "policy.pt2")).graph)
    config = (run / "config.yaml").read_text()
    assert "name: dqn" in config and "micro_batch: 128" in config and "precision: fp32" in config, config
    assert "samples_per_insert: 8.0" in config, config


def minatar_trained(ran: Ran) -> None:
    """MinAtar's boolean images stored as bytes, and a policy.pt2 that takes the converted
    observations one at a time or as a batch."""
    from raypex.learner.policy_file import load_policy

    run = the_run(ran)
    result = summary(run)
    assert result["env_id"] == "MinAtar/Breakout-v1" and result["ended"] == "env_steps" and result["epochs"] > 0
    assert result["replay_bytes_per_transition"] < 1000  # two 4x10x10 byte images, not floats
    policy = load_policy(run / "policy.pt2")
    frames = np.random.default_rng(0).integers(0, 2, (2, 4, 10, 10), dtype=np.uint8) * 255
    batch = policy.q_values(frames)
    assert batch.shape == (2, 3) and np.isfinite(batch.numpy()).all()
    np.testing.assert_allclose(policy.q_values(frames[1]).numpy(), batch[1].numpy(), rtol=1e-5, atol=1e-6)


def td3_ran(ran: Ran) -> None:
    """A short TD3 run with SALE on MuJoCo (the mujoco extra) through the real cluster: each
    collector's own noise in TensorBoard, the actor's and the embeddings' losses, a uniform warm-up,
    HalfCheetah's six float actions acted in its bounds, and MuJoCo's known deprecation warning
    kept out of the output."""
    from raypex.cluster.driver.checkpoints import load_latest
    from raypex.cluster.storage import read_replay
    from raypex.learner.policy_file import load_policy

    run = the_run(ran)
    result = summary(run)
    assert result["env_id"] == "HalfCheetah-v5" and result["ended"] == "env_steps" and result["epochs"] > 0, result
    tags = scalars(run)
    noise = [tags[f"collector/{i}/noise"][-1] for i in range(2)]
    assert noise == pytest.approx([0.1, 0.1]), noise  # the config's noise_spread 1: TD7's 0.1 for every collector
    assert np.isfinite(tags["losses/actor_loss"]).all() and np.isfinite(tags["losses/td_loss"]).all()
    assert np.isfinite(tags["losses/embedding_loss"]).all()
    # the replay warm-up: uniform actions until trained weights come (Ray's weights messages once
    # dropped the "untrained" mark, and collectors filled it with a fresh actor's near-zero actions)
    shards = load_latest(run / "checkpoints").replay_files
    assert len(shards) == 2, shards
    for shard in shards:
        warm_up = read_replay(shard)["storage"]["columns"]["action"][:200]
        assert abs(float(np.abs(warm_up).mean()) - 0.5) < 0.05, (shard, float(np.abs(warm_up).mean()))
    assert "WARNING: compiler attribute" not in ran.err + ran.out
    actions = load_policy(run / "policy.pt2").act(np.zeros((5, 17), np.float32))
    assert actions.shape == (5, 6) and actions.dtype == np.float32 and (np.abs(actions) <= 1.0).all()


def crossq_ran(ran: Ran) -> None:
    """A short run of the Hopper config (SAC with CrossQ's critics) through the real cluster: its
    losses and temperature in TensorBoard, a checkpoint whose learner holds no target critics and
    whose critics' batch renormalization has moved its running statistics, and Hopper's three
    actions acted in their bounds."""
    from raypex.cluster.driver.checkpoints import load_latest
    from raypex.learner.learner_state import read_learner_state
    from raypex.learner.policy_file import load_policy

    run = the_run(ran)
    result = summary(run)
    assert result["env_id"] == "Hopper-v5" and result["ended"] == "env_steps" and result["epochs"] > 0, result
    tags = scalars(run)
    for tag in ("losses/td_loss", "losses/actor_loss", "losses/temperature"):
        assert np.isfinite(tags[tag]).all(), tag
    step = read_learner_state(load_latest(run / "checkpoints").learner_state)["step"]
    assert "critic_target" not in step and "critic" in step, list(step)
    means = [value for key, value in step["critic"].items() if key.endswith("running_mean")]
    assert means and any(float(m.abs().max()) > 0 for m in means), "the critics' running statistics never moved"
    actions = load_policy(run / "policy.pt2").act(np.zeros((5, 11), np.float32))
    assert actions.shape == (5, 3) and (np.abs(actions) <= 1.0).all()


def sac_solved(ran: Ran) -> None:
    result = summary(the_run(ran))
    assert result["ended"] == "solved" and result["final_eval_return"] >= -200, result
    assert "losses/temperature" in scalars(the_run(ran))


def sac_evaluated(ran: Ran) -> None:
    # Seeds 0-2's saved policies scored -202, -162 and -153 over 100 fresh episodes here
    # (BENCHMARKS.md (git history), "Pendulum per env step"); a random policy scores about -1200. -300 catches a
    # policy that is not the solved one without failing on sampling noise.
    assert float(re.match(r"mean return (\S+) over 100 episodes", ran.out).group(1)) >= -300, ran.out


def trained_until_stopped(env_id: str):
    def check(ran: Ran) -> None:
        result = summary(the_run(ran))
        assert result["env_id"] == env_id and result["ended"] == "env_steps" and result["epochs"] > 0, result
    return check


def recurrent_evaluated(ran: Ran) -> None:
    assert -1.0 <= float(re.match(r"mean return (\S+) over 100 episodes", ran.out).group(1)) <= 1.0, ran.out


def stepped_with_its_state(ran: Ran) -> None:
    """The loop of the README's recurrent policy: one episode of RepeatPreviousEasy, its return in [-1, 1]."""
    assert -1.0 <= float(ran.out.strip()) <= 1.0, ran.out


def precisions_a_cpu_times() -> list[str]:
    """What the learner benches time by default on this machine's CPU: bf16 only where the CPU has
    bf16 units (elsewhere it is emulated and a learner's `auto` is fp32)."""
    from raypex.learner.cpu_features import cpu_has_bf16_units

    return ["fp32", "bf16"] if cpu_has_bf16_units() else ["fp32"]


def learner_matrix_measured(ran: Ran) -> None:
    measured = json.loads((ran.workdir / "matrix.json").read_text())["rows"]
    assert {(r["precision"], r["micro"], r["steps"]) for r in measured} == {
        (precision, 32, 1) for precision in precisions_a_cpu_times()}, measured
    if precisions_a_cpu_times() == ["fp32"]:
        assert "bf16 left out: this CPU has no bf16 units" in ran.err, ran.err[-2000:]
    assert all("error" not in r and r["device_samples_per_s"] > 0 for r in measured), measured
    assert "copy GB/s" in ran.out


def one_learner_against_two(ran: Ran) -> None:
    """The bench's rows for one learner and two, each having trained, and the all-reduce's share."""
    rows = {m[1]: float(m[2].replace(",", "")) for m in re.finditer(r"^(learners_\S+)\s+([\d,.]+)", ran.err, re.MULTILINE)}
    assert set(rows) == {"learners_1", "learners_2", "learners_2_allreduce"}, ran.err[-2000:]
    assert rows["learners_1"] > 0 and rows["learners_2"] > 0 and 0 < rows["learners_2_allreduce"] < 1, rows


def allreduce_model_on_the_results_page(ran: Ran) -> None:
    """The model's first line and rows, as the results page's table gives them (each link's cell
    for 2 / 4 / 8 learners)."""
    page = (ROOT / "docs" / "results.md").read_text()
    first = ran.out.splitlines()[0]
    size = re.search(r"; (\d+\.\d+) MB all-reduced per update", first)[1]
    assert f"{size} MB" in page, first
    rows = [line.strip("|").split(" | ") for line in ran.out.splitlines() if re.match(r"\| [^|]+ \| \d \| ", line)]
    assert len(rows) == 9, ran.out
    for link in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == link]
        cell = (f"{' / '.join(r[2].removesuffix(' ms') for r in mine)} ms, "
                f"{' / '.join(r[3].removesuffix('%') for r in mine)}%, {' / '.join(r[4].strip() for r in mine)}")
        assert cell in page, (link, cell)


def bench_wrote_every_row(ran: Ran) -> None:
    """Every row, with a ratio wherever it has a reference (no speed is asserted), and the
    profile's bound."""
    found = rows(ran.workdir / "bench.json")
    for name in ("env_raw", "env_policy", "collect", "learner_feed", "broadcast", "e2e_env_steps_per_s",
                 "e2e_learner_samples_per_s", "e2e_replay_ratio", "e2e_policy_lag_mean", "e2e_policy_lag_max",
                 "warmup", "linearity", "memory", "replay_bytes_per_transition", "learner_wait_fraction",
                 "learner_samples"):
        assert name in found, name
    for name in ("collect", "learner_feed", "broadcast", "warmup", "linearity", "memory"):
        assert found[name]["bar"], name
        with_ratio(found[name])
    layout = transition_layout((4,), "float32")  # CartPole: obs, action, return, discount, next_obs
    per_row = sum(np.dtype(dtype).itemsize * int(np.prod(shape)) for shape, dtype in layout.values())
    assert found["replay_bytes_per_transition"]["value"] == per_row
    assert any(name.startswith("profile_learner_") for name in found)
    details = json.loads((ran.workdir / "bench.json").read_text())["machine"]["details"]
    assert "bound_by" in details and "throughput is bound by" in ran.err


def learner_stage_measured(ran: Ran) -> None:
    """Per variant the CPU runs, the learner fed by the replay against the same loop fed from memory."""
    found = rows(ran.workdir / "learner.json")
    assert {name for name in found if name.endswith("_eager")} == {
        f"learner_{precision}_eager" for precision in precisions_a_cpu_times()}, found
    if precisions_a_cpu_times() == ["fp32"]:
        assert "bench: bf16 left out" in ran.err, ran.err[-2000:]
    for name in (f"learner_{precision}_eager" for precision in precisions_a_cpu_times()):
        assert found[name]["unit"] == "samples/s" and found[name]["bar"] == ">= 0.8"
        with_ratio(found[name])
        assert 0 <= found[f"{name}_wait_fraction"]["value"] <= 1
    assert json.loads((ran.workdir / "learner.json").read_text())["machine"]["details"]["device"] == "cpu"


def collect_stage_measured(ran: Ran) -> None:
    """env_raw, env_policy, collect through Ray, broadcast, then the env alone in both collectors'
    places at once and collect against it; nothing of the learner; each collector's acting
    precision and whether its forward was fused."""
    found = rows(ran.workdir / "collect.json")
    assert set(found) == {"env_raw", "env_policy", "collect", "env_raw_all", "collect_vs_env_raw", "broadcast",
                          "broadcast_env_loop_pause"}
    raw = found["env_raw"]["value"]
    assert found["env_raw_all"]["reference"] == raw * min(2, os.cpu_count()) and found["env_raw_all"]["value"] > 0
    assert found["collect_vs_env_raw"]["reference"] == found["env_raw_all"]["value"]
    assert found["env_policy"]["reference"] == raw and found["collect"]["value"] > 0
    details = json.loads((ran.workdir / "collect.json").read_text())["machine"]["details"]
    precisions, forms = details["act_precision"], details["act_form"]
    assert len(precisions) == 2 and set(precisions) <= {"fp32", "bf16"}
    # each acts in torch at its precision (fused or not), or with the acting graph where it timed that faster
    assert len(forms) == 2 and all(form in (p, f"{p}, fused", "onnx") for form, p in zip(forms, precisions, strict=True))
    from raypex.learner.cpu_features import cpu_has_bf16_units

    if not cpu_has_bf16_units():  # the one-process stage decides as the collectors' hosts do, untimed
        assert set(precisions) == {"fp32"} and "bench: env_policy acted in fp32" in ran.err, ran.err[-2000:]


def priority_costs_measured(ran: Ran) -> None:
    found = rows(ran.workdir / "priorities.json")
    for name in ("replay_add_prioritized", "replay_sample_prioritized", "learner_feed_prioritized"):
        with_ratio(found[name])
    assert found["replay_update_prioritized"]["value"] > 0 and found["learner_feed_prioritized"]["bar"] == ">= 0.77"


def startup_measured(ran: Ran) -> None:
    """A row per moment of `raypex train`'s start, the first env step and update held to their bars."""
    from raypex.cluster.driver.startup import PHASES

    found = rows(ran.workdir / "startup.json")
    assert set(found) == {f"startup_{phase}" for phase in PHASES}, found
    assert found["startup_first_env_step"]["bar"] == found["startup_first_update"]["bar"] == "<= 1.0"
    assert found["startup_first_env_step"]["reference"] == 2.0 and found["startup_first_update"]["reference"] == 3.0
    assert 0 < found["startup_env_checked"]["value"] < found["startup_first_update"]["value"]


def soak_measured(ran: Ran) -> None:
    """A row per process of the run's Ray cluster (workers, GCS, raylet, the driver), end against
    replay-full, and the object store's spilling (no growth asserted)."""
    found = rows(ran.workdir / "soak.json")
    for name in ("soak_rss_driver-0", "soak_rss_gcs_server-0", "soak_rss_raylet-0", "soak_rss_LearnerActor-0",
                 "soak_rss_CollectorActor-0", "soak_rss_CollectorActor-1", "soak_rss_EvaluatorActor-0"):
        assert found[name]["bar"] == "<= 1.05"
        with_ratio(found[name])
    assert found["soak_object_store_spilled"]["unit"] == "MiB"
    details = json.loads((ran.workdir / "soak.json").read_text())["machine"]["details"]
    assert details["full_at_s"] is not None and len(details["samples"]) >= 10


def scaling_measured(ran: Ran) -> None:
    from benchmarks.scaling import MEASURES

    results = json.loads((ran.workdir / "scaling.json").read_text())
    assert [r["pairs"] for r in results] == [1, 2]
    for result in results:
        assert result["poll_ms"] > 0 and result["broadcast_ms"] > 0 and result["gcs_server_mb"] > 10, result
        assert set(MEASURES) <= set(result)
    assert "| poll_ms |" in ran.out


def corridor_solved(ran: Ran) -> None:
    """The README's own env, from the file the user saved, with nothing registered."""
    result = summary(the_run(ran))
    assert result["env_id"] == "my_env:Corridor" and result["ended"] == "solved", result
    assert "goes to every actor as its working directory" in ran.err
    assert "WARNING" not in ran.err, ran.err  # Ray's about the .venv/ it leaves behind, as raypex does


def corridor_evaluated(ran: Ran) -> None:
    found = re.match(r"mean return (\S+) over 10 episodes \(min (\S+), max (\S+), std (\S+)\)", ran.out)
    mean, low, high, _ = (float(v) for v in found.groups())
    assert mean >= 0.9 and low <= mean <= high, ran.out  # as printed: 0.95 once came with "min 0.9, max 0.9"


def api_returned_the_run(ran: Ran) -> None:
    """The Python example's result: how it ended, its final evaluation, one callback per epoch,
    an action of the policy it loaded and its evaluation's mean return."""
    ended, final, every_epoch = ran.out.splitlines()[0].split()
    result = summary(ran.workdir / "runs" / "from-python")
    assert ended == result["ended"] in ("solved", "env_steps") and float(final) == result["final_eval_return"]
    assert every_epoch == "True" and result["epochs"] > 0 and ran.out.splitlines()[1] in ("0", "1"), ran.out
    assert 8 <= float(ran.out.splitlines()[2]) <= 500, ran.out  # raypex.evaluate: 20 episodes of CartPole


def stopped_then_resumed(ran: Ran) -> None:
    """The stop_when example: stopped past 20,000 env steps with its last evaluation reported, then
    resumed in the same directory to 40,000."""
    first, second = (line.split() for line in ran.out.splitlines()[:2])
    result = summary(ran.workdir / "runs" / "own-stop")
    assert first[0] == "stopped" and 20000 <= int(first[1]) < 40000 and first[2] == "True", ran.out
    assert second == ["env_steps", str(result["env_steps"]), "True"] and result["env_steps"] >= 40000, ran.out


def block_holding(text: str) -> str:
    """The README's python block that holds `text`."""
    return next(command for command, _ in documented_commands() if "\n" in command and text in command)


# ---- the plan: every documented line, in README order, then the config headers' lines

SEPARATE_HOSTS = "tests/test_separate_hosts.py::test_three_hosts_in_network_namespaces_spread_the_collectors_and_learn"
RAY_JOB = "tests/test_ray_jobs.py::test_a_job_trains_on_the_cluster_it_was_submitted_to_and_ray_job_stop_checkpoints"
LAUNCHER = "tests/test_deploy_files.py::test_the_launcher_file_starts_nodes_that_hold_its_command"
HOURS = "the line trains for hours here"
SWEEP = "tests/test_sweep.py::test_a_pbt_exploit_carries_the_donor_exactly_and_ctrl_c_then_resume_finish_the_sweep"
ASHA = "tests/test_sweep.py::test_asha_stops_by_env_steps_up_to_the_runs_own_end"
INSTALL = "tests/test_install.py::test_pip_install_gives_one_package_and_a_run_beside_files_named_like_our_folders_trains"
PONG_ON_A_SMALL_BOX = "tests/test_readme_lines.py::pong_trained_on_a_small_box"
SHORTER = "stop.env_steps=2000 replay.min_size=1000 eval.episodes=2"
THIS_FILE = "tests/test_readme_lines.py"
MINARI = "tests/test_minari.py::test_a_runs_replay_becomes_a_minari_dataset_and_a_new_runs_prior_data"
USER_ENCODER = "tests/test_user_encoder.py::test_an_encoder_from_the_users_installed_package_learns_cartpole_and_minatar"


def at_full_length(holds: str, which: str) -> Elsewhere:
    """A results page's run: a guide's line (`which`, planned in this file, holding `holds`) runs
    the same command in CI, shortened."""
    return Elsewhere(THIS_FILE, holds, f"a results figure at full length (minutes to hours here); {which} runs the "
                                       "same command in CI")

# a published curve's line: SimbaV2's repository holds the authors' result files
SIMBAV2_FILES = NotRun("it reads a checkout of SimbaV2's repository (its authors' data; its output is committed); the "
                       "script is tested on a small file of the same form (tests/test_curves.py)")

PLAN: dict[str, Run | Elsewhere | NotRun] = {
    "python3 -m venv .venv && source .venv/bin/activate": Elsewhere(
        ".ci/run", "python3 -m venv .ci-venv", "its first step, as `.ci-venv`, then `source .ci-venv/bin/activate`"),
    "pip install torch --index-url https://download.pytorch.org/whl/cpu": NotRun(
        "CI reaches PyPI only; .ci/run pins this machine's CPU torch with .ci/constraints.txt instead"),
    "pip install -e .": Elsewhere(INSTALL, "install_into_fresh_venv",
                                  "the core install, into a fresh virtual environment, then a run from a directory "
                                  "holding files named like raypex's folders (`.ci/run` installs the suite's, "
                                  '`-e ".[test]"`)'),
    "raypex train configs/cartpole.yaml --run-dir runs/cartpole": Run(check=solved_on_a_cluster_of_its_own,
                                                                      own_cluster=True),
    "raypex eval runs/cartpole --episodes 100": Run(check=evaluated),
    "raypex train configs/cartpole.yaml": Elsewhere(
        THIS_FILE, "configs/cartpole.yaml --run-dir runs/cartpole",
        "README's first run is this line with `--run-dir runs/cartpole` added"),
    "raypex train configs/cartpole.yaml --local": Run(check=solved_in_one_process),
    "raypex configs": Run(check=configs_listed),
    "raypex config show pong collectors.num=4": Run(check=config_shown),
    "raypex train --seed 1 --run-dir runs/cp-s1 collectors.num=3 collectors.num_cpus=0.3": Run(
        check=seed_1_solved_with_the_overrides),
    "raypex train --resume runs/cp-s1 stop.env_steps=1000000 stop.eval_return=null": Run(
        extra_from=more_steps_for_cp_s1, why="`stop.env_steps=` 2,000 past the run's own, not a million",
        check=trained_past_the_solve),
    "raypex eval runs/cp-s1 --episodes 100": Run(check=evaluated),
    POLICY_BLOCK: Run(check=one_action_then_eight),
    "raypex export runs/cp-s1 --onnx runs/cp-s1/policy.onnx": Run(check=onnx_acts_as_policy_pt2),
    "tensorboard --logdir runs/": Run("--port 0", "any free port; stopped once it lists the runs", serves=True,
                                      check=tensorboard_serves_the_runs),
    block_holding("# my_env.py"): Run(saves="my_env.py"),
    "raypex train cartpole env.id=my_env:Corridor stop.eval_return=0.9 --run-dir runs/corridor": Run(
        check=corridor_solved),
    "raypex eval runs/corridor --episodes 10": Run(check=corridor_evaluated),
    "raypex train env.id=my_env:Corridor --debug": Elsewhere(
        "tests/test_user_envs.py::test_debug_shows_the_users_own_traceback_before_the_line", '"--debug"',
        "an env file whose step raises: its traceback, then the one line"),
    block_holding("# myencoders/__init__.py"): Elsewhere(
        USER_ENCODER.split("::")[0], 'block_holding("# myencoders/__init__.py")',
        "the block as a package, installed beside raypex in a fresh virtual environment"),
    "raypex train cartpole network.encoder=myencoders:Flat \"network.encoder_kwargs={features: 32}\" --run-dir runs/flat":
        Elsewhere(USER_ENCODER, '"network.encoder=myencoders:Flat", "network.encoder_kwargs={features: 32}"',
                  "in a fresh virtual environment with the guide's package installed; solves"),
    "raypex eval runs/flat --episodes 10": Elsewhere(USER_ENCODER, '"eval", "runs/flat", "--episodes", "10"',
                                                     "the policy.pt2 that run gave, in that environment"),
    "raypex train minatar network.encoder=myencoders:SmallConv stop.env_steps=200000 --run-dir runs/conv": Elsewhere(
        USER_ENCODER, '"network.encoder=myencoders:SmallConv", "stop.env_steps=200000"',
        "in that environment, with the minatar extra; its final evaluation well above a random policy's"),
    'pip install "raypex[minari]"': Elsewhere(".ci/run", '-e ".[test,docs]"', "`.ci/run` installs the test extra, "
                                             "which holds the minari extra"),
    "raypex train pendulum stop.eval_return=null stop.env_steps=20000 --run-dir runs/pend-data": Elsewhere(
        MINARI, '"train", "pendulum", *SMALL, "stop.env_steps=1000"',
        "a Pendulum run as small as gives four whole episodes (one collector of two envs, 1,000 env steps)"),
    "raypex export runs/pend-data --minari pendulum/raypex-v0": Elsewhere(
        MINARI, '"export", str(run), "--minari", "pendulum/collected-v0"',
        "that run's replay exported, the dataset opened with minari.load_dataset and checked against the run's "
        "episodes and returns"),
    "raypex train pendulum replay.prior=pendulum/raypex-v0 --run-dir runs/pend-prior": Elsewhere(
        MINARI, '"replay.prior=pendulum/collected-v0"', "a small run with that dataset as prior data, its counts "
        "checked; the full-size comparison is on the results page"),
    block_holding("raypex.train(\"cartpole\""): Run(check=api_returned_the_run),
    block_holding("stop_when=lambda"): Run(check=stopped_then_resumed),
    'pip install -e ".[tune]"': Elsewhere(".ci/run", '-e ".[test]"', "`.ci/run` installs the test extra, which "
                                          "holds the tune extra"),
    "raypex tune configs/cartpole.yaml --samples 4 --scheduler pbt": Elsewhere(
        SWEEP, "\"--scheduler\", \"pbt\"", "the same PBT sweep of CartPole with two smaller trials and a shorter run, "
        "its exploits checked, stopped by Ctrl-C and resumed; the four-trial line's runs are in BENCHMARKS.md (git history)"),
    "raypex tune configs/cartpole.yaml 'learner.lr=loguniform(1e-3,3e-2)' --samples 8 --scheduler asha": Elsewhere(
        ASHA, "\"asha\"", "ASHA's rungs for the config's stop.env_steps are checked; the eight-trial line's run, "
        "stopped by Ctrl-C and resumed, is in BENCHMARKS.md (git history)"),
    "ray get-auth-token --generate": Elsewhere(SEPARATE_HOSTS, "hosts_with_ray", "three hosts in network namespaces "
                                               "sharing the token it writes (hosts_with_ray runs it first)"),
    "RAY_AUTH_MODE=token ray start --head --port 6379": Elsewhere(
        SEPARATE_HOSTS, "hosts_with_ray", "three hosts in network namespaces, `ray start` on each with token "
        "authentication on (hosts_with_ray)"),
    "RAY_AUTH_MODE=token ray start --address HEAD:6379": Elsewhere(
        SEPARATE_HOSTS, "hosts_with_ray", "three hosts in network namespaces, `ray start` on each with token authentication on"),
    "RAY_AUTH_MODE=token raypex train configs/cartpole.yaml --address HEAD:6379 collectors.num=16": Elsewhere(
        SEPARATE_HOSTS, '"--address"', "from the head's host, with collectors.num=3 (2 CPUs per host)"),
    "RAY_AUTH_MODE=token ray job submit --address http://HEAD:8265 --working-dir . -- raypex train pong "
    "--run-dir /data/runs/pong collectors.num_cpus=1": Elsewhere(
        RAY_JOB, '"submit"', "a head started with `ray start --head`, raypex train cartpole as the job"),
    "RAY_AUTH_MODE=token ray job stop --address http://HEAD:8265 JOB_ID": Elsewhere(
        RAY_JOB, "stop_job", "through Ray's job SDK, which sends the same SIGTERM"),
    "ray get-auth-token --generate && ray up cluster/deploy/ray-cluster-aws.yaml": Elsewhere(
        LAUNCHER, "setup_commands", "needs an AWS account; the launcher file's nodes and setup are checked"),
    'ray exec cluster/deploy/ray-cluster-aws.yaml --tmux "RAY_AUTH_MODE=token raypex train pong --address auto '
    'collectors.num_cpus=1 learner.num_cpus=4"': Elsewhere(
        LAUNCHER, "check_fits", "needs an AWS account; that its nodes hold this command is checked"),
    "raypex train configs/cartpole.yaml replay.prioritized=true": Run(check=prioritized_solved),
    "raypex train configs/pendulum.yaml --run-dir runs/pendulum": Run(check=sac_solved),
    "raypex eval runs/pendulum --episodes 100": Run(check=sac_evaluated),
    "raypex train configs/halfcheetah.yaml": Run(
        "stop.env_steps=1000 replay.min_size=512 learner.updates_per_epoch=10 eval.every_env_steps=20 eval.episodes=1 "
        "eval.video_every=0", "a short run, with no video (drawing one takes 8 s here; tests/test_continuous.py draws "
        "one): the 50-minute ones are on the results page", check=td3_ran),
    "raypex train configs/hopper.yaml": Run(
        "stop.env_steps=1000 replay.min_size=512 learner.updates_per_epoch=10 eval.every_env_steps=20 eval.episodes=1 "
        "eval.video_every=0", "a short run: the 40-minute ones are on the results page", check=crossq_ran),
    "raypex train configs/pong.yaml": Run(exit_code=2, why="sized for a GPU box with 16 cores, refused in one line",
                                          check=refused_in_one_line),
    "raypex train configs/pong.yaml collectors.num=2 collectors.num_cpus=0.4 learner.num_cpus=1 env.num_envs=4 "
    "learner.micro_batch=32 replay.min_size=5000 stop.env_steps=20000": Run(
        "eval.episodes=1 stop.env_steps=10000", "one evaluation game instead of eight and half the env steps (5,000 of "
        "training, every env finishing games): the same proof, shorter",
        check=pong_trained_on_a_small_box),
    "raypex train configs/breakout.yaml": Run(exit_code=2, why="sized for a GPU box with 16 cores, refused in one line",
                                              check=refused_in_one_line),
    "raypex train configs/minatar.yaml": Run("stop.env_steps=4000 replay.min_size=2000 eval.episodes=4", HOURS,
                                             check=minatar_trained),
    "raypex train configs/minatar.yaml env.id=MinAtar/Asterix-v1": Run(
        SHORTER, HOURS, check=trained_until_stopped("MinAtar/Asterix-v1")),
    "raypex train configs/minatar.yaml algo.name=dqn learner.micro_batch=128 learner.accumulation_steps=1 "
    "learner.lr=2.5e-4 learner.precision=fp32 replay.samples_per_insert=8": Run(SHORTER, HOURS,
                                                                                 check=minatar_dqn_trained),
    "raypex train configs/popgym.yaml --run-dir runs/memory": Run(
        SHORTER, "minutes of training; 2,000 env steps show the run", check=trained_until_stopped(
            "popgym-RepeatPreviousEasy-v0")),
    "raypex eval runs/memory --episodes 100": Run(check=recurrent_evaluated),
    block_holding("policy.initial_state()"): Run(check=stepped_with_its_state),
    "raypex bench configs/pong.yaml --stage learner collectors.num=12 learner.num_cpus=4": Run(
        exit_code=2, why="sized for a GPU box with 16 cores, refused in one line", check=refused_in_one_line),
    "python benchmarks/sb3_reference.py --env CartPole-v1 --seed 2 --curve sb3-cartpole-s2.csv": NotRun(
        "Stable-Baselines3 is not a raypex dependency; the reference runs in a virtual environment of its own"),
    "python benchmarks/sb3_reference.py --env Pendulum-v1 --seed 2 --curve sb3-pendulum-s2.csv": NotRun(
        "Stable-Baselines3 is not a raypex dependency; the reference runs in a virtual environment of its own"),
    "python -m benchmarks.curves docs/img/cartpole-sb3.png raypex=runs/cp-s0 raypex=runs/cp-s1 raypex=runs/cp-s2 "
    "sb3=sb3-cartpole-s0.csv sb3=sb3-cartpole-s1.csv sb3=sb3-cartpole-s2.csv --title CartPole-v1": NotRun(
        "it draws the results page's figure from six runs and SB3's CSVs; the script is tested on a short run "
        "(tests/test_integration.py)"),
    "python -m benchmarks.curves docs/img/pendulum-sb3.png raypex=runs/pend-s0 raypex=runs/pend-s1 raypex=runs/pend-s2 "
    "sb3=sb3-pendulum-s0.csv sb3=sb3-pendulum-s1.csv sb3=sb3-pendulum-s2.csv --title Pendulum-v1": NotRun(
        "it draws the results page's figure from six runs and SB3's CSVs; the script is tested on a short run "
        "(tests/test_integration.py)"),
    'python -m benchmarks.curves docs/img/minatar-seaquest.png raypex=runs/seaquest --published '
    'MinAtar-paper=5000000:20 --title "MinAtar Seaquest"': NotRun(
        "it draws the results page's figure from a ten-minute run; the script is tested on a short run "
        "(tests/test_integration.py)"),
    "python -m benchmarks.checkpoint_memory --transitions 50000": NotRun(
        "a results figure: filling Pong's replay to 50k transitions and checkpointing it takes minutes here"),
    "python -m benchmarks.checkpoint_memory --transitions 200000": NotRun(
        "a results figure, as the 50k line, with four times the replay"),
    "raypex bench configs/cartpole.yaml --stage learners learner.num_cpus=0.5": Run(
        "--window 1", "8 s of training per side measure the results page's row; 1 s shows both train",
        check=one_learner_against_two),
    "python -m benchmarks.allreduce_model configs/pong.yaml --samples-per-s 536000 --batch 2048": Run(
        check=allreduce_model_on_the_results_page),
    "python -m benchmarks.allreduce_model configs/halfcheetah.yaml --samples-per-s 592000 --batch 256": Run(
        check=allreduce_model_on_the_results_page),
    "python -m benchmarks.learner_matrix configs/pong.yaml --shapes 512x4,128x4 --copy": Run(
        "--shapes 32x1 --seconds 1 --json matrix.json", "the GPU box's shapes take minutes on 2 cores",
        check=learner_matrix_measured),
    "raypex bench configs/cartpole.yaml --profile --json bench.json": Run(
        "--quick --window 1", "a minute instead of two, 1 s windows", check=bench_wrote_every_row),
    "raypex bench configs/cartpole.yaml --stage learner --quick": Run(
        "--window 1 --json learner.json", "1 s windows; rows read back", check=learner_stage_measured),
    "raypex bench configs/pong.yaml --stage collect collectors.num=2 collectors.num_cpus=0.4 "
    "learner.num_cpus=1": Run(
        "--quick --window 1 --json collect.json env.num_envs=8", "1 s windows, 8 envs per collector; rows read back",
        check=collect_stage_measured),
    "raypex bench configs/cartpole.yaml --stage priorities": Run(
        "--quick --window 1 --json priorities.json", "1 s windows; rows read back", check=priority_costs_measured),
    "raypex bench configs/cartpole.yaml --stage startup": Run(
        "--quick --json startup.json", "one run of three; rows read back", check=startup_measured, own_cluster=True),
    "raypex bench configs/cartpole.yaml --soak 30 replay.capacity=20000": Run(
        "--soak 0.2 replay.capacity=300 --json soak.json", "12 seconds, replay full after a few",
        check=soak_measured),
    "python -m benchmarks.scaling --pairs 2,8,16,32 --seconds 40": Run(
        "--pairs 1,2 --seconds 1 --json scaling.json", "32 pairs need more than 2 cores", check=scaling_measured),
    "python -m pytest -q -n 2 --dist loadfile": Elsewhere(".ci/run", "python -m pytest -q -n 2 --dist loadfile",
                                                          "CI's own command; this test is one of its"),
    # the results page's runs: each the command of a guide's line that runs above, at full length
    "raypex train configs/cartpole.yaml --seed 2 --run-dir runs/cp-s2":
        at_full_length("--seed 1 --run-dir runs/cp-s1", "seed 1's line"),
    "raypex eval runs/cp-s2 --episodes 100":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "seed 1's evaluation"),
    "raypex train configs/cartpole.yaml --seed 2 --local":
        at_full_length("raypex train configs/cartpole.yaml --local", "the `--local` line"),
    "raypex train configs/pendulum.yaml --seed 2 --run-dir runs/pend-s2":
        at_full_length("configs/pendulum.yaml --run-dir runs/pendulum", "the Pendulum line"),
    "raypex eval runs/pend-s2 --episodes 100":
        at_full_length("raypex eval runs/pendulum --episodes 100", "the Pendulum evaluation"),
    "raypex train configs/halfcheetah.yaml --seed 2 --run-dir runs/hc-s2 stop.env_steps=100000 stop.eval_return=null":
        at_full_length('"raypex train configs/halfcheetah.yaml"', "the HalfCheetah line, shortened,"),
    "raypex eval runs/hc-s2 --episodes 20":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "python -m benchmarks.published_curves SimbaV2/results/baseline/crossq.csv --env HalfCheetah-v4 --max-steps 100000 "
    "--out benchmarks/published/halfcheetah-v4-crossq.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/simbaV2_utd2.csv --env HalfCheetah-v4 --max-steps "
    "100000 --out benchmarks/published/halfcheetah-v4-simbav2.csv": SIMBAV2_FILES,
    "python -m benchmarks.curves docs/img/halfcheetah-published.png raypex=runs/hc-s0 raypex=runs/hc-s1 "
    "raypex=runs/hc-s2 CrossQ=benchmarks/published/halfcheetah-v4-crossq.csv "
    "SimbaV2=benchmarks/published/halfcheetah-v4-simbav2.csv --title HalfCheetah": NotRun(
        "it draws the results page's figure from three runs of 46-52 minutes each; the script is tested on a short run "
        "with a published curve (tests/test_integration.py)"),
    "raypex train configs/hopper.yaml --seed 2 --run-dir runs/hop-s2":
        at_full_length('"raypex train configs/hopper.yaml"', "the Hopper line, shortened,"),
    "raypex eval runs/hop-s2 --episodes 20":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "python -m benchmarks.published_curves SimbaV2/results/baseline/crossq.csv --env Hopper-v4 --max-steps 100000 "
    "--out benchmarks/published/hopper-v4-crossq.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/simbaV2_utd2.csv --env Hopper-v4 --max-steps "
    "100000 --out benchmarks/published/hopper-v4-simbav2.csv": SIMBAV2_FILES,
    "python -m benchmarks.curves docs/img/hopper-published.png raypex=runs/hop-s0 raypex=runs/hop-s1 "
    "raypex=runs/hop-s2 CrossQ=benchmarks/published/hopper-v4-crossq.csv "
    "SimbaV2=benchmarks/published/hopper-v4-simbav2.csv --title Hopper": NotRun(
        "it draws the results page's figure from three runs of 35 minutes each; the script is tested on a short run "
        "with a published curve (tests/test_integration.py)"),
    "raypex train configs/walker2d.yaml --seed 2 --run-dir runs/walker2d-s2": NotRun(
        "a results figure at full length (91 minutes here); configs/walker2d.yaml holds the Hopper config's settings "
        "on another env, and the Hopper line runs that config in CI, shortened"),
    "raypex eval runs/walker2d-s2 --episodes 20":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "raypex train configs/ant.yaml --seed 1 --run-dir runs/ant-s1": NotRun(
        "a results figure at full length (25 minutes here); configs/ant.yaml holds the HalfCheetah config's settings "
        "(at one update per two env steps) on another env, and the HalfCheetah line runs that config in CI, shortened"),
    "raypex eval runs/ant-s1 --episodes 20":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "python -m benchmarks.published_curves SimbaV2/results/baseline/crossq.csv --env Walker2d-v4 --max-steps 200000 "
    "--out benchmarks/published/walker2d-v4-crossq.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/simbaV2_utd2.csv --env Walker2d-v4 --max-steps "
    "200000 --out benchmarks/published/walker2d-v4-simbav2.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/crossq.csv --env Ant-v4 --max-steps 100000 "
    "--out benchmarks/published/ant-v4-crossq.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/simbaV2_utd2.csv --env Ant-v4 --max-steps "
    "100000 --out benchmarks/published/ant-v4-simbav2.csv": SIMBAV2_FILES,
    "python -m benchmarks.curves docs/img/walker2d-published.png raypex=runs/walker2d-s1 raypex=runs/walker2d-s2 "
    "CrossQ=benchmarks/published/walker2d-v4-crossq.csv SimbaV2=benchmarks/published/walker2d-v4-simbav2.csv "
    "--title Walker2d": NotRun(
        "it draws the results page's figure from two runs of 91 minutes each; the script is tested on a short run "
        "with a published curve (tests/test_integration.py)"),
    "python -m benchmarks.curves docs/img/ant-published.png raypex=runs/ant-s1 raypex=runs/ant-s2 "
    "raypex=runs/ant-s3 raypex=runs/ant-s4 CrossQ=benchmarks/published/ant-v4-crossq.csv "
    "SimbaV2=benchmarks/published/ant-v4-simbav2.csv --title Ant": NotRun(
        "it draws the results page's figure from four runs of 25-37 minutes each; the script is tested on a short "
        "run with a published curve (tests/test_integration.py)"),
    "raypex train configs/humanoid.yaml --seed 0 --run-dir runs/humanoid-s0 learner.compile=true": NotRun(
        "a results figure at full length (2h50m here); configs/humanoid.yaml holds the Walker2d config's settings with "
        "the categorical critic head: the Hopper line runs those settings in CI, shortened, and "
        "tests/test_categorical_critic.py trains the head on Pendulum"),
    "raypex eval runs/humanoid-s0 --episodes 20":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "python -m benchmarks.published_curves SimbaV2/results/baseline/crossq.csv --env Humanoid-v4 --max-steps 300000 "
    "--out benchmarks/published/humanoid-v4-crossq.csv": SIMBAV2_FILES,
    "python -m benchmarks.published_curves SimbaV2/results/baseline/simbaV2_utd2.csv --env Humanoid-v4 --max-steps "
    "300000 --out benchmarks/published/humanoid-v4-simbav2.csv": SIMBAV2_FILES,
    "python -m benchmarks.curves docs/img/humanoid-published.png raypex=runs/humanoid-s0 "
    "CrossQ=benchmarks/published/humanoid-v4-crossq.csv SimbaV2=benchmarks/published/humanoid-v4-simbav2.csv "
    "--title Humanoid": NotRun(
        "it draws the results page's figure from a run of 2h50m; the script is tested on a short run with a "
        "published curve (tests/test_integration.py)"),
    "raypex train configs/halfcheetah.yaml --seed 2 --run-dir runs/hc128-s2 stop.env_steps=100000 stop.eval_return=null "
    "replay.samples_per_insert=128":
        at_full_length('"raypex train configs/halfcheetah.yaml"', "the HalfCheetah line, shortened,"),
    "raypex train --resume runs/hc128-s2 stop.env_steps=300000":
        at_full_length("raypex train --resume runs/cp-s1", "the resume line"),
    "raypex train configs/minatar.yaml env.id=MinAtar/Seaquest-v1 stop.wall_s=600 stop.env_steps=100000000 "
    "--run-dir runs/seaquest": at_full_length('"raypex train configs/minatar.yaml"', "the MinAtar line, shortened,"),
    "raypex eval runs/seaquest --episodes 100":
        at_full_length("raypex eval runs/cp-s1 --episodes 100", "an evaluation line"),
    "raypex train configs/popgym.yaml env.id=popgym-PositionOnlyCartPoleEasy-v0 --seed 2 --run-dir runs/position-s2":
        at_full_length("configs/popgym.yaml --run-dir runs/memory", "the memory line, shortened,"),
    "raypex eval runs/position-s2 --episodes 100":
        at_full_length("raypex eval runs/memory --episodes 100", "the memory evaluation"),
    "raypex train configs/popgym.yaml --seed 2 --run-dir runs/repeat-s2":
        at_full_length("configs/popgym.yaml --run-dir runs/memory", "the memory line, shortened,"),
    "raypex train configs/popgym.yaml network.core=mlp stop.eval_return=null stop.env_steps=2000000 --run-dir "
    "runs/repeat-mlp": at_full_length("configs/popgym.yaml --run-dir runs/memory", "the memory line, shortened,"),
    "python -m benchmarks.curves docs/img/popgym-repeat-previous.png lstm=runs/repeat-s0 lstm=runs/repeat-s1 "
    "lstm=runs/repeat-s2 mlp=runs/repeat-mlp": NotRun(
        "it draws the results page's figure from four runs of minutes each; the page's PNG is its output"),
    "raypex train configs/breakout.yaml collectors.num=2 collectors.num_cpus=0.4 learner.num_cpus=1 env.num_envs=4 "
    "learner.micro_batch=32": Run(
        SHORTER, HOURS, check=trained_until_stopped("ALE/Breakout-v5")),
    "raypex train configs/pong.yaml collectors.num=2 collectors.num_cpus=0.4 learner.num_cpus=1 env.num_envs=4 "
    "learner.micro_batch=32": Elsewhere(
        PONG_ON_A_SMALL_BOX, "10000 <= result", "README's 2-core Pong line is this line with replay.min_size and "
        "stop.env_steps added"),
}

DOCUMENTED = documented_commands()


def planned(kind: type, where=lambda source: True) -> dict:
    """parametrize's arguments for the documented lines PLAN proves as `kind` whose first place
    passes `where`, each named by that place."""
    chosen = [(command, places) for command, places in DOCUMENTED
              if isinstance(PLAN.get(command), kind) and where(places[0])]
    return {"argvalues": [c for c, _ in chosen], "ids": [str(places[0]) for _, places in chosen]}


BENCHMARK_PAGE = "docs/guides/benchmark.md"


def before_the_benchmarks(source) -> bool:
    """A line of README.md or of a docs page but the benchmark guide: this file runs those; the
    benchmark guide's lines and the configs' header lines are tests/test_readme_bench_lines.py's."""
    return source.path == "README.md" or (source.path.startswith("docs/") and source.path != BENCHMARK_PAGE)


def test_every_documented_line_has_a_plan_and_every_plan_a_line():
    documented = [command for command, _ in DOCUMENTED]
    missing = [f"{places[0]}: {command}" for command, places in DOCUMENTED if command not in PLAN]
    assert not missing, "documented lines that tests/test_readme_lines.py does not run or name:\n" + "\n".join(missing)
    assert not set(PLAN) - set(documented), f"planned but no longer documented: {set(PLAN) - set(documented)}"


@pytest.mark.parametrize("command", **planned(Elsewhere))
def test_a_line_proven_elsewhere_names_a_real_test_that_runs_it(command):
    how = PLAN[command]
    path, _, name = how.where.partition("::")
    text = (ROOT / path).read_text()
    if name:
        functions = {f.name: f for f in ast.walk(ast.parse(text)) if isinstance(f, ast.FunctionDef)}
        assert name in functions, f"{how.where} does not exist"
        text = ast.get_source_segment(text, functions[name])
    assert how.holds in text, f"{how.where} does not hold {how.holds!r}"


def test_the_development_page_says_how_ci_runs_each_line():
    assert markdown_table(PLAN) in (ROOT / "docs" / "development.md").read_text(), (
        "docs/development.md's table is out of date; paste in:\n" + markdown_table(PLAN))


def user_environment(joining: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's environment first on PATH (where pip put `raypex`), no Ray address;
    with `joining`, the variables that make runs join the kept-up cluster."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYPEX_ADDRESS")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **(joining or {})}


def run_dirs(workdir: Path) -> set[Path]:
    return {p for p in (workdir / "runs").glob("*") if p.is_dir()}


def serve(line: str, workdir: Path, how: Run) -> tuple[str, str, subprocess.Popen]:
    """Start a serving line; (its output so far, its URL, the process) once it prints the URL."""
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=workdir, env=user_environment(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(text) for text in proc.stdout], daemon=True).start()
    seen, deadline = [], time.monotonic() + how.timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                text = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(text)
            url = re.search(r"(http://\S+?/) ", text)
            if url:
                return "".join(seen), url.group(1), proc
        raise AssertionError(f"{line}: no URL in {how.timeout_s}s:\n{''.join(seen)}")
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


# slow whatever each line measures: the lines read what the lines before them wrote (one working
# directory, as a user's session), so they run all together or not at all
@pytest.mark.slow
@pytest.mark.parametrize("command", **planned(Run, before_the_benchmarks))
def test_a_documented_line_runs_and_does_what_it_says(command, workdir, joining_environment):
    type_and_check(command, workdir, joining_environment)


def type_and_check(command: str, workdir: Path, joining: dict[str, str]) -> None:
    """Type PLAN's `command` (with its extra text) in a shell in `workdir`, as a user would, the
    run joining the kept-up cluster (`joining`) unless the line starts its own; then its check."""
    how = PLAN[command]
    kept_up = joining["RAYPEX_ADDRESS"]
    environment = user_environment({"RAY_ADDRESS": kept_up} if how.own_cluster else joining)
    extra = how.extra_from(workdir) if how.extra_from else how.extra
    line = f"{command} {extra}".strip()
    if "-m benchmarks." in command:  # the checkout's tools (not installed): README says to run them from it
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    before = run_dirs(workdir)
    if how.serves:
        out, url, proc = serve(line, workdir, how)
        try:
            how.check(Ran(workdir, extra, out, "", [], url))
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        return
    argv = ["python", "-c", command] if "\n" in command else ["bash", "-c", line]  # a python block, or a line
    if how.saves:
        (workdir / how.saves).write_text(command + "\n")
        argv = ["python", "-c", f"import {how.saves.removesuffix('.py')}"]
    proc = subprocess.Popen(argv, cwd=workdir, env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=how.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{line}: still running after {how.timeout_s}s\n{err[-3000:]}") from None
    assert proc.returncode == how.exit_code, f"{line}: exit {proc.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    if how.check:
        how.check(Ran(workdir, extra, out, err, sorted(run_dirs(workdir) - before),
                      ray_address=kept_up if how.own_cluster else None))
