"""Media pipeline overhead: transcribe_long through a real node vs the same work in a script.

    python -m bench.media_overhead [--seconds 60] [--chunk 20] [--repeat 2]

Both sides do the same steps on the same generated speech video, with the same functions:
ffmpeg extracts 16 kHz WAV, Silero VAD finds the pauses, the audio is split into chunk files
(with their context audio), faster-whisper tiny.en (CPU, int8, beam 5, word timestamps)
transcribes every chunk and checks its words against voice activity. The script
(`bench.media_script`, run by hand in a fresh process, its start and imports timed) loads the
model once and runs the chunks one after another; the node runs each step as a
task (SQLite state, VAD and inference in the resident workers, chunks in
parallel up to the backend's max_concurrent). Overhead = node wall time / script wall time - 1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fredica.cli import demo_media
from fredica.domain.models import PipelineStatus
from fredica.engine.worker import EngineSettings
from fredica.executors import audio
from fredica.node import compose
from fredica.node.service import NodeSettings
from fredica.pipelines.request import PipelineRequest

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "We are measuring how much the task system adds to the real work.",
    "Every chunk is transcribed on the processor by a small model.",
    "The results are merged into subtitles at the end.",
)


def make_input(work: Path, seconds: float) -> Path:
    repeats = max(1, round(seconds / 12))
    speech = demo_media.speak(SENTENCES * repeats, work / "speech.wav")
    return demo_media.make_video(speech, work / "bench.mp4")


def direct(video: Path, work: Path, chunk_sec: float) -> float:
    """The pipeline's steps as a plain script run by hand: `python -m bench.media_script` in a
    fresh process (its start and imports count, as the node's worker process pays its own),
    the same functions, the model loaded once, chunks one after another."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "bench.media_script", str(video), str(work), str(chunk_sec)],
        check=True, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    return time.perf_counter() - started


async def pipeline(video: Path, work: Path, chunk_sec: float, workers: int) -> float:
    data = work / f"node-{time.monotonic_ns()}"
    engine = EngineSettings(
        node_id="bench", data_dir=data, max_workers=workers, poll_interval=0.05,
        idle_poll_interval=0.2, heartbeat_interval=1.0, stale_after=60, reclaim_after=120,
        progress_flush_interval=0.2, shutdown_grace=5,
    )  # fmt: skip
    node = compose.build_node(NodeSettings(node_id="bench", data_dir=data, engine=engine))
    await node.start()
    try:
        started = time.perf_counter()
        request = PipelineRequest(
            template="transcribe_long", source=str(video), language="en",
            params={"chunk_duration_sec": chunk_sec, "analyze": False},
        )  # fmt: skip
        created, _ = await node.create_pipeline(request)
        while True:
            p = await node.get_pipeline(created.id)
            if p.status.is_terminal:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        assert p.status is PipelineStatus.COMPLETED, p.status
        return elapsed
    finally:
        await node.stop(grace=2)


def run(seconds: float = 60.0, chunk: float = 600.0, repeat: int = 3) -> dict[str, object]:
    """For `python -m bench`: the script and the pipeline (1 worker) alternately on the same
    input, `repeat` times each, with the seed's default chunk length; the overhead compares the
    medians (single runs of a few seconds vary by tens of percent on a 2-core machine). Same
    work on both sides: extract, split, tiny.en in English (the pipeline is given
    `language: en`, so it runs no detection that the script skips)."""
    with tempfile.TemporaryDirectory(prefix="fredica-bench-") as tmp:
        work = Path(tmp)
        video = make_input(work, seconds)
        length = audio.wav_duration(work / "speech.wav")[0]
        scripts, nodes = [], []
        for _ in range(repeat):
            scripts.append(direct(video, work, chunk))
            nodes.append(asyncio.run(pipeline(video, work, chunk, 1)))
    script, node = statistics.median(scripts), statistics.median(nodes)
    return {
        "pipeline_overhead_pct": round(100 * (node / script - 1), 1),
        "script_s": round(script, 2),
        "pipeline_s": round(node, 2),
        "script_runs_s": [round(x, 2) for x in scripts],
        "pipeline_runs_s": [round(x, 2) for x in nodes],
        "audio_s": round(length, 1),
        "chunk_duration_sec": chunk,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the speech")
    parser.add_argument("--chunk", type=float, default=20.0, help="chunk_duration_sec")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fredica-bench-") as tmp:
        work = Path(tmp)
        video = make_input(work, args.seconds)
        length = audio.wav_duration(work / "speech.wav")[0]
        print(f"input: {length:.1f} s of speech, chunks of <= {args.chunk:g} s")
        rows: dict[str, list[float]] = {"script": [], "node (1 worker)": [], "node (2 workers)": []}
        for _ in range(args.repeat):
            rows["script"].append(direct(video, work, args.chunk))
            rows["node (1 worker)"].append(asyncio.run(pipeline(video, work, args.chunk, 1)))
            rows["node (2 workers)"].append(asyncio.run(pipeline(video, work, args.chunk, 2)))
        base = statistics.median(rows["script"])
        for name, times in rows.items():
            med = statistics.median(times)
            print(f"{name:18} median {med:6.2f} s  ({length / med:5.1f}x realtime)  "
                  f"overhead {100 * (med / base - 1):+6.1f} %")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
