"""Waiting in tests for a state that another process reaches: ask until the answer is true."""

import time


def until(condition, timeout_s: float, what: str, shown=None):
    """Poll `condition` (a question put to the cluster) until it returns something true; on a
    timeout the failure names `what` and shows what `shown()` returns (the job's logs, say)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = condition()
        if answer:
            return answer
        time.sleep(0.5)  # the asking's pace; the loop ends on the other side's own state
    raise AssertionError(f"no {what} within {timeout_s:g}s" + (f"; it showed:\n{shown()}" if shown else ""))
