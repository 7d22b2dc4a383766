"""DETECT_EMOTION (seed 001 §3.12): one emotion label per segment, with its confidence.

Backend `nrc-emotion-lexicon` (CPU, no model): the words each segment says are looked up in the
NRC Word-Emotion Association Lexicon (Mohammad & Turney, "Crowdsourcing a Word-Emotion
Association Lexicon", Computational Intelligence 29(3), 2013), about 6,500 English words with
their associations to anger, anticipation, disgust, fear, joy, sadness, surprise, trust and to
positive/negative sentiment, as shipped in the `nrclex` wheel. It reads the transcript of the
segment, not the sound: what is said, not how it is said (prosody needs an acoustic model such
as speechbrain-emotion, which fredica does not run yet).

Per segment:
1. Tokens: lower-cased words; a word missing from the lexicon is retried without a common
   inflection (-s, -es, -ies, -ed, -ied, -ing, -ly).
2. Negation: an emotion word within `NEGATION_WINDOW` tokens after a negator (not, no, never,
   ...n't) is not counted ("not happy" is not joy).
3. Label: each emotion of the chosen set counts its associated words; the share of the top
   emotion among the counted associations is the confidence; ties go to the emotion whose
   polarity agrees with the segment's positive/negative balance. A segment with no emotion
   word is `neutral`, with confidence 1 - (share of words that carry any association).

Emotion sets (payload `emotion_set`): `basic` = neutral, joy, sadness, anger, surprise, fear;
`extended` adds disgust, anticipation and trust (the lexicon has no contempt).

Input (payload), one of: `text` (the segment's words, with optional `start_sec`, `end_sec`,
`speaker_id`); `segments` (a list of {start|start_sec, end|end_sec, text, speaker}); or
`transcript_path` (a MERGE_TRANSCRIPTION JSON). With a list, `start_sec`/`end_sec` keep the
segments that overlap that window. The lexicon is English: text in another language is a
PERMANENT failure instead of a row of confident `neutral` labels.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

from fredica.domain import errors, models
from fredica.executors import outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

DETECT_EMOTION = "DETECT_EMOTION"
NRC_LEXICON = "nrc-emotion-lexicon"
METHOD = "NRC Word-Emotion Association Lexicon (Mohammad & Turney 2013), word counts"
NEUTRAL = "neutral"
EMOTION_SETS: Mapping[str, tuple[str, ...]] = {
    "basic": (NEUTRAL, "joy", "sadness", "anger", "surprise", "fear"),
    "extended": (
        NEUTRAL, "joy", "sadness", "anger", "surprise", "fear", "disgust", "anticipation", "trust",
    ),
}  # fmt: skip
POSITIVE_EMOTIONS = frozenset({"joy", "surprise", "anticipation", "trust"})
NEGATORS = frozenset({"not", "no", "never", "nor", "without", "hardly", "cannot", "neither"})
NEGATION_WINDOW = 3  # tokens after a negator whose emotion is not counted
MAX_CJK_SHARE = 0.2  # more CJK characters than this among the letters: not English
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LETTER = re.compile(r"[^\W\d_]")


def load_lexicon() -> dict[str, list[str]]:
    """word -> its emotions and sentiments, from the `nrclex` wheel (imported where it runs)."""
    from nrclex import NRCLex

    lexicon: dict[str, list[str]] = NRCLex().__lexicon__
    return lexicon


def _forms(word: str) -> list[str]:
    """`word` and its stems without one common English inflection, most likely first."""
    forms = [word]
    if word.endswith(("ies", "ied")):
        forms.append(word[:-3] + "y")
    for suffix in ("es", "ed", "ing", "ly", "s", "d"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            forms += [stem, stem + "e"]
            if len(stem) > 3 and stem[-1] == stem[-2]:  # sobbing -> sob
                forms.append(stem[:-1])
    return forms


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _negator(token: str) -> bool:
    return token in NEGATORS or token.endswith("n't")


def associations(
    words: list[str], lexicon: Mapping[str, list[str]]
) -> tuple[list[tuple[str, list[str]]], int]:
    """(word, its affects) for the words that count, and how many were negated away."""
    found: list[tuple[str, list[str]]] = []
    negated, since_negator = 0, NEGATION_WINDOW + 1
    for word in words:
        if _negator(word):
            since_negator = 0
            continue
        since_negator += 1
        affects = next((lexicon[f] for f in _forms(word) if f in lexicon), None)
        if not affects:
            continue
        if since_negator <= NEGATION_WINDOW:
            negated += 1
            continue
        found.append((word, affects))
    return found, negated


def classify(text: str, emotion_set: str, lexicon: Mapping[str, list[str]]) -> dict[str, Any]:
    """The emotion of one segment's text: label, confidence, per-label shares, evidence."""
    labels = EMOTION_SETS[emotion_set]
    words = tokens(text)
    found, negated = associations(words, lexicon)
    counts = dict.fromkeys(labels[1:], 0)
    positive = negative = 0
    for _, affects in found:
        for affect in affects:
            if affect in counts:
                counts[affect] += 1
        positive += "positive" in affects
        negative += "negative" in affects
    total = sum(counts.values())
    scores = {label: round(n / total, 3) if total else 0.0 for label, n in counts.items()}
    if total == 0:
        coverage = len(found) / len(words) if words else 0.0
        emotion, confidence = NEUTRAL, round(1.0 - coverage, 3)
    else:
        leaning_positive = positive >= negative

        def rank(label: str) -> tuple[int, bool, int]:
            agrees = (label in POSITIVE_EMOTIONS) == leaning_positive
            return counts[label], agrees, -labels.index(label)

        emotion = max(counts, key=rank)
        confidence = scores[emotion]
    evidence = sorted({w for w, affects in found if emotion in affects})
    return {
        "emotion": emotion,
        "confidence": confidence,
        "scores": {NEUTRAL: 1.0 if total == 0 else 0.0, **scores},
        "sentiment": {"positive": positive, "negative": negative},
        "emotion_words": evidence,
        "words": len(words),
        "negated": negated,
    }


def is_english(text: str) -> bool:
    letters = len(_LETTER.findall(text))
    return letters == 0 or len(_CJK.findall(text)) / letters <= MAX_CJK_SHARE


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.PayloadError(f"{what} must be a number, got {value!r}")
    return float(value)


def _segment(raw: Any, i: int) -> dict[str, Any]:
    """One input segment in the result's shape (start_sec, end_sec, speaker_id, text)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise errors.PayloadError(f"segments[{i}] must be an object with a text string")
    start = raw.get("start_sec", raw.get("start", 0.0))
    end = raw.get("end_sec", raw.get("end", start))
    seg: dict[str, Any] = {
        "start_sec": _number(start, f"segments[{i}].start"),
        "end_sec": _number(end, f"segments[{i}].end"),
        "text": raw["text"].strip(),
    }
    speaker = raw.get("speaker_id", raw.get("speaker"))
    if speaker:
        seg["speaker_id"] = str(speaker)
    return seg


async def input_segments(
    payload: dict[str, Any], ctx: TaskContext
) -> tuple[list[dict[str, Any]], str | None]:
    """The segments to label and their language (None when the input does not say)."""
    language = payload.get("language")
    if payload.get("transcript_path"):
        path = await ctx.payload_input(payload, "transcript_path")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise errors.PermanentError(f"cannot read the transcript {path}: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
            raise errors.PermanentError(f"{path} is not a transcript (no segments list)")
        raw, language = data["segments"], language or data.get("language")
    elif payload.get("segments") is not None:
        raw = payload["segments"]
        if not isinstance(raw, list):
            raise errors.PayloadError("payload.segments must be a list")
    elif isinstance(payload.get("text"), str):
        raw = [
            {
                "text": payload["text"],
                "start_sec": payload.get("start_sec", 0.0),
                "end_sec": payload.get("end_sec", payload.get("start_sec", 0.0)),
                "speaker_id": payload.get("speaker_id"),
            }
        ]
        return [_segment(raw[0], 0)], language
    else:
        raise errors.PayloadError(
            f"{NRC_LEXICON} labels what is said: give payload.text (the segment's words), "
            "payload.segments or payload.transcript_path"
        )
    segments = [_segment(s, i) for i, s in enumerate(raw)]
    low = payload.get("start_sec")
    high = payload.get("end_sec")
    if low is not None or high is not None:
        lo = _number(low if low is not None else 0.0, "payload.start_sec")
        hi = _number(high, "payload.end_sec") if high is not None else float("inf")
        if hi < lo:
            raise errors.PayloadError(f"payload.end_sec ({hi}) is before start_sec ({lo})")
        segments = [s for s in segments if s["end_sec"] > lo and s["start_sec"] < hi]
    return segments, language


def label_all(
    segments: list[dict[str, Any]], emotion_set: str, lexicon: Mapping[str, list[str]]
) -> dict[str, Any]:
    """Every segment labelled, plus the label of all of them together and a count per label."""
    labelled = [{**s, **classify(s["text"], emotion_set, lexicon)} for s in segments]
    overall = classify(" ".join(s["text"] for s in segments), emotion_set, lexicon)
    counts: dict[str, int] = {}
    for seg in labelled:
        counts[seg["emotion"]] = counts.get(seg["emotion"], 0) + 1
    return {
        "emotion": overall["emotion"],
        "confidence": overall["confidence"],
        "scores": overall["scores"],
        "segments": labelled,
        "segment_counts": counts,
    }


class DetectEmotionExecutor(TaskExecutor):
    task_type = DETECT_EMOTION
    capability = "EMOTION_DETECT"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        emotion_set = str(payload.get("emotion_set") or "basic")
        if emotion_set not in EMOTION_SETS:
            raise errors.PayloadError(
                f"payload.emotion_set must be one of {', '.join(EMOTION_SETS)}, got {emotion_set!r}"
            )
        backend = ctx.backend or NRC_LEXICON
        if backend != NRC_LEXICON:
            raise errors.PermanentError(f"EMOTION_DETECT backend {backend!r} is not run here")
        segments, language = await input_segments(payload, ctx)
        text = " ".join(s["text"] for s in segments)
        if (language and not str(language).lower().startswith("en")) or not is_english(text):
            raise errors.PermanentError(
                f"{NRC_LEXICON} reads English only (the transcript is "
                f"{language or 'not English'}); other languages need an acoustic backend"
            )
        ctx.event("tool", NRC_LEXICON)
        lexicon = await asyncio.to_thread(load_lexicon)
        found = await asyncio.to_thread(label_all, segments, emotion_set, lexicon)
        ctx.progress(100, f"{len(segments)} segment(s): {found['emotion']}")
        result: dict[str, Any] = {
            **found,
            "emotion_set": emotion_set,
            "labels": list(EMOTION_SETS[emotion_set]),
            "language": "en",
            "backend": NRC_LEXICON,
            "method": METHOD,
        }
        for key in ("start_sec", "end_sec", "speaker_id", "audio_path"):
            if payload.get(key) is not None:
                result[key] = payload[key]
        return ExecuteResult(outputs.portable(result, ctx.data_dir))
