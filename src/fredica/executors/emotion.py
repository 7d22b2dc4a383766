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

Backend `onnx-emotion` (CPU, ours): an audio-classification model the operator exports to ONNX
(`providers: [{backend: onnx-emotion, model_path: /models/ser/model.onnx}]`; no speech-emotion
model ships in a wheel, they come from a model hub: e.g. a wav2vec2 / HuBERT emotion model
exported with `optimum-cli export onnx --task audio-classification`). It hears the segment:
the audio from `start_sec` to `end_sec` (or each of `segments`) at 16 kHz mono, normalised to
zero mean and unit variance unless the model's `preprocessor_config.json` says
`do_normalize: false`, fed as the model's first input `[1, samples]`; the first output is the
logits, soft-maxed. The model's class names come from `id2label` in the `config.json` beside
it (or the ONNX metadata `id2label` / `labels`) and map onto the emotion set (angry/ang ->
anger, happy/hap -> joy, calm/neu -> neutral, ...); classes outside the set are dropped.

Input (payload) of the lexicon, one of: `text` (the segment's words, with optional
`start_sec`, `end_sec`, `speaker_id`); `segments` (a list of {start|start_sec, end|end_sec,
text, speaker}); or `transcript_path` (a MERGE_TRANSCRIPTION JSON). With a list,
`start_sec`/`end_sec` keep the segments that overlap that window. The lexicon is English:
text in another language is a PERMANENT failure instead of a row of confident `neutral`
labels.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fredica.domain import errors, models
from fredica.executors import outputs, speech
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter as Reporter

DETECT_EMOTION = "DETECT_EMOTION"
NRC_LEXICON = "nrc-emotion-lexicon"
ONNX_EMOTION = "onnx-emotion"
RATE = 16_000
MIN_SEGMENT_SEC = 0.1
METHOD = "NRC Word-Emotion Association Lexicon (Mohammad & Turney 2013), word counts"
NEUTRAL = "neutral"
EMOTION_SETS: Mapping[str, tuple[str, ...]] = {
    "basic": (NEUTRAL, "joy", "sadness", "anger", "surprise", "fear"),
    "extended": (
        NEUTRAL, "joy", "sadness", "anger", "surprise", "fear", "disgust", "anticipation", "trust",
    ),
}  # fmt: skip
# class names of speech-emotion models (IEMOCAP, RAVDESS, CREMA-D, ...) -> ours
LABEL_ALIASES: Mapping[str, str] = {
    "neutral": NEUTRAL, "neu": NEUTRAL, "calm": NEUTRAL,
    "joy": "joy", "happy": "joy", "hap": "joy", "happiness": "joy",
    "sad": "sadness", "sadness": "sadness",
    "anger": "anger", "angry": "anger", "ang": "anger",
    "surprise": "surprise", "surprised": "surprise", "sur": "surprise",
    "fear": "fear", "fearful": "fear", "fea": "fear",
    "disgust": "disgust", "disgusted": "disgust", "dis": "disgust",
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
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every segment labelled, and the label of all of them together."""
    labelled = [{**s, **classify(s["text"], emotion_set, lexicon)} for s in segments]
    return labelled, classify(" ".join(s["text"] for s in segments), emotion_set, lexicon)


def finish(
    ctx: TaskContext,
    payload: dict[str, Any],
    emotion_set: str,
    segments: list[dict[str, Any]],
    overall: dict[str, Any],
    **about: Any,
) -> ExecuteResult:
    """The result of either backend: the overall label, every segment's, a count per label,
    what ran (`about`) and the payload's window and speaker."""
    counts: dict[str, int] = {}
    for seg in segments:
        counts[seg["emotion"]] = counts.get(seg["emotion"], 0) + 1
    result: dict[str, Any] = {
        "emotion": overall["emotion"],
        "confidence": overall["confidence"],
        "scores": overall["scores"],
        "segments": segments,
        "segment_counts": counts,
        "emotion_set": emotion_set,
        "labels": list(EMOTION_SETS[emotion_set]),
        **about,
    }
    for key in ("start_sec", "end_sec", "speaker_id", "audio_path"):
        if payload.get(key) is not None and key not in result:
            result[key] = payload[key]
    ctx.progress(100, f"{len(segments)} segment(s): {overall['emotion']}")
    return ExecuteResult(outputs.portable(result, ctx.data_dir))


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
        if backend == ONNX_EMOTION:
            return await self._by_sound(payload, emotion_set, ctx)
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
        labelled, overall = await asyncio.to_thread(label_all, segments, emotion_set, lexicon)
        return finish(
            ctx, payload, emotion_set, labelled, overall,
            language="en", backend=NRC_LEXICON, method=METHOD,
        )  # fmt: skip

    async def _by_sound(
        self, payload: dict[str, Any], emotion_set: str, ctx: TaskContext
    ) -> ExecuteResult:
        model = ctx.backend_config.get("model_path")
        if not isinstance(model, str) or not Path(model).is_file():
            raise errors.PermanentError(
                f"{ONNX_EMOTION} model file not found: {model!r} "
                "(capabilities.emotion_detect.providers[].model_path)"
            )
        source = await ctx.payload_input(payload, "audio_path")
        samples = await speech.decode(ctx, source, RATE, ctx.output_dir)
        spans = audio_spans(payload, len(samples) / RATE)
        pieces = [samples[int(s["start_sec"] * RATE) : int(s["end_sec"] * RATE)] for s in spans]
        ctx.event("tool", f"onnxruntime {Path(model).name} on {len(pieces)} segment(s)")
        names, probs = await ctx.run_in_subprocess(classify_audio_in_child, model, pieces)
        labels = EMOTION_SETS[emotion_set]
        segments = [
            {**s, **from_model(names, p, labels)} for s, p in zip(spans, probs, strict=True)
        ]
        weights = np.array([s["end_sec"] - s["start_sec"] for s in segments])
        mean = np.average(np.array(probs), axis=0, weights=weights)
        overall = from_model(names, [float(x) for x in mean], labels)
        return finish(
            ctx, payload, emotion_set, segments, overall,
            backend=ONNX_EMOTION, model=Path(model).name, audio_path=str(source),
            method="audio classification (ONNX) on the 16 kHz waveform of each segment",
        )  # fmt: skip


def audio_spans(payload: dict[str, Any], duration: float) -> list[dict[str, Any]]:
    """The segments to hear: payload.segments (each with its times), else start_sec..end_sec
    (the whole file without them); each at least MIN_SEGMENT_SEC long and inside the audio."""
    if payload.get("segments") is not None:
        if not isinstance(payload["segments"], list):
            raise errors.PayloadError("payload.segments must be a list")
        raw = payload["segments"]
    else:
        raw = [
            {
                "start_sec": payload.get("start_sec", 0.0),
                "end_sec": payload.get("end_sec", duration),
                "speaker_id": payload.get("speaker_id"),
            }
        ]
    spans = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise errors.PayloadError(f"segments[{i}] must be an object with start and end")
        start = _number(item.get("start_sec", item.get("start", 0.0)), f"segments[{i}].start")
        end = _number(item.get("end_sec", item.get("end", duration)), f"segments[{i}].end")
        end = min(end, duration)
        if start < 0 or end - start < MIN_SEGMENT_SEC:
            raise errors.PayloadError(
                f"segment {i} ({start:.2f}-{end:.2f} s) is not at least {MIN_SEGMENT_SEC} s "
                f"of the {duration:.2f} s of audio"
            )
        span: dict[str, Any] = {"start_sec": start, "end_sec": round(end, 3)}
        speaker = item.get("speaker_id", item.get("speaker"))
        if speaker:
            span["speaker_id"] = str(speaker)
        if isinstance(item.get("text"), str):
            span["text"] = item["text"].strip()
        spans.append(span)
    return spans


def model_labels(model_path: str, metadata: Mapping[str, str], count: int) -> list[str]:
    """The model's class names: `id2label` of the config.json beside it, else of the ONNX
    metadata (`id2label` JSON or comma-separated `labels`), else class_0...."""
    table: Any = None
    config = Path(model_path).with_name("config.json")
    if config.is_file():
        table = json.loads(config.read_text(encoding="utf-8")).get("id2label")
    elif "id2label" in metadata:
        table = json.loads(metadata["id2label"])
    elif "labels" in metadata:
        table = dict(enumerate(metadata["labels"].split(",")))
    if isinstance(table, dict):
        names = {int(k): str(v).strip() for k, v in table.items()}
        return [names.get(i, f"class_{i}") for i in range(count)]
    return [f"class_{i}" for i in range(count)]


def _normalise(model_path: str) -> bool:
    pre = Path(model_path).with_name("preprocessor_config.json")
    if not pre.is_file():
        return True
    return bool(json.loads(pre.read_text(encoding="utf-8")).get("do_normalize", True))


def classify_audio_in_child(
    reporter: Reporter, model_path: str, pieces: list[np.ndarray]
) -> tuple[list[str], list[list[float]]]:
    """(class names, probabilities per piece) from the ONNX model, in a child process."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    normalise = _normalise(model_path)
    name = session.get_inputs()[0].name
    probs: list[list[float]] = []
    for i, piece in enumerate(pieces):
        x = piece.astype(np.float32)
        if normalise:
            x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        logits = np.asarray(session.run(None, {name: x[None, :]})[0], dtype=np.float64)[0]
        e = np.exp(logits - logits.max())
        probs.append([float(v) for v in e / e.sum()])
        reporter.progress(10 + 80 * (i + 1) // len(pieces), f"segment {i + 1}/{len(pieces)}")
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    names = model_labels(model_path, metadata, len(probs[0]) if probs else 0)
    return names, probs


def from_model(names: list[str], probs: list[float], labels: tuple[str, ...]) -> dict[str, Any]:
    """The model's probabilities as the emotion set's label, confidence and shares."""
    scores = dict.fromkeys(labels, 0.0)
    for name, p in zip(names, probs, strict=True):
        ours = LABEL_ALIASES.get(name.lower())
        if ours in scores:
            scores[ours] += p
    total = sum(scores.values())
    if total <= 0:
        raise errors.PermanentError(
            f"the model's classes ({', '.join(names)}) map to none of {', '.join(labels)}"
        )
    shares = {k: round(v / total, 3) for k, v in scores.items()}
    emotion = max(shares, key=lambda k: shares[k])
    return {
        "emotion": emotion,
        "confidence": shares[emotion],
        "scores": shares,
        "model_scores": {n: round(p, 3) for n, p in zip(names, probs, strict=True)},
    }
