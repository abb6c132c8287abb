"""Test-session guards."""

import signal

import pytest

TEST_TIMEOUT_S = 600  # far above the slowest test (about 60 s); a hang fails one test, not CI


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
