"""auth.mode: token against a real node: Bearer tokens, hashes in worker.yaml, permissions."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import httpx
import pytest

from fredica import auth
from fredica.config import schema as config_schema

from .conftest import FAST_CONFIG, ServedNode, create_token

TASKS = {"template": "custom", "tasks": [{"ref": "a", "type": "TEST_SLEEP"}]}


def test_token_mode(served: ServedNode) -> None:
    served.config.write_text(FAST_CONFIG.format(grace=2) + "auth:\n  mode: token  # keep me\n")
    alice = create_token(served, "--name", "Alice", "--max-tasks", "2")
    text = served.config.read_text()
    assert "keep me" in text and alice not in text  # only the hash is stored
    assert "sha256:" + hashlib.sha256(alice.encode()).hexdigest() in text
    served.start()
    with httpx.Client(base_url=served.url, timeout=10, trust_env=False) as anon:
        assert anon.get("/healthz").status_code == 200
        r = anon.post("/api/v1/pipelines", json=TASKS)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = anon.get("/api/v1/pipelines", headers={"Authorization": "Bearer nope"})
        assert (r.status_code, r.json()["error"]) == (401, "unknown token")
        r = anon.get("/api/v1/pipelines", headers={"Authorization": "Basic abc"})
        assert r.status_code == 401 and "Bearer" in r.json()["error"]
        # ?token= only where a browser cannot send a header: downloads and the event stream
        assert anon.get("/api/v1/pipelines", params={"token": alice}).status_code == 401
        assert anon.get("/files/results/x/y.txt", params={"token": alice}).status_code == 404
        assert anon.get("/files/results/x/y.txt").status_code == 401  # result files too
    with httpx.Client(
        base_url=served.url,
        timeout=10,
        trust_env=False,
        headers={"Authorization": f"Bearer {alice}"},
    ) as client:
        created = client.post("/api/v1/pipelines", json=TASKS)
        assert created.status_code == 201
        task_id = created.json()["tasks"]["a"]
        token_id = client.get(f"/api/v1/tasks/{task_id}").json()["publisher_id"]
        assert token_id.startswith("tok-")
        assert client.post("/api/v1/pipelines", json=TASKS).status_code == 201
        over = client.post("/api/v1/pipelines", json=TASKS)
        assert over.status_code == 403 and "max_tasks_per_day 2" in over.json()["error"]
        cloud = client.post("/api/v1/pipelines", json={**TASKS, "cloud_preference": "cloud_only"})
        assert cloud.status_code == 403
    # a token created while the node runs works at once; an expired one does not
    bob = create_token(served, "--name", "Bob", "--cloud")
    # (`token create` refuses a past expiry: the expired token is written to the file directly)
    old_id, old = auth.new_token()
    config_schema.add_access_token(
        served.config,
        {"id": old_id, "name": "Old", "token_hash": auth.hash_token(old),
         "expires_at": "2020-01-01T00:00:00+00:00", "permissions": {}},
    )  # fmt: skip
    with httpx.Client(base_url=served.url, timeout=10, trust_env=False) as client:
        ok = client.get("/api/v1/status", headers={"Authorization": f"Bearer {bob}"})
        assert ok.status_code == 200
        expired = client.get("/api/v1/status", headers={"Authorization": f"Bearer {old}"})
        assert expired.status_code == 401 and "expired" in expired.json()["error"]
    result = served.cli("status", check=False)
    assert result.returncode == 1 and "FREDICA_TOKEN" in result.stderr


@pytest.mark.parametrize("expires", ["soon", "2020-01-01", "0d"])
def test_token_create_rejects_bad_expiry_and_changes_nothing(
    served: ServedNode, expires: str
) -> None:
    served.config.write_text(FAST_CONFIG.format(grace=2))
    before = served.config.read_text()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fredica",
            "token",
            "create",
            "--config",
            str(served.config),
            "--name",
            "X",
            "--expires",
            expires,
        ],
        capture_output=True,
        text=True,
        env=served.env() | {"COLUMNS": "200"},
        timeout=60,
    )
    # a usage error: exit 2, one line naming --expires, no token printed, the file untouched
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --expires"), out.stderr
    if expires != "soon":
        assert "not in the future" in lines[0]
    assert "Token" not in out.stdout
    assert served.config.read_text() == before
