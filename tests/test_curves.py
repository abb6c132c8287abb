"""The results page's curve tools: benchmarks/published_curves.py (a paper's long-format result
file to the mean curve drawn beside raypex's runs) and the run's own time benchmarks/curves.py
puts on the wall-time axis. (tests/test_integration.py draws a real run's curves.)"""

from __future__ import annotations

import csv

import pytest

from benchmarks import published_curves
from benchmarks.curves import own_seconds, run_spans

SOURCE = """,exp_name,env_name,seed,metric,env_step,value
0,CrossQ,HalfCheetah-v4,1,avg_return,0,-10.0
1,CrossQ,HalfCheetah-v4,2,avg_return,0,-20.0
2,CrossQ,HalfCheetah-v4,1,avg_return,50000,5000.0
3,CrossQ,HalfCheetah-v4,2,avg_return,50000,6000.0
4,CrossQ,HalfCheetah-v4,1,avg_success,50000,0.0
5,CrossQ,Hopper-v4,1,avg_return,50000,900.0
6,CrossQ,HalfCheetah-v4,1,avg_return,400000,9000.0
"""


def test_the_mean_over_seeds_of_one_envs_returns_up_to_the_step_asked(tmp_path):
    source = tmp_path / "crossq.csv"
    source.write_text(SOURCE)
    out = tmp_path / "curve.csv"
    assert published_curves.main([str(source), "--env", "HalfCheetah-v4", "--max-steps", "300000", "--out", str(out)]) == 0
    with out.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows == [{"env_steps": "0", "eval_return_mean": "-15.0", "seeds": "2"},
                    {"env_steps": "50000", "eval_return_mean": "5500.0", "seeds": "2"}]


def test_an_env_the_source_lacks_is_refused_naming_the_ones_it_holds(tmp_path):
    source = tmp_path / "crossq.csv"
    source.write_text(SOURCE)
    with pytest.raises(SystemExit, match="no avg_return of Walker2d-v4; it holds HalfCheetah-v4, Hopper-v4"):
        published_curves.main([str(source), "--env", "Walker2d-v4", "--out", str(tmp_path / "curve.csv")])
    assert not (tmp_path / "curve.csv").exists()


def test_a_resumed_runs_seconds_leave_out_the_time_between_its_end_and_its_resume():
    starts = [1000.0, 5000.0]  # the run's start, then its --resume an hour later
    logged = [1000.5, 1010.0, 1060.0, 5000.2, 5030.0]  # its events: the first start's last at 1060
    spans = run_spans(starts, logged)
    assert own_seconds(1010.0, spans) == 10.0
    assert own_seconds(1060.0, spans) == 60.0
    assert own_seconds(5030.0, spans) == 60.0 + 30.0
    assert own_seconds(1010.0, run_spans([1000.0], logged)) == 10.0  # never resumed


def test_scalars_are_averaged_per_bin_of_env_steps_a_row_per_run_and_an_empty_bin_is_a_dash(tmp_path, capsys):
    from benchmarks import scalars
    from raypex.cluster.driver.tensorboard_log import TensorBoardLog

    for name, points in {"a": [(0, 1.0), (9999, 3.0), (10000, 10.0), (25000, 7.0)], "b": [(15000, -4.0)]}.items():
        log = TensorBoardLog(tmp_path / name / "tensorboard")
        for step, value in points:
            log.scalars({"losses/td_loss": value}, step)
        log.close()
    assert scalars.main([str(tmp_path / "a"), str(tmp_path / "b"), "--tags", "losses/td_loss", "eval/return_mean",
                         "--bin", "10000", "--to", "30000"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert rows == [["losses/td_loss"], ["0k", "10k", "20k"], [a, "2.00", "10.00", "7.00"], [b, "-", "-4.00", "-"],
                    ["eval/return_mean"], ["0k", "10k", "20k"], [a, "-", "-", "-"], [b, "-", "-", "-"]]
    with pytest.raises(SystemExit, match="no tensorboard/ there"):
        scalars.main([str(tmp_path)])
