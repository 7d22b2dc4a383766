"""What is recorded is what ran, through a real `fredica serve` node (issue 13): German with the
language given and Spanish with `auto` both go to the multilingual model; for every inference
task, the backend event the node recorded names the backend, model and device that the
executor itself reports having run, and its resident worker served the chunks."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench import talks

from tests.e2e.conftest import ServedNode, served_node
from tests.media_support import require_media_tools

pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServedNode]:
    with served_node(tmp_path, "") as served:
        yield served


def _run(node: ServedNode, body: dict[str, Any], timeout: float = 240) -> dict[str, Any]:
    with node.client() as client:
        created = client.post("/api/v1/pipelines", json=body)
        assert created.status_code == 201, created.text
        pid = created.json()["pipeline_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data: dict[str, Any] = client.get(f"/api/v1/pipelines/{pid}").json()
            if data["status"] in ("completed", "failed", "partial_failed", "cancelled"):
                data["events"] = {
                    t["id"]: client.get(f"/api/v1/tasks/{t['id']}").json()["events"]
                    for t in data["tasks"]
                }
                return data
            time.sleep(0.2)
    raise AssertionError(f"pipeline did not finish: {node.log.read_text()[-3000:]}")


def _check_recorded_is_what_ran(data: dict[str, Any], model: str) -> None:
    ran = [t for t in data["tasks"] if t["type"] in ("TRANSCRIBE_CHUNK", "DETECT_LANGUAGE")]
    assert ran
    for task in ran:
        result = task["result"]
        # the worker's own report ...
        assert (result["backend"], result["model"], result["device"]) == (
            "faster-whisper", model, "cpu",
        )  # fmt: skip
        # ... equals what the node recorded when it chose the backend
        assert task["backend"] == result["backend"]
        # (the completion event names the backend, model and device that were chosen)
        chosen = [
            e["message"] for e in data["events"][task["id"]] if e["event_type"] == "completed"
        ]
        assert len(chosen) == 1, data["events"][task["id"]]
        match = re.match(r"backend (\S+) score=\d+ \(model (\S+) on (\w+);", chosen[0])
        assert match, chosen[0]
        assert match.groups() == (result["backend"], result["model"], result["device"])


@pytest.mark.parametrize(("language", "given"), [("de", "de"), ("es", "auto")])
def test_non_english_speech_runs_the_multilingual_model_that_was_recorded(
    node: ServedNode, tmp_path: Path, language: str, given: str
) -> None:
    require_media_tools()
    wav, reference = talks.make_talk(tmp_path / "talk.wav", language, limit=5)
    body = {"template": "transcribe_long", "source": str(wav), "language": given,
            "params": {"chunk_duration_sec": 10, "analyze": False}}  # fmt: skip
    data = _run(node, body)
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    chunks = [t for t in data["tasks"] if t["type"] == "TRANSCRIBE_CHUNK"]
    assert len(chunks) >= 2
    assert all(t["payload"]["model_name"] == "base" for t in chunks)
    if given == "auto":
        detect = next(t for t in data["tasks"] if t["type"] == "DETECT_LANGUAGE")
        assert detect["result"]["language"] == language, detect["result"]
    _check_recorded_is_what_ran(data, "base")
    # one resident worker per (model, device): later chunks find the model loaded
    loads = [t["result"]["model_load_sec"] for t in chunks]
    assert sum(1 for s in loads if s > 0.05) <= 2, loads  # at most one per parallel slot
    merged = next(t for t in data["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")["result"]
    wer = talks.word_error_rate(reference, merged["text"])
    print(f"\n{language} ({given}) through the node: WER {wer:.3f}")
    assert wer < 0.5, merged["text"]  # German/Spanish words, not an English model's guess
