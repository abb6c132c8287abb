"""tests/durations.json after a run of part of the suite: what ran is replaced, what was not
selected stays, and only a test that is gone from a file collected in full leaves."""

from collections import Counter
from pathlib import Path

from tests.conftest import stored_durations

BEFORE = {
    "tests/test_a.py::test_one": 3.0,
    "tests/test_a.py::test_two": 0.5,
    "tests/test_a.py::test_renamed_away": 9.0,
    "tests/test_b.py::test_lines[docs/results.md:10]": 4.0,
    "tests/test_b.py::test_lines[docs/results.md:12]": 0.1,
    "tests/test_gone.py::test_x": 1.0,
}


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / name).write_text("")
    return tmp_path


def test_a_k_selection_replaces_what_ran_and_keeps_the_rest_of_its_file(tmp_path):
    root = _tree(tmp_path)
    collected = {"tests/test_a.py::test_one", "tests/test_a.py::test_two"}  # before -k deselects test_two
    after = stored_durations(BEFORE, Counter({"tests/test_a.py::test_one": 2.345}), collected, root, set())
    assert after["tests/test_a.py::test_one"] == 2.35
    assert after["tests/test_a.py::test_two"] == 0.5
    assert "tests/test_a.py::test_renamed_away" not in after  # its file was collected in full without it
    assert "tests/test_gone.py::test_x" not in after
    assert after["tests/test_b.py::test_lines[docs/results.md:10]"] == 4.0  # its file was not collected
    assert list(after) == sorted(after)


def test_a_moved_documented_line_takes_its_new_key(tmp_path):
    root = _tree(tmp_path)
    collected = {"tests/test_b.py::test_lines[docs/results.md:14]", "tests/test_b.py::test_lines[docs/results.md:16]"}
    ran = Counter({nodeid: 4.2 if nodeid.endswith(":14]") else 0.1 for nodeid in collected})
    after = stored_durations(BEFORE, ran, collected, root, set())
    assert {nodeid: secs for nodeid, secs in after.items() if "test_b" in nodeid} == {
        "tests/test_b.py::test_lines[docs/results.md:14]": 4.2,
        "tests/test_b.py::test_lines[docs/results.md:16]": 0.1,
    }


def test_a_file_named_by_a_tests_node_id_keeps_its_other_entries(tmp_path):
    root = _tree(tmp_path)
    collected = {"tests/test_a.py::test_one"}  # `pytest tests/test_a.py::test_one` collects only it
    after = stored_durations(BEFORE, Counter({"tests/test_a.py::test_one": 1.0}), collected, root,
                             {(root / "tests/test_a.py").resolve()})
    assert after["tests/test_a.py::test_two"] == 0.5
    assert after["tests/test_a.py::test_renamed_away"] == 9.0
