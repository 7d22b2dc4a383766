"""Subtitle parsing, writing, line breaking and timing repair (pure)."""

from __future__ import annotations

import itertools

import pytest

from fredica.domain import errors
from fredica.executors import subtitle_format as sf
from fredica.executors.subtitle_format import Cue

SRT = """\
1
00:00:01,000 --> 00:00:03,250
Hello there.

2
00:00:03,500 --> 00:00:06,120
Two lines,
of text & <more>.

3
01:02:03,450 --> 01:02:05,000
你好，世界！
"""


def test_srt_to_ass_to_vtt_to_srt_keeps_text_and_times() -> None:
    original = sf.parse(SRT)
    assert [c.text for c in original] == ["Hello there.", "Two lines,\nof text & <more>.",
                                          "你好，世界！"]  # fmt: skip
    ass = sf.dumps(original, "ass")
    assert sf.detect_format(ass) is sf.SubtitleFormat.ASS
    vtt = sf.dumps(sf.parse(ass), "vtt")
    assert vtt.startswith("WEBVTT") and sf.detect_format(vtt) is sf.SubtitleFormat.VTT
    back = sf.parse(sf.dumps(sf.parse(vtt), "srt"))
    assert [c.text for c in back] == [c.text for c in original]
    for a, b in zip(original, back, strict=True):
        # ASS stores centiseconds: times survive within 5 ms
        assert abs(a.start - b.start) <= 0.005 and abs(a.end - b.end) <= 0.005
    assert sf.dumps(back, "srt") == SRT  # these times are on the 10 ms grid: exact


def test_vtt_with_header_notes_settings_and_hours_omitted() -> None:
    vtt = (
        "WEBVTT - title\n\nNOTE a comment\n\n"
        "intro\n00:01.500 --> 00:04.000 line:90%\n<v Bob>Hi</v>\n"
    )
    assert sf.parse(vtt) == [Cue(1.5, 4.0, "Hi")]


def test_ass_override_tags_and_commas_in_text() -> None:
    ass = sf.write_ass([Cue(0, 1, "a, b")]).replace("a, b", r"{\i1}a, b{\i0}\Nc")
    assert sf.parse(ass) == [Cue(0, 1, "a, b\nc")]


def test_bad_input_is_named() -> None:
    with pytest.raises(errors.PayloadError, match="timestamp"):
        sf.parse("1\n00:00:xx,000 --> 00:00:01,000\nx\n", "srt")
    with pytest.raises(errors.PayloadError, match="not a subtitle"):
        sf.parse("just text")
    with pytest.raises(errors.PayloadError, match="ends before"):
        sf.parse("1\n00:00:02,000 --> 00:00:01,000\nx\n")


def test_wrap_latin_at_spaces_balanced() -> None:
    lines = sf.wrap("The quick brown fox jumps over the lazy dog and keeps running", 32)
    assert len(lines) == 2 and all(sf.text_width(x) <= 32 for x in lines)
    assert abs(len(lines[0]) - len(lines[1])) < 12
    assert " ".join(lines) == "The quick brown fox jumps over the lazy dog and keeps running"


def test_wrap_cjk_counts_double_width_and_respects_punctuation() -> None:
    text = "这是一个很长的中文字幕，用来测试断行算法是否正确地处理标点符号。"
    lines = sf.wrap(text, 20)
    assert "".join(lines) == text
    assert all(sf.text_width(x) <= 20 for x in lines)
    assert not any(x[0] in "，。" for x in lines)  # no line starts with closing punctuation
    mixed = sf.wrap("我们用ffmpeg处理视频，然后 burn 字幕。", 16)
    assert all("ffmpeg" in x or "ff" not in x for x in mixed)  # a Latin word is not split


def test_reflow_splits_long_cues_in_proportion() -> None:
    cue = Cue(10.0, 16.0, " ".join(["word"] * 30))
    out = sf.reflow([cue], max_width=20, max_lines=2)
    assert len(out) > 1 and out[0].start == 10.0 and out[-1].end == 16.0
    assert all(len(c.text.split("\n")) <= 2 for c in out)
    assert all(a.end == pytest.approx(b.start) for a, b in itertools.pairwise(out))


def test_fix_timing_overlaps_short_cues_and_order() -> None:
    cues = [Cue(5.0, 5.2, "short"), Cue(0.0, 3.0, "first"), Cue(2.5, 4.0, "overlap"),
            Cue(6.0, 7.0, "  ")]  # fmt: skip
    fixed, report = sf.fix_timing(cues, min_duration=0.7, min_gap=0.1)
    assert [c.text for c in fixed] == ["first", "overlap", "short"]
    assert fixed[0].end == pytest.approx(2.4)  # ends min_gap before the next one
    assert fixed[2].end == pytest.approx(5.7)  # stretched to the minimum duration
    assert (report.dropped_empty, report.overlaps_fixed, report.extended) == (1, 1, 1)
    assert report.reordered


def test_shift_and_colours() -> None:
    assert sf.shift([Cue(1.0, 2.0, "a")], -1.5) == [Cue(0.0, 0.5, "a")]
    # wholly before 0: kept, from 0, for its length up to CLAMPED_MIN_SEC
    assert sf.shift([Cue(1.0, 2.0, "a"), Cue(3.0, 3.2, "b")], -4.0) == [
        Cue(0.0, 0.5, "a"),
        Cue(0.0, 0.2, "b"),
    ]
    assert sf.ass_colour("#FF8000") == "&H000080FF"
    with pytest.raises(errors.PayloadError):
        sf.ass_colour("red")
