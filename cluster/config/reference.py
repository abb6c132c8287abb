"""The config reference table in README.md, generated from the schema so the two cannot drift.

`python -m raypex.cluster.config.reference` prints it; a test checks README.md contains it verbatim.
"""

from __future__ import annotations

from pydantic import BaseModel

from raypex.cluster.config.schema import RunConfig


def _fields(model: type[BaseModel], prefix: str = ""):
    """(dotted key, field) for every leaf of the schema, in schema order."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def config_listing(config: RunConfig) -> list[str]:
    """`raypex config show`: every key with its value in `config`, its default when the value
    differs ("*" marks those), and its meaning, aligned for a terminal."""
    values = config.model_dump(mode="json")
    rows = []
    for key, field in _fields(RunConfig):
        value = values
        for part in key.split("."):
            value = value[part]
        default = field.get_default(call_default_factory=True)
        default = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
        changed = value != (list(default) if isinstance(default, tuple) else default)
        shown = "null" if value is None else str(value)
        rows.append((f"{'*' if changed else ' '} {key}", shown, f"(default {default}) " if changed else "",
                     field.description or ""))
    width_key = max(len(r[0]) for r in rows)
    width_value = min(24, max(len(r[1]) for r in rows))
    return [f"{k:<{width_key}}  {v:<{width_value}}  {d}{m}" for k, v, d, m in rows]


def markdown_reference() -> str:
    """One table row per config key: dotted name, default, meaning."""
    rows = []
    for key, field in _fields(RunConfig):
        default = field.get_default(call_default_factory=True)
        shown = "null" if default is None else str(default).replace("|", "\\|")
        rows.append(f"| `{key}` | `{shown}` | {field.description or ''} |")
    return "\n".join(["| key | default | meaning |", "| --- | --- | --- |", *rows])


if __name__ == "__main__":
    print(markdown_reference())
