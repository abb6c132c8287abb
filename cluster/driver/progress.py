"""The live progress line: one line rewritten in place on a terminal, a line every few seconds
when output goes to a file or CI log (so logs stay readable and small)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt_count(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _fmt(value: float | None, spec: str) -> str:
    """Format like `spec`; a missing value is a dash of the same width, so columns stay put."""
    if value is None:
        width = spec.split(".")[0]
        return "-".rjust(int(width) if width.isdigit() else 1)
    return format(value, spec)


def _fmt_duration(seconds: float | None) -> str:
    """'1h02m', '3m05s', '42s', or '?' when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class ProgressLine:
    """Renders run status; call `update` often, it decides when to draw."""

    def __init__(self, stream: TextIO = sys.stderr, log_every_s: float = 10.0):
        self.stream = stream
        self.live = stream.isatty()
        self.log_every_s = log_every_s
        self._last_log = float("-inf")
        self._logged_learning = False  # a logged line has shown a loss
        self._width = 0

    def update(self, elapsed_s: float, env_steps: int, sps: float | None, episode_return: float | None,
               eval_return: float | None, loss: float | None, lag: float | None,
               goal_steps: int | None = None, filling: tuple[int, int] | None = None,
               stopping: bool = False, may_solve: bool = False, collectors: int | None = None,
               time_limit: tuple[float, float] | None = None) -> None:
        """Draw the line (in place on a TTY; otherwise every `log_every_s`, and at once when the
        first loss is known, so that a log shows when learning began). With `goal_steps`
        (stop.env_steps) it shows the share done and the time left at the current speed, or
        "stopping" once the run is ending (the speed then falls to nothing and the time left
        would be absurd); with `filling` (replay size, replay.min_size) it says replay is filling
        instead of the loss. `sps` None (not measured yet) shows "starting" for the speed and no time left.
        `may_solve` (stop.eval_return is set): an evaluation can end the run before stop.env_steps,
        so the time left is said as an upper bound. `collectors`: how many collect now, shown when
        their number follows the cluster (collectors.num auto). `time_limit`: (the run's wall seconds
        so far, stop.wall_s); the share and the time left are that limit's when it comes first."""
        done = ""
        if stopping:
            done = " (stopping)"
        elif goal_steps:
            left = (goal_steps - env_steps) / sps if sps else None
            share = min(env_steps / goal_steps, 1.0)
            if time_limit is not None:
                wall_done, wall_goal = time_limit
                if left is None or wall_goal - wall_done < left:
                    left, share = max(wall_goal - wall_done, 0.0), min(wall_done / wall_goal, 1.0)
            bound = "at most " if may_solve else ""
            done = f" ({share:4.0%}" + (
                f", {bound}{_fmt_duration(left)} left)" if left is not None else ")")
        shows_loss = loss is not None and not filling
        learning = (f"filling replay {_fmt_count(filling[0])}/{_fmt_count(filling[1])}" if filling
                    else f"loss {_fmt(loss, '.4f')}")
        speed = f"{_fmt_count(sps):>6} steps/s" if sps is not None else "    starting"
        line = (f"[{elapsed_s:6.1f}s] env steps {_fmt_count(env_steps):>7}{done} | {speed} | "
                f"return {_fmt(episode_return, '7.1f')} | eval {_fmt(eval_return, '6.1f')} | "
                f"{learning} | lag {_fmt(lag, '.1f')}" + (f" | collectors {collectors}" if collectors is not None else ""))
        if self.live:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.flush()
        elif time.monotonic() - self._last_log >= self.log_every_s or (shows_loss and not self._logged_learning):
            self._last_log = time.monotonic()
            self._logged_learning = self._logged_learning or shows_loss
            self.stream.write(line + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """Print a message line without breaking the live line."""
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """End the live line."""
        if self.live and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


def learner_ready_line(info: dict, collectors, envs: int, learners: int = 1) -> str:
    """The line saying the learner (or every learner of a group) is ready: its device, precision,
    capture and compilation."""
    how = [info["precision"]] + ["update captured as a CUDA graph"] * info["cuda_graph"] + [
        "networks compiled"] * info["compiled"]
    over = "NCCL" if str(info["device"]).startswith("cuda") else "gloo"
    who = "learner ready" if learners == 1 else f"{learners} learners ready, their gradients summed over {over},"
    many = (f"up to {collectors.max} collectors (following the cluster, {collectors.per_node} per node)"
            if collectors.elastic else f"{collectors.num} collectors")
    return f"{who} on {info['device']} ({', '.join(how)}), {many} x {envs} envs"
