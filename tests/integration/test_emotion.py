"""DETECT_EMOTION with the NRC emotion lexicon: labels of known sentences, negation, the
executor's inputs (text, segments, transcript file) and refusals, its declaration, and the
`transcribe_speakers` template labelling each speaker turn of generated speech."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fredica.capabilities import catalog, probes
from fredica.config import schema as config
from fredica.domain import errors
from fredica.engine import declare
from fredica.executors import emotion, speech
from tests import subtitle_support as ss
from tests.media_support import make_context

F = catalog.CapabilityFunction

JOY = "I am so happy and glad today, what a wonderful and beautiful celebration."
ANGER = "I am furious and angry, I hate this, the rage makes me want to shout."
SADNESS = "She cried and sobbed all night, full of grief after the loss."
FEAR = "We were afraid and in a panic, the terror of the attack was everywhere."
FLAT = "The report has four pages and two tables."


@pytest.fixture(scope="module")
def lexicon() -> dict[str, list[str]]:
    return emotion.load_lexicon()


@pytest.mark.parametrize(
    ("text", "label"),
    [(JOY, "joy"), (ANGER, "anger"), (SADNESS, "sadness"), (FEAR, "fear"), (FLAT, "neutral")],
)
def test_known_sentences_get_their_emotion(
    text: str, label: str, lexicon: dict[str, list[str]]
) -> None:
    found = emotion.classify(text, "basic", lexicon)
    assert found["emotion"] == label, found
    assert 0.0 < found["confidence"] <= 1.0
    assert set(found["scores"]) == set(emotion.EMOTION_SETS["basic"])
    if label != "neutral":
        assert found["emotion_words"], found
        assert found["scores"][label] == max(found["scores"].values())


def test_negation_and_inflections(lexicon: dict[str, list[str]]) -> None:
    assert emotion.classify("I am happy.", "basic", lexicon)["emotion"] == "joy"
    negated = emotion.classify("I am not happy, never glad.", "basic", lexicon)
    assert negated["emotion"] == "neutral" and negated["negated"] == 2
    # "sobbed" and "cried" are not in the lexicon as such: found through their stems
    assert {"sobbed", "cried"} <= set(emotion.classify(SADNESS, "basic", lexicon)["emotion_words"])


def test_extended_set_has_disgust(lexicon: dict[str, list[str]]) -> None:
    text = "The rotten, filthy, disgusting garbage smelled vile and nauseating."
    assert emotion.classify(text, "extended", lexicon)["emotion"] == "disgust"
    assert "disgust" not in emotion.classify(text, "basic", lexicon)["scores"]


async def run(tmp_path: Path, payload: dict) -> dict:
    ctx = await make_context(tmp_path, "DETECT_EMOTION", payload, backend=emotion.NRC_LEXICON)
    result = (await emotion.DetectEmotionExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


async def test_segments_are_labelled_one_by_one_in_their_window(tmp_path: Path) -> None:
    segments = [
        {"start": 0.0, "end": 3.0, "text": JOY, "speaker": "SPEAKER_00"},
        {"start": 3.5, "end": 6.0, "text": ANGER, "speaker": "SPEAKER_01"},
        {"start": 6.5, "end": 9.0, "text": SADNESS, "speaker": "SPEAKER_00"},
    ]
    result = await run(tmp_path, {"segments": segments, "end_sec": 6.2})
    assert result["backend"] == "nrc-emotion-lexicon" and result["language"] == "en"
    assert [(s["speaker_id"], s["emotion"]) for s in result["segments"]] == [
        ("SPEAKER_00", "joy"),
        ("SPEAKER_01", "anger"),
    ]
    assert result["segments"][1]["start_sec"] == 3.5 and result["segments"][1]["end_sec"] == 6.0
    assert result["segment_counts"] == {"joy": 1, "anger": 1}
    assert result["labels"] == list(emotion.EMOTION_SETS["basic"])


async def test_one_text_and_a_transcript_file(tmp_path: Path) -> None:
    one = await run(
        tmp_path, {"text": FEAR, "start_sec": 1.0, "end_sec": 4.0, "speaker_id": "SPEAKER_02"}
    )
    assert one["emotion"] == "fear" and one["speaker_id"] == "SPEAKER_02"
    assert one["segments"][0]["start_sec"] == 1.0
    transcript = tmp_path / "data" / "t.json"
    transcript.write_text(
        json.dumps(
            {
                "language": "en",
                "segments": [
                    {"start": 0.0, "end": 2.0, "text": FLAT},
                    {"start": 2.0, "end": 5.0, "text": JOY},
                ],
            }
        )
    )
    result = await run(tmp_path, {"transcript_path": "t.json", "emotion_set": "extended"})
    assert [s["emotion"] for s in result["segments"]] == ["neutral", "joy"]
    assert result["emotion_set"] == "extended"


@pytest.mark.parametrize(
    ("payload", "error", "words"),
    [
        ({"text": JOY, "emotion_set": "all"}, errors.PayloadError, "emotion_set"),
        ({"audio_path": "a.wav"}, errors.PayloadError, "payload.text"),
        ({"segments": [{"start": 0}]}, errors.PayloadError, "segments[0]"),
        ({"text": "今天我非常高兴，这是一个美好的日子。"}, errors.PermanentError, "English only"),
        ({"text": JOY, "language": "zh"}, errors.PermanentError, "English only"),
        ({"segments": [], "start_sec": 5, "end_sec": 1}, errors.PayloadError, "before"),
    ],
)
async def test_bad_input_is_refused_naming_it(
    tmp_path: Path, payload: dict, error: type[errors.TaskError], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        await run(tmp_path, payload)


def test_declared_only_when_enabled_and_installed() -> None:
    report = probes.run_probes()
    enabled = config.parse_config({"capabilities": {"emotion_detect": {"enabled": True}}})
    caps = declare.declared_capabilities(declare.declare(enabled, report, declare.RUNNABLE))
    assert [c.backend for c in caps if c.function is F.EMOTION_DETECT] == ["nrc-emotion-lexicon"]
    off = declare.declared_capabilities(declare.declare(config.parse_config({}), report))
    assert not [c for c in off if c.function is F.EMOTION_DETECT]


DIALOGUE = [
    ("en-us", "I am so happy today. This is a wonderful and beautiful celebration."),
    ("en-us+f4", "I am furious and angry. I hate this terrible mess."),
    ("en-us", "We love the music and the friends. What a good party."),
    ("en-us+f4", "This makes me mad. I am angry and I hate the noise."),
]


def test_transcribe_speakers_adds_detect_emotion_after_the_merge(tmp_path: Path) -> None:
    from fredica.pipelines.dubbing import SpeakersTemplate
    from fredica.pipelines.request import PipelineRequest
    from fredica.pipelines.templates import BuildContext

    source = tmp_path / "a.wav"
    source.write_bytes(b"")
    template, ctx = SpeakersTemplate("transcribe_speakers", ""), BuildContext(frozenset(), "n")

    def build(**params: object) -> list:
        request = PipelineRequest(template=template.name, source=str(source), params=params)
        return list(template.build(request, ctx).tasks)

    assert not [t for t in build() if t.type == "DETECT_EMOTION"]
    tasks = build(emotion=True, emotion_set="extended")
    merge = next(t for t in tasks if t.type == "MERGE_TRANSCRIPTION")
    (detect,) = (t for t in tasks if t.type == "DETECT_EMOTION")
    assert detect.depends_on == (merge.id,) and detect.payload["emotion_set"] == "extended"
    for params, words in (({"emotion": True, "emotion_set": "many"}, "params.emotion_set"),
                          ({"emotion": "yes"}, "params.emotion")):  # fmt: skip
        with pytest.raises(errors.InvalidRequest, match=re.escape(words)):
            build(**params)


@pytest.mark.slow
async def test_transcribe_speakers_labels_each_speaker_turn(tmp_path: Path) -> None:
    from fredica.pipelines.request import PipelineRequest

    wav = tmp_path / "dialogue.wav"
    ss.timed_speech(DIALOGUE, wav, lead=0.8, pause=0.7)
    cfg = {
        "capabilities": {"speaker_diarize": {"enabled": True}, "emotion_detect": {"enabled": True}}
    }
    request = PipelineRequest(
        template="transcribe_speakers",
        source=str(wav),
        language="en",
        params={"analyze": False, "max_speakers": 3, "emotion": True},
    )
    done, tasks = await ss.run_on_node(tmp_path, cfg, request)
    assert done.status.value == "completed", [(t.type, t.error) for t in tasks]
    merge = next(t for t in tasks if t.type == "MERGE_TRANSCRIPTION")
    detect = next(t for t in tasks if t.type == "DETECT_EMOTION")
    assert list(detect.depends_on) == [merge.id]
    # an acoustic backend would hear the extracted audio: its path reached the task
    extract = next(t for t in tasks if t.type == "EXTRACT_AUDIO")
    assert detect.payload["audio_path"] == extract.result["audio_path"]
    assert detect.result["backend"] == "nrc-emotion-lexicon"
    labelled = detect.result["segments"]
    print("\n" + "\n".join(f"{s['speaker_id']} {s['emotion']} {s['text']}" for s in labelled))
    assert len(labelled) == len(merge.result["segments"])
    # every turn that says something emotional gets its speaker's emotion (whisper may add a
    # short filler such as "Thank you." in a pause: that one is neutral). Whisper may also cut
    # a turn into its sentences, and each segment is labelled on its own ("I hate this terrible
    # mess." alone reads as sadness): the angry speaker's labels are negative, mostly anger.
    by_speaker: dict[str, list[str]] = {}
    for seg in labelled:
        if seg["emotion"] != "neutral":
            by_speaker.setdefault(seg["speaker_id"], []).append(seg["emotion"])
    assert set(by_speaker) == {"SPEAKER_00", "SPEAKER_01"}
    assert set(by_speaker["SPEAKER_00"]) == {"joy"}
    assert set(by_speaker["SPEAKER_01"]) <= {"anger", "sadness", "disgust", "fear"}
    assert Counter(by_speaker["SPEAKER_01"]).most_common(1)[0][0] == "anger"
    assert sum(s["emotion"] != "neutral" for s in labelled) >= len(DIALOGUE)


# --- onnx-emotion: an exported audio-classification model ------------------------------------


def lag_one_model(directory: Path, labels: dict[str, str] | None) -> Path:
    """A tiny ONNX "emotion" model over the raw waveform, shaped like an optimum export
    (`input_values` [1, samples] -> `logits` [1, 2]): class 0 for low-pitched sound (lag-1
    autocorrelation above 0.9), class 1 for high-pitched. With `labels`, a config.json with
    that `id2label` sits beside it, as an export writes it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: object, dtype: object = np.float32) -> object:
        return numpy_helper.from_array(np.array(value, dtype=dtype), name)

    nodes = [
        helper.make_node("Slice", ["input_values", "zero", "minus_one", "axis"], ["a"]),
        helper.make_node("Slice", ["input_values", "one", "end", "axis"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("ReduceMean", ["ab"], ["r"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["r", "threshold"], ["d"]),
        helper.make_node("Mul", ["d", "gain"], ["low"]),
        helper.make_node("Neg", ["low"], ["high"]),
        helper.make_node("Concat", ["low", "high"], ["logits"], axis=1),
    ]
    inits = [
        const("zero", [0], np.int64),
        const("one", [1], np.int64),
        const("minus_one", [-1], np.int64),
        const("end", [2**62], np.int64),
        const("axis", [1], np.int64),
        const("threshold", 0.9),
        const("gain", 20.0),
    ]
    graph = helper.make_graph(
        nodes,
        "lag_one",
        [helper.make_tensor_value_info("input_values", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    onnx.save(model, str(path))
    if labels is not None:
        (directory / "config.json").write_text(json.dumps({"id2label": labels}))
    return path


def two_tones(path: Path) -> Path:
    """2 s of a 200 Hz tone, then 2 s of a 3 kHz tone (16 kHz mono)."""
    t = np.arange(2 * emotion.RATE) / emotion.RATE
    low, high = np.sin(2 * np.pi * 200 * t), np.sin(2 * np.pi * 3000 * t)
    speech.write_wav(path, (0.4 * np.concatenate([low, high])).astype(np.float32), emotion.RATE)
    return path


async def hear(tmp_path: Path, payload: dict, model: Path | None) -> dict:
    config = {"model_path": str(model)} if model else {}
    ctx = await make_context(
        tmp_path, "DETECT_EMOTION", payload, backend=emotion.ONNX_EMOTION, backend_config=config
    )
    result = (await emotion.DetectEmotionExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


async def test_onnx_model_hears_each_segment(tmp_path: Path) -> None:
    model = lag_one_model(tmp_path / "ser", {"0": "neu", "1": "ang"})
    wav = two_tones(tmp_path / "tones.wav")
    segments = [
        {"start": 0.0, "end": 2.0, "speaker": "SPEAKER_00", "text": "hello"},
        {"start": 2.0, "end": 4.0, "speaker": "SPEAKER_01"},
    ]
    result = await hear(tmp_path, {"audio_path": str(wav), "segments": segments}, model)
    assert result["backend"] == "onnx-emotion" and result["model"] == "model.onnx"
    labelled = result["segments"]
    assert [(s["speaker_id"], s["emotion"]) for s in labelled] == [
        ("SPEAKER_00", "neutral"),
        ("SPEAKER_01", "anger"),
    ]
    assert labelled[0]["text"] == "hello"
    assert all(s["confidence"] > 0.8 for s in labelled)
    assert set(labelled[1]["model_scores"]) == {"neu", "ang"}
    assert set(labelled[1]["scores"]) == set(emotion.EMOTION_SETS["basic"])
    # one window of the file: only the high tone
    one = await hear(tmp_path, {"audio_path": str(wav), "start_sec": 2.5, "end_sec": 3.5}, model)
    assert one["emotion"] == "anger" and one["segments"][0]["end_sec"] == 3.5


async def test_onnx_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    wav = two_tones(tmp_path / "tones.wav")
    payload = {"audio_path": str(wav)}
    with pytest.raises(errors.PermanentError, match="model_path"):
        await hear(tmp_path, payload, None)
    unnamed = lag_one_model(tmp_path / "unnamed", None)  # classes class_0, class_1
    with pytest.raises(errors.PermanentError, match="map to none of"):
        await hear(tmp_path, payload, unnamed)
    model = lag_one_model(tmp_path / "ser", {"0": "calm", "1": "angry"})
    with pytest.raises(errors.PayloadError, match="segment 0"):
        await hear(tmp_path, {**payload, "start_sec": 3.98}, model)


def test_onnx_emotion_is_declared_only_with_a_model(tmp_path: Path) -> None:
    report = probes.run_probes()
    model = lag_one_model(tmp_path / "ser", {"0": "neu", "1": "ang"})

    def emotion_backends(section: dict) -> tuple[list[str], list[declare.Declaration]]:
        cfg = config.parse_config({"capabilities": {"emotion_detect": section}})
        decls = declare.declare(cfg, report, declare.RUNNABLE)
        caps = declare.declared_capabilities(decls)
        return [c.backend for c in caps if c.function is F.EMOTION_DETECT], decls

    auto, decls = emotion_backends({"enabled": True})
    assert "onnx-emotion" not in auto
    why = next(d.reason for d in decls if d.backend == "onnx-emotion")
    assert "providers[].model_path" in why
    configured, _ = emotion_backends(
        {"enabled": True, "providers": [{"backend": "onnx-emotion", "model_path": str(model)}]}
    )
    assert "onnx-emotion" in configured
