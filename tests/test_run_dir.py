"""Run-directory checks before anything starts: a refused `raypex train` (new or --resume) is one
line, exit 2, and leaves the directory byte-for-byte as it was. Run directories are made here
from the real writers (save_checkpoint, config_to_yaml); a real resume is in test_integration."""

import json
from pathlib import Path

import pytest

from raypex.cluster.commands.cli import main
from raypex.cluster.config.loading import config_to_yaml, load_config
from raypex.cluster.driver.checkpoints import save_checkpoint
from raypex.cluster.driver.run_dir import check_resume
from tests.test_driver_parts import learner_bytes


def make_run(run_dir: Path, summary: dict | None = None, epochs=(5, 10)) -> None:
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(config_to_yaml(load_config(None, [])))
    for epoch in epochs:
        save_checkpoint(run_dir / "checkpoints", epoch, learner_bytes(epoch),
                        {"epochs": epoch, "env_steps": 1000 * epoch, "wall_s": 1.0 * epoch}, keep=3)
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(args: list[str], capsys) -> str:
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("raypex: error: ") and "Traceback" not in err, err
    return lines[-1]


@pytest.mark.parametrize(("override", "key"), [
    ("network.hidden=[32]", "network.hidden"), ("network.dueling=false", "network.dueling"),
    ("env.id=Acrobot-v1", "env.id"), ("env.frame_stack=2", "env.frame_stack"),
])
def test_a_resume_that_changes_shapes_is_refused_and_changes_nothing(tmp_path, capsys, override, key):
    run = tmp_path / "run"
    make_run(run)
    before = snapshot(run)
    line = refused(["--resume", str(run), override], capsys)
    assert f"{key} cannot change on resume" in line
    assert snapshot(run) == before  # config.yaml included: a plain --resume still works afterwards


@pytest.mark.parametrize(("summary", "expected"), [
    ({"env_steps": 500_000, "ended": "env_steps", "final_eval_return": 120.7},
     "the run is finished (500000 env steps, stop.env_steps=500000); to train on, give a larger one"),
    ({"env_steps": 60_000, "ended": "solved", "final_eval_return": 495.0, "time_to_solve_s": 12.0},
     "the run is finished (solved, eval return 495.0); to train on, give stop.eval_return=null"),
    # a summary from before runs recorded how they ended
    ({"env_steps": 500_000, "final_eval_return": 120.7, "time_to_solve_s": None}, "the run is finished"),
])
def test_resuming_a_finished_run_is_refused_unless_it_is_extended(tmp_path, capsys, summary, expected):
    run = tmp_path / "run"
    make_run(run, summary)
    before = snapshot(run)
    assert expected in refused(["--resume", str(run)], capsys)
    assert snapshot(run) == before
    saved = load_config(None, [])
    extended = load_config(None, ["stop.env_steps=1000000", "stop.eval_return=null"])
    assert check_resume(run, saved, extended, print).epochs == 10


def test_an_interrupted_run_resumes_from_its_newest_intact_checkpoint(tmp_path):
    run = tmp_path / "run"
    make_run(run, {"env_steps": 12_000, "ended": "interrupted", "final_eval_return": 50.0})
    newest = run / "checkpoints" / "ckpt-00000010.pt"
    newest.write_bytes(newest.read_bytes()[:40])  # truncated: a copy cut short, a full disk
    skipped: list[str] = []
    config = load_config(None, [])
    point = check_resume(run, config, config, skipped.append)
    assert point.epochs == 5 and point.env_steps == 5000
    assert skipped == [("checkpoint ckpt-00000010 is damaged (its .pt does not match the size and checksum its "
                       ".json recorded); trying the one before it")]


def test_no_intact_checkpoint_is_one_line_after_the_warnings(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, epochs=(5,))
    (run / "checkpoints" / "ckpt-00000005.json").write_text("{not json")
    before = snapshot(run)
    code = main(["train", "--resume", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err == [("warning: checkpoint ckpt-00000005 is damaged (unreadable or incomplete (JSONDecodeError)); trying the one "
                   "before it"), f"raypex: error: --resume {run}: no intact checkpoint in {run / 'checkpoints'}"]
    assert snapshot(run) == before


def test_eval_of_a_damaged_policy_is_one_line(tmp_path, capsys):
    """`raypex eval` on a policy.pt2 cut short in a copy: exit 2, one line naming the file."""
    run = tmp_path / "run"
    make_run(run, epochs=(5,))
    (run / "policy.pt2").write_bytes(b"PK\x03\x04 cut short")
    code = main(["eval", str(run), "--episodes", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"raypex: error: {run / 'policy.pt2'}: not a readable policy.pt2"), err


def test_a_file_in_the_way_or_an_unwritable_place_is_refused_before_anything_starts(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("mine")
    assert "a file is in the way" in refused(["--run-dir", str(blocker)], capsys)
    assert f"{blocker} is a file, so no directory can be made under it" in refused(
        ["--run-dir", str(blocker / "run")], capsys)
    assert blocker.read_text() == "mine"
    # /sys takes no new directories, even from root (a chmod would not stop root)
    assert "--run-dir /sys/raypex-run: cannot create a directory in /sys (" in refused(
        ["--run-dir", "/sys/raypex-run"], capsys)
