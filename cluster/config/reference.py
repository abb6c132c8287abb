"""The config reference table in README.md, generated from the schema so the two cannot drift.

`python -m cluster.config.reference` prints it; a test checks README.md contains it verbatim.
"""

from __future__ import annotations

from pydantic import BaseModel

from cluster.config.schema import RunConfig


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += _rows(annotation, f"{prefix}{name}.")
            continue
        default = field.get_default(call_default_factory=True)
        shown = "null" if default is None else str(default).replace("|", "\\|")
        rows.append(f"| `{prefix}{name}` | `{shown}` | {field.description or ''} |")
    return rows


def markdown_reference() -> str:
    """One table row per config key: dotted name, default, meaning."""
    return "\n".join(["| key | default | meaning |", "| --- | --- | --- |", *_rows(RunConfig)])


if __name__ == "__main__":
    print(markdown_reference())
