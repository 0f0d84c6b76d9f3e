"""``densegate.impl`` must import without z3, the spec or the lab, and its rooms import one way.

Engines embed ``densegate.impl`` alone, so it never loads z3, the spec, the
proofs, the laboratory (``densegate.lab``: cost model, benchmark, comparison
policies, fault injection, benchmark phases) or an optional engine. Inside it
the dependency direction is gate -> sched / dp_vector / dp_gate -> runners -> engine ->
traces -> dp: the core never reaches up, and no module cycle exists.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import densegate.impl

IMPL = pathlib.Path(densegate.impl.__file__).parent

FORBIDDEN_EVERYWHERE = (
    "z3",
    "crosshair",
    "hypothesis",
    "densegate.spec",
    "densegate.proofs",
    "densegate.testing",
    "densegate.lab",
    "densegate.cli",
    "vllm",
    "sglang",
)
"""No impl module imports these, at any depth (function-level imports included)."""

LAYER: dict[str, int] = {
    "validation": 0,
    "extras": 0,
    "figures": 0,
    "settings": 0,
    "gate": 1,
    "sched": 2,
    "dp_vector": 2,
    "dp_gate": 2,
    "runners": 3,
    "engine": 4,
    "engine_config": 4,
    "inbox": 4,  # the engine's input queue
    "outputs": 4,  # what the engine reports
    "traces": 5,
    "dp": 6,
}
"""Room -> layer: a module may import rooms of its own layer or below, never above."""


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(IMPL).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["densegate.impl", *parts])


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def _imports(path: pathlib.Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            # ``from densegate.impl.sched import scheduler`` imports a submodule.
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    files = sorted(IMPL.rglob("*.py"))
    modules = {_module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        graph[mod] = {n for n in _imports(path) if n in modules and n != mod}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules, or None (iterative DFS, three colours)."""
    state: dict[str, int] = {}
    for root in sorted(graph):
        if state.get(root):
            continue
        stack: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop()
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph[nxt])))
    return None


def test_importing_impl_loads_no_z3_and_no_spec() -> None:
    code = (
        "import sys, densegate.impl, densegate.impl.sched.batch, densegate.impl.gate\n"
        "bad = sorted(m for m in sys.modules if m == 'z3' or m.startswith(('z3.', 'densegate.spec',"
        " 'densegate.proofs', 'densegate.lab')))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_impl_module_imports_z3_spec_proofs_lab_or_an_engine_anywhere() -> None:
    """Covers imports inside functions too, which the subprocess check cannot reach."""
    offenders = []
    files = sorted(IMPL.rglob("*.py"))
    assert files
    for path in files:
        for n in _imports(path):
            if any(n == f or n.startswith(f + ".") for f in FORBIDDEN_EVERYWHERE):
                offenders.append(f"{path.relative_to(IMPL)}: {n}")
    assert offenders == []


def test_every_impl_room_has_a_layer() -> None:
    rooms = {_room(m) for m in _graph()} - {None}
    assert rooms <= set(LAYER), f"rooms without a layer: {sorted(rooms - set(LAYER))}"


def test_impl_imports_only_downward() -> None:
    upward = []
    for mod, deps in _graph().items():
        room = _room(mod)
        if room is None:  # the package's __init__: the public API, on top of everything
            continue
        for dep in deps:
            dep_room = _room(dep)
            if dep_room is not None and LAYER[dep_room] > LAYER[room]:
                upward.append(f"{mod} -> {dep}")
    assert upward == []


def test_impl_has_no_import_cycle() -> None:
    assert _cycle(_graph()) is None


def test_the_layer_checks_can_fail() -> None:
    """The checks above see what they claim to: a planted cycle and an upward edge."""
    graph = _graph()
    graph["densegate.impl.gate"] = {*graph["densegate.impl.gate"], "densegate.impl.engine"}
    cycle = _cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    engine_deps = graph["densegate.impl.engine"]
    assert "densegate.impl.gate" in engine_deps  # the real edge the planted one closes
    assert LAYER["engine"] > LAYER["gate"]
