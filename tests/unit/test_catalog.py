"""The capability model, the backend catalog of seed 001 §3 and the task type table §2.1."""

from __future__ import annotations

import pytest

from fredica.capabilities import catalog, task_types
from fredica.domain import errors

F = catalog.CapabilityFunction
K = catalog.AcceleratorKind
LC = catalog.LanguageClass

# Every backend of the §3 tables, by function.
SEED_BACKENDS: dict[F, set[str]] = {
    F.DOWNLOAD_BILIBILI: {"bilibili-pyutil"},
    F.DOWNLOAD_YOUTUBE: {"youtube-ytdlp"},
    F.DOWNLOAD_HTTP: {"http-aria2c", "http-ytdlp", "http-curl"},
    F.DOWNLOAD_HLS: {"hls-ffmpeg", "hls-ytdlp"},
    F.TRANSCRIBE: {
        "faster-whisper",
        "whisper.cpp",
        "xunfei-iat-api",
        "aliyun-nls-api",
        "volcengine-asr-api",
        "tencent-asr-api",
        "groq-whisper-api",
        "openai-whisper-api",
        "deepgram-api",
        "assemblyai-api",
        "azure-speech-api",
        "google-speech-api",
        "baidu-asr-api",
        "aws-transcribe-api",
    },
    F.AI_ANALYZE: {
        "ollama",
        "lm-studio",
        "deepseek-api",
        "openai-api",
        "anthropic-api",
        "openai-compatible",
    },
    F.FFMPEG: {"ffmpeg-nvenc", "ffmpeg-videotoolbox", "ffmpeg-vaapi", "ffmpeg-cpu"},
    F.TTS: {
        "cosyvoice",
        "gpt-sovits",
        "f5-tts",
        "fish-speech",
        "xtts",
        "kokoro",
        "chattts",
        "edge-tts",
        "bark",
        "piper",
        "elevenlabs-api",
        "xunfei-tts-api",
        "minimax-tts-api",
        "openai-tts-api",
        "fish-audio-api",
        "volcengine-tts-api",
        "aliyun-tts-api",
        "azure-tts-api",
        "google-tts-api",
    },
    F.OCR: {
        "paddleocr-gpu",
        "paddleocr-cpu",
        "rapidocr",
        "surya",
        "easyocr",
        "tesseract",
        "baidu-ocr-api",
        "tencent-ocr-api",
        "aliyun-ocr-api",
        "volcengine-ocr-api",
        "google-vision-api",
        "azure-vision-api",
        "aws-textract-api",
    },
    F.OBJECT_DETECT: {
        "yolo-gpu",
        "rtdetr-gpu",
        "yolo-cpu",
        "yolo-onnx",
        "google-vision-detect-api",
        "azure-vision-detect-api",
        "aws-rekognition-api",
    },
    F.TRANSLATE: {
        "nllb-gpu",
        "nllb-cpu",
        "opus-mt",
        "ollama-translate",
        "deepl-api",
        "google-translate-api",
        "deepseek-translate-api",
        "openai-translate-api",
        "tencent-translate-api",
        "baidu-translate-api",
        "aliyun-translate-api",
    },
    F.SUPER_RESOLUTION: {"realesrgan-gpu", "hat-gpu", "edsr-gpu", "swinir-gpu", "realesrgan-ncnn"},
    F.SPEECH_ENHANCE: {
        "deepfilternet-gpu",
        "deepfilternet-cpu",
        "speechbrain-enhance",
        "demucs-gpu",
        "demucs-cpu",
        "rnnoise",
        "noisereduce",
    },
    F.SPEAKER_DIARIZE: {
        "pyannote-gpu",
        "pyannote-cpu",
        "speechbrain-diarize",
        "nemo-diarize-gpu",
        "resemblyzer-cpu",
        "assemblyai-diarize-api",
        "google-speech-diarize-api",
        "azure-speech-diarize-api",
    },
    F.EMOTION_DETECT: {
        "speechbrain-emotion",
        "speechbrain-emotion-cpu",
        "wav2vec2-emotion",
        "ser-acrnn",
    },
    F.SUBTITLE_SYNC: {"alass", "ffsubsync", "subsync"},
    F.AUDIO_FINGERPRINT: {"chromaprint", "chromaprint-py", "essentia-fingerprint", "acoustid-api"},
}


def test_the_seventeen_functions() -> None:
    assert len(F) == 17
    assert set(SEED_BACKENDS) == set(F)


@pytest.mark.parametrize("function", list(F))
def test_every_seed_backend_is_in_the_catalog(function: F) -> None:
    names = set(catalog.backend_names(function))
    assert SEED_BACKENDS[function] <= names
    # our additions: bilibili via yt-dlp (the Python node has no fredica-pyutil bundle) and the
    # built-in extractive analysis (a default pipeline must finish offline)
    # and the offline subtitle-sync / diarization / TTS backends of the subtitle issue
    # and any server of the OpenAI transcription protocol (openai-compatible-asr)
    # and ffmpeg's non-AI Lanczos scaler for UPSCALE_VIDEO (declared only when configured), the
    # NRC emotion lexicon on the transcript, an exported ONNX emotion model
    ours = {"bilibili-ytdlp", "local-extractive", "builtin-vad-xcorr", "builtin-mfcc-cluster",
            "espeak-ng", "openai-compatible-asr", "ffmpeg-lanczos", "nrc-emotion-lexicon",
            "onnx-emotion"}  # fmt: skip
    assert names - SEED_BACKENDS[function] <= ours


def test_scores_and_defaults_are_sane() -> None:
    for spec in catalog.BACKENDS:
        lo, hi = spec.score_range
        assert 0 <= lo <= hi <= 100, spec
        assert lo <= spec.default_score <= hi, spec
        named_cloud = spec.name.endswith("-api") or spec.name.startswith("openai-compatible")
        assert spec.cloud == named_cloud, spec
        assert spec.cloud == bool(spec.provider) == bool(spec.cost_unit), spec


@pytest.mark.parametrize(
    ("function", "backend", "kind", "lo", "hi"),
    [
        (F.TRANSCRIBE, "xunfei-iat-api", K.CLOUD, 65, 72),
        (F.TRANSCRIBE, "aws-transcribe-api", K.CLOUD, 48, 56),
        (F.AI_ANALYZE, "ollama", K.GPU, 80, 100),
        (F.AI_ANALYZE, "ollama", K.CPU, 20, 40),
        (F.FFMPEG, "ffmpeg-nvenc", K.GPU, 90, 90),
        (F.FFMPEG, "ffmpeg-cpu", K.CPU, 40, 40),
        (F.TTS, "cosyvoice", K.GPU, 88, 95),
        (F.TTS, "edge-tts", K.CPU, 55, 65),
        (F.OCR, "paddleocr-gpu", K.GPU, 88, 95),
        (F.OCR, "tesseract", K.CPU, 35, 45),
        (F.OBJECT_DETECT, "yolo-onnx", K.CPU, 55, 68),
        (F.TRANSLATE, "deepl-api", K.CLOUD, 78, 85),
        (F.SUPER_RESOLUTION, "hat-gpu", K.GPU, 85, 92),
        (F.SPEECH_ENHANCE, "noisereduce", K.CPU, 38, 48),
        (F.SPEAKER_DIARIZE, "assemblyai-diarize-api", K.CLOUD, 68, 76),
        (F.EMOTION_DETECT, "ser-acrnn", K.CPU, 55, 65),
        (F.SUBTITLE_SYNC, "alass", K.CPU, 80, 88),
        (F.AUDIO_FINGERPRINT, "acoustid-api", K.CLOUD, 60, 70),
        (F.DOWNLOAD_BILIBILI, "bilibili-pyutil", K.NETWORK, 70, 70),
        (F.DOWNLOAD_YOUTUBE, "youtube-ytdlp", K.NETWORK, 65, 65),
        (F.DOWNLOAD_HTTP, "http-aria2c", K.NETWORK, 60, 60),
        (F.DOWNLOAD_HTTP, "http-ytdlp", K.NETWORK, 55, 55),
        (F.DOWNLOAD_HLS, "hls-ffmpeg", K.NETWORK, 50, 50),
        (F.DOWNLOAD_HTTP, "http-curl", K.NETWORK, 40, 40),
    ],
)
def test_seed_score_ranges(function: F, backend: str, kind: K, lo: int, hi: int) -> None:
    spec = catalog.spec_for(function, backend, kind)
    assert spec is not None and spec.score_range == (lo, hi)


@pytest.mark.parametrize(
    ("kind", "model", "vram", "score_range", "default"),
    [
        (K.GPU, "large-v3", 12.0, (90, 100), 95),
        (K.GPU, "large-v3", 6.0, (70, 85), 80),
        (K.GPU, "medium", 12.0, (70, 85), 72),
        (K.CPU, "large-v3", None, (30, 50), 45),
        (K.CPU, "medium", None, (30, 50), 38),
        (K.CPU, "small", None, (10, 20), 15),
        (K.CPU, "tiny.en", None, (10, 20), 10),
    ],
)
def test_faster_whisper_rows_by_accelerator_and_model(
    kind: K, model: str, vram: float | None, score_range: tuple[int, int], default: int
) -> None:
    spec = catalog.spec_for(F.TRANSCRIBE, "faster-whisper", kind, model, vram)
    assert spec is not None and (spec.score_range, spec.default_score) == (score_range, default)
    assert catalog.default_score(F.TRANSCRIBE, "faster-whisper", kind, model, vram) == default


def test_openai_tts_hd_row() -> None:
    hd = catalog.spec_for(F.TTS, "openai-tts-api", K.CLOUD, "tts-1-hd")
    std = catalog.spec_for(F.TTS, "openai-tts-api", K.CLOUD, "tts-1")
    assert hd is not None and std is not None
    assert (hd.score_range, std.score_range) == ((65, 75), (58, 68))


def test_language_classes() -> None:
    chinese = {
        "xunfei-iat-api",
        "aliyun-nls-api",
        "volcengine-asr-api",
        "tencent-asr-api",
        "baidu-asr-api",
    }
    whisper = {"faster-whisper", "whisper.cpp", "groq-whisper-api", "openai-whisper-api",
               "openai-compatible-asr"}  # fmt: skip
    english = {"deepgram-api", "assemblyai-api"}
    multi = {"azure-speech-api", "google-speech-api", "aws-transcribe-api"}
    for names, klass in (
        (chinese, LC.CHINESE_CLOUD),
        (whisper, LC.WHISPER),
        (english, LC.ENGLISH_FIRST_CLOUD),
        (multi, LC.MULTILINGUAL_CLOUD),
    ):
        assert {n for n in names if catalog.language_class(F.TRANSCRIBE, n) is klass} == names
    assert catalog.language_class(F.OCR, "paddleocr-cpu") is LC.OCR_PADDLE
    assert catalog.language_class(F.OCR, "surya") is LC.OCR_SURYA_EASYOCR
    assert catalog.language_class(F.OCR, "tesseract") is LC.OCR_TESSERACT
    assert catalog.language_class(F.OCR, "aws-textract-api") is LC.OCR_CLOUD
    assert catalog.language_class(F.AI_ANALYZE, "ollama") is None


def test_voice_clone_column() -> None:
    cloning = {n for n in catalog.backend_names(F.TTS) if catalog.supports_voice_clone(n)}
    assert cloning == {
        "cosyvoice",
        "gpt-sovits",
        "f5-tts",
        "fish-speech",
        "xtts",
        "elevenlabs-api",
        "minimax-tts-api",
        "fish-audio-api",
    }


def test_functions_without_cloud_backends() -> None:
    no_cloud = {f for f in F if not catalog.function_has_cloud(f)}
    assert {F.SUPER_RESOLUTION, F.SPEECH_ENHANCE, F.EMOTION_DETECT, F.SUBTITLE_SYNC} <= no_cloud
    assert catalog.cloud_backend_names(F.AUDIO_FINGERPRINT) == ("acoustid-api",)


@pytest.mark.parametrize(
    ("model", "size"),
    [
        ("large-v3", "large"),
        ("distil-large-v3", "large"),
        ("large-v3-turbo", "large"),
        ("turbo", "large"),
        ("medium.en", "medium"),
        ("small", "small"),
        ("base", "base"),
        ("tiny.en", "tiny"),
        ("custom-finetune", "small"),
    ],
)
def test_whisper_size(model: str, size: str) -> None:
    assert catalog.whisper_size(model) == size


def test_capability_model() -> None:
    gpu = catalog.LocalGPU("RTX 4070", 12282)
    a = catalog.Capability(F.TRANSCRIBE, "faster-whisper", gpu, ("large-v3",), 95, {"x": "1"})
    b = catalog.Capability(F.TRANSCRIBE, "faster-whisper", gpu, ("large-v3",), 95, {"x": "1"})
    assert a == b and len({a, b}) == 1  # hashable despite the metadata dict
    assert gpu.kind is K.GPU and catalog.LocalCPU().kind is K.CPU
    assert catalog.LocalNetwork(None, "CN", False).kind is K.NETWORK
    cloud = catalog.Capability(F.AI_ANALYZE, "openai-api", catalog.CloudAPI("openai", "gpt-4o"))
    assert cloud.is_cloud and not a.is_cloud


# --- task types (§2.1) -----------------------------------------------------------------------

SEED_TASK_FUNCTIONS: dict[str, F | None] = {
    "DOWNLOAD_SUBTITLE": F.DOWNLOAD_BILIBILI,
    "EXTRACT_AUDIO": F.FFMPEG,
    "SPLIT_AUDIO": F.FFMPEG,
    "DETECT_LANGUAGE": F.TRANSCRIBE,
    "TRANSCRIBE_CHUNK": F.TRANSCRIBE,
    "MERGE_TRANSCRIPTION": None,
    "AI_ANALYZE": F.AI_ANALYZE,
    "TRANSCODE": F.FFMPEG,
    "GENERATE_THUMBNAIL": F.FFMPEG,
    "EXTRACT_FRAMES": F.FFMPEG,
    "DETECT_SCENES": F.FFMPEG,
    "OCR_FRAME_BATCH": F.OCR,
    "MERGE_OCR_RESULTS": None,
    "DETECT_FRAME_BATCH": F.OBJECT_DETECT,
    "MERGE_DETECT_RESULTS": None,
    "TRANSLATE_TEXT": F.TRANSLATE,
    "UPSCALE_VIDEO": F.SUPER_RESOLUTION,
    "ENHANCE_AUDIO": F.SPEECH_ENHANCE,
    "DIARIZE_AUDIO": F.SPEAKER_DIARIZE,
    "DETECT_EMOTION": F.EMOTION_DETECT,
    "EXTRACT_SUBTITLE": F.FFMPEG,
    "FORMAT_SUBTITLE": None,
    "SYNC_SUBTITLE": F.SUBTITLE_SYNC,
    "DETECT_HARDCODED_SUBTITLE": F.AI_ANALYZE,
    "BLUR_SUBTITLE_REGION": F.FFMPEG,
    "BURN_SUBTITLE": F.FFMPEG,
    "GENERATE_TTS": F.TTS,
    "FINGERPRINT_AUDIO": F.AUDIO_FINGERPRINT,
    "FINGERPRINT_VIDEO": F.FFMPEG,
    "NETWORK_TEST": None,
}


@pytest.mark.parametrize(("task_type", "function"), list(SEED_TASK_FUNCTIONS.items()))
def test_task_type_table(task_type: str, function: F | None) -> None:
    assert task_types.required_function(task_type, {}) is function


def test_all_task_types_are_listed() -> None:
    assert set(task_types.TASK_TYPES) == {*SEED_TASK_FUNCTIONS, "DOWNLOAD_VIDEO"}
    assert {
        "MERGE_TRANSCRIPTION",
        "MERGE_OCR_RESULTS",
        "MERGE_DETECT_RESULTS",
        "FORMAT_SUBTITLE",
        "NETWORK_TEST",
    } == task_types.ANYWHERE_TASK_TYPES


@pytest.mark.parametrize(
    ("payload", "function"),
    [
        ({"source_platform": "bilibili"}, F.DOWNLOAD_BILIBILI),
        ({"source_platform": "YouTube"}, F.DOWNLOAD_YOUTUBE),
        ({"source_platform": "twitter"}, F.DOWNLOAD_YOUTUBE),
        ({"source_platform": "http"}, F.DOWNLOAD_HTTP),
        ({"source_platform": "hls"}, F.DOWNLOAD_HLS),
        ({"url": "https://www.bilibili.com/video/BV1xx"}, F.DOWNLOAD_BILIBILI),
        ({"url": "https://b23.tv/abc"}, F.DOWNLOAD_BILIBILI),
        ({"url": "https://youtu.be/abc"}, F.DOWNLOAD_YOUTUBE),
        ({"url": "https://cdn.example.com/live/index.m3u8"}, F.DOWNLOAD_HLS),
        ({"source_url": "https://example.com/video.mp4"}, F.DOWNLOAD_HTTP),
    ],
)
def test_download_video_function_follows_the_source_platform(
    payload: dict[str, str], function: F
) -> None:
    assert task_types.required_function("DOWNLOAD_VIDEO", payload) is function


@pytest.mark.parametrize("payload", [{}, {"source_platform": "ftp"}, {"url": "ftp://x/y"}])
def test_unusable_download_payload_is_a_payload_error(payload: dict[str, str]) -> None:
    with pytest.raises(errors.PayloadError):
        task_types.required_function("DOWNLOAD_VIDEO", payload)


def test_unknown_task_type_and_plugin_types() -> None:
    with pytest.raises(errors.PayloadError, match="unknown task type 'NOPE'"):
        task_types.required_function("NOPE")
    assert task_types.required_function("MY_TASK", {}, {"MY_TASK": F.OCR}) is F.OCR
    assert task_types.co_required_functions("DOWNLOAD_VIDEO") == (F.FFMPEG,)
    assert task_types.task_types_for(F.DOWNLOAD_HTTP) == ("DOWNLOAD_VIDEO",)
    assert task_types.task_types_for(F.OCR) == ("OCR_FRAME_BATCH",)


def test_servable_task_types() -> None:
    nas = task_types.servable_task_types([F.DOWNLOAD_HTTP, F.FFMPEG])
    assert {"DOWNLOAD_VIDEO", "EXTRACT_AUDIO", "MERGE_TRANSCRIPTION", "NETWORK_TEST"} <= nas
    assert "TRANSCRIBE_CHUNK" not in nas and "DOWNLOAD_SUBTITLE" not in nas
    download_only = task_types.servable_task_types([F.DOWNLOAD_BILIBILI])
    assert "DOWNLOAD_VIDEO" not in download_only and "DOWNLOAD_SUBTITLE" in download_only
    assert task_types.servable_task_types([]) == task_types.ANYWHERE_TASK_TYPES
