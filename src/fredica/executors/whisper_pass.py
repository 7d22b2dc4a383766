"""One faster-whisper pass over a chunk, then two checks against voice activity detection.

Whisper hallucinates in silence: given a prompt, it may "hear" the prompt's sentence again in
the trailing silence of a clip (seen here: a sentence repeated at 10.8-11.6 s where VAD finds no
speech). Words whose time lies entirely outside the chunk's speech regions (padded by
SPEECH_PAD_SEC) are therefore dropped and reported.

Whisper sometimes jumps over speech: on speech without pauses its timestamp tokens can run
ahead, so a 20 s stretch gets no words at all (seen here: 87-108 s of a run-on talk missing
from one chunk while the whole-file run had it). After the first pass, the chunk's speech
regions (Silero VAD, bundled with faster-whisper) are compared with the words' timestamps;
every stretch of speech of at least MIN_GAP_SEC without a word is transcribed again on its own
(with the text before it as prompt) and its words are inserted. What was repaired is reported.
Whisper also repeats itself: conditioned on what it already wrote (the previous window's text,
or the prompt), it may write an earlier sentence again over new speech, and the real words there
are lost (seen here: "many rivers were so dirty ... in them for several decades" written a second
time 15 s later over "a clean stream is full of small larvae hiding under the stones"). A segment
that contains a run of REPEAT_WORDS words already written earlier in the chunk (or in its prompt)
is transcribed again on its own, without any text to condition on, and what that pass hears in
its time replaces it (only in the part of the file the merge takes from this chunk: `own_sec`).
Speech that really repeats itself comes out the same the second time.
A prompted first pass that leaves at least RETRY_MISSED_SEC of speech without words is run
again without the prompt, and the pass missing less speech is kept (seen here: conditioned on
the previous chunk's text, the first sentence written 20 s late over other speech; before,
the hole was repaired stretch by stretch and heard worse than in one pass).
The first pass stops reading segments after one that ends within END_REST_SEC of the clip's
end: faster-whisper seeks to the last word and would decode those last few hundred
milliseconds (a pause: chunk files end in one) as a window of their own, conditioned on the
chunk's text, where the model writes nonsense until the log-probability check fails and the
no-speech check discards it (seen here after most prompted chunks: 0.5-0.8 s of a 2-2.6 s
decode, for nothing).
Runs in the inference worker (child process); times here are relative to the chunk.
"""

from __future__ import annotations

import importlib
from typing import Any

from fredica.executors.merge import tokens

SAMPLE_RATE = 16_000
MIN_GAP_SEC = 3.0  # speech this long without a single word was skipped, not mumbled
REPAIR_PAD_SEC = 0.5  # audio on each side of a gap given to the repair pass for context
PROMPT_CHARS = 800  # the repair pass hears what came before, as Whisper would
SPEECH_PAD_SEC = 0.3  # word timings from cross-attention may stray this far out of speech
MIN_SPEECH_SHARE = 0.25  # a segment less than this much inside speech was heard in silence
REPEAT_WORDS = 5  # a run of this many words written twice in one chunk is checked again
END_REST_SEC = 1.0  # audio after a segment ending this close to the clip's end: not decoded
WINDOW_SEC = 30.0  # one Whisper window: skipped speech is repaired in passes of at most this
RETRY_MISSED_SEC = 8.0  # a prompted first pass missing this much speech is run again unprompted


def uncovered(
    speech: list[tuple[float, float]], words: list[tuple[float, float]], min_gap: float
) -> list[tuple[float, float]]:
    """Stretches of speech of at least `min_gap` seconds that no word overlaps. Pure."""
    out: list[tuple[float, float]] = []
    spans = sorted(words)
    for s_start, s_end in speech:
        at = s_start
        for w_start, w_end in spans:
            if w_end <= at or w_start >= s_end:
                continue
            if w_start - at >= min_gap:
                out.append((round(at, 3), round(w_start, 3)))
            at = max(at, w_end)
        if s_end - at >= min_gap:
            out.append((round(at, 3), round(s_end, 3)))
    return out


def _rows(
    segments: Any, shift: float, duration: float, reporter: Any, rest: float = 0.0
) -> list[dict[str, Any]]:
    """Segments of a faster-whisper generator as dicts (times + `shift`), checking pause and
    cancel between segments (decoding happens while the generator is consumed). With `rest`,
    consumption stops after a segment that ends less than `rest` seconds before `duration`:
    faster-whisper would otherwise decode that remainder as a window of its own."""
    out: list[dict[str, Any]] = []
    for seg in segments:
        reporter.wait_if_paused()
        start = shift + float(seg.start)
        row: dict[str, Any] = {
            "start": start,
            "end": max(start, shift + min(float(seg.end), duration)),
            "text": seg.text.strip(),
            "avg_logprob": round(float(seg.avg_logprob), 4),
            "no_speech_prob": round(float(seg.no_speech_prob), 4),
        }
        if seg.words:
            row["words"] = [
                {
                    "start": shift + float(w.start),
                    "end": shift + float(w.end),
                    "word": w.word,
                    "probability": round(float(w.probability), 3),
                }
                for w in seg.words
            ]
        out.append(row)
        if duration > 0:
            reporter.progress(5 + 85 * min(1.0, row["end"] / duration), f"{row['end']:.1f}s")
        if rest > 0 and duration - row["end"] < rest:
            break
    return out


def first_pass(model: Any, audio: Any, spec: dict[str, Any], reporter: Any) -> tuple[Any, Any]:
    """(rows, info) of the chunk transcribed as a whole."""
    segments, info = model.transcribe(
        audio,
        language=spec.get("language") or None,
        initial_prompt=spec.get("initial_prompt") or None,
        beam_size=int(spec["beam_size"]),
        vad_filter=bool(spec["vad_filter"]),
        word_timestamps=bool(spec["word_timestamps"]),
        condition_on_previous_text=True,
    )
    return _rows(segments, 0.0, len(audio) / SAMPLE_RATE, reporter, END_REST_SEC), info


def speech_regions(audio: Any) -> list[tuple[float, float]]:
    vad = importlib.import_module("faster_whisper.vad")
    options = vad.VadOptions(min_silence_duration_ms=500, speech_pad_ms=30)
    return [
        (s["start"] / SAMPLE_RATE, s["end"] / SAMPLE_RATE)
        for s in vad.get_speech_timestamps(audio, options)
    ]


def _prompt_before(rows: list[dict[str, Any]], at: float) -> str:
    words = [w for r in rows for w in r.get("words") or [] if float(w["end"]) <= at]
    text = " ".join("".join(str(w["word"]) for w in words).split())
    if len(text) <= PROMPT_CHARS:
        return text
    tail = text[-PROMPT_CHARS:]
    return tail.split(" ", 1)[-1] if " " in tail else tail


def speech_share(start: float, end: float, speech: list[tuple[float, float]]) -> float:
    """Share of [start, end] inside speech regions. Pure."""
    if end - start <= 0.05:
        return 1.0  # too short to judge by time: the word check decides
    inside = sum(max(0.0, min(end, e) - max(start, s)) for s, e in speech)
    return inside / (end - start)


def in_speech(word: dict[str, Any], speech: list[tuple[float, float]]) -> bool:
    """Whether a word's time touches a speech region (padded by SPEECH_PAD_SEC). Pure."""
    start, end = float(word["start"]), float(word["end"])
    return any(start <= e + SPEECH_PAD_SEC and end >= s - SPEECH_PAD_SEC for s, e in speech)


def drop_silent_words(
    rows: list[dict[str, Any]], speech: list[tuple[float, float]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows without words heard in silence, the dropped words). Rows without word
    timestamps are kept as they are. Pure."""
    kept: list[dict[str, Any]] = []
    dropped: list[str] = []
    for row in rows:
        words = row.get("words")
        if not words:
            kept.append(row)
            continue
        if speech_share(float(row["start"]), float(row["end"]), speech) < MIN_SPEECH_SHARE:
            dropped += [str(w["word"]).strip() for w in words]  # a segment heard in silence
            continue
        real = [w for w in words if in_speech(w, speech)]
        dropped += [str(w["word"]).strip() for w in words if not in_speech(w, speech)]
        if len(real) == len(words):
            kept.append(row)
        elif real:
            text = "".join(str(w["word"]) for w in real).strip()
            start, end = real[0]["start"], real[-1]["end"]
            kept.append({**row, "words": real, "text": text, "start": start, "end": end})
    return kept, dropped


def check_against_speech(
    model: Any, audio: Any, rows: list[dict[str, Any]], spec: dict[str, Any], reporter: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows checked against VAD, report): words in silence dropped, skipped speech repaired,
    repeated text heard again without context."""
    speech = speech_regions(audio)
    rows, silent = drop_silent_words(rows, speech)
    rows, retried, silent = retry_unprompted(model, audio, rows, speech, spec, reporter, silent)
    rows, repaired = repair(model, audio, rows, speech, spec, reporter)
    rows, repeats = redecode_repeats(model, audio, rows, spec, reporter)
    report: dict[str, Any] = {
        "dropped_in_silence": silent,
        "redecoded_repeats": repeats,
        "repaired_gaps": repaired,
    }
    if retried is not None:
        report["unprompted_retry"] = retried
    return rows, report


def word_spans(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) of every word of `rows`. Pure."""
    return [(float(w["start"]), float(w["end"])) for r in rows for w in r.get("words") or []]


def missed_speech(rows: list[dict[str, Any]], speech: list[tuple[float, float]]) -> float:
    """Seconds of speech in stretches of at least MIN_GAP_SEC that no word of `rows` covers.
    Pure."""
    spans = word_spans(rows)
    return round(sum(end - start for start, end in uncovered(speech, spans, MIN_GAP_SEC)), 3)


class _Within:
    """A reporter whose 0-100 % maps onto [low, high] of the task's progress."""

    def __init__(self, reporter: Any, low: float, high: float, note: str) -> None:
        self._reporter, self._low, self._high, self._note = reporter, low, high, note

    def progress(self, pct: float, note: str | None = None) -> None:
        span = self._high - self._low
        self._reporter.progress(self._low + span * pct / 100, f"{self._note} {note or ''}")

    def wait_if_paused(self, timeout: float | None = None) -> bool:
        return bool(self._reporter.wait_if_paused(timeout))


def retry_unprompted(
    model: Any,
    audio: Any,
    rows: list[dict[str, Any]],
    speech: list[tuple[float, float]],
    spec: dict[str, Any],
    reporter: Any,
    silent: list[str],
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str]]:
    """(rows, report or None, words dropped in silence): a prompted first pass that left at
    least RETRY_MISSED_SEC of speech without words is run again without the prompt, and the
    pass that misses less speech is kept. Conditioned on the previous chunk's text, Whisper
    may write the chunk's first sentence 20 s late and skip what lies between, or jump over
    the middle and fill the end with the prompt's sentences (seen here at 60 s chunks of a
    talk with three voices); repairing such holes stretch by stretch hears them worse than
    one pass over the chunk."""
    if not spec.get("initial_prompt"):
        return rows, None, silent
    missed = missed_speech(rows, speech)
    if missed < RETRY_MISSED_SEC:
        return rows, None, silent
    quiet = _Within(reporter, 92, 94, "again without the prompt:")  # after "checking" (92)
    again, _ = first_pass(model, audio, {**spec, "initial_prompt": None}, quiet)
    again, again_silent = drop_silent_words(again, speech)
    missed_again = missed_speech(again, speech)
    better = missed_again < missed
    report = {"missed_sec": missed, "missed_unprompted_sec": missed_again, "kept": (
        "unprompted" if better else "prompted")}  # fmt: skip
    return (again, report, again_silent) if better else (rows, report, silent)


def _grams(text: str, n: int) -> set[tuple[str, ...]]:
    words = tokens(text)
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def repeated_runs(
    rows: list[dict[str, Any]], prompt: str = "", n: int = REPEAT_WORDS
) -> list[tuple[int, int]]:
    """Runs (first, last row index) of consecutive rows each containing `n` words in a row that
    were already written in an earlier row or in the prompt (case and punctuation ignored).
    Pure."""
    seen = _grams(prompt, n)
    flagged: list[int] = []
    for i, row in enumerate(rows):
        grams = _grams(str(row.get("text") or ""), n)
        if grams & seen:
            flagged.append(i)
        seen |= grams
    runs: list[tuple[int, int]] = []
    for i in flagged:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def redecode_repeats(
    model: Any, audio: Any, rows: list[dict[str, Any]], spec: dict[str, Any], reporter: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows with every repeated run transcribed again without context, what was redone). The
    new pass covers the time from the end of the row before the run to the start of the row
    after it (the repeat may have stood in for more speech than its own timestamps show); its
    words in that time replace the run. A pass that hears nothing leaves the run as it was."""
    runs = repeated_runs(rows, str(spec.get("initial_prompt") or ""))
    own = spec.get("own_sec")
    if own:  # a run in the context the merge leaves to a neighbour needs no second pass
        lo_own, hi_own = float(own[0]), float(own[1])
        runs = [(a, b) for a, b in runs if rows[a]["start"] < hi_own and rows[b]["end"] > lo_own]
    if not runs:
        return rows, []
    duration = len(audio) / SAMPLE_RATE
    replaced: dict[int, list[dict[str, Any]]] = {}
    report: list[dict[str, Any]] = []
    for first, last in runs:
        reporter.wait_if_paused()
        start = float(rows[first - 1]["end"]) if first > 0 else 0.0
        end = float(rows[last + 1]["start"]) if last + 1 < len(rows) else duration
        start = min(start, float(rows[first]["start"]))
        end = max(end, float(rows[last]["end"]))
        lo, hi = max(0.0, start - REPAIR_PAD_SEC), min(duration, end + REPAIR_PAD_SEC)
        segments, _ = model.transcribe(
            audio[int(lo * SAMPLE_RATE) : int(hi * SAMPLE_RATE)],
            language=spec.get("language") or None,
            beam_size=int(spec["beam_size"]),
            word_timestamps=True,
            condition_on_previous_text=False,
        )
        found = _words_within(_rows(segments, lo, duration, reporter), start, end)
        was = " ".join(str(r["text"]) for r in rows[first : last + 1])
        now = " ".join(str(r["text"]) for r in found)
        report.append({"start": round(start, 3), "end": round(end, 3), "was": was, "now": now})
        if found:
            replaced[first] = found
            for i in range(first + 1, last + 1):
                replaced[i] = []
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        out.extend(replaced.get(i, [row]))
    return out, report


def _words_within(rows: list[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """`rows` cut to the words whose middle lies in [start, end)."""
    found = []
    for row in rows:
        words = [w for w in row.get("words") or [] if start <= _mid(w) < end]
        if words:
            text = "".join(str(w["word"]) for w in words).strip()
            found.append({**row, "words": words, "text": text,
                          "start": words[0]["start"], "end": words[-1]["end"]})  # fmt: skip
    return found


def joined_gaps(
    gaps: list[tuple[float, float]], words: list[tuple[float, float]], longest: float = WINDOW_SEC
) -> list[tuple[float, float]]:
    """Consecutive gaps with no word between them (skipped sentences and the pauses between
    them) as one stretch of at most `longest` seconds: transcribed in one pass, it is heard as
    in a Whisper window, not as short clips padded with silence, which the model hears worse
    (seen here: 20 s a first pass had skipped, repaired sentence by sentence, misheard in
    every other sentence). Pure."""
    out: list[tuple[float, float]] = []
    for start, end in gaps:
        if out:
            prev_start, prev_end = out[-1]
            between = any(w_end > prev_end and w_start < start for w_start, w_end in words)
            if not between and end - prev_start <= longest:
                out[-1] = (prev_start, end)
                continue
        out.append((start, end))
    return out


def repair(
    model: Any,
    audio: Any,
    rows: list[dict[str, Any]],
    speech: list[tuple[float, float]],
    spec: dict[str, Any],
    reporter: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows with skipped speech transcribed and inserted, what was repaired)."""
    duration = len(audio) / SAMPLE_RATE
    spans = word_spans(rows)
    gaps = joined_gaps(uncovered(speech, spans, MIN_GAP_SEC), spans)
    repaired: list[dict[str, Any]] = []
    for start, end in gaps:
        reporter.wait_if_paused()
        lo, hi = max(0.0, start - REPAIR_PAD_SEC), min(duration, end + REPAIR_PAD_SEC)
        # the pass's words are kept between the words around the gap, not only inside it:
        # Whisper times the first word of a clip from the clip's start, so a short first
        # word ("Los", "Cada") of a gap that begins where speech begins has its middle in
        # the padding before it (seen here: a sentence's first word lost per repaired gap)
        low = max([lo, *(e for _, e in spans if e <= start + 1e-6)])
        high = min([hi, *(s for s, _ in spans if s >= end - 1e-6)])
        segments, _ = model.transcribe(
            audio[int(lo * SAMPLE_RATE) : int(hi * SAMPLE_RATE)],
            language=spec.get("language") or None,
            initial_prompt=_prompt_before(rows, start) or None,
            beam_size=int(spec["beam_size"]),
            word_timestamps=True,
        )
        found = _words_within(_rows(segments, lo, duration, reporter), low, high)
        rows = sorted([*rows, *found], key=lambda r: float(r["start"]))
        repaired.append({"start": start, "end": end, "words": sum(len(r["words"]) for r in found)})
    return rows, repaired


def _mid(word: dict[str, Any]) -> float:
    return (float(word["start"]) + float(word["end"])) / 2


def shifted(rows: list[dict[str, Any]], offset: float) -> list[dict[str, Any]]:
    """Rows with absolute times (chunk offset added), rounded to milliseconds."""
    out = []
    for row in rows:
        new = {
            **row,
            "start": round(offset + row["start"], 3),
            "end": round(offset + row["end"], 3),
        }
        if row.get("words"):
            new["words"] = [
                {**w, "start": round(offset + w["start"], 3), "end": round(offset + w["end"], 3)}
                for w in row["words"]
            ]
        out.append(new)
    return out
