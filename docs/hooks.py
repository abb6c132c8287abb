"""MkDocs hook: the reference pages' tables come from the code at build time, never written twice.

A page holds a marker such as `<!-- generated: config -->`; the build puts the table there: the
config keys from the schema, the CLI from the argument parser, the Python API from its docstrings.
"""

from __future__ import annotations

import inspect
import re

MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def python_api_reference() -> str:
    """Each name `raypex` exports: its signature and its docstring, and for a class each public
    member's (methods, properties, fields)."""
    import raypex

    parts = []
    for name in raypex.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(raypex, name)
        kind = "class" if inspect.isclass(obj) else "function"
        parts += [f"## `raypex.{name}`", "", f"```python\n{kind} {_signature(name, obj)}\n```", "",
                  inspect.cleandoc(obj.__doc__ or ""), ""]
        if inspect.isclass(obj):
            for member, what, doc in public_members(obj):
                parts += [f"### `{name}.{member}`", "", f"```python\n{what}\n```", "", doc, ""]
    return "\n".join(parts)


def public_members(cls) -> list[tuple[str, str, str]]:
    """(name, how it is written, docstring) of each public member `cls` defines or inherits from
    raypex (not from object, Exception or other libraries): dataclass fields with their types,
    attributes its `__init__` sets, methods with their signatures, and properties. A field's or an
    attribute's docstring is its comment in the code (`name: type  # what it holds`)."""
    import dataclasses

    members = []
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    for name, field in fields.items():
        if not name.startswith("_"):
            members.append((name, f"{name}: {_type_name(field.type)}", _comment_of(cls, rf"{name}:")))
    for name in _init_attributes(cls):
        members.append((name, f"{name}  # attribute", _comment_of(cls.__init__, rf"self\.{name}\b[^=\n]*=")))
    for klass in cls.__mro__:
        if not klass.__module__.startswith("raypex."):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and name != "__call__" or name in fields or any(m[0] == name for m in members):
                continue
            if isinstance(value, property):
                members.append((name, f"{name}  # property", inspect.cleandoc(value.__doc__ or "")))
            elif inspect.isfunction(value):
                members.append((name, _signature(name, value), inspect.cleandoc(value.__doc__ or "")))
    return members


def _signature(name: str, obj) -> str:
    """`name(parameters) -> result` as the code writes them (`self` left out, annotations unquoted)."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].name == "self":
        signature = signature.replace(parameters=parameters[1:])
    return name + re.sub(r"(: |-> )'([^']*)'", r"\1\2", str(signature))


def _type_name(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def _init_attributes(cls) -> list[str]:
    """The public attributes `cls.__init__` (raypex's own) sets: `self.name = ...`, or several at once."""
    init = vars(cls).get("__init__")
    try:
        source = inspect.getsource(init)
    except (OSError, TypeError):  # none of its own, or a dataclass's generated one
        return []
    names = []
    for targets in re.findall(r"^\s+((?:self\.\w+(?:: [^=]+)?,?\s*)+)=", source, re.MULTILINE):
        names += [n for n in re.findall(r"self\.(\w+)", targets) if not n.startswith("_") and n not in names]
    return names


def _comment_of(obj, line_start: str) -> str:
    """The comment ending the first line of `obj`'s source that starts with `line_start` (a regex)."""
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return ""
    found = re.search(rf"^\s+[^#\n]*?{line_start}[^#\n]*#\s*(.+)$", source, re.MULTILINE)
    return found.group(1).strip() if found else ""


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
