"""Long-file speech recognition speed: fredica `transcribe_long` on one node beside the tool a
user would otherwise pick on one machine, faster-whisper's `BatchedInferencePipeline`, and plain
`WhisperModel.transcribe`.

    python -m bench --only asr_speed            # 10-minute file, 3 alternating rounds
    python -m bench.asr_speed --minutes 10 --rounds 3 --chunk 60

Same file (a generated English talk, espeak-ng, repeated to the length, with its reference
text), same model (the packaged tiny.en in the pipeline's default compute type,
`transcribe.default_compute_type`: float32 on the CPU), same machine, one process after the
other. Rounds alternate the order (round 1 fredica, batched, plain; round 2 reversed; ...), so
slow drift of a shared machine favours no system; each system's wall time and WER are medians
over rounds. The peers load the model once before the rounds (load timed apart) and use
`cpu_threads` = the machine's cores; fredica runs a real node (SQLite, tasks, VAD split at
`--chunk` s, resident inference workers, merge) with max_workers = the cores, after one
warm-up pipeline on a short file so that its resident workers have the model loaded, as on a
node that has transcribed before. The load average is recorded beside every round.
Writes bench/results/asr_speed.{json,md} (and, through the harness, its only-asr_speed files).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

from bench import quality, talks
from fredica.capabilities import packaged_models
from fredica.executors import transcribe

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("fredica", "batched", "plain")
MODEL = packaged_models.TINY_EN
COMPUTE = transcribe.default_compute_type(MODEL, "cpu")  # the pipeline's default
BEAM = 5


def make_file(work: Path, minutes: float) -> tuple[Path, str, float]:
    """(WAV, reference, seconds): the English talk repeated to at least `minutes`."""
    one, _ = talks.make_talk(work / "one.wav", "en")
    with wave.open(str(one), "rb") as f:
        seconds = f.getnframes() / f.getframerate()
    repeat = max(1, int(-(-minutes * 60 // seconds)))
    wav, reference = talks.make_talk(work / f"talk-{minutes:g}min.wav", "en", repeat=repeat)
    with wave.open(str(wav), "rb") as f:
        length = f.getnframes() / f.getframerate()
    return wav, reference, length


class Peers:
    """faster-whisper in this process: the model loaded once, plain and batched."""

    def __init__(self) -> None:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        path = packaged_models.materialize(MODEL)
        assert path is not None, f"packaged model {MODEL} missing: make venv"
        began = time.perf_counter()
        self.threads = os.cpu_count() or 1
        self.model = WhisperModel(
            str(path), device="cpu", compute_type=COMPUTE, cpu_threads=self.threads
        )
        self.batched = BatchedInferencePipeline(model=self.model)
        self.load_s = round(time.perf_counter() - began, 2)
        self.batch_size = 8

    def plain(self, wav: Path) -> str:
        segments, _ = self.model.transcribe(str(wav), language="en", beam_size=BEAM)
        return " ".join(s.text.strip() for s in segments)

    def batch(self, wav: Path) -> str:
        segments, _ = self.batched.transcribe(
            str(wav), language="en", beam_size=BEAM, batch_size=self.batch_size
        )
        return " ".join(s.text.strip() for s in segments)


def run(
    work: Path, minutes: float = 10.0, rounds: int = 3, chunk_sec: float = 60.0
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    wav, reference, length = make_file(work, minutes)
    cores = os.cpu_count() or 1
    peers = Peers()
    # warm-up: a short pipeline, so fredica's resident workers hold the model (as they do on a
    # node that has transcribed before); the peers' model is loaded above, timed apart
    short, _ = talks.make_talk(work / "warm.wav", "en", limit=2)
    warm = asyncio.run(quality.pipeline(short, work, "en", chunk_sec, cores))
    per_round: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    order_log: list[list[str]] = []
    for r in range(rounds):
        order = list(SYSTEMS) if r % 2 == 0 else list(reversed(SYSTEMS))
        order_log.append(order)
        for system in order:
            began = time.perf_counter()
            extra: dict[str, Any] = {}
            if system == "fredica":
                out = asyncio.run(quality.pipeline(wav, work, "en", chunk_sec, cores))
                text = out.pop("text")
                extra = {k: out[k] for k in ("chunks", "models", "split_at")}
            elif system == "batched":
                text = peers.batch(wav)
            else:
                text = peers.plain(wav)
            seconds = time.perf_counter() - began
            wer = 100 * talks.word_error_rate(reference, text)
            row = {
                "round": r + 1,
                "seconds": round(seconds, 2),
                "wer": round(wer, 2),
                "load_avg": round(os.getloadavg()[0], 2),
                **extra,
            }
            per_round[system].append(row)
            print(f"  round {r + 1} {system}: {row}", flush=True)
    medians = {
        s: {
            "seconds": round(statistics.median(x["seconds"] for x in rows), 2),
            "wer": round(statistics.median(x["wer"] for x in rows), 2),
            "realtime_x": round(length / statistics.median(x["seconds"] for x in rows), 1),
        }
        for s, rows in per_round.items()
    }
    f = medians["fredica"]["seconds"]
    return {
        "audio_s": round(length, 1),
        "reference_words": len(talks.words(reference)),
        "model": f"{MODEL} ({COMPUTE}, cpu), language en given",
        "beam_size": BEAM,
        "cores": cores,
        "fredica": {
            "chunk_duration_sec": chunk_sec,
            "max_workers": cores,
            "warm_up_s": warm["seconds"],
        },
        "peers": {
            "cpu_threads": peers.threads,
            "batch_size": peers.batch_size,
            "model_load_s": peers.load_s,
        },
        "order": order_log,
        "rounds": per_round,
        "medians": medians,
        # > 1: fredica is faster (time of the peer / time of fredica)
        "speed_vs_batched": round(medians["batched"]["seconds"] / f, 3),
        "speed_vs_plain": round(medians["plain"]["seconds"] / f, 3),
        "wer_minus_batched": round(medians["fredica"]["wer"] - medians["batched"]["wer"], 2),
        "wer_minus_plain": round(medians["fredica"]["wer"] - medians["plain"]["wer"], 2),
    }


def markdown(doc: dict[str, Any]) -> str:
    m = doc["medians"]
    lines = [
        f"{doc['audio_s'] / 60:.1f} min of English, {doc['model']}, beam {doc['beam_size']}, "
        f"{doc['cores']} cores; medians of {len(doc['order'])} alternating rounds "
        f"(load average per round in asr_speed.json)",
        "",
        "| system | wall time | × real time | WER |",
        "|---|---|---|---|",
    ]
    names = {
        "fredica": f"fredica transcribe_long, 1 node, {doc['fredica']['chunk_duration_sec']:g} s "
        f"chunks, {doc['fredica']['max_workers']} workers",
        "batched": f"faster-whisper BatchedInferencePipeline (batch {doc['peers']['batch_size']})",
        "plain": "faster-whisper WhisperModel.transcribe",
    }
    for s in SYSTEMS:
        lines.append(
            f"| {names[s]} | {m[s]['seconds']:.1f} s | {m[s]['realtime_x']:.1f} | "
            f"{m[s]['wer']:.2f}% |"
        )
    lines.append("")
    lines.append(
        f"fredica speed vs batched {doc['speed_vs_batched']:.2f}×, vs plain "
        f"{doc['speed_vs_plain']:.2f}× (> 1: fredica faster); WER difference vs batched "
        f"{doc['wer_minus_batched']:+.2f} points, vs plain {doc['wer_minus_plain']:+.2f}"
    )
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], out: Path = RESULTS / "asr_speed") -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(markdown(doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asr_speed", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=float, default=60.0, help="fredica's chunk_duration_sec")
    parser.add_argument("--out", type=Path, default=RESULTS / "asr_speed")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.minutes <= 0 or args.chunk < 1:
        parser.error("--rounds >= 1, --minutes > 0 and --chunk >= 1 are required")
    with tempfile.TemporaryDirectory(prefix="fredica-asr-speed-") as tmp:
        doc = run(Path(tmp), args.minutes, args.rounds, args.chunk)
    write(doc, args.out)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
