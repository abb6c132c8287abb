"""The layout as checks: no import cycle, no product module past 500 lines, and DESIGN.md's
dependency rule (cluster -> actors, replay, learner; actors may use learner's model definitions;
the learner draws from the replay in its own process, so learner -> replay; an algorithm's plug-in
builds the policy its collectors act with, so learner.algorithms -> actors' policies; replay imports
no other package of ours; every package may import replay.contracts; no Ray outside cluster/). Imports are read from the source (ast), function-level ones included."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "learner", "replay", "cluster")
MAX_LINES = 500
CONTRACTS = "replay.contracts"
MODEL_DEFINITIONS = ("learner.networks", "learner.actor_critic_networks", "learner.weights",
                     "learner.recurrent_networks", "learner.encoders")  # what collectors acting in torch act with
REGISTRY = "learner.algorithms.registry"  # what collectors and the evaluator ask how to act
PLUGINS = "learner.algorithms"  # the registry and its plug-ins: the only code that tells algorithms apart by name
POLICIES = ("actors.policy", "actors.settings", "actors.q_policy", "actors.recurrent_acting",
            "actors.continuous_acting", "actors.onnx_acting", "actors.served_acting")  # what a plug-in builds
# its collectors' and evaluator's policies from


def product_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every product module (package __init__ files included)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = product_modules()


def short(name: str) -> str:
    """A module name without the package everything installs under (raypex.replay.shard -> replay.shard)."""
    return name.removeprefix("raypex.")


def imported_names(path: Path) -> set[str]:
    """Every module name imported anywhere in the file (absolute imports, named as MODULES names
    them; `from a import b` gives a.b when that is a module, else a)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(short(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = short(f"{node.module}.{alias.name}")
                names.add(candidate if candidate in MODULES else short(node.module))
    return names


def test_every_import_of_ours_goes_through_the_raypex_package():
    """`from replay.shard import ...` would import a user's replay.py instead (or a second copy of ours)."""
    bare = sorted(f"{module}: {node.module if isinstance(node, ast.ImportFrom) else node.names[0].name}"
                  for module, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and _bare(node))
    assert not bare, bare


def _bare(node) -> bool:
    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
    return getattr(node, "level", 0) == 0 and any(name.split(".")[0] in PACKAGES for name in names)


def our_imports(module: str) -> set[str]:
    """The product modules `module` imports (packages' empty __init__ files left out)."""
    return {name for name in imported_names(MODULES[module])
            if name in MODULES and name != module and MODULES[name].name != "__init__.py"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the search stack, "done" after
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_there_is_no_import_cycle():
    cycle = find_cycle({module: our_imports(module) for module in MODULES})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_product_module_is_longer_than_500_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"


def allowed(importer: str, imported: str) -> bool:
    """DESIGN.md's dependency rule for one import between our packages."""
    source, target = importer.split(".")[0], imported.split(".")[0]
    if source == target or imported == CONTRACTS or source == "cluster":
        return True
    if source == "actors":
        return imported in MODEL_DEFINITIONS or imported == REGISTRY
    if source == "learner":
        if importer.startswith(PLUGINS + ".") and imported in POLICIES:
            return True  # a plug-in owns how its algorithm acts
        return target == "replay"  # the replay lives in the learner's process
    return False  # replay imports only itself


@pytest.mark.parametrize("module", sorted(m for m in MODULES if MODULES[m].name != "__init__.py"))
def test_imports_follow_the_dependency_rule(module):
    wrong = sorted(name for name in our_imports(module) if not allowed(module, name))
    assert not wrong, f"{module} imports {wrong}, which DESIGN.md's dependency rule does not allow"
    if not module.startswith("cluster"):
        ray = sorted(name for name in imported_names(MODULES[module]) if name.split(".")[0] == "ray")
        assert not ray, f"{module} is pure logic but imports {ray}"


# cluster's parts drawn top to bottom: each imports only those below it (the CLI calls the Python
# API; the CLI, the API and a sweep's trials start runs through launch, which picks the runtime). The two runtimes share
# a row: neither imports the other, and the driver's run loop below them knows neither.
CLUSTER_LAYERS = (("cluster.commands",), ("cluster.sweep",), ("cluster.api",), ("cluster.launch",), ("cluster.bench",),
                  ("cluster.local", "cluster.ray_runtime"), ("cluster.driver",), ("cluster.hosts",),
                  ("cluster.storage",), ("cluster.plan",), ("cluster.config",), ("cluster.process_clock",))


def cluster_part(module: str) -> tuple[int, str]:
    """The row in CLUSTER_LAYERS of the part `module` belongs to, and that part."""
    return next((i, part) for i, row in enumerate(CLUSTER_LAYERS) for part in row
                if module == part or module.startswith(part + "."))


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("cluster.")))
def test_cluster_parts_import_only_those_drawn_below_them(module):
    row, part = cluster_part(module)
    wrong = sorted(name for name in our_imports(module) if name.startswith("cluster.")
                   and cluster_part(name)[1] != part and cluster_part(name)[0] <= row)
    assert not wrong, f"{module} imports {wrong}, drawn beside or above it in CLUSTER_LAYERS"


# The modules that may import Ray: the Ray runtime, the actors it hosts parts in, the bench's Ray
# stages and the sweeps (Ray Tune). The run loop, the local runtime and every pure package do not.
RAY_USERS = ("cluster.ray_runtime.", "cluster.hosts.acting_server_actor", "cluster.hosts.collector_actor",
             "cluster.hosts.learner_actor", "cluster.hosts.learner_group", "cluster.hosts.ray_seams", "cluster.bench.learner_probes",
             "cluster.bench.ray_stages", "cluster.bench.recorder", "cluster.bench.soak", "cluster.sweep.experiment",
             "cluster.sweep.trial")


def imports_ray(module: str) -> bool:
    return any(name.split(".")[0] == "ray" for name in imported_names(MODULES[module]))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_modules_named_import_ray(module):
    named = module.startswith(RAY_USERS)
    assert imports_ray(module) <= named, f"{module} imports Ray; RAY_USERS does not name it"


def test_every_module_named_to_import_ray_does():
    """A name left in RAY_USERS after its module stopped importing Ray would let the next one start."""
    idle = [name for name in RAY_USERS if not any(imports_ray(m) for m in MODULES if m.startswith(name))]
    assert not idle, idle


def test_the_local_runtime_calls_its_parts_as_plain_objects():
    """Nothing of the local runtime imitates Ray's call form."""
    found = [f"{path.relative_to(ROOT)}:{number}" for module, path in MODULES.items() if module.startswith("cluster.local")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\.remote\(|\.options\(|__ray_ready__", line)]
    assert not found, found


def names_an_algorithm(line: str) -> bool:
    """Whether a line of code compares an algorithm's name (`algo.name == ...`, `== "td3"`, ...)."""
    from raypex.learner.algorithms.registry import names

    quoted = "|".join(names())
    return bool(re.search(r"algo(\.name)? *(==|!=| in )|self\.sac\b", line)
                or re.search(rf"(==|!=|\bin) *\(?[\"'](?:{quoted})[\"']|[\"'](?:{quoted})[\"'] *(==|!=)", line))


def test_no_code_but_the_algorithm_registry_and_its_plug_ins_compares_an_algorithms_name():
    """The learner, the run loop, the collectors and the evaluator ask an algorithm's plug-in
    (learner/algorithms/) what differs, so a new algorithm is one new module there."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for module, path in MODULES.items() if not module.startswith(PLUGINS)
             for number, line in enumerate(path.read_text().splitlines(), 1) if names_an_algorithm(line)]
    assert not found, "\n".join(found)
    assert names_an_algorithm('if config.algo.name != "dqn":') and names_an_algorithm('noise if s.algo == x else 0')
    assert names_an_algorithm('gaussian = head in ("sac",)') and not names_an_algorithm('head == "gaussian"')


def test_no_code_but_the_plug_ins_asks_what_kind_of_network_acts():
    """Acting is the plug-in's policy (actors/policy.py): nothing else compares a head or kind of
    network, so a new way to act is a plug-in alone."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for module, path in MODULES.items() if not module.startswith(PLUGINS)
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\bhead *(==|!=| in )", line)]
    assert not found, "\n".join(found)


def test_the_contracts_module_imports_nothing_of_ours():
    assert not our_imports(CONTRACTS)


def test_the_checks_see_a_cycle_and_a_forbidden_import(tmp_path):
    """The checks themselves: a cycle and a replay -> learner import written to files are found."""
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("def f():\n    from raypex.replay.shard import ReplayShard\n")
    second.write_text("from raypex.learner import networks\nimport ray.util\n")
    assert "replay.shard" in imported_names(first)
    assert {"learner.networks", "ray.util"} <= imported_names(second)
    assert not allowed("replay.shard", "learner.networks") and allowed("actors.collector", "learner.networks")
    assert not allowed("learner.learner", "actors.envs") and allowed("learner.learner", CONTRACTS)
    assert allowed("learner.learner", "replay.sharded") and not allowed("replay.sharded", "learner.replay_feed")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) is None


def test_pyproject_installs_one_package_holding_every_folder_and_the_configs():
    """Everything installs under raypex (a user's `replay.py` shadows nothing of ours): each
    top-level folder mapped to its sub-package, and every sub-package listed by name (one left out
    would be missing from every non-editable install)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"raypex": "raypex", **{f"raypex.{room}": room for room in (*PACKAGES, "configs")}}
    assert setuptools["package-dir"] == folders
    on_disk = {"raypex." + str(init.parent.relative_to(ROOT)).replace("/", ".")
               for room in PACKAGES for init in (ROOT / room).rglob("__init__.py")}
    assert set(setuptools["packages"]) == on_disk | {"raypex", "raypex.configs"}
    assert setuptools["package-data"]["raypex.configs"] == ["*.yaml"]


def test_the_driver_and_an_mlp_runs_collectors_and_evaluator_never_import_torch():
    """Only the learner's process pays torch's import (about 1.5 s of CPU here): the driver and,
    for MLP envs, the collectors and the evaluator act with the acting graph in ONNX Runtime
    (tests/test_acting_graph.py acts with it in such a process). A top-level import
    of learner.weights in the learner's host once put torch on every run's path to Ray's start."""
    import subprocess
    import sys

    modules = ["raypex.cluster.commands.train", "raypex.cluster.ray_runtime.runtime", "raypex.cluster.ray_runtime.wiring",
               "raypex.cluster.hosts.collector_actor", "raypex.cluster.hosts.evaluator_actor"]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
