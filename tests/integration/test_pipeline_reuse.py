"""A pipeline over a source another active pipeline uses (seed 001 §4.4): a `dub` or a
`summary_audio` of a file while its `transcribe_short` is active is created with its own tasks,
never refused with a 422 about an internal task id (nor a 409)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.media_support import tones

from .conftest import node_client

SECOND = {
    "dub": {"target_lang": "fr"},
    "summary_audio": {},
}


@pytest.mark.parametrize("template", sorted(SECOND))
async def test_a_second_template_over_an_active_transcription_gets_its_own_tasks(
    tmp_path: Path, template: str
) -> None:
    wav = tones(tmp_path / "talk.wav", ((0.2, 0.8), (1.2, 1.8)), 2.0)
    # a translation backend to declare (never called: this node claims nothing)
    translate = {"enabled": True, "providers": [{"backend": "deepl-api", "api_key": "unused"}]}
    config = {"capabilities": {"translate": translate, "ai_analyze": {"enabled": True}}}
    async with node_client(tmp_path / "data", config=config) as (client, node):
        # Given a transcription of the file that stays active (the node claims nothing)
        node.engine.set_draining(True)
        first = await client.post(
            "/api/v1/pipelines",
            json={"template": "transcribe_short", "source": str(wav), "language": "en"},
        )
        assert first.status_code in (200, 201), first.text
        # When a second template is made over the same file
        second = await client.post(
            "/api/v1/pipelines",
            json={"template": template, "source": str(wav), "language": "en",
                  "params": SECOND[template]},
        )  # fmt: skip
        # Then it is created, with tasks of its own whose dependencies all exist
        assert second.status_code in (200, 201), second.text
        pid = second.json()["pipeline_id"]
        assert pid != first.json()["pipeline_id"]
        tasks = (await client.get(f"/api/v1/pipelines/{pid}")).json()["tasks"]
        ids = {t["id"] for t in tasks}
        assert tasks and all(set(t["depends_on"]) <= ids for t in tasks), tasks
        assert all(t["pipeline_id"] == pid for t in tasks)
        first_tasks = (await client.get(f"/api/v1/pipelines/{first.json()['pipeline_id']}")).json()[
            "tasks"
        ]
        assert ids.isdisjoint(t["id"] for t in first_tasks)
