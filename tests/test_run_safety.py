"""A run directory holds data, never code: a pickle planted in any file a run writes (its learner
state, a shard's replay, the manifest, policy.pt2), with the manifest's sizes and hashes updated
as anyone who can edit the files can, is refused in one line, exit 2, and never runs.

The run is a real one (`--local`, CartPole); each payload would create a file if unpickled."""

import hashlib
import json
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import pytest

import raypex
from raypex.cluster.commands.cli import main
from raypex.cluster.driver.checkpoints import check_run_files
from raypex.cluster.storage import UnsafeRunFile
from raypex.learner.policy_file import PolicyFileError


class Payload:
    """Unpickled, it creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("safety") / "run"
    code = main(["train", "--local", "--run-dir", str(run), "stop.env_steps=3000", "stop.eval_return=null",
                 "checkpoint.replay=true", "checkpoint.keep=1", "replay.min_size=500", "eval.video_every=0"])
    assert code == 0 and (run / "policy.pt2").is_file()
    return run


def planted(finished_run: Path, tmp_path: Path, kind: str, marker: Path) -> Path:
    """A copy of the run with `kind`'s file replaced by the payload (the manifest's records of it
    updated to match)."""
    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    manifest = next((run / "checkpoints").glob("ckpt-*.json"))
    payload = pickle.dumps(Payload(marker))
    if kind == "manifest":
        manifest.write_bytes(payload)
        return run
    if kind == "policy":  # a real archive whose example inputs torch would unpickle when a weights-only load fails
        original = zipfile.ZipFile(finished_run / "policy.pt2")
        with zipfile.ZipFile(run / "policy.pt2", "w") as archive:
            for name in original.namelist():
                archive.writestr(name, payload if "/sample_inputs/" in name else original.read(name))
        return run
    counters = json.loads(manifest.read_text())
    if kind == "learner state":
        manifest.with_suffix(".pt").write_bytes(payload)
        counters.update(learner_bytes=len(payload), learner_sha256=hashlib.sha256(payload).hexdigest())
    else:  # one shard's replay
        part = counters["replay"][0]
        (run / "checkpoints" / part["file"]).write_bytes(payload)
        part.update(bytes=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    manifest.write_text(json.dumps(counters))
    return run


def refused(args: list[str], capsys) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("raypex: error: "), err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["learner state", "replay", "manifest"])
def test_a_resume_refuses_a_checkpoint_holding_a_pickle(finished_run, tmp_path, capsys, kind):
    marker = tmp_path / "ran"
    run = planted(finished_run, tmp_path, kind, marker)
    line = refused(["train", "--local", "--resume", str(run), "stop.env_steps=20000"], capsys)
    expected = {"learner state": "ckpt-00000", "replay": "is not a replay file of arrays",
                "manifest": "no intact checkpoint"}[kind]
    assert expected in line, line
    assert not marker.exists()


def test_eval_and_load_policy_refuse_a_policy_holding_a_pickle(finished_run, tmp_path, capsys):
    marker = tmp_path / "ran"
    run = planted(finished_run, tmp_path, "policy", marker)
    line = refused(["eval", str(run), "--episodes", "1"], capsys)
    assert "not a readable policy.pt2" in line and "could run code" in line, line
    with pytest.raises(PolicyFileError) as err:
        raypex.load_policy(run)
    assert "could run code" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()
    assert raypex.load_policy(finished_run).act([0.0, 0.0, 0.0, 0.0]).shape == ()  # the untouched run's loads


@pytest.mark.parametrize("kind", ["learner state", "replay", "manifest", "policy"])
def test_a_tree_of_run_files_is_checked_before_anything_loads_it(finished_run, tmp_path, kind):
    """What a sweep's resume checks first, over its trials' run directories and Tune's copies of
    their checkpoint sets (the sweep test resumes a real experiment directory with one planted)."""
    check_run_files(finished_run)
    marker = tmp_path / "ran"
    run = planted(finished_run, tmp_path, kind, marker)
    with pytest.raises(UnsafeRunFile) as err:
        check_run_files(run)
    assert "\n" not in str(err.value) and str(run) in str(err.value)
    assert not marker.exists()


def as_older_raypex_wrote(finished_run: Path, tmp_path: Path, state_bytes=None) -> Path:
    """A copy of the run whose replay is a pickle of the shard's state, as raypex wrote it before
    replay files held arrays (`ckpt-E-shard-I.replay`, pickle protocol 5), or `state_bytes` there."""
    from raypex.replay.state_file import read_state

    run = tmp_path / "older"
    shutil.copytree(finished_run, run)
    manifest = next((run / "checkpoints").glob("ckpt-*.json"))
    counters = json.loads(manifest.read_text())
    part = counters["replay"][0]
    arrays = run / "checkpoints" / part["file"]
    data = state_bytes if state_bytes is not None else pickle.dumps(read_state(str(arrays), part["file"]), protocol=5)
    pickled = arrays.with_suffix(".replay")
    pickled.write_bytes(data)
    arrays.unlink()
    part.update(file=pickled.name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest.write_text(json.dumps(counters))
    return run


def test_an_older_run_directory_resumes_with_its_pickled_replay_converted_to_arrays(finished_run, tmp_path, capsys):
    run = as_older_raypex_wrote(finished_run, tmp_path)
    check_run_files(run)  # a sweep's check reads it the same way
    code = main(["train", "--local", "--resume", str(run), "stop.env_steps=9000", "stop.eval_return=null",
                 "eval.video_every=0"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "replay was pickled by an older raypex: converted to arrays" in err, err
    assert "replay restored from the checkpoint" in err, err
    assert not list((run / "checkpoints").glob("*.replay"))
    for manifest in (run / "checkpoints").glob("ckpt-*.json"):
        assert all(part["file"].endswith(".npz") for part in json.loads(manifest.read_text())["replay"])


def test_an_older_replay_file_holding_a_payload_is_refused_without_running_it(finished_run, tmp_path, capsys):
    marker = tmp_path / "ran"
    run = as_older_raypex_wrote(finished_run, tmp_path, pickle.dumps({"storage": Payload(marker)}, protocol=5))
    line = refused(["train", "--local", "--resume", str(run), "stop.env_steps=20000"], capsys)
    assert "is not replay pickled by raypex (it imports posix.system" in line, line
    with pytest.raises(UnsafeRunFile):
        check_run_files(run)
    assert not marker.exists()


def test_a_resumed_run_starts_from_its_lines_newest_evaluation(finished_run, tmp_path, capsys):
    """What a Tune trial reports before its next evaluation (PBT ranks a trial reporting -inf last,
    and would exploit a trial it has just restarted at once again)."""
    from raypex.cluster.driver.checkpoints import load_latest

    point = load_latest(finished_run / "checkpoints")
    assert point is not None and point.eval_return is not None and point.eval_return > 0
    run = tmp_path / "again"
    shutil.copytree(finished_run, run)
    code = main(["train", "--local", "--resume", str(run), "stop.env_steps=9000", "stop.eval_return=null",
                 "eval.video_every=0", "eval.every_env_steps=100000"])
    err = capsys.readouterr().err
    assert code == 0, err
    progress = [line for line in err.splitlines() if line.startswith("[") and "env steps" in line]
    shown = re.search(r"\| eval +(\S+) \|", progress[0]) if progress else None
    assert shown and float(shown[1]) == round(point.eval_return, 1), progress
