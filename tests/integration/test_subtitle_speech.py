"""TRANSLATE_TEXT over the DeepL and OpenAI protocols (local servers) keeps every cue's times;
GENERATE_TTS with espeak-ng follows the subtitle timeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fredica.domain import errors
from fredica.executors import subsync, translate, tts
from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.media_support import make_context

pytestmark = pytest.mark.slow

ENGLISH = [
    sf.Cue(0.5, 2.8, "Good morning, and welcome to the show."),
    sf.Cue(3.2, 6.0, "Today we talk about home media clusters."),
    sf.Cue(6.5, 7.4, ""),  # an empty cue stays empty
    sf.Cue(8.0, 9.0, "Every machine helps with the work, and we thank you for listening."),
    sf.Cue(9.4, 11.5, "Thank you\nfor listening."),
]


@pytest.mark.parametrize("backend", ["deepl-api", "openai-translate-api"])
async def test_translation_of_an_srt_keeps_every_cue_time(tmp_path: Path, backend: str) -> None:
    source = tmp_path / "talk.en.srt"
    source.write_text(sf.write_srt(ENGLISH))
    with ss.TranslationServer() as server:
        endpoint = server.url if backend == "deepl-api" else f"{server.url}/v1"
        ctx = await make_context(
            tmp_path,
            "TRANSLATE_TEXT",
            {"srt_path": str(source), "source_lang": "en", "target_lang": "de"},
            backend=backend,
            backend_config={"api_key": "k-test", "endpoint": endpoint, "model": "translator"},
        )
        result = (await translate.TranslateTextExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["backend"] == backend
    out = sf.parse(Path(result["srt_path"]).read_text())
    assert [(c.start, c.end) for c in out] == [(c.start, c.end) for c in ENGLISH]
    assert out[0].text == "guten Morgen, und willkommen zu der Sendung."
    assert out[2].text == "" and out[4].text == "danke dir fürs Zuhören."
    path, headers, body = server.requests[0]
    if backend == "deepl-api":
        assert path == "/v2/translate" and headers["Authorization"] == "DeepL-Auth-Key k-test"
        assert body["target_lang"] == "DE" and body["source_lang"] == "EN"
        assert len(body["text"]) == 4  # the empty cue is not sent
    else:
        assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer k-test"
        assert "German" in body["messages"][0]["content"] and body["model"] == "translator"


async def test_llm_reply_missing_lines_is_transient(tmp_path: Path) -> None:
    with pytest.raises(errors.TransientError, match="returned 1 of 2 lines"):
        translate.parse_llm_lines('[{"id": 1, "text": "eins"}]', [1, 2])


async def test_tts_follows_the_subtitle_timeline(tmp_path: Path) -> None:
    ss.require("espeak-ng")
    source = tmp_path / "talk.srt"
    source.write_text(sf.write_srt(ENGLISH))
    ctx = await make_context(
        tmp_path, "GENERATE_TTS", {"srt_path": str(source), "language": "en"}, backend=tts.ESPEAK
    )
    result = (await tts.GenerateTtsExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    timeline = ENGLISH[-1].end
    print(f"\nTTS {result['duration_sec']}s for a {timeline}s timeline; cues {result['cues']}")
    assert result["duration_sec"] == pytest.approx(timeline, rel=0.05)
    samples = tts.read_wav(Path(result["audio_path"])).astype(np.float32) / 32768
    voiced = subsync.speech_frames(samples, rate=tts.RATE)
    spoken = [c for c in ENGLISH if c.text.strip()]
    inside = np.zeros_like(voiced)
    for i, cue in enumerate(spoken):
        nxt = spoken[i + 1].start if i + 1 < len(spoken) else cue.end
        window = voiced[int(cue.start / 0.01) : int(max(cue.end, nxt) / 0.01)]
        assert window.mean() > 0.3, f"cue {i} is not spoken in its slot"
        inside[int(cue.start / 0.01) : int(max(cue.end, nxt) / 0.01)] = 1
    assert (voiced * (1 - inside)).sum() / max(1, voiced.sum()) < 0.05  # no speech outside
    long_cue = result["cues"][2]  # 1.4 s for a long sentence: spoken faster to fit
    assert long_cue["speed_up"] > 2.0 and long_cue["speech_sec"] <= 1.4 + 0.01
