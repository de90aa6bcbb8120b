"""The house drawn from imports: no circle, lazy or not, and the protocol and the core sweep import no system.

Every ``import`` of a ``jaxcomm`` module anywhere in a file counts (at the top, inside a function, under
``TYPE_CHECKING``), so a lazy import cannot hide an arrow back up.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxcomm"

METHODS = {"network", "data_parallel", "local_sgd", "codistillation", "sparta", "gossip", "sgp", "leader_sgd", "lgc",
           "federated"}
"""The modules that make methods (:class:`jaxcomm.methods.Method` values): siblings on the protocol."""
SYSTEMS = METHODS | {"network_sweep", "unsupervised", "language", "teacher", "zoo", "recipes", "demo"}
"""Modules that build or train a system (a method, the network, the teacher, the agents) or pick among them."""


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, modules: set[str], name: str | None = None) -> set[str]:
    """The jaxcomm modules ``path`` imports anywhere (``from jaxcomm import x`` counts x where x is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("jaxcomm"):
            named = {f"{node.module}.{a.name}" for a in node.names}
            out |= (named & modules) or ({node.module} & modules)
    return out - {name or module_name(path)}


def graph() -> dict[str, set[str]]:
    paths = list(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    # a package's __init__ is not an arrow target of its own modules' imports
    return {module_name(p): {m for m in imports_of(p, modules) if not module_name(p).startswith(m + ".")}
            for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_library_has_no_import_circle():
    assert cycles(graph()) == []


def test_the_protocol_the_kit_and_the_core_sweep_import_no_system():
    edges = graph()
    for name in ("jaxcomm.methods", "jaxcomm.sweep", "jaxcomm.kit", "jaxcomm.classifier", "jaxcomm.driver"):
        systems = {m for m in edges[name] if m.split(".")[-1] in SYSTEMS}
        assert not systems, f"{name} imports {sorted(systems)}"


def test_no_method_imports_another():
    edges = graph()
    for name in sorted(METHODS):
        siblings = {m for m in edges[f"jaxcomm.{name}"] if m.split(".")[-1] in METHODS}
        assert not siblings, f"jaxcomm.{name} imports {sorted(siblings)}"


def test_the_drawing_sees_lazy_imports(tmp_path):
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    from jaxcomm import network  # noqa\n    import jaxcomm.sweep\n")
    assert imports_of(lazy, {"jaxcomm.network", "jaxcomm.sweep"}, "lazy") == {"jaxcomm.network", "jaxcomm.sweep"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
