"""SYNC_SUBTITLE with the built-in speech-activity cross-correlation, on espeak-ng speech whose
true line times are known."""

from __future__ import annotations

from pathlib import Path

import pytest

from fredica.domain import errors
from fredica.executors import subsync
from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.media_support import make_context

pytestmark = pytest.mark.slow

LINES = [
    ("en-us", "Good morning, and welcome to the show."),
    ("en-us", "Today we talk about home media clusters."),
    ("en-us", "Every machine helps with the work."),
    ("en-us", "Subtitles must follow the speech closely."),
    ("en-us", "Thank you for listening."),
]


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    d = tmp_path_factory.mktemp("sync")
    wav = d / "talk.wav"
    truth = ss.timed_speech(LINES, wav, lead=1.5, pause=1.2)
    return wav, truth


async def test_recovers_a_known_offset(tmp_path: Path, speech: tuple[Path, list]) -> None:
    wav, truth = speech
    late = tmp_path / "late.srt"
    late.write_text(ss.srt_of(truth, offset=2.5))  # the file lags the speech by 2.5 s
    ctx = await make_context(
        tmp_path,
        "SYNC_SUBTITLE",
        {"audio_path": str(wav), "subtitle_path": str(late), "max_offset_sec": 10},
        backend=subsync.BUILTIN,
    )
    result = (await subsync.SyncSubtitleExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    print(f"\nrecovered offset {result['offset_sec']:+.3f}s (true -2.5), score {result['score']}")
    assert result["offset_sec"] == pytest.approx(-2.5, abs=0.2)
    synced = sf.parse(Path(result["subtitle_path"]).read_text())
    assert [c.text for c in synced] == [text for *_, text in truth]
    for cue, (start, end, _, _) in zip(synced, truth, strict=True):
        assert cue.start == pytest.approx(start, abs=0.2) and cue.end == pytest.approx(end, abs=0.2)


async def test_ffsubsync_backend_recovers_the_offset(
    tmp_path: Path, speech: tuple[Path, list]
) -> None:
    wav, truth = speech
    late = tmp_path / "late.srt"
    late.write_text(ss.srt_of(truth, offset=2.5))
    ctx = await make_context(
        tmp_path,
        "SYNC_SUBTITLE",
        {"audio_path": str(wav), "subtitle_path": str(late), "max_offset_sec": 10},
        backend=subsync.FFSUBSYNC,
    )
    result = (await subsync.SyncSubtitleExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["backend"] == "ffsubsync"
    print(f"\nffsubsync offset {result['offset_sec']:+.3f}s (true -2.5)")
    assert result["offset_sec"] == pytest.approx(-2.5, abs=0.2)


async def test_an_offset_beyond_the_limit_is_permanent_with_a_diagnosis(
    tmp_path: Path, speech: tuple[Path, list]
) -> None:
    wav, truth = speech
    early = tmp_path / "early.vtt"
    early.write_text(sf.write_vtt(sf.shift([sf.Cue(s, e, t) for s, e, _, t in truth], -1.4)))
    ctx = await make_context(
        tmp_path,
        "SYNC_SUBTITLE",
        {"audio_path": str(wav), "subtitle_path": str(early), "max_offset_sec": 1},
        backend=subsync.BUILTIN,
    )
    with pytest.raises(errors.PermanentError, match=r"\+1\.[3-5]\ds.*max_offset_sec 1"):
        await subsync.SyncSubtitleExecutor().execute(ctx.task, ctx)
