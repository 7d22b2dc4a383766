"""Transcript quality: transcribe_long at several chunk sizes beside faster-whisper on the whole
file with the same model, on generated talks (English with and without pauses, with three
voices at a faster rate, and 11 minutes long; German with one voice and with two; Spanish;
French on demand).

    python -m bench quality [--chunks 20 30 60 120] [--samples en-pauses de ...] [--workers 2]

For every sample: the word error rate (WER) against the text espeak-ng spoke, and the wall time,
of (a) faster-whisper run once on the whole WAV in this process (model load timed apart) and (b)
the `transcribe_long` pipeline through a real node (SQLite, tasks, chunk splitting, merge) with
`chunk_duration_sec` = each chunk size, given the sample's language. Same model on both sides:
tiny.en for English, the multilingual base for the others. Writes bench/results/quality.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import talks
from fredica.capabilities import packaged_models
from fredica.domain.models import PipelineStatus
from fredica.engine.worker import EngineSettings
from fredica.executors import transcribe
from fredica.node import compose
from fredica.node.service import NodeSettings
from fredica.pipelines.request import PipelineRequest

RESULTS = Path(__file__).resolve().parent / "results"
VOICES_EN = ("en-us", "en-gb-x-rp+f3", "en-gb-scotland+m3")


@dataclass(frozen=True)
class Sample:
    name: str
    language: str
    pauses: bool
    repeat: int = 1
    #: espeak-ng voices taking turns sentence by sentence (empty: the language's one voice)
    voices: tuple[str, ...] = ()
    wpm: int = 150


SAMPLES = {
    s.name: s
    for s in (
        Sample("en-pauses", "en", True),
        Sample("en-runon", "en", False),
        # three speakers (US, British RP female, Scottish) at a brisker rate
        Sample("en-voices", "en", True, voices=VOICES_EN, wpm=170),
        # 11 minutes: the talk twice (repeats are minutes apart, never in one chunk)
        Sample("en-long", "en", True, repeat=2),
        Sample("de", "de", True),
        Sample("de-voices", "de", True, voices=("de+f2", "de+m3"), wpm=140),
        Sample("es", "es", True),
        # espeak-ng's French is hard for the base model (≈ 70 % WER on the whole file): the
        # comparison is noisy there, so it is measured on demand, not by default
        Sample("fr", "fr", True),
    )
}
DEFAULT_SAMPLES = [name for name in SAMPLES if name != "fr"]


def model_for(language: str) -> str:
    return packaged_models.TINY_EN if language == "en" else packaged_models.BASE


def whole_file(wav: Path, language: str) -> dict[str, Any]:
    """faster-whisper once on the whole file (beam 5, the pipeline's compute type and thread
    count)."""
    from faster_whisper import WhisperModel

    name = model_for(language)
    path = packaged_models.materialize(name)
    assert path is not None, f"packaged model {name} missing: make venv"
    loaded = time.perf_counter()
    threads = min(4, os.cpu_count() or 1)
    compute = transcribe.default_compute_type(name, "cpu")  # the pipeline's
    model = WhisperModel(str(path), device="cpu", compute_type=compute, cpu_threads=threads)
    started = time.perf_counter()
    segments, _ = model.transcribe(str(wav), language=language, beam_size=5)
    text = " ".join(s.text.strip() for s in segments)
    return {
        "text": text,
        "seconds": round(time.perf_counter() - started, 2),
        "load_seconds": round(started - loaded, 2),
        "model": name,
    }


async def pipeline(
    wav: Path, work: Path, language: str, chunk_sec: float, workers: int
) -> dict[str, Any]:
    """transcribe_long through a real node; the merged text, wall time and what ran."""
    data = work / f"node-{time.monotonic_ns()}"
    engine = EngineSettings(
        node_id="bench", data_dir=data, max_workers=workers, poll_interval=0.05,
        idle_poll_interval=0.2, heartbeat_interval=1.0, stale_after=120, reclaim_after=240,
        progress_flush_interval=0.2, shutdown_grace=5,
    )  # fmt: skip
    node = compose.build_node(NodeSettings(node_id="bench", data_dir=data, engine=engine))
    await node.start()
    try:
        started = time.perf_counter()
        request = PipelineRequest(
            template="transcribe_long", source=str(wav), language=language,
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
        tasks = await node.list_tasks(created.id)
    finally:
        await node.stop(grace=2)
    merged = next(t for t in tasks if t.type == "MERGE_TRANSCRIPTION").result or {}
    split = next(t for t in tasks if t.type == "SPLIT_AUDIO").result or {}
    chunks = [t for t in tasks if t.type == "TRANSCRIBE_CHUNK"]
    return {
        "text": str(merged.get("text", "")),
        "seconds": round(elapsed, 2),
        "chunks": len(chunks),
        "models": sorted({str((t.result or {}).get("model")) for t in chunks}),
        "split_at": split.get("split_at"),
        "reconciled": len(merged.get("reconciled") or [])
        or merged.get("boundary_duplicates_dropped", 0),
    }


def measure(sample: Sample, work: Path, chunk_sizes: list[float], workers: int) -> dict[str, Any]:
    wav, reference = talks.make_talk(
        work / f"{sample.name}.wav",
        sample.language,
        pauses=sample.pauses,
        repeat=sample.repeat,
        voices=sample.voices,
        wpm=sample.wpm,
    )
    import wave

    with wave.open(str(wav), "rb") as f:
        length = f.getnframes() / f.getframerate()
    whole = whole_file(wav, sample.language)
    row: dict[str, Any] = {
        "sample": sample.name,
        "language": sample.language,
        "voices": list(sample.voices) or [talks.TALKS[sample.language][0]],
        "wpm": sample.wpm,
        "audio_s": round(length, 1),
        "reference_words": len(talks.words(reference)),
        "whole": {**whole, "wer": round(100 * talks.word_error_rate(reference, whole["text"]), 2)},
        "pipeline": {},
    }
    row["whole"].pop("text")
    for chunk_sec in chunk_sizes:
        out = asyncio.run(pipeline(wav, work, sample.language, chunk_sec, workers))
        out["wer"] = round(100 * talks.word_error_rate(reference, out.pop("text")), 2)
        row["pipeline"][f"{chunk_sec:g}"] = out
        print(f"  {sample.name} chunks {chunk_sec:g}s: {out}", flush=True)
    return row


def markdown(doc: dict[str, Any]) -> str:
    sizes = doc["chunk_sizes"]
    head = "| sample | audio | whole-file WER / time | " + " | ".join(
        f"{s:g} s chunks WER / time" for s in sizes
    )
    lines = [head + " |", "|" + "---|" * (3 + len(sizes))]
    for row in doc["rows"]:
        w = row["whole"]
        cells = [
            f"{row['sample']} ({w['model']})",
            f"{row['audio_s']:.0f} s",
            f"{w['wer']:.1f}% / {w['seconds']:.1f} s (+{w['load_seconds']:.1f} s load)",
        ]
        for s in sizes:
            p = row["pipeline"][f"{s:g}"]
            cells.append(f"{p['wer']:.1f}% / {p['seconds']:.1f} s ({p['chunks']} chunks)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__)
    parser.add_argument("--chunks", type=float, nargs="+", default=[20.0, 30.0, 60.0, 120.0])
    parser.add_argument("--samples", nargs="+", choices=sorted(SAMPLES), default=DEFAULT_SAMPLES)
    parser.add_argument("--workers", type=int, default=2, help="the node's max_workers")
    parser.add_argument("--out", type=Path, default=RESULTS / "quality")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fredica-quality-") as tmp:
        for name in args.samples:
            print(f"{name} ...", flush=True)
            rows.append(measure(SAMPLES[name], Path(tmp), args.chunks, args.workers))
    doc = {"chunk_sizes": args.chunks, "workers": args.workers, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    table = markdown(doc)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
