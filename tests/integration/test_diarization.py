"""DIARIZE_AUDIO on generated dialogues with known turns: the speaker count and the diarization
error rate (DER = missed + false alarm + confusion over the true speech, with the best mapping
of found speakers to true voices, 10 ms frames, no collar), for every backend offered."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from fredica.executors import speech, voice_encoder
from tests import subtitle_support as ss
from tests.media_support import make_context

pytestmark = pytest.mark.slow

MALE, FEMALE, KLATT = "en-us", "en-us+f3", "en-us+klatt"
SENTENCES = [
    "Good morning, and welcome to the show about home media clusters.",
    "Thank you, it is a pleasure to be here today.",
    "Tell me how the machines share the work between them.",
    "Every machine takes the tasks it is best at, and the results come back in order.",
    "What happens when one of them goes away in the middle of a job?",
    "Another node picks the task up again after a short while.",
    "And that is all for this week, goodbye.",
    "Goodbye everyone.",
]
DIALOGUES = {
    "two voices": [(MALE if i % 2 == 0 else FEMALE, s) for i, s in enumerate(SENTENCES[:6])],
    "three voices": [((MALE, FEMALE, KLATT)[i % 3], s) for i, s in enumerate(SENTENCES[:6])]
    + [(KLATT, SENTENCES[6]), (MALE, SENTENCES[7])],
}
BACKENDS = [speech.DIARIZE_RESEMBLYZER, speech.DIARIZE_BUILTIN]
MAX_DER = 0.15


@pytest.fixture(scope="module")
def dialogues(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list]]:
    d = tmp_path_factory.mktemp("dialogues")
    out = {}
    for name, lines in DIALOGUES.items():
        wav = d / f"{name.replace(' ', '_')}.wav"
        out[name] = (wav, ss.timed_speech(lines, wav, lead=1.0, pause=0.7))
    return out


def der(truth: list, segments: list[dict], frames: int) -> tuple[float, float, float, float]:
    """(DER, missed, false alarm, confusion) as shares of the true speech."""
    voices = sorted({voice for _, _, voice, _ in truth})
    speakers = sorted({s["speaker"] for s in segments})
    ref, hyp = np.full(frames, -1), np.full(frames, -1)
    for start, end, voice, _ in truth:
        ref[round(start * 100) : round(end * 100)] = voices.index(voice)
    for s in segments:
        hyp[round(s["start_sec"] * 100) : round(s["end_sec"] * 100)] = speakers.index(s["speaker"])
    overlap = np.array(
        [
            [np.sum((ref == i) & (hyp == j)) for j in range(len(speakers))]
            for i in range(len(voices))
        ]
    )
    rows, cols = linear_sum_assignment(-overlap) if speakers else ([], [])
    total = np.sum(ref >= 0)
    missed = np.sum((ref >= 0) & (hyp < 0))
    false_alarm = np.sum((ref < 0) & (hyp >= 0))
    confusion = np.sum((ref >= 0) & (hyp >= 0)) - overlap[rows, cols].sum()
    return tuple(
        float(x / total) for x in (missed + false_alarm + confusion, missed, false_alarm, confusion)
    )  # type: ignore[return-value]


def test_der_counts_every_kind_of_error() -> None:
    truth = [(0.0, 1.0, "a", ""), (1.0, 2.0, "b", "")]
    right = [{"speaker": "S1", "start_sec": 0.0, "end_sec": 1.0},
             {"speaker": "S0", "start_sec": 1.0, "end_sec": 2.0}]  # fmt: skip
    assert der(truth, right, 300)[0] == 0.0
    one = [{"speaker": "S0", "start_sec": 0.0, "end_sec": 2.0}]
    assert der(truth, one, 300) == pytest.approx((0.5, 0.0, 0.0, 0.5))
    late = [{"speaker": "S0", "start_sec": 0.5, "end_sec": 2.5}]
    assert der(truth, late, 300) == pytest.approx((0.75, 0.25, 0.25, 0.25))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(DIALOGUES))
async def test_dialogue_speaker_count_and_der(
    tmp_path: Path, dialogues: dict[str, tuple[Path, list]], name: str, backend: str
) -> None:
    wav, truth = dialogues[name]
    ctx = await make_context(
        tmp_path,
        "DIARIZE_AUDIO",
        {"audio_path": str(wav), "min_speakers": 0, "max_speakers": 0},
        backend=backend,
    )
    result = (await speech.DiarizeAudioExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    with wave.open(str(wav), "rb") as w:
        frames = int(w.getnframes() / w.getframerate() * 100) + 1
    error, missed, false_alarm, confusion = der(truth, result["segments"], frames)
    voices = len({voice for _, _, voice, _ in truth})
    print(
        f"\n{backend} on {name}: {result['num_speakers']} speakers (true {voices}), DER "
        f"{error:.1%} (missed {missed:.1%}, false alarm {false_alarm:.1%}, confusion "
        f"{confusion:.1%})"
    )
    assert result["backend"] == backend
    expected_model = voice_encoder.MODEL if backend == speech.DIARIZE_RESEMBLYZER else None
    assert result["model"] == expected_model
    assert result["num_speakers"] == voices
    assert error <= MAX_DER


async def test_one_voice_is_one_speaker_with_the_encoder(
    tmp_path: Path, dialogues: dict[str, tuple[Path, list]]
) -> None:
    wav = tmp_path / "mono.wav"
    ss.timed_speech([(MALE, s) for s in SENTENCES[:4]], wav)
    ctx = await make_context(
        tmp_path, "DIARIZE_AUDIO", {"audio_path": str(wav), "max_speakers": 4},
        backend=speech.DIARIZE_RESEMBLYZER,
    )  # fmt: skip
    result = (await speech.DiarizeAudioExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["num_speakers"] == 1


def test_the_numpy_encoder_reproduces_the_trained_network(tmp_path: Path) -> None:
    """The port is checked against what the weights must do: unit-norm embeddings, one voice
    saying two sentences closer than two voices saying the same sentence."""
    encoder = voice_encoder.VoiceEncoder()
    texts = ("The quick brown fox jumps over the lazy dog.", "Every chunk is transcribed in order.")
    embeds = {}
    for voice in (MALE, FEMALE):
        for i, text in enumerate(texts):
            raw = tmp_path / f"{voice}_{i}.wav"
            ss.speak(text, raw, voice)
            out = tmp_path / f"{voice}_{i}.s16le"
            ss.run_ffmpeg("-i", str(raw), "-ac", "1", "-ar", "16000", "-f", "s16le", str(out))
            samples = np.fromfile(out, dtype="<i2").astype(np.float32) / 32768.0
            mel = voice_encoder.mel_spectrogram(voice_encoder.normalise_volume(samples))
            embeds[voice, i] = encoder.embed(mel[None, : voice_encoder.PARTIAL_FRAMES])[0]
    for e in embeds.values():
        assert np.linalg.norm(e) == pytest.approx(1.0, abs=1e-5)
        assert np.all(e >= 0)  # after the ReLU
    same = [float(embeds[v, 0] @ embeds[v, 1]) for v in (MALE, FEMALE)]
    cross = [float(embeds[MALE, i] @ embeds[FEMALE, i]) for i in range(2)]
    print(f"\nsame-voice cosine {same}, cross-voice cosine {cross}")
    assert min(same) > max(cross) + 0.1
