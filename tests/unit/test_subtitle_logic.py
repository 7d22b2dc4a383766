"""Pure pieces of the subtitle and speech family: routing decisions, frame sampling, reading
model replies, offset search, TTS placement, turn merging."""

from __future__ import annotations

import numpy as np
import pytest

from fredica.domain import errors
from fredica.executors import diarization, hardsub, subsync, translate, tts
from fredica.executors import subtitle_format as sf
from fredica.pipelines import subtitles as routing


@pytest.mark.parametrize(
    ("has", "mode", "case"),
    [(False, "original", "A"), (False, "dubbed", "A"), (True, "original", "B"),
     (True, "dubbed", "C")],
)  # fmt: skip
def test_routing_cases(has: bool, mode: str, case: str) -> None:
    assert routing.route({"has_subtitle": has}, mode) == case


def test_eight_frames_skip_five_percent_at_each_end() -> None:
    times = hardsub.sample_times(100.0, 8, 0.05)
    assert len(times) == 8 and times[0] == pytest.approx(5 + 90 / 16)
    assert times[-1] == pytest.approx(95 - 90 / 16)
    assert all(5 < t < 95 for t in times)


def test_vision_reply_parsing() -> None:
    got = hardsub.parse_vision_reply('```json\n{"has_subtitle": true, "y_top_pct": 84, '
                                     '"y_bottom_pct": 96}\n```')  # fmt: skip
    assert got["region"] == {"y_top_pct": 0.84, "y_bottom_pct": 0.96}
    assert hardsub.parse_vision_reply('{"has_subtitle": false}')["region"] is None
    with pytest.raises(errors.PermanentError, match="asked JSON"):
        hardsub.parse_vision_reply("I think there are subtitles.")
    with pytest.raises(errors.PermanentError, match="impossible region"):
        hardsub.parse_vision_reply('{"has_subtitle": true, "y_top_pct": 0.9, "y_bottom_pct": 0.2}')


def test_ocr_verdict_needs_text_in_enough_frames() -> None:
    word = {"text": "HELLO", "confidence": 0.9, "top": 0.85, "bottom": 0.9}
    assert hardsub.ocr_verdict([[word], [], [], []], min_frames=2)["has_subtitle"] is False
    found = hardsub.ocr_verdict([[word], [word], [], []], min_frames=2)
    assert found["has_subtitle"] is True and found["frames_with_text"] == 2
    region = found["region"]
    assert region["y_top_pct"] < 0.85 and region["y_bottom_pct"] > 0.9


def test_best_offset_puts_cue_starts_on_phrase_onsets() -> None:
    speech = np.zeros(3000, dtype=np.float32)
    for start in (200, 900, 1700, 2400):
        speech[start : start + 300] = 1
        speech[start + 120 : start + 140] = 0  # a pause between words: inside the phrase
    subs = np.zeros_like(speech)
    for start in (150, 850, 1650, 2350):  # cues 0.5 s early that stay up 0.4 s longer
        subs[start : start + 340] = 1
    lag = subsync.best_offset(speech, subs, 400)
    assert lag == 50
    moved = np.roll(subs, lag)
    assert subsync.agreement(speech, moved) > 0.8 > subsync.agreement(speech, subs)


def test_best_offset_does_not_push_the_cues_off_the_sound() -> None:
    """Cues 3 s early in a short file: the answer is +3 s, not a lag moving them all out."""
    speech = np.zeros(1600, dtype=np.float32)
    for start in (320, 700, 1100):
        speech[start : start + 300] = 1
    subs = np.zeros_like(speech)
    for start in (20, 400, 800):
        subs[start : start + 300] = 1
    assert subsync.best_offset(speech, subs, 2000) == 300


def test_tts_slots_and_placement() -> None:
    cues = [sf.Cue(0.0, 1.0, "a"), sf.Cue(3.0, 3.5, "b")]
    assert tts.slots(cues) == [3.0, 0.5]
    clip = np.full(tts.RATE // 2, 1000, dtype=np.int16)
    track = tts.place([(0.0, clip), (3.0, clip)], 3.5)
    assert len(track) == int(3.5 * tts.RATE)
    assert track[: tts.RATE // 2].min() == 1000 and track[tts.RATE : 3 * tts.RATE].max() == 0


def test_short_turns_join_their_neighbour() -> None:
    segs = [diarization.Segment(1, 0.0, 3.0), diarization.Segment(0, 3.1, 3.3),
            diarization.Segment(1, 3.4, 6.0), diarization.Segment(0, 7.0, 9.0)]  # fmt: skip
    out = diarization.merge_short(segs, 0.5)
    assert out == [diarization.Segment(0, 0.0, 6.0), diarization.Segment(1, 7.0, 9.0)]


def test_llm_lines_must_all_come_back() -> None:
    reply = '[{"id": 1, "text": "eins"}, {"id": 2, "text": "zwei"}]'
    assert translate.parse_llm_lines(reply, [1, 2]) == {1: "eins", 2: "zwei"}
    with pytest.raises(errors.TransientError, match="JSON array"):
        translate.parse_llm_lines("sorry", [1])
