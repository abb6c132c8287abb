"""The suite's tiers and order, from measured durations, and the local Ray cluster runs join
instead of each starting one.

tests/durations.json holds each test's measured seconds (setup, call and teardown), written by
`python -m pytest -n 2 --dist loadfile --store-durations`. A run of part of the suite (`-k`, `-m`,
a file, a test's node id) replaces the entries of the tests it ran and keeps the rest; an entry
goes when its file is gone, or when its file was collected in full and the test is no longer in it
(a renamed test, a moved documented line). From it:
- a test of SLOW_S or more is marked `slow`: `python -m pytest -m "not slow"` is the fast tier,
  every pure module's tests, for a developer's loop; a test not measured yet counts as fast;
- files run longest first: `-n 2 --dist loadfile` hands whole files to whichever worker is free,
  in collection order, so with the long files first the short ones fill in at the end and both
  workers finish together.
A test that hangs fails after pytest-timeout's limit (pyproject.toml), not CI.
"""

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.kept_up_cluster import JOIN_ENVIRONMENT, kept_up_cluster

pytest_plugins = ["tests.s3_server"]  # the s3_server fixture: moto's S3 server, for run directories at a URI

DURATIONS = Path(__file__).parent / "durations.json"
SLOW_S = 2.0


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help="write each test's measured seconds to tests/durations.json (the tiers and the file "
                     "order read them)")


def measured() -> dict[str, float]:
    """tests/durations.json: each test's node id and seconds."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


_COLLECTED: set[str] = set()  # every test collected, before `-k` or `-m` deselect: the tests that exist


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks set here
def pytest_collection_modifyitems(items):
    _COLLECTED.update(item.nodeid for item in items)
    durations = measured()
    per_file = Counter()
    for nodeid, seconds in durations.items():
        per_file[nodeid.split("::")[0]] += seconds
    for item in items:
        if durations.get(item.nodeid, 0.0) >= SLOW_S:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -per_file[item.nodeid.split("::")[0]])  # stable: a file's own order stays


_SECONDS: Counter = Counter()


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid] += report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node):
    """pytest-xdist's controller: a worker's collection, which the controller never makes itself."""
    _COLLECTED.update(getattr(node, "workeroutput", {}).get("collected", ()))


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("--store-durations"):
        return
    if hasattr(config, "workerinput"):  # pytest-xdist's worker: its collection goes to the controller, which writes
        config.workeroutput["collected"] = sorted(_COLLECTED)
        return
    root = Path(config.rootpath)
    invoked_in = Path(config.invocation_params.dir)
    named_in_part = {(invoked_in / arg.split("::")[0]).resolve() for arg in config.args if "::" in arg}
    durations = stored_durations(measured(), _SECONDS, _COLLECTED, root, named_in_part)
    DURATIONS.write_text(json.dumps(durations, indent=2) + "\n")


def stored_durations(before: dict[str, float], seconds: Counter, collected: set[str], root: Path,
                     named_in_part: set[Path]) -> dict[str, float]:
    """The measured seconds after a run: the tests it ran replace their entries; of the rest, an
    entry stays unless its file is gone, or its file was collected in full (not named by a test's
    node id, `named_in_part`) without it."""
    collected_files = {nodeid.split("::")[0] for nodeid in collected}
    in_part = {file for file in collected_files if (root / file).resolve() in named_in_part}

    def still_there(nodeid: str) -> bool:
        file = nodeid.split("::")[0]
        if not (root / file).is_file():
            return False
        return file not in collected_files or file in in_part or nodeid in collected

    kept = {nodeid: secs for nodeid, secs in before.items() if still_there(nodeid)}
    return dict(sorted({**kept, **{nodeid: round(secs, 2) for nodeid, secs in seconds.items()}}.items()))


@pytest.fixture(scope="session")
def kept_up_ray() -> str:
    """The address of one local Ray cluster kept up for the session (tests/kept_up_cluster.py; one
    per pytest-xdist worker), started by the first test that asks for it."""
    from raypex.cluster.ray_runtime.wiring import local_cluster_cpus

    with kept_up_cluster(local_cluster_cpus()) as address:
        yield address


@pytest.fixture
def joining_environment(kept_up_ray) -> dict[str, str]:
    """The environment variables that make a run started in a new process join the kept-up
    cluster (tests/kept_up_cluster.py)."""
    return {"RAYPEX_ADDRESS": kept_up_ray, **JOIN_ENVIRONMENT}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A user's working directory for one test file's README lines, which share it as a user's
    session does: nothing in it at first but the `.venv/` the README's install line makes there
    (the configs are found by path in the package)."""
    workdir = tmp_path_factory.mktemp("user")
    (workdir / ".venv").mkdir()
    return workdir
