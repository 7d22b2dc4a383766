"""API keys never leave the node whose worker.yaml holds them (seed 001 §12.3): two real
`fredica serve` nodes in a home cluster, each with cloud backends and keys, run tasks that use
every key (against local servers of the OpenAI chat and transcription protocols, which check
the key), and afterwards no key string appears anywhere it could leak to: the SQLite files
(with -wal and -shm), the node logs, the task logs, any `/api/v1` answer, the `/cluster` answers
(replication diffs, info, peers), or the bytes that crossed the wire between the nodes.

a owns the pipeline: its AI_ANALYZE tasks run on a (deepseek-api), on b (openai-compatible,
b's own key, so b's key is used for a's rows that replicate back to a), and a transcription
chunk runs on a through openai-compatible-asr. A second pipeline fails on purpose against a
server that refuses the key and echoes it in its error, as some providers do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.asr_server import serve_transcriptions
from tests.e2e.conftest import ServedNode, wait_until
from tests.faultproxy import FaultProxy
from tests.media_support import serve_fake_openai, tones

from .support import SECRET, get, make_cluster, pipeline_done, post

pytestmark = pytest.mark.slow

DEEPSEEK_KEY = "sk-deepseek-a1b2c3d4e5f6-never-leaves-a"
OPENAI_KEY = "sk-compatible-f6e5d4c3b2a1-never-leaves-b"
ASR_KEY = "sk-asr-0a9b8c7d6e5f-never-leaves-a"
WRONG_KEY = "sk-refused-1122334455-never-leaves-a"
KEYS = (DEEPSEEK_KEY, OPENAI_KEY, ASR_KEY, WRONG_KEY)
TEXT = "A fox runs through the cluster. It finds every node. Then it rests."

CAPABILITIES = {
    "a": """\
capabilities:
  ai_analyze:
    providers:
      - backend: deepseek-api
        endpoint: {llm}/v1
        api_key: {deepseek}
        model: fake-llm
  transcribe:
    backend: openai-compatible-asr
    endpoint: {asr}
    api_key: {asr_key}
    models: [whisper-1]
  translate:
    enabled: true
    providers:
      - backend: openai-translate-api
        endpoint: {refusing}/v1
        api_key: {wrong}
""",
    "b": """\
capabilities:
  ai_analyze:
    providers:
      - backend: openai-compatible
        endpoint: {llm}/v1
        api_key: {openai}
        model: fake-llm
  transcribe:
    enabled: false
""",
}


def _configure(urls: dict[str, str]) -> Any:
    def configure(name: str, text: str) -> str:
        head = text[: text.index("capabilities:")]
        return head + CAPABILITIES[name].format(
            deepseek=DEEPSEEK_KEY, openai=OPENAI_KEY, asr_key=ASR_KEY, wrong=WRONG_KEY, **urls
        )

    return configure


def _api_answers(node: ServedNode, pipeline_ids: list[str]) -> list[str]:
    """Every `/api/v1` (and peer) answer a user or a peer can read about this work."""
    user = [
        "/api/v1/status",
        "/api/v1/nodes",
        "/api/v1/tasks?scope=cluster",
        "/api/v1/tasks",
        "/api/v1/pipelines?scope=cluster",
        "/api/v1/templates",
        "/api/v1/restart-log",
        "/api/v1/recovery",
        "/api/v1/web/config",
        "/api/v1/web/cluster",
        "/api/v1/WorkerTaskListRoute",
        "/metrics",
        "/healthz",
    ]
    peer = ["/cluster/info", "/cluster/peers", "/cluster/tasks/diff?since=0&limit=5000"]
    answers = []
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        for pid in pipeline_ids:
            pipeline = client.get(f"/api/v1/pipelines/{pid}")
            if pipeline.status_code == 404:
                continue  # a's pipeline on b: b answers from its replica only with scope=cluster
            answers.append(pipeline.text)
            for task in pipeline.json()["tasks"]:
                for path in ("", "/log", "/files"):
                    answers.append(client.get(f"/api/v1/tasks/{task['id']}{path}").text)
        for path in user:
            r = client.get(path)
            assert r.status_code in (200, 409), (path, r.text)
            answers.append(r.text)
        for path in peer:
            r = client.get(path, headers={"X-Cluster-Secret": SECRET})
            assert r.status_code == 200, (path, r.text)
            answers.append(r.text)
        with client.stream("GET", "/api/v1/events") as events:  # the UI's first snapshot
            for line in events.iter_lines():
                answers.append(line)
                if line.startswith("data:"):
                    break
    return answers


def _files(data_dir: Path) -> list[Path]:
    """Every file under the data dir: the database with its journals, task logs, results."""
    return [p for p in data_dir.rglob("*") if p.is_file()]


def _leaks(where: str, data: bytes | str) -> list[str]:
    raw = data.encode(errors="replace") if isinstance(data, str) else bytes(data)
    return [f"{key} in {where}" for key in KEYS if key.encode() in raw]


def test_api_keys_never_leave_their_node(tmp_path: Path) -> None:
    with (
        serve_fake_openai() as llm,
        serve_fake_openai() as refusing,
        serve_transcriptions(api_key=ASR_KEY) as asr,
    ):
        refusing.refuse_with_key = True  # 401 with the key in its message
        urls = {"llm": llm.url, "asr": asr.url, "refusing": refusing.url}
        proxy = FaultProxy(0, record=True)
        with make_cluster(
            tmp_path, "ab", lambda port: _proxied(proxy, port), _configure(urls)
        ) as cluster:
            cluster.start_some("ab")
            a, b = cluster.nodes["a"], cluster.nodes["b"]
            ids = cluster.ids
            wav = tones(tmp_path / "tone.wav", ((0.5, 1.5),), 2.0)

            def on(name: str, ref: str, task_type: str, payload: dict[str, Any]) -> Any:
                return {
                    "ref": ref,
                    "type": task_type,
                    "payload": payload,
                    "affinity": {"kind": "HARD", "node_id": ids[name]},
                }

            # Given work that needs every configured key, on both nodes
            tasks = [
                on("a", "deepseek", "AI_ANALYZE", {"text": TEXT}),
                on("b", "compatible", "AI_ANALYZE", {"text": TEXT}),
                on("b", "compatible2", "AI_ANALYZE", {"text": TEXT + " Again."}),
                on("a", "asr", "TRANSCRIBE_CHUNK", {"audio_path": str(wav), "model_name": "base"}),
            ]
            pid = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})[
                "pipeline_id"
            ]
            # and work whose provider refuses the key and echoes it back
            refused = on("a", "refused", "TRANSLATE_TEXT", {"text": TEXT, "target_lang": "de"})
            refused["max_retries"] = 0
            pid2 = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": [refused]})[
                "pipeline_id"
            ]
            # When it has run
            done = wait_until(lambda: pipeline_done(a, pid), 90, "the pipeline to finish")
            assert done["status"] == "completed", [
                (t["type"], t["status"], t["error"]) for t in done["tasks"]
            ]
            failed = wait_until(lambda: pipeline_done(a, pid2), 60, "the refused pipeline")
            assert failed["status"] == "failed", failed["tasks"]
            wait_until(lambda: _replicated(b, ids["a"]), 20, "b's replica of a's rows")
            # (the keys were really used: each server saw its own key, and only it)
            assert set(llm.authorizations) == {f"Bearer {DEEPSEEK_KEY}", f"Bearer {OPENAI_KEY}"}
            assert {r["authorization"] for r in asr.requests} == {f"Bearer {ASR_KEY}"}
            assert set(refusing.authorizations) == {f"Bearer {WRONG_KEY}"}
            assert b"/cluster/tasks/" in proxy.traffic  # b's claims and reports crossed it

            # Then no key is anywhere it could be read from
            leaks = _leaks("the traffic between the nodes", proxy.traffic)
            for name, node in cluster.nodes.items():
                for text in _api_answers(node, [pid, pid2]):
                    leaks += _leaks(f"an answer of {name}", text)
            for running in (True, False):  # the live WAL, then what is left after a stop
                for node in (a, b):
                    files = _files(node.data_dir)
                    names = {p.name for p in files}
                    assert ("fredica.db-wal" in names) is running, names
                    assert any(p.parent.parent.name == "tasks" for p in files), names  # logs
                    for path in files:
                        leaks += _leaks(str(path.relative_to(tmp_path)), path.read_bytes())
                    if running:
                        node.terminate()
            for name, node in cluster.nodes.items():
                leaks += _leaks(f"{name}'s log", node.log.read_bytes())
            proxy.stop()
    assert not leaks, "\n".join(leaks)


def _proxied(proxy: FaultProxy, port: int) -> str:
    """a's seed as b knows it: the recording proxy in front of a."""
    proxy.target_port = port
    return proxy.start().address


def _replicated(node: ServedNode, owner: str) -> bool:
    rows = get(node, "/api/v1/tasks", scope="cluster", limit=100)["tasks"]
    mine = [t for t in rows if t["owner_id"] == owner]
    return len(mine) >= 5 and all(t["status"] in ("completed", "failed") for t in mine)
