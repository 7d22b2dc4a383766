"""`/docs`: every endpoint of the API says what it does."""

from __future__ import annotations

from pathlib import Path

from fredica.api.app import create_app
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import NodeSettings


def test_every_operation_in_the_openapi_schema_has_a_description(tmp_path: Path) -> None:
    engine = EngineSettings(node_id="n", data_dir=tmp_path)
    node = compose.build_node(NodeSettings(node_id="n", data_dir=tmp_path, engine=engine))
    doc = create_app(node, manage_lifecycle=False).openapi()
    operations = [
        (method.upper(), path, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    ]
    assert len(operations) > 40
    undescribed = [f"{m} {p}" for m, p, op in operations if len(op.get("description", "")) < 20]
    assert undescribed == []
