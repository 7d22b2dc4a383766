"""SYNC_SUBTITLE on espeak-ng speech whose true line times are known, for every backend offered
(`builtin-vad-xcorr` and `ffsubsync`): subtitles moved by -3, +2.5 and +7 s come back within
0.2 s, every cue kept, and `offset_sec` is the shift that was applied."""

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
SHIFTS = [-3.0, 2.5, 7.0]
BACKENDS = [subsync.BUILTIN, subsync.FFSUBSYNC]
LEAD = 3.5  # silence before the first line, so the file moved by -3 s still starts after 0


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    d = tmp_path_factory.mktemp("sync")
    wav = d / "talk.wav"
    truth = ss.timed_speech(LINES, wav, lead=LEAD, pause=0.8)
    return wav, truth


async def sync(tmp_path: Path, wav: Path, subtitles: Path, backend: str, limit: float) -> dict:
    ctx = await make_context(
        tmp_path,
        "SYNC_SUBTITLE",
        {"audio_path": str(wav), "subtitle_path": str(subtitles), "max_offset_sec": limit},
        backend=backend,
    )
    result = (await subsync.SyncSubtitleExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["backend"] == backend
    return result


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shift", SHIFTS)
async def test_a_known_shift_comes_back_with_every_cue(
    tmp_path: Path, speech: tuple[Path, list], shift: float, backend: str
) -> None:
    wav, truth = speech
    moved = tmp_path / "moved.srt"
    moved.write_text(ss.srt_of(truth, offset=shift))
    result = await sync(tmp_path, wav, moved, backend, limit=10)
    synced = sf.parse(Path(result["subtitle_path"]).read_text())
    worst = max(abs(c.start - s) for c, (s, *_) in zip(synced, truth, strict=False))
    print(
        f"\n{backend} on subtitles moved {shift:+}s: offset_sec {result['offset_sec']:+.3f}, "
        f"{len(synced)}/{len(truth)} cues, worst start error {worst:.3f}s"
    )
    assert result["offset_sec"] == pytest.approx(-shift, abs=0.2)
    assert result["framerate_scale"] == 1.0  # ffsubsync's frame-rate search is opt-in
    assert [c.text for c in synced] == [text for *_, text in truth]
    assert result["cue_count"] == len(truth)
    for cue, (start, end, _, _) in zip(synced, truth, strict=True):
        # the file shows exactly the shift reported, and lands on the speech
        assert cue.start == pytest.approx(start, abs=0.2) and cue.end == pytest.approx(end, abs=0.2)
    originals = sf.parse(moved.read_text())
    for before, after in zip(originals, synced, strict=True):
        assert after.start - before.start == pytest.approx(result["offset_sec"], abs=0.002)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_cue_moved_before_zero_is_clamped_not_dropped(
    tmp_path: Path, speech: tuple[Path, list], backend: str
) -> None:
    """A title card at 0.5-1.5 s in a file 7 s late belongs before the start: it stays, at 0."""
    wav, truth = speech
    cues = [sf.Cue(0.5, 1.5, "[title]")] + [sf.Cue(s + 7, e + 7, t) for s, e, _, t in truth]
    late = tmp_path / "late.srt"
    late.write_text(sf.write_srt(cues))
    result = await sync(tmp_path, wav, late, backend, limit=10)
    synced = sf.parse(Path(result["subtitle_path"]).read_text())
    assert result["offset_sec"] == pytest.approx(-7, abs=0.2)
    assert [c.text for c in synced] == ["[title]"] + [text for *_, text in truth]
    assert synced[0].start == 0.0 and synced[0].end > 0
    for cue, (start, *_) in zip(synced[1:], truth, strict=True):
        assert cue.start == pytest.approx(start, abs=0.2)


async def test_an_offset_beyond_the_limit_is_permanent_with_a_diagnosis(
    tmp_path: Path, speech: tuple[Path, list]
) -> None:
    wav, truth = speech
    early = tmp_path / "early.vtt"
    early.write_text(sf.write_vtt(sf.shift([sf.Cue(s, e, t) for s, e, _, t in truth], -1.4)))
    with pytest.raises(errors.PermanentError, match=r"\+1\.[3-5]\ds.*max_offset_sec 1"):
        await sync(tmp_path, wav, early, subsync.BUILTIN, limit=1)


def test_ffsubsync_alignment_is_read_from_its_log() -> None:
    log = "INFO  score: 512.3\nINFO  offset seconds: -2.490\nINFO  framerate scale factor: 1.000"
    assert subsync.ffsubsync_alignment(log) == (-2.49, 1.0)
    with pytest.raises(errors.PermanentError, match="did not report its alignment"):
        subsync.ffsubsync_alignment("Traceback: something broke")
