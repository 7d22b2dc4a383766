"""The cloud ASR backend's pure parts and its declaration and selection: answers of the OpenAI
transcription protocol mapped to the local result shape, a node without the key declares
nothing, and the scheduler honours cloud_preference and cloud_policy for it."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from fredica.capabilities import catalog, scoring
from fredica.config import schema as config
from fredica.domain import errors, models
from fredica.engine import backends, declare
from fredica.executors import cloud_asr, cues
from tests.unit.test_probes import FakeMachine, declared, reason

F = catalog.CapabilityFunction
CP = models.CloudPreference


# --- the answer ---------------------------------------------------------------------------------


def test_words_get_their_spaces_and_punctuation_back_from_the_text() -> None:
    text = " Well, today there are dams. So?"
    words = [{"word": w, "start": i, "end": i + 1} for i, w in
             enumerate(["Well", "today", "there", "are", "dams", "So"])]  # fmt: skip
    out = cloud_asr.spaced_words(text, words)
    assert [w["word"] for w in out] == [" Well,", " today", " there", " are", " dams.", " So?"]
    assert "".join(w["word"] for w in out) == text  # joined, they are the text again
    assert [w["start"] for w in out] == [0, 1, 2, 3, 4, 5]  # times untouched
    # "a" is found as a word, not inside "say"; a word the text lacks keeps its spelling
    said = [{"word": w} for w in ("I", "say", "a", "ten", "word")]
    out = cloud_asr.spaced_words(" I say a word", said)
    assert [w["word"] for w in out] == [" I", " say", " a", " ten", " word"]
    # CJK: no spaces, no word boundaries between characters
    out = cloud_asr.spaced_words("今天天气很好。", [{"word": w} for w in ("今天", "天气", "很好")])
    assert [w["word"] for w in out] == ["今天", "天气", "很好。"]
    assert cues.join_words([w["word"] for w in out]) == "今天天气很好。"


def test_top_level_words_are_assigned_to_their_segments() -> None:
    segments = [{"start": 0.0, "end": 2.0}, {"start": 2.5, "end": 4.0}]
    timed = (("b", 2.6, 3.0), ("a", 0.1, 0.5), ("gap", 2.1, 2.3), ("late", 4.1, 4.2))
    words = [{"word": w, "start": s, "end": e} for w, s, e in timed]
    buckets = cloud_asr.assign_words(segments, words)
    assert [[w["word"] for w in b] for b in buckets] == [["a", "gap"], ["b", "late"]]


def test_a_verbose_answer_becomes_the_local_result_shape() -> None:
    body = {
        "language": "english", "duration": 4.02, "text": "Hello, world. Bye.",
        "segments": [
            {"id": 0, "start": 0.5, "end": 1.9, "text": " Hello, world.", "avg_logprob": -0.21,
             "no_speech_prob": 0.01, "tokens": [1, 2]},
            {"id": 1, "start": 2.2, "end": 4.5, "text": " Bye."},
            {"id": 2, "start": "bad"},
        ],
        "words": [{"word": "Hello", "start": 0.5, "end": 0.9}, {"word": "world", "start": 1.0,
                   "end": 1.9}, {"word": "Bye", "start": 2.2, "end": 4.5}],
    }  # fmt: skip
    rows, timing = cloud_asr.segments_of(body, 4.0)
    assert timing == "segments and words"
    assert [(r["start"], r["end"], r["text"]) for r in rows] == [
        (0.5, 1.9, "Hello, world."),
        (2.2, 4.0, "Bye."),  # clamped to the measured duration
    ]
    assert rows[0]["avg_logprob"] == -0.21 and "tokens" not in rows[0]
    assert [w["word"] for w in rows[0]["words"]] == [" Hello,", " world."]
    assert rows[1]["words"] == [{"start": 2.2, "end": 4.0, "word": " Bye."}]


def test_a_text_only_answer_is_one_segment_spanning_the_audio() -> None:
    rows, timing = cloud_asr.segments_of({"text": " Hello there. "}, 7.5)
    assert rows == [{"start": 0.0, "end": 7.5, "text": "Hello there."}]
    assert timing.startswith("none")
    assert cloud_asr.segments_of({"text": ""}, 7.5) == ([], "none (no speech)")
    assert cloud_asr.text_only("gpt-4o-transcribe")
    assert cloud_asr.text_only("gpt-4o-mini-transcribe")
    assert not cloud_asr.text_only("whisper-1")


@pytest.mark.parametrize(
    ("reported", "code"),
    [("english", "en"), ("German", "de"), ("de", "de"), ("cantonese", "yue"), ("Burmese", "my"),
     ("haitian creole", "ht"), ("", None), (None, None), ("klingon", "klingon")],
)  # fmt: skip
def test_reported_languages_become_whisper_codes(reported: object, code: str | None) -> None:
    assert cloud_asr.language_code(reported) == code


def test_the_request_names_a_language_only_when_known() -> None:
    assert cloud_asr.request_language("auto") is None and cloud_asr.request_language(None) is None
    assert cloud_asr.request_language("zh-yue") == "yue"
    assert cloud_asr.request_language("zh-CN") == "zh"


def test_the_client_takes_key_endpoint_and_model_from_the_node_config_only() -> None:
    client = cloud_asr.Client("groq-whisper-api", {"api_key": "gsk"})
    assert client.url == "https://api.groq.com/openai/v1/audio/transcriptions"
    assert client.model == "whisper-large-v3" and client.limit_bytes == 25 * cloud_asr.MB
    with pytest.raises(errors.AwaitingCredentialError, match="needs an API key"):
        cloud_asr.Client("openai-whisper-api", {"endpoint": "http://x/v1"})
    with pytest.raises(errors.PermanentError, match="needs `endpoint`"):
        cloud_asr.Client("openai-compatible-asr", {})
    local = cloud_asr.Client("openai-compatible-asr", {"endpoint": "http://gpu:8000/v1/",
                             "models": [{"name": "Systran/faster-whisper-small"}]})  # fmt: skip
    assert local.url == "http://gpu:8000/v1/audio/transcriptions" and local.key == ""
    assert local.model == "Systran/faster-whisper-small" and local.limit_bytes is None
    with pytest.raises(errors.PermanentError, match="does not speak"):
        cloud_asr.Client("xunfei-iat-api", {"api_key": "k"})


# --- declaration and selection -----------------------------------------------------------------


def _config(*providers: dict[str, Any], **policy: Any) -> config.WorkerConfig:
    local = {"backend": "faster-whisper", "accelerator": "cpu", "models": ["tiny.en", "base"],
             "max_concurrent": 1}  # fmt: skip
    return config.parse_config(
        {
            "capabilities": {"transcribe": {"providers": [local, *providers]}},
            "cloud_policy": {"transcribe": policy} if policy else {},
        }
    )


def test_a_node_without_the_key_does_not_declare_the_backend() -> None:
    machine = FakeMachine(modules=("faster_whisper",))
    cfg = _config({"backend": "openai-whisper-api"}, {"backend": "groq-whisper-api",
                  "api_key": ""}, {"backend": "openai-compatible-asr"})  # fmt: skip
    decls = declare.declare(cfg, machine.report(), declare.RUNNABLE)
    caps = declared(decls)
    assert {b for f, b in caps if f is F.TRANSCRIBE} == {"faster-whisper"}
    assert reason(decls, F.TRANSCRIBE, "openai-whisper-api") == "missing api_key"
    assert reason(decls, F.TRANSCRIBE, "groq-whisper-api") == "missing api_key"
    assert reason(decls, F.TRANSCRIBE, "openai-compatible-asr") == "missing endpoint"
    # with the key (or, for a server of the operator's, its endpoint) they are declared
    cfg = _config({"backend": "openai-whisper-api", "api_key": "sk", "max_concurrent": 4},
                  {"backend": "openai-compatible-asr", "endpoint": "http://gpu:8000/v1",
                   "model": "Systran/faster-whisper-small"})  # fmt: skip
    decls = declare.declare(cfg, machine.report(), declare.RUNNABLE)
    caps = declared(decls)
    assert reason(decls, F.TRANSCRIBE, "openai-compatible-asr") == (
        "configured: endpoint http://gpu:8000/v1"
    )
    (openai,) = caps[(F.TRANSCRIBE, "openai-whisper-api")]
    assert (openai.models, openai.score, openai.metadata["max_concurrent"]) == (
        ("whisper-1",), 62, "4",
    )  # fmt: skip
    (own,) = caps[(F.TRANSCRIBE, "openai-compatible-asr")]
    assert own.accelerator == catalog.CloudAPI("openai-compatible", "Systran/faster-whisper-small")
    assert own.score == 60 and "http://gpu:8000/v1" not in own.metadata.values()


def test_the_operator_policy_keeps_the_cloud_backend_undeclared() -> None:
    machine = FakeMachine(modules=("faster_whisper",))
    key = {"backend": "openai-whisper-api", "api_key": "sk"}
    decls = declare.declare(_config(key, cloud_allowed=False), machine.report(), declare.RUNNABLE)
    assert reason(decls, F.TRANSCRIBE, "openai-whisper-api") == (
        "cloud_policy.transcribe.cloud_allowed is false"
    )
    decls = declare.declare(
        _config(key, allowed_backends=["groq-whisper-api"]), machine.report(), declare.RUNNABLE
    )
    assert "allowed_backends" in reason(decls, F.TRANSCRIBE, "openai-whisper-api")


def _task(task_type: str, payload: dict[str, Any], preference: CP) -> models.Task:
    now = time.time()
    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(models.Task)}
    values.update(
        id="t", type=task_type, status=models.TaskStatus.PENDING, priority=5, depends_on=[],
        payload=payload, cache_policy=models.CachePolicy.NONE, cloud_preference=preference,
        excluded_nodes=[], retry_count=0, max_retries=0, created_by="n", owner_id="n",
        owner_epoch=0, progress=0, is_paused=False, is_pausable=True, attempt=1,
        cancel_requested=False, change_seq=1, created_at=now, updated_at=now,
    )  # fmt: skip
    return models.Task(**values)


def _selector(cfg: config.WorkerConfig) -> backends.BackendSelector:
    report = FakeMachine(binaries=("ffmpeg",), modules=("faster_whisper",)).report()
    decls = declare.declare(cfg, report, declare.RUNNABLE)
    profile = declare.node_profile(cfg, declare.resolve_hardware(cfg, report))
    return backends.BackendSelector(
        declare.declared_capabilities(decls), profile, {}, backends._backend_configs(cfg)
    )


@pytest.mark.parametrize("task_type", ["TRANSCRIBE_CHUNK", "DETECT_LANGUAGE"])
def test_cloud_preference_decides_and_local_only_never_uses_the_cloud(task_type: str) -> None:
    selector = _selector(_config({"backend": "openai-whisper-api", "api_key": "sk-secret"}))
    payload = {"model_name": "base", "language": "de" if task_type != "DETECT_LANGUAGE" else None}
    chosen = {p: selector.choose(_task(task_type, payload, p), {}, pending=0) for p in CP}
    # the cloud Whisper (62 + 5 for German, large) outscores base on a CPU unless told otherwise
    assert chosen[CP.AUTO].backend == "openai-whisper-api"
    assert chosen[CP.PREFER_CLOUD].backend == "openai-whisper-api"
    assert chosen[CP.CLOUD_ONLY].backend == "openai-whisper-api"
    assert chosen[CP.LOCAL_ONLY].backend == "faster-whisper"
    assert chosen[CP.LOCAL_ONLY].model == "base"
    # the choice records the model that runs, and the executor gets the key from this node
    cloud = chosen[CP.CLOUD_ONLY]
    assert cloud.model == "whisper-1" and "model whisper-1 on cloud_api" in cloud.breakdown
    assert cloud.config["api_key"] == "sk-secret" and "sk-secret" not in cloud.breakdown
    assert "sk-secret" not in str(_task(task_type, payload, CP.CLOUD_ONLY).payload)


def test_without_the_key_cloud_only_work_is_left_to_another_node() -> None:
    selector = _selector(_config({"backend": "openai-whisper-api"}))
    task = _task("TRANSCRIBE_CHUNK", {"model_name": "base", "language": "en"}, CP.CLOUD_ONLY)
    with pytest.raises(errors.ResourceError) as info:
        selector.choose(task, {}, pending=0)
    assert info.value.hint == "NO_BACKEND"
    cloud_types, _ = selector.preference_gates(frozenset({"TRANSCRIBE_CHUNK"}))
    assert cloud_types == frozenset()  # so this node does not even claim it


def test_the_language_modifier_follows_the_model_a_server_names() -> None:
    # a cloud API's own model names run large models; a self-hosted server may say otherwise
    mod = scoring.transcribe_language_modifier
    assert mod("openai-whisper-api", "whisper-1", "en") == 8
    assert mod("openai-compatible-asr", "Systran/faster-whisper-small", "en") == 5
    assert mod("openai-compatible-asr", "large-v3", "ja") == 12
    assert catalog.is_english_only_model("distil-whisper-large-v3-en")


def test_while_one_kind_of_backend_is_busy_only_the_other_kind_of_work_is_claimed() -> None:
    selector = _selector(_config({"backend": "openai-whisper-api", "api_key": "sk"}))
    types = frozenset({"TRANSCRIBE_CHUNK", "DETECT_LANGUAGE", "EXTRACT_AUDIO"})
    asr = frozenset({"TRANSCRIBE_CHUNK", "DETECT_LANGUAGE"})
    assert selector.preference_gates(types) == (asr, None)  # local: everything, cloud: ASR
    # the local faster-whisper (max_concurrent 1) is busy: local_only ASR waits, cloud_only not
    cloud, local = selector.preference_gates(types, {"faster-whisper": 1})
    assert (cloud, local) == (asr, frozenset({"EXTRACT_AUDIO"}))
    cloud, local = selector.preference_gates(types, {"openai-whisper-api": 1})
    assert cloud == frozenset() and local is None
    # a local_only chunk claimed in a race for the busy slot is handed back, not failed as
    # RESOURCE (which would exclude this node, the only one that may run it)
    task = _task("TRANSCRIBE_CHUNK", {"model_name": "base", "language": "en"}, CP.LOCAL_ONLY)
    with pytest.raises(errors.BackendBusy):
        selector.choose(task, {"faster-whisper": 1}, pending=0)


def test_the_operators_cost_cap_keeps_long_chunks_off_the_cloud() -> None:
    priced = {"backend": "openai-whisper-api", "api_key": "sk", "cost_per_unit_usd": 0.006}
    selector = _selector(_config(priced, max_cost_per_task_usd=0.02))
    for seconds, backend in ((120.0, "openai-whisper-api"), (600.0, "faster-whisper")):
        payload = {"model_name": "base", "language": "en", "chunk_duration_sec": seconds}
        choice = selector.choose(_task("TRANSCRIBE_CHUNK", payload, CP.AUTO), {}, pending=0)
        assert choice.backend == backend  # 600 s = $0.036 > $0.02: refused for the cloud
