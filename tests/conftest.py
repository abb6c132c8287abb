"""Test-session guards, and the local Ray cluster runs join instead of each starting one."""

import signal
from pathlib import Path

import pytest

from tests.kept_up_cluster import JOIN_ENVIRONMENT, kept_up_cluster

pytest_plugins = ["tests.s3_server"]  # the s3_server fixture: moto's S3 server, for run directories at a URI

TEST_TIMEOUT_S = 600  # far above the slowest test (about 60 s); a hang fails one test, not CI


# Every file of more than about 10 s in the suite, longest first. `-n 2 --dist loadfile` hands whole
# files to whichever worker is free, in collection order: with these first, the short files fill in
# at the end and both workers finish together, where alphabetical order left a long file starting
# last on one worker while the other sat idle.
LONGEST_FIRST = ("test_readme_lines.py", "test_faults.py", "test_readme_bench_lines.py", "test_integration.py",
                 "test_sweep.py", "test_separate_hosts.py", "test_pixels_integration.py", "test_several_learners.py",
                 "test_python_api.py", "test_ray_jobs.py", "test_driver_loop.py", "test_storage_uri.py",
                 "test_sweep_at_a_uri.py", "test_install.py", "test_continuous.py", "test_user_envs.py",
                 "test_gradient_group.py")


def pytest_collection_modifyitems(items):
    """The longest files first (LONGEST_FIRST), the rest after them in their usual order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))


@pytest.fixture(autouse=True)
def fail_instead_of_hanging():
    """Turn a test that hangs (a deadlocked run, say) into a failure after TEST_TIMEOUT_S."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"test still running after {TEST_TIMEOUT_S}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIMEOUT_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def kept_up_ray() -> str:
    """The address of one local Ray cluster kept up for the session (tests/kept_up_cluster.py; one
    per pytest-xdist worker), started by the first test that asks for it."""
    from raypex.cluster.driver.wiring import local_cluster_cpus

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
