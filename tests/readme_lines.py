"""The command lines a user is told to type (the bash blocks of README.md and the docs pages, the
configs' header lines),
and the ways tests/test_readme_lines.py proves each one.

Pure text handling and plain data: the test module holds the plan, line by line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Source:
    """Where a command line was found, e.g. README.md:53."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Ran:
    """What a run line did, for its check: the shared working directory, the text appended to
    the line, the process's output, the run directories it created under runs/, and the URL a
    served line printed."""

    workdir: Path
    extra: str
    out: str
    err: str
    new_runs: list[Path]
    url: str | None = None
    ray_address: str | None = None  # RAY_ADDRESS in the line's environment (own_cluster lines)


@dataclass(frozen=True)
class Run:
    """Run the line in a shell from the shared working directory, with `extra` appended (only
    where `why` says the line is meant for a bigger machine or a longer run), expect `exit_code`,
    then `check` what it did. `extra_from` computes the extra text from the working directory
    when it depends on an earlier line's run. `serves`: the line starts a server that runs until
    stopped; it is checked once it prints its URL, then stopped. `saves`: the block is a file the
    user saves (`# NAME.py` on its first line). `own_cluster`: the line's run starts its own local
    Ray cluster, as a new user's does, with RAY_ADDRESS naming the suite's kept-up one (a cluster
    `ray start`ed on the machine must not capture a run that names no address); the others join
    the kept-up one (RAYPEX_ADDRESS)."""

    extra: str = ""
    why: str = ""
    exit_code: int = 0
    check: Callable[[Ran], None] | None = None
    extra_from: Callable[[Path], str] | None = None
    serves: bool = False
    timeout_s: int = 300
    saves: str | None = None  # a python block the user saves as this file: written, then imported
    own_cluster: bool = False

    def describe(self) -> str:
        """The README table's cell for this line."""
        own = "; its own local Ray cluster, with RAY_ADDRESS naming another" if self.own_cluster else ""
        if self.saves:
            return f"saved as `{self.saves}` in the working directory, then imported"
        if self.exit_code:
            return f"as written; exit {self.exit_code} here: {self.why}{own}"
        if not (self.extra or self.extra_from):
            return f"as written{own}"
        shown = f"`{self.extra}`" if self.extra else "an override"
        return f"with {shown}: {self.why}{own}"


@dataclass(frozen=True)
class Elsewhere:
    """Proven by another test or check (`tests/FILE.py::FUNCTION`, whose source holds the text
    `holds`) or by `.ci/run` (which holds it): the line needs more than one process tree on one
    machine, another documented line's run is this line's run with settings added, or `.ci/run`
    itself does what the line does (a fresh virtual environment, activated)."""

    where: str
    holds: str
    why: str

    def describe(self) -> str:
        """The README table's cell for this line."""
        return f"`{self.where}`: {self.why}"


@dataclass(frozen=True)
class NotRun:
    """Not run by CI, because it needs what the CI machine cannot reach, or it only draws what
    other lines' long runs wrote."""

    why: str

    def describe(self) -> str:
        """The README table's cell for this line."""
        return f"not run: {self.why}"


def strip_comment(line: str) -> str:
    """The command without its trailing `# comment` (a # inside quotes is kept)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str, path: str = "README.md") -> list[tuple[str, Source]]:
    """Every command line of the markdown's ```bash blocks without comments, and every ```python
    block whole (one program, several lines), in order."""
    commands, block, python = [], None, None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            if python is not None:
                commands.append(("\n".join(python), Source(path, number - len(python))))
            block = line.strip().removeprefix("```") if block is None else None
            python = [] if block == "python" else None
        elif python is not None:
            python.append(line)
        elif block == "bash" and strip_comment(line):
            commands.append((strip_comment(line), Source(path, number)))
    return commands


HEADER_COMMAND = re.compile(r"^#\s+((?:raypex|python) .*)$")


def header_commands(text: str, path: str) -> list[tuple[str, Source]]:
    """The command lines of a config file's leading comment block (`#   raypex train ...`)."""
    commands = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("#"):
            break
        match = HEADER_COMMAND.match(line)
        if match:
            commands.append((match.group(1).strip(), Source(path, number)))
    return commands


def docs_pages(root: Path = ROOT) -> list[str]:
    """The docs site's pages in the order of mkdocs.yml's nav (paths from the root: docs/...)."""
    return ["docs/" + page for page in re.findall(r"^\s*- (?:[^:\n]+: )?([\w/.-]+\.md)\s*$",
                                                   (root / "mkdocs.yml").read_text(), re.MULTILINE)]


def documented_commands(root: Path = ROOT) -> list[tuple[str, list[Source]]]:
    """README.md's lines, then the docs pages' in the site's order, then the configs' header
    lines: each distinct line once, with every place it appears, in first-appearance order."""
    found = readme_commands((root / "README.md").read_text())
    for page in docs_pages(root):
        found += readme_commands((root / page).read_text(), page)
    for config in sorted((root / "configs").glob("*.yaml")):
        found += header_commands(config.read_text(), f"configs/{config.name}")
    places: dict[str, list[Source]] = {}
    for command, source in found:
        places.setdefault(command, []).append(source)
    return list(places.items())


def markdown_table(plan: dict[str, Run | Elsewhere | NotRun]) -> str:
    """README.md's table of how CI proves each documented line (tests/test_readme_lines.py)."""
    rows = ["| line | how CI runs it |", "| --- | --- |"]
    for command, how in plan.items():
        label = f"`{command}`" if "\n" not in command else f"the python block `{command.splitlines()[-1][:60]}...`"
        rows.append(f"| {label} | {how.describe()} |")
    return "\n".join(rows)
