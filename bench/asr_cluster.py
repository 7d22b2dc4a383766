"""Long-file speech recognition on three real nodes against one: `transcribe_long` on a home
cluster of `fredica serve` processes on loopback (embedded SQLite each, one shared secret),
the chunks spread over the nodes that claim them, against the same file on one served node.

    python -m bench --only asr_cluster
    python -m bench.asr_cluster --minutes 10 --rounds 2 --chunk 60

Same file as `asr_speed` (the generated English talk repeated to the length), same model (the
packaged tiny.en in the pipeline's default compute type), language given. One node runs
`max_workers` = the cores; each of the three runs 1 worker: on this machine the three share its
cores, so three nodes cannot be faster here than one with every core, and the run measures the
cost of spreading (chunk files fetched from the owner over HTTP, claims across nodes). The
projection for three machines like this one is computed from the one-node run's own task
times (Amdahl): the part that is not TRANSCRIBE_CHUNK (extract, detect, split, merge, and the
wait between them) stays, and the chunk work divides by the three nodes' slots. Rounds
alternate the order (1 node first, then 3 nodes first, ...); each cluster transcribes a short
warm-up file first, so that the resident workers hold the model, as on nodes that have
transcribed before. Writes bench/results/asr_cluster.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import asr_speed, cluster_runs, talks

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("one", "three")
NODES = {"one": 1, "three": 3}
DEADLINE_S = 1800.0


def _transcribe(url: str, wav: Path, chunk_sec: float) -> dict[str, Any]:
    """One transcribe_long pipeline created on `url`; its wall time, text and task times."""
    body = {
        "template": "transcribe_long",
        "source": str(wav),
        "language": "en",
        "params": {"chunk_duration_sec": chunk_sec, "analyze": False},
    }
    with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
        began = time.perf_counter()
        created = client.post("/api/v1/pipelines", json=body)
        created.raise_for_status()
        pid = created.json()["pipeline_id"]
        end = time.monotonic() + DEADLINE_S
        while True:
            data = client.get(f"/api/v1/pipelines/{pid}").json()
            if data["status"] in ("completed", "failed", "partial_failed", "cancelled"):
                break
            if time.monotonic() > end:
                raise RuntimeError(f"transcribe_long did not finish within {DEADLINE_S:g} s")
            time.sleep(0.1)  # polling the pipeline's status, bounded by the deadline
        wall = time.perf_counter() - began
    if data["status"] != "completed":
        errors = [(t["type"], t.get("error")) for t in data["tasks"] if t.get("error")]
        raise RuntimeError(f"transcribe_long {data['status']}: {errors[:3]}")
    chunks = [t for t in data["tasks"] if t["type"] == "TRANSCRIBE_CHUNK"]
    merged = next(t for t in data["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")
    spans = [(float(t["started_at"]), float(t["completed_at"])) for t in chunks]
    ran_on: dict[str, int] = {}
    for t in chunks:
        ran_on[t["claimed_by"]] = ran_on.get(t["claimed_by"], 0) + 1
    chunk_window = max(e for _, e in spans) - min(s for s, _ in spans)
    return {
        "seconds": round(wall, 2),
        "text": str((merged.get("result") or {}).get("text", "")),
        "chunks": len(chunks),
        "chunk_work_s": round(sum(e - s for s, e in spans), 2),
        "chunk_window_s": round(chunk_window, 2),
        "outside_chunks_s": round(wall - chunk_window, 2),
        "ran_on": sorted(ran_on.values(), reverse=True),
    }


def _one_run(
    work: Path, system: str, wav: Path, warm: Path, chunk_sec: float, cores: int
) -> dict[str, Any]:
    count = NODES[system]
    workers = cores if count == 1 else 1
    with cluster_runs.nodes(work, count, workers) as urls:
        _transcribe(urls[0], warm, min(chunk_sec, 20.0))
        out = _transcribe(urls[0], wav, chunk_sec)
    return {**out, "nodes": count, "workers_per_node": workers}


def run(
    work: Path, minutes: float = 10.0, rounds: int = 2, chunk_sec: float = 60.0
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    wav, reference, length = asr_speed.make_file(work, minutes)
    warm, _ = talks.make_talk(work / "warm.wav", "en", limit=12)
    cores = os.cpu_count() or 1
    per_round: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    order_log: list[list[str]] = []
    for r in range(rounds):
        order = list(SYSTEMS) if r % 2 == 0 else list(reversed(SYSTEMS))
        order_log.append(order)
        for system in order:
            out = _one_run(work / f"r{r + 1}-{system}", system, wav, warm, chunk_sec, cores)
            text = out.pop("text")
            out.update(
                round=r + 1,
                wer=round(100 * talks.word_error_rate(reference, text), 2),
                load_avg=round(os.getloadavg()[0], 2),
            )
            per_round[system].append(out)
            print(f"  round {r + 1} {system}: {out}", flush=True)

    def median(system: str, key: str) -> float:
        return round(statistics.median(float(x[key]) for x in per_round[system]), 2)

    one, three = median("one", "seconds"), median("three", "seconds")
    # three machines like this one, each node with `cores` slots: what is not chunk work
    # stays, the chunk work (measured on one node, one core per chunk) divides by 3 x cores
    outside, work_s = median("one", "outside_chunks_s"), median("one", "chunk_work_s")
    projected = outside + work_s / (3 * cores)
    return {
        "audio_s": round(length, 1),
        "model": f"{asr_speed.MODEL} ({asr_speed.COMPUTE}, cpu), language en given",
        "cores": cores,
        "chunk_duration_sec": chunk_sec,
        "order": order_log,
        "rounds": per_round,
        "medians": {s: {"seconds": median(s, "seconds"), "wer": median(s, "wer")} for s in SYSTEMS},
        "three_vs_one": round(one / three, 3),
        "projection": {
            "outside_chunks_s": outside,
            "chunk_work_s": work_s,
            "three_nodes_s": round(projected, 2),
            "three_vs_one": round(one / projected, 2),
        },
    }


def markdown(doc: dict[str, Any]) -> str:
    m, p = doc["medians"], doc["projection"]
    cores = doc["cores"]
    last = {s: doc["rounds"][s][-1] for s in SYSTEMS}
    lines = [
        f"{doc['audio_s'] / 60:.1f} min of English, {doc['model']}, "
        f"{doc['chunk_duration_sec']:g} s chunks, {cores} cores; medians of "
        f"{len(doc['order'])} alternating rounds (load average per round in asr_cluster.json)",
        "",
        "| system | wall time | WER | chunks per node (last round) |",
        "|---|---|---|---|",
        f"| 1 node, {cores} workers | {m['one']['seconds']:.1f} s | {m['one']['wer']:.2f}% | "
        f"{last['one']['ran_on']} |",
        f"| 3 nodes on this machine, 1 worker each | {m['three']['seconds']:.1f} s | "
        f"{m['three']['wer']:.2f}% | {last['three']['ran_on']} |",
        "",
        f"3 nodes vs 1 on one {cores}-core machine: {doc['three_vs_one']:.2f}× (the three share "
        "its cores). Projected for three such machines, from the 1-node run's task times: "
        f"{p['outside_chunks_s']:.1f} s outside the chunks + {p['chunk_work_s']:.1f} s of chunk "
        f"work / {3 * cores} slots = {p['three_nodes_s']:.1f} s, **{p['three_vs_one']:.2f}× one "
        "node**.",
    ]
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], out: Path = RESULTS / "asr_cluster") -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(markdown(doc))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asr_cluster", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=float, default=60.0, help="chunk_duration_sec")
    parser.add_argument("--out", type=Path, default=RESULTS / "asr_cluster")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.minutes <= 0 or args.chunk < 1:
        parser.error("--rounds >= 1, --minutes > 0 and --chunk >= 1 are required")
    with tempfile.TemporaryDirectory(prefix="fredica-asr-cluster-") as tmp:
        doc = run(Path(tmp), args.minutes, args.rounds, args.chunk)
    write(doc, args.out)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
