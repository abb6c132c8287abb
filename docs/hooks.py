"""MkDocs hook: the reference pages' tables come from the code at build time, never written twice.

A page holds a marker such as `<!-- generated: config -->`; the build puts the table there: the
config keys from the schema, the CLI from the argument parser, the Python API from its docstrings.
"""

from __future__ import annotations

import inspect
import re

MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def python_api_reference() -> str:
    """Each name `raypex` exports: its signature and its docstring."""
    import raypex

    parts = []
    for name in raypex.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(raypex, name)
        kind = "class" if inspect.isclass(obj) else "function"
        try:
            signature = f"{name}{inspect.signature(obj)}"
        except (TypeError, ValueError):
            signature = name
        doc = inspect.cleandoc(obj.__doc__ or "")
        parts += [f"## `raypex.{name}`", "", f"```python\n{kind} {signature}\n```", "", doc, ""]
    return "\n".join(parts)


def generated(name: str) -> str:
    """The markdown a marker stands for."""
    if name == "config":
        from raypex.cluster.config.reference import markdown_reference

        return markdown_reference()
    if name == "cli":
        from raypex.cluster.commands.reference import markdown_reference

        return markdown_reference()
    if name == "python-api":
        return python_api_reference()
    if name == "summary":
        from raypex.cluster.driver.reference import markdown_summary

        return markdown_summary()
    if name == "tensorboard-tags":
        from raypex.cluster.driver.reference import markdown_tags

        return markdown_tags()
    raise ValueError(f"no generated table named {name!r}")


def on_page_markdown(markdown: str, **_) -> str:
    return MARKER.sub(lambda match: generated(match.group(1)), markdown)
