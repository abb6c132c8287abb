"""CollectorSupervisor: keeps every collector's run loop going for the whole run.

Ray restarts a collector whose process died, `max_restarts` times (the call then fails with
ActorUnavailableError; one after the last restart is spent fails with ActorDiedError). The
collector comes back with no loop running and an old network: the supervisor announces the
learner's latest weights to the new process and starts its loop again, on the same shard (the
shard lives on in the learner's process, with its data). A loop that raised (its env's error, the
process alive) is started again too, as often, unless it raised the same error at the same place
as before its last restart: a deterministic fault that no restart (nor a resume) can fix ends the
run at once. A collector's death past its restarts, or its loop's error past as many restarts,
ends the run with one line naming the error and where the env's code raised it. Restarts of the
process are counted by the shards (each counts the collector processes attached to it).

After a death the loop is started again, and the restart said, only once the collector answers (a
`pid` call): a call sent at once can reach the dead process before Ray has noticed it died, and on
a loaded machine that failed call once counted as one more death (a single kill read as four).
"""

from __future__ import annotations

import time

import ray

from raypex.cluster.driver.progress import ProgressLine
from raypex.cluster.driver.run_errors import RunFailed, cause_line, error_line, raised_at, traceback_text


class CollectorSupervisor:
    """Starts, watches and restarts the collectors' run loops."""

    def __init__(self, collectors: list, learner, max_restarts: int, progress: ProgressLine, come_back_s: float):
        self.collectors = collectors
        self.learner = learner
        self.max_restarts = max_restarts
        self.progress = progress
        self.come_back_s = come_back_s  # how long a dead collector may take to be restarted (collectors.come_back_s)
        self.loops: dict[int, object] = {}  # each collector's running `run` call, or its `pid` call while it restarts
        self.restarting = [False] * len(collectors)  # loops[i] is the pid call of a restarting collector
        self.deaths = [0] * len(collectors)  # processes that died and that Ray restarts
        self.raised = [0] * len(collectors)  # loops that raised in a live process
        self.last_error: list[tuple | None] = [None] * len(collectors)  # (type, where) of each one's last
        self.died_at: list[float | None] = [None] * len(collectors)  # while Ray restarts it: when it died
        self.gone: set[int] = set()  # collectors Ray has not brought back within come_back_s: the run goes on without
        self.silent_since: dict[int, float] = {}  # live collectors that have not answered a stats call: since when
        self.stopping = False  # after `stop`, a loop's end is the run's end: nothing is restarted

    def start(self) -> None:
        """Start every collector's loop (they act with their own network until weights come)."""
        self.loops = {i: c.run.remote() for i, c in enumerate(self.collectors) if c is not None}

    def check(self) -> None:
        """Restart the loop of every collector whose loop ended in an error (RunFailed when one
        has died or raised more often than its restarts allow)."""
        if self.stopping:
            return
        slot_of = {ref: i for i, ref in self.loops.items()}
        done, _ = ray.wait(list(slot_of), num_returns=len(slot_of), timeout=0) if slot_of else ([], [])
        for ref in done:
            i = slot_of[ref]
            try:
                returned = ray.get(ref)
                if self.restarting[i]:  # the restarted process answers: its loop again
                    back = " (it was counted out; the run has it again)" if i in self.gone else ""
                    self.gone.discard(i)
                    self.progress.message(f"collector {i} died; restarting it on its shard{back}")
                    self._start_loop(i)
                else:  # returned normally: it was asked to stop
                    self._stopped(i, returned)
                continue
            except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError):
                self._died_for_good(i)  # (unschedulable: pinned to a node that is gone)
                continue
            except ray.exceptions.RayActorError:  # its process died; Ray is restarting it
                if not self.restarting[i]:  # (a pid call that reached the dead process is not a death)
                    self.deaths[i] += 1
                    self.died_at[i] = time.monotonic()
                self.restarting[i] = True
                self.loops[i] = self.collectors[i].pid.remote()
                continue
            except ray.exceptions.RayError as err:
                self.raised[i] += 1
                signature = (error_line(err).split(":")[0], raised_at(err))
                if signature == self.last_error[i]:
                    raise RunFailed(f"collector {i}'s env raised the same error again after a restart, so no "
                                    f"restart or resume can fix it: {cause_line(err)}", traceback_text(err),
                                    resumable=False) from None
                self.last_error[i] = signature
                if self.raised[i] > self.max_restarts:
                    raise RunFailed(f"collector {i} raised {self.raised[i]} times; last error: {cause_line(err)}",
                                    traceback_text(err)) from None
                what = f"stopped ({cause_line(err)})"
            self.progress.message(f"collector {i} {what}; restarting it on its shard")
            self._start_loop(i)
        self._count_out_the_lost()

    def _stopped(self, i: int, env_steps: int) -> None:
        """Collector i's loop returned, as asked, its `env_steps` all stored."""

    def _died_for_good(self, i: int) -> None:
        """Collector i's process died and Ray will not restart it (its restarts are spent)."""
        raise RunFailed(f"collector {i} died after {self.deaths[i]} restarts (a collector is restarted "
                        f"{self.max_restarts} times)")

    def _count_out_the_lost(self) -> None:
        """Go on without a collector that Ray has not brought back within come_back_s of its death:
        its node is gone and no node has room for its bundle (a strict spread keeps one collector
        per node). It is taken back if Ray restarts it later; with none left the run cannot go on."""
        now = time.monotonic()
        for i, died_at in enumerate(self.died_at):
            if self.restarting[i] and i not in self.gone and died_at is not None and now - died_at > self.come_back_s:
                self._not_back(i)

    def _not_back(self, i: int) -> None:
        """Collector i has not come back within come_back_s of its death: count it out."""
        self.gone.add(i)
        left = len(self.collectors) - len(self.gone)
        if left == 0:
            raise RunFailed(f"no collector came back within {self.come_back_s:g}s of dying (their nodes are gone, "
                            "and no node has room for them)")
        self.progress.message(f"collector {i} has not come back {self.come_back_s:g}s after its process died (its "
                              f"node is gone, and no node has room for it): the run goes on with {left} "
                              f"collector{'s' if left > 1 else ''}")

    def answering(self) -> list[int]:
        """The collectors whose counters can be asked for (all but those counted out, and with
        collectors.num auto the slots that have none)."""
        return [i for i, c in enumerate(self.collectors) if c is not None and i not in self.gone]

    @property
    def absent(self) -> set[int]:
        """Slots without a collector now (collectors.num auto)."""
        return {i for i, c in enumerate(self.collectors) if c is None}

    def check_env_steps(self, stats: list, timeout_s: float, env_id: str) -> None:
        """RunFailed when a collector's env step has been running for more than `timeout_s` (a
        hung env: no restart can take the step back from it). `stats`: every collector's
        CollectorStats, just polled."""
        for collector in stats:
            if collector.env_step_running_s > timeout_s:
                raise RunFailed(f"collector {collector.index}: a step of env.id {env_id} has not returned for "
                                f"{collector.env_step_running_s:.0f}s (env.step_timeout_s: {timeout_s:g}); the env "
                                "hangs", resumable=False)

    def check_answers(self, answering: list[int], answered: list[bool], waited_s: float, timeout_s: float,
                      env_id: str) -> None:
        """RunFailed when a live collector has not answered its stats calls for more than
        `timeout_s`: a step that holds its process (a C call that keeps Python's lock) leaves no
        thread to answer, nor to report how long the step has run (check_env_steps). `answered`:
        whether each of `answering` answered the poll that waited `waited_s` for it."""
        now = time.monotonic()
        for i, came in zip(answering, answered, strict=True):
            if came or self.restarting[i]:  # a restarting one is waited for by `check` instead
                self.silent_since.pop(i, None)
                continue
            silent_s = now - self.silent_since.setdefault(i, now - waited_s)
            if silent_s > timeout_s:
                self.gone.add(i)  # its counters cannot be read again: the run's end counts it as a lost node's
                raise RunFailed(f"collector {i} has not answered for {silent_s:.0f}s (env.step_timeout_s: "
                                f"{timeout_s:g}), its process alive but held (a step of env.id {env_id} that "
                                "does not return and lets no other thread run); the env hangs", resumable=False)

    def count_out_silent(self, answering: list[int], answered: list[bool]) -> list[int]:
        """At the run's end: those of `answering` that did not answer (a process held by a hung step)
        are counted as a lost node's collectors (from their last answer, what their shard lacks of
        it lost); those that did."""
        self.gone.update(i for i, came in zip(answering, answered, strict=True) if not came)
        return [i for i in answering if i not in self.gone]

    def _start_loop(self, i: int) -> None:
        """Collector i's loop again, with the learner's newest weights sent to it first."""
        self.restarting[i] = False
        self.died_at[i] = None
        self.learner.resend_weights.remote(i)
        self.loops[i] = self.collectors[i].run.remote()

    def stop(self) -> None:
        """Ask every collector to end its loop after the chunk in progress."""
        self.stopping = True
        for collector in self.collectors:
            if collector is not None:
                collector.stop.remote()

    def wait_stopped(self, timeout_s: float = 5.0) -> None:
        """Wait (at most `timeout_s`) for every loop to return, so that counters read afterwards,
        and the final checkpoint that records them, include each collector's last chunk."""
        loops = [loop for i, loop in self.loops.items() if i not in self.gone]  # a gone one never returns
        if loops:
            ray.wait(loops, num_returns=len(loops), timeout=timeout_s)
