"""Rows of `raypex bench`: each measurement beside its reference, the ratio and the bar it must meet.

Pure logic (no Ray, no torch): the arithmetic of ratios and bars, the printed table and the JSON
file, so they are tested without running anything. A bar is a comparison string (">= 0.8",
"<= 1.5") or None for rows that only report.
"""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass
from pathlib import Path

_COMPARE = {">=": operator.ge, "<=": operator.le}


@dataclass
class BenchRow:
    """One measurement: `value` in `unit`, its `reference` measured in the same run, and the bar
    that `ratio` (value / reference) must meet; reference, ratio and bar are None for rows that
    only report a figure."""

    name: str
    value: float
    unit: str
    reference: float | None = None
    ratio: float | None = None
    bar: str | None = None

    @classmethod
    def against(cls, name: str, value: float, unit: str, reference: float, bar: str | None) -> BenchRow:
        """A row whose ratio is value / reference (None when the reference is zero)."""
        ratio = value / reference if reference else None
        return cls(name, value, unit, reference, ratio, bar)

    @property
    def passed(self) -> bool | None:
        """Whether the ratio meets the bar; None when the row has no bar."""
        if self.bar is None:
            return None
        if self.ratio is None:
            return False
        symbol, threshold = parse_bar(self.bar)
        return _COMPARE[symbol](self.ratio, threshold)


def parse_bar(bar: str) -> tuple[str, float]:
    """Split a bar like '>= 0.8' into its comparison and threshold (ValueError when malformed)."""
    symbol, _, threshold = bar.partition(" ")
    if symbol not in _COMPARE:
        raise ValueError(f"bar {bar!r}: the comparison must be one of {sorted(_COMPARE)}")
    return symbol, float(threshold)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _ratio_text(row: BenchRow) -> str:
    """The ratio to 3 significant digits, or as many more as it takes for the printed figure to
    agree with the verdict: 0.7996 against '>= 0.8' reads 0.7996, never a MISSED 0.8."""
    text = _num(row.ratio)
    if row.ratio is None or row.bar is None:
        return text
    symbol, threshold = parse_bar(row.bar)
    digits = 3
    while _COMPARE[symbol](float(text.replace(",", "")), threshold) != row.passed and digits < 12:
        digits += 1
        text = f"{row.ratio:.{digits}g}"
    return text


def format_table(rows: list[BenchRow]) -> str:
    """The table `raypex bench` prints: one line per row, the verdict last."""
    header = ("row", "value", "unit", "reference", "ratio", "bar", "verdict")
    lines = [header]
    for r in rows:
        verdict = {True: "pass", False: "MISSED", None: ""}[r.passed]
        lines.append((r.name, _num(r.value), r.unit, _num(r.reference), _ratio_text(r), r.bar or "", verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def write_json(rows: list[BenchRow], path: Path, machine: dict) -> None:
    """Write {"machine": ..., "rows": [{name, value, unit, reference, ratio, bar}, ...]} atomically."""
    write_json_payload({"machine": machine, "rows": [asdict(r) for r in rows]}, path)


def write_json_payload(payload: dict, path: Path) -> None:
    """Write `payload` as indented JSON, atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)


def linearity_note(t_env_steps: int, slack_env_steps: int, samples_per_insert: float) -> str | None:
    """A line under the table when the linearity row compares unlike runs: where replay's fill plus
    the limiter's slack is a fifth of T or more, collectors run ahead of the learner for that much
    of the T run and far less of the 5T run, so 5T costs more than 5x T with no slowdown at all."""
    if samples_per_insert <= 0 or 5 * slack_env_steps < t_env_steps:
        return None
    return (f"linearity: {min(slack_env_steps, t_env_steps):,} of the T run's {t_env_steps:,} env steps are replay "
            f"filling (replay.min_size + replay.error_buffer = {slack_env_steps:,}) ahead of the learner's pace; "
            "--json keeps each run's env steps/s by tenth (details.env_steps_per_s_by_tenth) to tell that from a slowdown")


def bounding_stage(collector: dict[str, float], learner: dict[str, float]) -> str:
    """Which side waits less bounds the pipeline; its largest working phase is the bottleneck.

    Collectors that sit throttled are waiting for the learner (the learner bounds); a learner that
    waits for data is waiting for the collectors (they bound).
    """
    collector_idle = collector.get("throttle", 0.0)
    learner_idle = learner.get("wait", 0.0)
    if learner_idle > collector_idle:
        side, phases = "collectors", {p: f for p, f in collector.items() if p != "throttle"}
    else:
        side, phases = "learner", {p: f for p, f in learner.items() if p != "wait"}
    return f"{side} ({max(phases, key=phases.get)})" if phases else side
