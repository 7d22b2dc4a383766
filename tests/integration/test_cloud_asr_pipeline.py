"""A transcription pipeline through the cloud ASR backend on a real node (SQLite, engine,
templates): generated speech goes EXTRACT_AUDIO -> DETECT_LANGUAGE + SPLIT_AUDIO -> chunks ->
MERGE with the chunks and the detection sent to a local server of the OpenAI transcription
protocol that runs faster-whisper, as a self-hosted faster-whisper-server does. The node records
the cloud backend and model, its transcript is the server's, the key stays on the node; the
same node runs a `local_only` pipeline on faster-whisper without asking the server."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.talks import word_error_rate

from fredica.cli.demo_media import speak
from fredica.executors import inference_worker
from tests.asr_server import WhisperRecognizer, serve_transcriptions
from tests.media_support import REFERENCE, SENTENCES, require_media_tools

from .conftest import node_client

pytestmark = pytest.mark.slow

KEY = "sk-test-only-on-this-node"
INFERENCE = ("DETECT_LANGUAGE", "TRANSCRIBE_CHUNK")
CHOSEN = re.compile(r"backend (\S+) score=\d+ \(model (\S+) on (\w+);")


async def _run(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    created = await client.post("/api/v1/pipelines", json=body)
    assert created.status_code == 201, created.text
    pid = created.json()["pipeline_id"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        data: dict[str, Any] = (await client.get(f"/api/v1/pipelines/{pid}")).json()
        if data["status"] in ("completed", "failed", "partial_failed", "cancelled"):
            data["events"] = {
                t["id"]: (await client.get(f"/api/v1/tasks/{t['id']}")).json()["events"]
                for t in data["tasks"]
            }
            return data
        await asyncio.sleep(0.1)  # polling the node's state, with a deadline
    tasks = [(t["type"], t["status"], t["error"]) for t in data["tasks"]]
    raise AssertionError(f"pipeline {pid} did not finish: {tasks}")


def _ran(data: dict[str, Any]) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
    """(type, recorded backend, result backend, model, device, and what the completion
    event recorded as chosen) of every inference task."""
    out = []
    for task in data["tasks"]:
        if task["type"] not in INFERENCE:
            continue
        events = data["events"][task["id"]]
        chosen = [e["message"] for e in events if e["event_type"] == "completed"]
        assert len(chosen) == 1, events
        match = CHOSEN.match(chosen[0])
        assert match, chosen[0]
        result = task["result"]
        ran = (result["backend"], result["model"], result["device"])
        assert match.groups() == ran  # what the node recorded is what the executor ran
        out.append((task["type"], task["backend"], *ran))
    return out


async def test_a_pipeline_runs_on_the_cloud_backend_and_local_only_never_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_media_tools()
    wav = speak(SENTENCES, tmp_path / "talk.wav")
    pool = inference_worker.InferencePool()  # this test's own: it counts local inference
    monkeypatch.setattr(inference_worker, "_POOL", pool)
    with serve_transcriptions(api_key=KEY, recognizer=WhisperRecognizer()) as server:
        config = {
            "capabilities": {
                "ai_analyze": {"enabled": False},
                "transcribe": {
                    "providers": [
                        {"backend": "faster-whisper", "accelerator": "cpu",
                         "models": ["tiny.en", "base"]},
                        {"backend": "openai-whisper-api", "api_key": KEY, "endpoint": server.url,
                         "max_concurrent": 2},
                    ]
                },
            }
        }  # fmt: skip
        async with node_client(tmp_path / "data", config=config) as (client, _):
            # Given a node with faster-whisper and the key, When a pipeline leaves the choice
            # to the scores (cloud Whisper 62 against base on a CPU)
            body = {"template": "transcribe_long", "source": str(wav), "material_id": "cloud",
                    "params": {"chunk_duration_sec": 5, "analyze": False}}  # fmt: skip
            data = await _run(client, body)
            asked = len(server.requests)
            # the VAD of SPLIT_AUDIO runs in a model-free worker; none was started for a model
            local_models = [w.key for w in pool.workers if w.key is not None]
            # And the same media again, local_only (in one piece: the choice is what matters)
            local = await _run(client, {
                "template": "transcribe_short", "source": str(wav), "language": "en",
                "material_id": "local", "cloud_preference": "local_only",
                "params": {"analyze": False}})  # fmt: skip
    # Then the first ran on the cloud backend, recorded as such
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    ran = _ran(data)
    assert {t for t, *_ in ran} == set(INFERENCE)
    chunks = [t for t in data["tasks"] if t["type"] == "TRANSCRIBE_CHUNK"]
    assert len(chunks) >= 2
    assert all(r[1:] == ("openai-whisper-api",) * 2 + ("whisper-1", "cloud_api") for r in ran)
    detect = next(t for t in data["tasks"] if t["type"] == "DETECT_LANGUAGE")
    assert detect["result"]["language"] == "en"  # what the server's faster-whisper heard
    # its transcript came from the server: every chunk's text is one of its answers
    assert asked == len(chunks) + len(detect["result"]["windows"])
    assert all(r["authorization"] == f"Bearer {KEY}" for r in server.requests[:asked])
    answered = {" ".join(a["text"].split()) for a in server.answers[:asked]}
    assert all(" ".join(c["result"]["text"].split()) in answered for c in chunks)
    merged = next(t for t in data["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")["result"]
    wer = word_error_rate(REFERENCE, merged["text"])
    print(f"\ncloud backend through the pipeline: WER {wer:.3f}: {merged['text']}")
    assert wer < 0.3
    # the key stayed on the node: in no payload, result or event
    assert KEY not in json.dumps(data)
    assert local_models == []  # no local Whisper worker was started for it
    # And the local_only pipeline never asked the server: faster-whisper ran it here
    assert local["status"] == "completed", [(t["type"], t["error"]) for t in local["tasks"]]
    assert len(server.requests) == asked
    assert [r[1:] for r in _ran(local)] == [("faster-whisper", "faster-whisper", "tiny.en", "cpu")]
    assert pool.started >= 1
    assert (
        word_error_rate(
            REFERENCE,
            next(t for t in local["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")["result"]["text"],
        )
        < 0.3
    )
