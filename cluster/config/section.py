"""The base every config section shares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for every section: unknown keys are errors, values are checked on assignment too, and
    NaN or infinity is never a value (a NaN target compares false with every return)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def on_off_from_yaml_bools(value: Any) -> Any:
    """An auto/on/off field's value: YAML 1.1 reads a bare on/off (in a file or a key=value
    override) as true/false."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
