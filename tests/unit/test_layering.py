"""The import rules of DESIGN §3: checked on the source, so a violation fails the suite.

- Only `node/compose.py` names a concrete store (SQLite or PostgreSQL).
- The faces (API, web UI, CLI) call the node service: they import no store module at all.
- The domain imports nothing above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fredica"
CONCRETE = {"fredica.store.sqlite", "fredica.store.postgres"}
FACES = ("api", "web", "cli")


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
    allowed = {SRC / "node" / "compose.py", SRC / "store" / "postgres.py"}
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
