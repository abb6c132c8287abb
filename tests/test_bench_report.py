"""raypex bench's rows: ratio and bar arithmetic, the table and the JSON schema (no Ray)."""

from __future__ import annotations

import json

import pytest

from raypex.cluster.bench.report import BenchRow, bounding_stage, format_table, parse_bar, write_json
from raypex.cluster.config.shipped import config_path


def test_ratio_is_value_over_reference_and_the_bar_is_applied_to_it():
    row = BenchRow.against("collect", 80.0, "env steps/s", 100.0, ">= 0.8")
    assert row.ratio == pytest.approx(0.8)
    assert row.passed is True
    assert BenchRow.against("collect", 79.0, "env steps/s", 100.0, ">= 0.8").passed is False
    assert BenchRow.against("broadcast", 3.0, "ms", 2.0, "<= 1.5").passed is True
    assert BenchRow.against("broadcast", 3.2, "ms", 2.0, "<= 1.5").passed is False


def test_rows_without_bar_or_reference():
    assert BenchRow("env_raw", 1.0, "env steps/s").passed is None
    zero_reference = BenchRow.against("x", 1.0, "u", 0.0, ">= 0.8")
    assert zero_reference.ratio is None and zero_reference.passed is False


def test_parse_bar_rejects_unknown_comparisons():
    assert parse_bar("<= 5.5") == ("<=", 5.5)
    with pytest.raises(ValueError, match="comparison"):
        parse_bar("== 1")


def test_json_has_one_object_per_row_with_the_schema_fields(tmp_path):
    rows = [BenchRow.against("learner_feed", 90.0, "updates/s", 100.0, ">= 0.8"), BenchRow("env_raw", 5.0, "env steps/s")]
    path = tmp_path / "out.json"
    write_json(rows, path, {"cpus": 2})
    data = json.loads(path.read_text())
    assert data["machine"] == {"cpus": 2}
    assert [set(r) for r in data["rows"]] == [{"name", "value", "unit", "reference", "ratio", "bar"}] * 2
    assert data["rows"][0]["ratio"] == pytest.approx(0.9)
    assert data["rows"][1]["reference"] is None and data["rows"][1]["bar"] is None
    assert not (tmp_path / "out.json.tmp").exists()


def test_table_marks_missed_bars():
    table = format_table([BenchRow.against("collect", 50.0, "env steps/s", 100.0, ">= 0.8"),
                          BenchRow.against("warmup", 1.0, "env steps/s", 1.0, ">= 0.9")])
    lines = table.splitlines()
    assert lines[0].split()[0] == "row"
    assert lines[1].endswith("MISSED") and lines[2].endswith("pass")


def test_a_ratio_just_under_its_bar_is_never_printed_as_the_bar():
    rows = [BenchRow.against("learner_feed", 167_112.0, "samples/s", 209_001.0, ">= 0.8"),  # 0.79957...
            BenchRow.against("linearity", 5.5004, "s", 1.0, "<= 5.5"),
            BenchRow.against("collect", 0.6371, "env steps/s", 1.0, ">= 0.8"),
            BenchRow.against("broadcast", 30.0, "ms", 0.01, "<= 1.5")]  # a ratio printed with a comma
    lines = format_table(rows).splitlines()[1:]
    assert lines[0].split()[-4:] == ["0.7996", ">=", "0.8", "MISSED"]
    assert "5.5004" in lines[1].split() and lines[1].endswith("MISSED")
    assert "0.637" in lines[2].split()  # far from the bar: three digits as before
    assert "3,000" in lines[3].split() and lines[3].endswith("MISSED")


def test_bounding_stage_names_the_side_that_waits_less_and_its_largest_phase():
    collectors = {"act": 0.1, "env": 0.2, "fold": 0.0, "push": 0.1, "throttle": 0.6}
    learner = {"feed": 0.2, "forward_backward": 0.6, "optimizer": 0.15, "wait": 0.05}
    assert bounding_stage(collectors, learner) == "learner (forward_backward)"
    hungry = {**learner, "wait": 0.7}
    assert bounding_stage({**collectors, "throttle": 0.0}, hungry) == "collectors (env)"


def test_scaling_fits_a_line_and_extrapolates_each_measure():
    from benchmarks.scaling import fit, table

    assert fit([(2, 5.0), (4, 9.0), (8, 17.0)]) == pytest.approx((1.0, 2.0))
    rows = [{"pairs": n, "poll_ms": 1.0 + 0.5 * n, "gcs_server_mb": 50.0 + n} for n in (2, 8)]
    text = table(rows)
    assert "| poll_ms | 2.00 | 5.00 | +0.500 | 51.0 | 501.0 |" in text
    assert "| gcs_server_mb | 52.00 | 58.00 | +1.000 | 150.0 | 1050.0 |" in text
    assert "broadcast_ms" not in text  # not measured: no row


def test_a_runs_rate_by_tenth_shows_a_fast_fill_apart_from_a_slowdown():
    from raypex.cluster.bench.ray_stages import RunRecord

    # 2,000 env steps/s while replay fills (5 s), then 1,000/s held by the limiter
    timeline = [(0.0, 0), (5.0, 10_000), (10.0, 15_000)]
    run = RunRecord(summary={}, train_wall_s=10.0, timeline=timeline, rss_full=None, rss_end={},
                    bytes_per_transition=0.0, replay_ratio=1.0, fill_steps=10_000)
    assert run.tenth_rates == pytest.approx([2000.0] * 5 + [1000.0] * 5)
    assert run.first_tenth_rate == pytest.approx(2000.0) and run.last_tenth_rate == pytest.approx(1000.0)


def test_warmup_counts_the_first_tenth_of_env_steps_even_when_the_first_report_comes_late():
    from raypex.cluster.bench.ray_stages import RunRecord

    # a loaded box: the driver's first report (0.7 s) says 0 steps, the next 5,000 at 1.2 s
    timeline = [(0.7, 0), (1.2, 5_000), (5.0, 30_000)]
    run = RunRecord(summary={}, train_wall_s=5.0, timeline=timeline, rss_full=None, rss_end={},
                    bytes_per_transition=0.0, replay_ratio=1.0, fill_steps=1_000)
    assert run.tenth_rates[0] == 0.0  # by time, the first half second shows nothing
    assert run.first_tenth_rate == pytest.approx(3_000 / 1.0)  # 3,000 steps reached at 1.0 s
    assert run.last_tenth_rate == pytest.approx(3_000 / (5.0 - (1.2 + 3.8 * 22_000 / 25_000)))


def test_the_linearity_note_appears_only_where_replay_filling_is_a_fifth_of_T_or_more():
    from raypex.cluster.bench.report import linearity_note

    assert linearity_note(40_000, 512, 16.0) is None  # CartPole: the fill is 1% of T
    note = linearity_note(12_000, 22_000, 1.0)  # small-box Pong: T lies wholly inside it
    assert note.startswith("linearity: 12,000 of the T run's 12,000 env steps") and "22,000" in note
    assert linearity_note(40_000, 8_000, 8.0) is not None
    assert linearity_note(12_000, 22_000, 0.0) is None  # no limiter: collectors are never held back


@pytest.mark.parametrize("config,overrides", [
    ("cartpole", ["replay.capacity=600"]),
    ("pong", ["replay.capacity=600", "env.num_envs=2", "learner.micro_batch=16", "replay.min_size=600",
              "learner.updates_per_epoch=5", "learner.accumulation_steps=1"]),
], ids=["ring", "frames-prioritized"])
def test_the_feed_profile_draws_from_a_filled_replay_both_ways(config, overrides):
    """`python -m benchmarks.feed_profile`: the learner's rate drawing from a replay beside it
    against the same loop cycling batches already drawn, with the host's draw timed apart."""
    from benchmarks.feed_profile import profile_feed
    from raypex.cluster.config.loading import load_config

    result = profile_feed(load_config(config_path(config), overrides), shards=2, seconds=0.3, with_profile=True)
    assert result["replay_storage"] == "host" and result["draw_ms"] > 0
    assert result["fed_samples_per_s"] > 0 and result["memory_samples_per_s"] > 0
    assert result["fed_over_memory"] == pytest.approx(result["fed_samples_per_s"] / result["memory_samples_per_s"])
    assert result["prioritized"] == (config == "pong")
    assert "function calls" in result["profile"] and "Ordered by: internal time" in result["profile"]


def test_the_idle_control_judges_growth_as_the_soak_does_from_its_settling_time():
    from benchmarks.idle_ray import SETTLE_S, idle_growth_rows, main

    samples = [{"t": float(t), "rss": {"raylet-0": 30_000_000 + 100_000 * t, "gcs_server-0": 50_000_000}}
               for t in range(61)]
    samples[0]["rss"]["raylet-0"] = 1  # before SETTLE_S: never the reference
    found = {row.name: row for row in idle_growth_rows(samples)}
    first = [30_000_000 + 100_000 * t for t in range(int(SETTLE_S), int(SETTLE_S) + 3)]
    assert found["idle_rss_raylet-0"].reference == first[1] and found["idle_rss_raylet-0"].value == 30_000_000 + 100_000 * 59
    assert found["idle_rss_raylet-0"].passed is False and found["idle_rss_gcs_server-0"].passed is True
    with pytest.raises(SystemExit, match="too few samples"):
        idle_growth_rows(samples[:9])
    assert main(["--minutes", "0.05"]) == 2  # refused before any cluster starts


def test_a_startup_run_joins_the_cluster_it_is_given_and_otherwise_starts_its_own(tmp_path):
    from raypex.cluster.bench.startup import startup_argv

    own = startup_argv(["configs/cartpole.yaml", "seed=1"], tmp_path / "r", 256, None)
    joining = startup_argv(["configs/cartpole.yaml", "seed=1"], tmp_path / "r", 256, "127.0.0.1:6379")
    assert "--address" not in own and own[-2:] == ["stop.env_steps=512", "stop.eval_return=null"]
    assert joining[joining.index("--address") + 1] == "127.0.0.1:6379"
    assert [a for a in joining if a not in ("--address", "127.0.0.1:6379")] == own


def test_a_process_keeps_its_label_unless_it_was_an_idle_worker_that_now_holds_an_actor():
    from raypex.cluster.bench.soak import label_new_processes

    labels: dict[int, str] = {}
    label_new_processes(labels, {10: "CollectorActor", 11: "default_worker", 12: "raylet"})
    label_new_processes(labels, {10: "CollectorActor", 11: "EvaluatorActor", 12: "raylet", 13: "CollectorActor"})
    label_new_processes(labels, {10: "worker", 11: "default_worker", 12: "raylet"})  # titles come and go
    assert labels == {10: "CollectorActor-0", 11: "EvaluatorActor-0", 12: "raylet-0", 13: "CollectorActor-1"}


def test_the_soak_samples_once_per_interval_of_its_clock_however_late_the_polls_come(monkeypatch):
    from types import SimpleNamespace

    from raypex.cluster.bench import soak

    recorder = soak.SoakRecorder(0.2, replay_capacity=300, progress=None)  # 12 s: a sample a second
    taken: list[float] = []
    monkeypatch.setattr(recorder, "_sample", taken.append)
    ended: list[str] = []
    run = SimpleNamespace(collect_start=1000.0, metrics=SimpleNamespace(shard_sizes=[0]),
                          evaluations=SimpleNamespace(started=0, pending=None), end_soon=ended.append)
    for poll in range(21):  # a poll every 0.6 s: each one late against a 0.5 s cadence
        monkeypatch.setattr(soak.time, "time", lambda at=1000.0 + 0.6 * poll: at)
        recorder.after_poll(run)
    assert [round(t, 1) for t in taken] == [0.0, 1.2, 2.4, 3.0, 4.2, 5.4, 6.0, 7.2, 8.4, 9.0, 10.2, 11.4, 12.0]
    assert ended == ["soak done"]


def test_the_learner_stage_leaves_bf16_out_only_on_a_cpu_without_bf16_units_and_only_by_default():
    from raypex.cluster.bench.learner_variants import learner_variants
    from raypex.cluster.config.arguments import UsageError

    assert learner_variants("cpu", None, cpu_bf16_units=False) == [("fp32", "off")]
    assert learner_variants("cpu", None, cpu_bf16_units=True) == [("fp32", "off"), ("bf16", "off")]
    assert len(learner_variants("cuda", None, cpu_bf16_units=False)) == 6  # the GPU's own units decide there
    assert learner_variants("cpu", [("bf16", "off")], cpu_bf16_units=False) == [("bf16", "off")]  # asked for
    with pytest.raises(UsageError, match="'fp16:off' does not run on cpu; there: fp32:off, bf16:off"):
        learner_variants("cpu", [("fp16", "off")], cpu_bf16_units=False)
