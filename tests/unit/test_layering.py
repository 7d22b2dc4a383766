"""The import rules of DESIGN §3: checked on the source, so a violation fails the suite.

- Only `node/compose.py` names a concrete store (SQLite or PostgreSQL), and
  `node/store_child.py`, the composition root of the store's own process (`store.process`).
- The faces (API, web UI, CLI) call the node service: they import no store module at all.
- The domain imports nothing above it.
- The subpackages form layers with no import cycle between them: each imports only the layers
  below it (`LAYERS`, top first); no module import cycle either, inside a package. Every import
  counts, including those inside functions and under `TYPE_CHECKING`: a lazy import hides a
  cycle, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fredica"
CONCRETE = {"fredica.store.sqlite", "fredica.store.postgres"}
FACES = ("api", "web", "cli")

#: fredica's subpackages (and top-level modules) from the top down; a package may import the
#: ones after it, never the ones before it. `config` (worker.yaml) sits above `capabilities`:
#: it validates backend and task type names against the catalog, and the engine's `declare`
#: joins the two. `pipelines` register into the engine's registry through a protocol of theirs.
LAYERS = (
    "__main__",
    "cli",
    "web",
    "api",
    "node",
    "auth",
    "engine",
    "pipelines",
    "executors",
    "cluster",
    "config",
    "capabilities",
    "store",
    "domain",
)


def imports(path: Path) -> set[str]:
    """Every module `path` imports (`from a import b` counts as a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_only_compose_names_a_concrete_store() -> None:
    allowed = {
        SRC / "node" / "compose.py",
        SRC / "node" / "store_child.py",
        SRC / "store" / "postgres.py",
    }
    offenders = [
        str(p.relative_to(SRC))
        for p in modules()
        if p not in allowed and not p.is_relative_to(SRC / "store") and imports(p) & CONCRETE
    ]
    assert offenders == []


def test_faces_do_not_touch_a_store() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in modules()
        if p.relative_to(SRC).parts[0] in FACES
        and any(m == "fredica.store" or m.startswith("fredica.store.") for m in imports(p))
    ]
    assert offenders == []


def test_faces_call_no_store_method() -> None:
    # `node._store` is the service's own; a face reaching for it bypasses the use cases
    offenders = [
        str(p.relative_to(SRC))
        for p in modules()
        if p.relative_to(SRC).parts[0] in FACES and "._store" in p.read_text()
    ]
    assert offenders == []


def test_domain_imports_nothing_above_it() -> None:
    offenders = {
        str(p.relative_to(SRC)): sorted(
            m for m in imports(p) if m.startswith("fredica.") and not m.startswith("fredica.domain")
        )
        for p in (SRC / "domain").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def package_of(module: str) -> str | None:
    """The subpackage of a `fredica.…` module name (None: outside fredica, or the root)."""
    parts = module.split(".")
    if parts[0] != "fredica" or len(parts) < 2:
        return None
    name = parts[1]
    return name if (SRC / name).is_dir() or (SRC / f"{name}.py").is_file() else None


def package_graph() -> dict[tuple[str, str], set[str]]:
    """(importer, imported) package pairs, each with the files that import across."""
    edges: dict[tuple[str, str], set[str]] = {}
    for path in modules():
        rel = path.relative_to(SRC)
        if rel.parts == ("__init__.py",):
            continue
        source = rel.parts[0].removesuffix(".py")
        for module in imports(path):
            target = package_of(module)
            if target is not None and target != source:
                edges.setdefault((source, target), set()).add(str(rel))
    return edges


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> set[tuple[str, str]]:
    """(importer, imported) fredica modules. `from a import b` names the module a.b when there
    is one (not the package a, whose `__init__` is then merely run first)."""
    known = {module_name(p): p for p in modules()}
    edges: set[tuple[str, str]] = set()
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [m for m in subs if m in known] or [node.module]
            edges.update((name, t) for t in targets if t in known and t != name)
    return edges


def find_cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected group of nodes, each as a path that returns
    to its first node (the group's smallest name); [] for an acyclic graph."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())

    def path_from(start: str, allowed: set[str]) -> dict[str, str]:
        parent: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for here in frontier:
                for there in sorted(graph[here] & allowed):
                    if there not in parent:
                        parent[there] = here
                        nxt.append(there)
            frontier = nxt
        return parent

    reach = {n: set(path_from(n, set(graph))) for n in graph}
    cycles: list[list[str]] = []
    done: set[str] = set()
    for n in sorted(graph):
        group = {m for m in reach[n] if n in reach[m]}
        if n in done or not group:
            continue
        done |= group
        parent = path_from(n, group)
        path = [n]
        while path[-1] != n or len(path) == 1:
            path.append(parent[path[-1]])
        cycles.append(path[::-1])
    return cycles


def test_every_package_is_in_a_layer() -> None:
    packages = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in modules()}
    assert packages - {"__init__"} <= set(LAYERS)


def test_no_import_cycle_between_packages() -> None:
    cycles = find_cycles(set(package_graph()))
    assert cycles == [], " ; ".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_between_modules() -> None:
    cycles = find_cycles(module_graph())
    assert cycles == [], " ; ".join(" -> ".join(c) for c in cycles)


def test_packages_import_only_the_layers_below() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = {
        f"{a} -> {b}": sorted(files)
        for (a, b), files in package_graph().items()
        if rank.get(a, -1) >= rank.get(b, -1)
    }
    assert upward == {}


def test_cycle_finder_names_a_cycle() -> None:
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d")}
    assert find_cycles(edges) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert find_cycles({("a", "b"), ("b", "c"), ("a", "c")}) == []
