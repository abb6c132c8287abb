"""The CLI reference page (docs/reference/cli.md), generated from the argument parser so the
page and `raypex --help` cannot drift: every command, its usage and every argument's help."""

from __future__ import annotations

import argparse

from raypex.cluster.commands.cli import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The parser's subcommands (argparse keeps them only among its actions)."""
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def markdown_reference() -> str:
    """Every `raypex` command: what it does, its usage line and a row per argument."""
    subcommands = _subcommands(build_parser())
    summaries = {choice.dest: choice.help or "" for choice in subcommands._choices_actions}
    parts = []
    for name, command in subcommands.choices.items():
        usage = " ".join(command.format_usage().removeprefix("usage: ").split())
        parts += [f"## raypex {name}", "", _cell(summaries.get(name)), "", "```text", usage, "```", ""]
        rows = ["| argument | meaning |", "| --- | --- |"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = ", ".join(action.option_strings) or (action.metavar or action.dest)
            if action.option_strings and action.nargs != 0:
                label += f" {action.metavar or action.dest.upper()}"
            choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
            rows.append(f"| `{label}` | {_cell(action.help)}{choices} |")
        parts += rows + [""]
        if command.epilog:
            parts += [_cell(command.epilog), ""]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown_reference())
