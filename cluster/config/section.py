"""The base every config section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for every section: unknown keys are errors, values are checked on assignment too, and
    NaN or infinity is never a value (a NaN target compares false with every return)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
