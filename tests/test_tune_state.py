"""Tune's pickled experiment state is resumed only as this user's raypex signed it: any change to
it, a file added, no signature, or another key's signature is refused; the trials' checkpoint
sets (raypex's own data files, checked one by one) are outside the signature."""

import pytest

from raypex.cluster.sweep.tune_state import UnsignedTuneState, check_tune_state, key_path, sign_tune_state


@pytest.fixture
def experiment(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYPEX_KEY_FILE", str(tmp_path / "keys" / "mine"))
    root = tmp_path / "exp"
    (root / "tune" / "Trial_0" / "checkpoint_000001").mkdir(parents=True)
    (root / "tune" / "tuner.pkl").write_bytes(b"tune's pickle")
    (root / "tune" / "experiment_state-1.json").write_text("{}")
    (root / "tune" / "Trial_0" / "checkpoint_000001" / "ckpt-00000004.json").write_text("{}")
    sign_tune_state(str(root))
    return root


def refused(root) -> str:
    with pytest.raises(UnsignedTuneState) as err:
        check_tune_state(str(root))
    assert "\n" not in str(err.value) and "--trust-tune-state" in str(err.value)
    return str(err.value)


def test_the_state_as_signed_resumes_and_the_key_is_this_users_alone(experiment):
    check_tune_state(str(experiment))
    assert key_path().stat().st_mode & 0o077 == 0
    (experiment / "tune" / "Trial_0" / "checkpoint_000001" / "ckpt-00000004.json").write_text('{"x": 1}')
    check_tune_state(str(experiment))  # PBT's copies change; they are checked as data instead


@pytest.mark.parametrize("change", ["edited", "added", "removed"])
def test_a_changed_state_is_refused(experiment, change):
    if change == "edited":
        (experiment / "tune" / "tuner.pkl").write_bytes(b"someone else's pickle")
    elif change == "added":
        (experiment / "tune" / "searcher-state.pkl").write_bytes(b"x")
    else:
        (experiment / "tune" / "experiment_state-1.json").unlink()
    assert "its signature does not match" in refused(experiment)


def test_no_signature_or_another_users_is_refused(experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("RAYPEX_KEY_FILE", str(tmp_path / "keys" / "theirs"))
    assert "its signature does not match" in refused(experiment)
    (experiment / "tune.sig").unlink()
    assert "carries no signature" in refused(experiment)
