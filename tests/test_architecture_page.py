"""docs/architecture.md's diagram against the code: every part it names is defined in the module it
gives, every message is one of replay/contracts.py, every call drawn from the driver to a part is
a method of that part the run loop calls, each runtime offers the interface the driver box lists,
and each runtime builds the parts where the diagram says it does."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
MODULE = r"((?:cluster|actors|learner|replay)/[\w/]+\.py)"


def diagram(text: str | None = None) -> str:
    """The page's one text block."""
    text = PAGE.read_text() if text is None else text
    blocks = re.findall(r"```text\n(.*?)```", text, re.S)
    assert len(blocks) == 1, f"the page has {len(blocks)} diagrams, not one"
    return blocks[0]


def definitions(path: str) -> dict[str, ast.AST]:
    """The top-level classes, functions and assigned names of a module."""
    tree = ast.parse((ROOT / path).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    found[target.id] = node
    return found


def named_parts(block: str) -> list[tuple[str, str]]:
    """(name, module) for each `Name (path/to/module.py)` of the diagram, across line breaks."""
    return re.findall(r"(\w+)\s+\(" + MODULE + r"\)", block)


def methods_of(cls: ast.ClassDef) -> set[str]:
    return {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}


def part_class(name: str, block: str) -> ast.ClassDef:
    module = dict(named_parts(block))[name]
    return definitions(module)[name]


def test_every_part_is_defined_in_the_module_the_diagram_names():
    block = diagram()
    parts = named_parts(block)
    assert len(parts) >= 20, parts
    missing = [f"{name} ({module})" for name, module in parts
               if not (ROOT / module).is_file() or name not in definitions(module)]
    assert not missing, missing
    unknown = sorted(set(re.findall(MODULE, block)) - {module for _, module in parts} - {"replay/contracts.py"})
    assert all((ROOT / module).is_file() for module in unknown), unknown


def test_every_other_name_the_diagram_gives_is_a_message_or_a_seam_defined_beside_the_parts():
    """A CamelCase name not paired with its module (PushChunk, ChunkSink, ...) is defined in
    replay/contracts.py or in one of the modules the diagram names."""
    block = diagram()
    modules = {module for _, module in named_parts(block)} | {"replay/contracts.py"}
    defined = set().union(*(definitions(module) for module in modules))
    camel = set(re.findall(r"\b[A-Z][a-z]+[A-Z]\w*\b", block))
    assert {"PushChunk", "PublishWeights", "PollWeights", "EpochStats", "ShardStats", "CollectorStats"} <= camel
    assert not sorted(camel - defined)
    for message in ("Chunk", "Weights"):
        assert re.search(rf"\b{message}\b", block) and message in definitions("replay/contracts.py")


def calls_drawn(block: str) -> dict[str, set[str]]:
    """The methods on the arrows from the driver's box, by the part whose box they point into."""
    lines = block.splitlines()
    bottom = next(n for n, line in enumerate(lines) if line.lstrip().startswith("└") and "┬" in line)
    tops = next(n for n in range(bottom + 1, len(lines)) if "▼" in lines[n])
    columns = [i for i, ch in enumerate(lines[bottom]) if ch == "┬"] + [10_000]
    heads = [re.findall(r"│ (\w+)", lines[tops + 1])[k] for k in range(len(columns) - 1)]
    drawn: dict[str, set[str]] = {head: set() for head in heads}
    for line in lines[bottom + 1:tops]:
        for k, head in enumerate(heads):
            asked = line[columns[k]:columns[k + 1]].split("->")[0]  # what a call returns is drawn after ->
            drawn[head] |= set(re.findall(r"\b([a-z]+(?:_[a-z]+)*)\b(?=\s*(?:->|\(|,|$))", asked))
    return drawn


def test_each_call_drawn_to_a_part_is_its_method_and_the_run_loop_makes_it():
    block = diagram()
    drawn = calls_drawn(block)
    assert set(drawn) == {"LearnerHost", "Collector", "WeightsEvaluator"}, drawn
    assert {"train_epoch", "replay_stats", "stats", "evaluate"} <= set().union(*drawn.values())
    loop = "\n".join(path.read_text() for path in (ROOT / "cluster" / "driver").glob("*.py"))
    for part, methods in drawn.items():
        assert methods, part
        assert methods <= methods_of(part_class(part, block)), (part, methods - methods_of(part_class(part, block)))
        for method in methods:
            assert re.search(rf'call\([^()]*, "{method}"', loop), f"the run loop never calls {part}.{method}"


def test_both_runtimes_offer_the_interface_the_driver_box_lists():
    block = diagram()
    listed = re.search(r"Runtime \(cluster/driver/runtime.py\): ([\w, ]+)", block)[1].strip().split(", ")
    assert listed == ["call", "when_up", "wait", "get"]
    for runtime in ("Runtime", "RayRuntime", "LocalRuntime"):
        assert set(listed) <= methods_of(part_class(runtime, block)), runtime


@pytest.mark.parametrize("runtime,builder,hosted", [
    ("ray", "cluster/ray_runtime/wiring.py", ["LearnerActor", "GroupLead", "CollectorActor", "EvaluatorActor",
                                             "ChunkSink"]),
    ("local", "cluster/local/wiring.py", ["LearnerHost", "Collector", "WeightsEvaluator", "ShardWriter",
                                         "WeightBoard"]),
])
def test_each_runtime_builds_the_parts_the_diagram_says_it_does(runtime, builder, hosted):
    """The Ray wiring makes the hosts actors (ray.remote); the local one makes the parts themselves."""
    block = diagram()
    source = (ROOT / builder).read_text()
    for name in hosted:
        assert name in block, name
        assert re.search(rf"\b{name}\b[()]", source), f"{builder} does not build {name}"
    if runtime == "ray":
        for actor in ("CollectorActor", "EvaluatorActor", "LearnerActor"):
            assert re.search(rf"ray\.remote\([^)]*\)?\(?{actor}\)", source), actor
        assert "LearnerHost" in {base.id for base in part_class("LearnerActor", block).bases}
        assert "WeightsEvaluator" in {base.id for base in part_class("EvaluatorActor", block).bases}


def test_the_checks_see_a_part_in_the_wrong_module():
    wrong = "```text\n Learner (replay/sharded.py) and ShardedReplay (replay/sharded.py)\n```"
    parts = named_parts(diagram(wrong))
    assert [name for name, module in parts if name not in definitions(module)] == ["Learner"]
