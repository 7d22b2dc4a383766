"""Joins reconciled by time, never by substring, and readable subtitle cues (issue 13)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from fredica.executors import cues as cuelib
from fredica.executors import merge


def _words(text: str, start: float, step: float = 0.4) -> list[dict[str, Any]]:
    return [
        {"start": round(start + i * step, 3), "end": round(start + i * step + step * 0.8, 3),
         "word": f" {w}"}
        for i, w in enumerate(text.split())
    ]  # fmt: skip


def _seg(text: str, start: float, end: float, words: bool = False) -> dict[str, Any]:
    seg: dict[str, Any] = {"start": start, "end": end, "text": text}
    if words:
        seg["words"] = _words(text, start, (end - start) / max(1, len(text.split())))
    return seg


def _texts(chunks: list[dict[str, Any]]) -> list[str]:
    return [s["text"] for s in merge.merge_segments(chunks).segments]


def test_a_short_word_inside_an_earlier_word_is_not_a_repeat() -> None:
    # "So." after a tail containing "also", "No." after "north": whole words, not substrings
    chunks = [
        {"index": 0, "start_sec": 0, "end_sec": 10, "segments": [
            _seg("We also went to the north", 6.0, 9.8)]},
        {"index": 1, "start_sec": 10, "end_sec": 20, "segments": [
            _seg("So.", 10.2, 10.6), _seg("No.", 10.8, 11.1), _seg("It was cold.", 11.3, 12.5)]},
    ]  # fmt: skip
    assert _texts(chunks) == ["We also went to the north", "So.", "No.", "It was cold."]
    # even overlapping in time, a different word is not a repeat
    assert not merge.is_boundary_duplicate(_seg("So.", 9.5, 9.8), [_seg("we also", 9.0, 9.9)])
    assert not merge.is_boundary_duplicate(_seg("No.", 9.5, 9.8), [_seg("the north", 9.0, 9.9)])


def test_repeated_words_that_do_not_overlap_in_time_are_kept() -> None:
    chunks = [
        {"index": 0, "start_sec": 0, "end_sec": 30, "segments": [
            _seg("Rivers run in the north.", 20.0, 23.0), _seg("In the north.", 26.0, 29.5)]},
        {"index": 1, "start_sec": 30, "end_sec": 60, "segments": [
            _seg("In the north.", 30.5, 32.0), _seg("It snows.", 32.5, 33.5)]},
    ]  # fmt: skip
    assert _texts(chunks) == [
        "Rivers run in the north.", "In the north.", "In the north.", "It snows.",
    ]  # fmt: skip


def test_a_repeat_in_time_and_words_is_dropped_and_recorded() -> None:
    chunks = [
        {"index": 0, "start_sec": 0, "end_sec": 6.3, "segments": [
            _seg("we split the audio", 0.0, 4.0), _seg("into small chunks", 4.0, 6.2)]},
        {"index": 1, "start_sec": 6.3, "end_sec": 12, "segments": [
            _seg("into small chunks", 4.9, 6.2), _seg("and transcribe each", 6.4, 9.0)]},
    ]  # fmt: skip
    merged = merge.merge_segments(chunks)
    assert [s["text"] for s in merged.segments] == [
        "we split the audio", "into small chunks", "and transcribe each",
    ]  # fmt: skip
    assert merged.dropped == 1
    assert merged.reconciled == [
        {"after_chunk": 0, "method": "time and word overlap",
         "dropped_text": "into small chunks", "at": 4.9},
    ]  # fmt: skip


def test_overlapping_chunks_keep_every_word_once_by_word_timestamps() -> None:
    # chunk 0 ends at 20.0 inside "bridges" (heard as "bridge."); chunk 1 starts at 17.0
    spoken = "today there are dams and bridges over the river"
    words = _words(spoken, 17.2, 0.4)  # 17.2 .. 20.8
    a_words = [dict(w) for w in words if w["start"] < 20.0]
    a_words[-1]["word"] = " bridge."  # the cut-off word, as the model heard it
    a_words[-1]["end"] = 20.0
    b_words = [dict(w, start=w["start"] + 0.02, end=w["end"] + 0.02) for w in words]
    chunks = [
        {"index": 0, "start_sec": 0, "end_sec": 20.0, "segments": [
            {"start": 15.0, "end": 17.0, "text": "Welcome.", "words": _words("Welcome.", 15.0)},
            {"start": 17.2, "end": 20.0, "text": "today there are dams and bridge.",
             "words": a_words}]},
        {"index": 1, "start_sec": 17.0, "end_sec": 40.0, "segments": [
            {"start": 17.2, "end": 21.0, "text": spoken, "words": b_words}]},
    ]  # fmt: skip
    merged = merge.merge_segments(chunks)
    text = cuelib.join_text([s["text"] for s in merged.segments])
    assert text.split() == ["Welcome.", *spoken.split()]  # nothing lost, nothing twice
    cut = merged.reconciled[0]
    assert cut["after_chunk"] == 0 and cut["overlap_sec"] == 3.0 and 17.3 <= cut["cut_at"] <= 19.7
    times = [(s["start"], s["end"]) for s in merged.segments]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(times))


def test_without_a_neighbour_overlap_cut_nothing_is_reconciled() -> None:
    merged = merge.merge_segments([{"index": 0, "segments": [_seg("Hello there.", 0, 1)]}])
    assert merged.reconciled == [] and merged.segments[0]["text"] == "Hello there."


def test_long_segments_become_cues_of_at_most_7_seconds_and_2_lines() -> None:
    text = " ".join(f"word{i}" for i in range(60))
    timed = _seg(text, 10.0, 35.0, words=True)
    untimed = _seg(text, 40.0, 70.0)
    for seg in (timed, untimed):
        cues = cuelib.split_cues([seg])
        assert len(cues) >= 5
        assert " ".join(c["text"] for c in cues).split() == text.split()
        for cue in cues:
            assert cue["end"] - cue["start"] <= 7.0 + 1e-9
            assert len(cuelib.wrap_lines(cue["text"])) <= 2
        assert cues[0]["start"] == seg["start"]
    srt = cuelib.to_srt([timed])
    for block in srt.strip().split("\n\n"):
        assert len(block.splitlines()) <= 4  # number, times, at most two lines


def test_cjk_cues_wrap_by_character_width() -> None:
    text = (
        "今天我们在家里测试一个媒体集群系统，它把视频切成小段然后转写成文字，最后合并成字幕文件。"
        * 2
    )
    cues = cuelib.split_cues([_seg(text, 0.0, 20.0)])
    assert "".join(c["text"] for c in cues) == text
    for cue in cues:
        lines = cuelib.wrap_lines(cue["text"])
        assert len(lines) <= 2 and all(len(line) <= cuelib.CJK_LINE_CHARS for line in lines)
        assert cue["end"] - cue["start"] <= 7.0 + 1e-9
    assert cuelib.join_text(["你好。", "世界"]) == "你好。世界"
    assert cuelib.join_text(["Hello.", "World"]) == "Hello. World"


def _task(task_type: str, payload: dict[str, Any]) -> Any:
    import dataclasses
    import time

    from fredica.domain import models

    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(models.Task)}
    now = time.time()
    values.update(
        id="t1", type=task_type, status=models.TaskStatus.RUNNING, priority=5, depends_on=[],
        payload=payload, cache_policy=models.CachePolicy.NONE,
        cloud_preference=models.CloudPreference.AUTO, excluded_nodes=[], retry_count=0,
        max_retries=0, created_by="n", owner_id="n", owner_epoch=0, progress=0,
        is_paused=False, is_pausable=True, attempt=1, cancel_requested=False, change_seq=1,
        created_at=now, updated_at=now,
    )  # fmt: skip
    return models.Task(**values)


def test_the_selector_records_the_model_the_task_names() -> None:
    from fredica.capabilities import catalog, scoring
    from fredica.domain import errors
    from fredica.engine import backends
    from fredica.executors import transcribe

    F = catalog.CapabilityFunction
    cpu = catalog.LocalCPU()
    selector = backends.BackendSelector(
        (
            catalog.Capability(F.TRANSCRIBE, "faster-whisper", cpu, ("tiny.en",), 10),
            catalog.Capability(
                F.TRANSCRIBE, "faster-whisper", cpu, ("base",), 15,
                metadata={"max_concurrent": "2"},
            ),
        ),
        scoring.NodeProfile(cpu_score=50),
    )  # fmt: skip
    for model, language in (("tiny.en", "en"), ("base", "de"), ("base", "auto")):
        task = _task("TRANSCRIBE_CHUNK", {"model_name": model, "language": language})
        choice = selector.choose(task, {}, pending=0)
        # the backend event names the model and device; the executor runs exactly those
        assert choice.model == model and f"model {model} on cpu" in choice.breakdown
        assert choice.config["accelerator"] == "cpu"
        # the executor learns how many jobs of its backend may run at once (threads per job)
        assert choice.config.get("max_concurrent") == (2 if model == "base" else None)
        ctx = type("Ctx", (), {"backend": choice.backend, "backend_config": {
            **choice.config, "model": choice.model}})()  # fmt: skip
        assert transcribe.run_choice(task, ctx) == ("faster-whisper", model, "cpu")  # type: ignore[arg-type]
    missing = _task("TRANSCRIBE_CHUNK", {"model_name": "large-v3", "language": "en"})
    with pytest.raises(errors.ResourceError) as info:  # never recorded as chosen
        selector.choose(missing, {}, pending=0)
    assert info.value.hint == "NO_BACKEND"
    # a backend other than the one the executor can run is refused, never silently replaced
    task = _task("TRANSCRIBE_CHUNK", {"model_name": "base"})
    ctx = type("Ctx", (), {"backend": "xunfei-iat-api", "backend_config": {}})()
    with pytest.raises(errors.PermanentError, match="no executor"):
        transcribe.run_choice(task, ctx)  # type: ignore[arg-type]


def test_speech_the_model_skipped_is_found_and_words_in_silence_are_dropped() -> None:
    from fredica.executors import whisper_pass

    speech = [(0.0, 30.0), (31.0, 40.0)]
    words = [(0.2, 0.5), (0.6, 9.0), (29.0, 29.5), (31.5, 39.0)]
    # 9.0-29.0 is speech without a word: skipped; 39-40 and the pause are not (too short)
    assert whisper_pass.uncovered(speech, words, 3.0) == [(9.0, 29.0)]
    assert whisper_pass.uncovered(speech, [(0.0, 40.0)], 3.0) == []
    rows = [
        {"start": 0.0, "end": 2.0, "text": "Hello there.",
         "words": [{"start": 0.0, "end": 1.0, "word": " Hello"},
                   {"start": 1.0, "end": 2.0, "word": " there."}]},
        {"start": 40.5, "end": 42.0, "text": "Thank you.",  # hallucinated in the silence
         "words": [{"start": 40.5, "end": 41.0, "word": " Thank"},
                   {"start": 41.0, "end": 42.0, "word": " you."}]},
        {"start": 35.0, "end": 41.5, "text": "Rivers run. Bye.",
         "words": [{"start": 35.0, "end": 36.0, "word": " Rivers"},
                   {"start": 36.0, "end": 37.0, "word": " run."},
                   {"start": 41.0, "end": 41.5, "word": " Bye."}]},
        {"start": 3.0, "end": 4.0, "text": "untimed"},
    ]  # fmt: skip
    kept, dropped = whisper_pass.drop_silent_words(rows, speech)
    assert [r["text"] for r in kept] == ["Hello there.", "Rivers run.", "untimed"]
    assert kept[1]["end"] == 37.0 and dropped == ["Thank", "you.", "Bye."]


def _row(start: float, text: str, step: float = 0.5) -> dict[str, Any]:
    words = [
        {"start": start + i * step, "end": start + (i + 1) * step, "word": f" {w}"}
        for i, w in enumerate(text.split())
    ]
    return {"start": start, "end": words[-1]["end"], "text": text, "words": words}


def test_a_sentence_written_twice_in_a_chunk_is_flagged_once_and_only_the_later_copy() -> None:
    from fredica.executors import whisper_pass

    rows = [
        _row(0.0, "Many rivers were so dirty that nothing could live."),
        _row(6.0, "Otters have returned."),
        _row(9.0, "Many rivers were so dirty, that nothing could live!"),  # case, punctuation
        _row(15.0, "In them for several decades."),
        _row(20.0, "A heron stands still."),
    ]
    assert whisper_pass.repeated_runs(rows) == [(2, 2)]
    # four words in common are not a repeat; the prompt counts as written before
    same = [_row(0, "at the same time"), _row(3, "at the same time")]
    assert whisper_pass.repeated_runs(same) == []
    prompt = "nothing could live in them for several decades."
    assert whisper_pass.repeated_runs(rows, prompt) == [(2, 3)]


class _Heard:
    """What faster-whisper's segment and word objects carry."""

    def __init__(self, start: float, end: float, word: str = "", text: str = "") -> None:
        self.start, self.end, self.word, self.text = start, end, word, text
        self.avg_logprob, self.no_speech_prob, self.probability = -0.2, 0.01, 0.9
        self.words: list[_Heard] = []


class _Model:
    """Transcribes a clip as the words of `script` that fall in it. The test's audio holds
    each sample's own time, so a clip tells where it began. Records how it was asked."""

    def __init__(self, script: list[tuple[float, str]]) -> None:
        self.script, self.calls = script, []  # type: list[dict[str, Any]]

    def transcribe(self, audio: Any, **options: Any) -> tuple[list[_Heard], None]:
        self.calls.append(options)
        lo, length = float(audio[0]), len(audio) / 16_000
        words = [_Heard(t - lo, t - lo + 0.4, f" {w}") for t, w in self.script]
        words = [w for w in words if w.start >= 0 and w.end <= length]
        if not words:
            return [], None
        seg = _Heard(words[0].start, words[-1].end, text="".join(w.word for w in words))
        seg.words = words
        return [seg], None


def test_a_repeat_is_transcribed_again_without_context_and_replaced() -> None:
    import numpy as np

    from fredica.executors import whisper_pass

    truth = ["on", "its", "bed", "a", "clean", "stream", "is", "full", "of", "small", "larvae"]
    model = _Model([(9.0 + 0.5 * i, w) for i, w in enumerate(truth)])
    audio = (np.arange(30 * 16_000) / 16_000).astype(np.float64)
    rows = [
        _row(0.0, "Many rivers were so dirty that nothing could live."),
        _row(9.5, "Many rivers were so dirty that nothing could live."),
        _row(20.0, "A heron stands still."),
    ]
    rows[0]["end"] = 8.5  # the clip handed to the second pass is 8.0 .. 20.5
    spec = {"language": "en", "beam_size": 5, "initial_prompt": "Rivers."}
    out, report = whisper_pass.redecode_repeats(model, audio, rows, spec, _Quiet())
    assert [r["text"] for r in out] == [rows[0]["text"], " ".join(truth), rows[2]["text"]]
    assert out[1]["start"] == pytest.approx(9.0) and out[1]["words"][-1]["word"] == " larvae"
    assert model.calls == [{"language": "en", "beam_size": 5, "word_timestamps": True,
                            "condition_on_previous_text": False}]  # fmt: skip
    assert report == [{"start": 8.5, "end": 20.0, "was": rows[1]["text"], "now": " ".join(truth)}]
    # a repeat in the context that the merge leaves to the next chunk is left alone
    calls = len(model.calls)
    kept, report = whisper_pass.redecode_repeats(
        model, audio, rows, {**spec, "own_sec": [0.0, 8.0]}, _Quiet()
    )
    assert (kept, report, len(model.calls)) == (rows, [], calls)
    # a second pass that hears nothing leaves the text as it was
    kept, report = whisper_pass.redecode_repeats(_Model([]), audio, rows, spec, _Quiet())
    assert kept == rows and report[0]["now"] == ""


class _Quiet:
    def progress(self, pct: float, note: str | None = None) -> None:
        return None

    def wait_if_paused(self, timeout: float | None = None) -> bool:
        return True


def test_skipped_sentences_next_to_each_other_are_repaired_in_one_pass() -> None:
    import numpy as np

    from fredica.executors import whisper_pass

    # gaps with no word between them join (up to one 30 s window); a word between keeps
    # them apart, and so does the window's length
    gaps = [(0.4, 4.9), (5.7, 9.9), (10.7, 14.4), (20.0, 24.0), (25.0, 56.0)]
    words = [(15.0, 19.5)]
    assert whisper_pass.joined_gaps(gaps, words) == [(0.4, 14.4), (20.0, 24.0), (25.0, 56.0)]
    assert whisper_pass.joined_gaps([(0.0, 20.0), (21.0, 40.0)], []) == [(0, 20), (21, 40)]
    # a first pass that skipped three sentences: one repair pass hears all of them
    audio = (np.arange(30 * 16_000) / 16_000).astype(np.float64)
    speech = [(0.4, 4.9), (5.7, 9.9), (10.7, 14.4), (15.0, 19.5)]
    heard = [(0.5, "one"), (6.0, "two"), (11.0, "three")]
    model = _Model(heard)
    rows = [_row(15.0, "the first pass heard this")]
    out, report = whisper_pass.repair(
        model, audio, rows, speech, {"language": "en", "beam_size": 5}, _Quiet()
    )
    assert len(model.calls) == 1
    assert [r["text"] for r in out] == ["one two three", rows[0]["text"]]
    assert report == [{"start": 0.4, "end": 14.4, "words": 3}]


def test_a_repaired_gap_keeps_its_first_word_timed_from_the_clip_start() -> None:
    import numpy as np

    from fredica.executors import whisper_pass

    # Given speech at 15-20 s that the first pass skipped (no word there), after a pause
    audio = (np.arange(30 * 16_000) / 16_000).astype(np.float64)
    rows = [_row(10.0, "a sentence before the pause"), _row(21.0, "and after it")]
    speech = [(10.0, 12.6), (15.0, 20.0), (21.0, 22.6)]
    # and a repair pass that times the gap's first word from its clip's start (14.5 s, the
    # padding), its middle before the gap, as Whisper does with a clip's first word
    heard = [(14.5, "Cada"), (15.2, "pueblo"), (15.8, "celebra"), (16.4, "su"), (17.0, "fiesta")]
    model = _Model(heard)
    spec = {"language": "es", "beam_size": 5}

    # When the gap is repaired
    out, report = whisper_pass.repair(model, audio, rows, speech, spec, _Quiet())

    # Then every word of it is inserted, the first one too, and nothing around it twice
    assert [r["text"] for r in out] == [
        rows[0]["text"],
        "Cada pueblo celebra su fiesta",
        rows[1]["text"],
    ]
    assert report == [{"start": 15.0, "end": 20.0, "words": 5}]
    # and where the gap begins right after a word (no pause), a word the pass hears again
    # over that word stays out
    before = [_row(10.0, "a sentence before the pause")]  # its last word: 12.0-12.5
    again = _Model([(12.1, "pause"), (12.6, "Cada"), (13.2, "pueblo"), (13.8, "celebra")])
    out, report = whisper_pass.repair(again, audio, before, [(10.0, 17.0)], spec, _Quiet())
    assert [r["text"] for r in out] == [before[0]["text"], "Cada pueblo celebra"]
    assert report == [{"start": 12.5, "end": 17.0, "words": 3}]


def test_offline_analysis_works_in_any_language() -> None:
    from fredica.executors import extractive

    german = (
        "Der Wald ist für viele Menschen ein Ort der Ruhe. Die Förster pflanzen im Wald neue "
        "Bäume. Trockene Sommer schaden den Fichten im Wald. Während des Winters liegt Schnee "
        "auf den Bäumen. Die Förster zählen die Bäume im Frühling."
    )
    assert extractive.guess_language(german) == "de"
    tags = extractive.keywords(german, 5)
    assert "wald" in tags and "bäume" in tags  # whole words with umlauts, not "ausf"/"hrend"
    assert not {"der", "die", "den", "im"} & set(tags)
    assert "während" in extractive.words_of(german)
    spanish = "El mar es azul. Los pescadores salen al mar. El mar tiene muchos peces."
    assert extractive.guess_language(spanish) == "es" and "mar" in extractive.keywords(spanish, 3)
    # chapters scale with the length: a 3-minute talk gets several, not one
    segs = [
        {"start": 10.0 * i, "end": 10.0 * i + 9, "text": t}
        for i, t in enumerate(
            ["rivers bridges water banks"] * 6 + ["forests trees leaves"] * 6
            + ["oceans fish salt waves"] * 6
        )
    ]  # fmt: skip
    assert extractive.chapter_length(180.0) == 60.0
    assert len(extractive.chapters(segs)) == 3
    assert len(extractive.chapters(segs[:5])) == 1  # under a minute: one chapter


def test_the_first_pass_does_not_decode_the_last_moment_of_a_clip_on_its_own() -> None:
    """faster-whisper decodes windows lazily, while its segments are read: after a segment
    that ends within END_REST_SEC of the clip's end the first pass reads no further, so the
    few hundred milliseconds left (a pause) are never decoded as a window of their own."""
    import numpy as np

    from fredica.executors import whisper_pass

    decoded: list[float] = []

    def windows() -> Any:  # what the model yields, window by window
        for start, end in [(0.0, 12.0), (12.5, 29.4), (29.4, 30.0)]:
            decoded.append(start)
            seg = _Heard(start, end, text=f"words {start}")
            seg.words = [_Heard(start, end, word=f" w{start}")]
            yield seg

    class Lazy:
        def transcribe(self, audio: Any, **options: Any) -> tuple[Any, None]:
            return windows(), None

    audio = np.zeros(30 * 16_000, dtype=np.float32)
    spec = {"language": "en", "beam_size": 5, "vad_filter": False, "word_timestamps": True}
    rows, _ = whisper_pass.first_pass(Lazy(), audio, spec, _Quiet())
    assert [r["text"] for r in rows] == ["words 0.0", "words 12.5"]
    assert decoded == [0.0, 12.5]  # the remainder after 29.4 s was never asked for
    # far from the end, every segment is read
    decoded.clear()
    long_audio = np.zeros(40 * 16_000, dtype=np.float32)
    rows, _ = whisper_pass.first_pass(Lazy(), long_audio, spec, _Quiet())
    assert len(rows) == 3 and decoded == [0.0, 12.5, 29.4]


class _Prompted(_Model):
    """Hears `script` without a prompt, `with_prompt` when given one."""

    def __init__(self, script: list[tuple[float, str]], with_prompt: list[tuple[float, str]]):
        super().__init__(script)
        self.with_prompt = with_prompt

    def transcribe(self, audio: Any, **options: Any) -> tuple[list[_Heard], None]:
        if options.get("initial_prompt"):
            self.calls.append(options)
            return _Model(self.with_prompt).transcribe(audio, **options)
        return super().transcribe(audio, **options)


def test_a_prompted_chunk_that_skips_its_start_is_transcribed_again_without_the_prompt() -> None:
    import numpy as np

    from fredica.executors import whisper_pass

    # Given a chunk with speech throughout, and a model that, prompted with the previous
    # chunk's text, writes the chunk's first sentence 20 s late and hears nothing before it
    audio = (np.arange(30 * 16_000) / 16_000).astype(np.float64)
    speech = [(0.0, 29.0)]
    truth = [(0.5 + 1.0 * i, f"w{i}") for i in range(28)]
    late = [(20.5 + 1.0 * i, f"w{i}") for i in range(8)]
    model = _Prompted(truth, late)
    spec = {"language": "en", "beam_size": 5, "vad_filter": False, "word_timestamps": True,
            "initial_prompt": "what the previous chunk said"}  # fmt: skip
    rows, _ = whisper_pass.first_pass(model, audio, spec, _Quiet())
    assert whisper_pass.missed_speech(rows, speech) == pytest.approx(20.5)

    # When it is checked against the speech
    out, report, silent = whisper_pass.retry_unprompted(
        model, audio, rows, speech, spec, _Quiet(), ["hm"]
    )

    # Then the unprompted pass, which misses nothing, is kept, and the report says so
    assert [w["word"].strip() for r in out for w in r["words"]] == [w for _, w in truth]
    assert report == {"missed_sec": 20.5, "missed_unprompted_sec": 0, "kept": "unprompted"}
    assert silent == [] and model.calls[-1].get("initial_prompt") is None
    # and an unprompted pass that misses more leaves the prompted one
    worse = _Prompted([], late)
    kept, report, silent = whisper_pass.retry_unprompted(
        worse, audio, rows, speech, spec, _Quiet(), ["hm"]
    )
    assert kept == rows and report is not None and report["kept"] == "prompted"
    assert silent == ["hm"]
    # a chunk without a prompt, or one that misses little, is not run again
    for unprompted_spec, few in ((dict(spec, initial_prompt=None), rows), (spec, out)):
        calls = len(model.calls)
        same = whisper_pass.retry_unprompted(
            model, audio, few, speech, unprompted_spec, _Quiet(), []
        )
        assert same == (few, None, []) and len(model.calls) == calls
