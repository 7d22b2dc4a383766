"""transcribe_long wall time against another checkout of fredica, in the same session.

    python -m bench.chunk_speed --peer /path/to/other/checkout/src [--rounds 5] [--chunk 30]

The English talk's first `--sentences` sentences (32: about 3 minutes) are spoken into a WAV,
and each side runs `transcribe_long` on it through a real node (2 slots, language en, no
analysis) in a fresh process per run, the two sides alternating and the order reversed every
other round. Each run's wall time is from creating the pipeline to its end, model loads
included. Reported: every wall time, the medians, the ratio of the medians and its range
over the rounds, and each side's WER against the spoken text. Issue 13 measured it against
the main before that issue (`git worktree add /tmp/old b4ab3cb`, then `--peer /tmp/old/src`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"


async def _one(wav: str, chunk: float) -> dict[str, Any]:
    """One pipeline run with whatever fredica is first on sys.path (this checkout or the
    peer's; older checkouts had `fredica.node.Node` instead of `compose.build_node`)."""
    from fredica.engine.worker import EngineSettings
    from fredica.pipelines.request import PipelineRequest

    data = Path(tempfile.mkdtemp(prefix="fredica-chunk-speed-"))
    engine = EngineSettings(
        node_id="bench", data_dir=data, max_workers=2, poll_interval=0.05,
        idle_poll_interval=0.2, heartbeat_interval=1.0, stale_after=120, reclaim_after=240,
        progress_flush_interval=0.2, shutdown_grace=5,
    )  # fmt: skip
    try:
        from fredica.node import compose
        from fredica.node.service import NodeSettings

        node: Any = compose.build_node(NodeSettings(node_id="bench", data_dir=data, engine=engine))
        get, tasks_of = node.get_pipeline, node.list_tasks
    except ImportError:
        from fredica.node import Node, NodeSettings  # type: ignore[attr-defined,no-redef]

        node = Node(NodeSettings(node_id="bench", data_dir=data, engine=engine))

        async def get(pid: str) -> Any:
            return await node.db.call(node.store.get_pipeline, pid)

        async def tasks_of(pid: str) -> Any:
            return await node.db.call(node.store.list_tasks, pid)

    await node.start()
    try:
        t0 = time.perf_counter()
        request = PipelineRequest(
            template="transcribe_long", source=wav, language="en",
            params={"chunk_duration_sec": chunk, "analyze": False},
        )  # fmt: skip
        pipeline, _ = await node.create_pipeline(request)
        while (p := await get(pipeline.id)).status.value not in (
            "completed", "failed", "cancelled", "partial_failed",
        ):  # fmt: skip
            await asyncio.sleep(0.05)
        wall = time.perf_counter() - t0
        tasks = await tasks_of(pipeline.id)
    finally:
        await node.stop(grace=2)
    merged = next((t.result or {} for t in tasks if t.type == "MERGE_TRANSCRIPTION"), {})
    chunks = sum(1 for t in tasks if t.type == "TRANSCRIBE_CHUNK")
    text = merged.get("text", "")
    return {"status": p.status.value, "wall_s": wall, "chunks": chunks, "text": text}


def _run(src: Path, wav: Path, chunk: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, str(HERE), "--one", str(wav), str(chunk)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"run with {src} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chunk_speed", description=__doc__)
    parser.add_argument("--peer", type=Path, required=True, help="the other checkout's src/")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=float, default=30.0, help="chunk_duration_sec")
    parser.add_argument("--sentences", type=int, default=32)
    args = parser.parse_args(argv)
    if not (args.peer / "fredica").is_dir():
        parser.error(f"--peer: {args.peer} has no fredica package (give a checkout's src/)")
    from bench import talks

    with tempfile.TemporaryDirectory(prefix="fredica-chunk-speed-") as tmp:
        wav, reference = talks.make_talk(Path(tmp) / "talk.wav", "en", limit=args.sentences)
        sides = {"this": SRC, "peer": args.peer.resolve()}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for round_no in range(args.rounds):
            order = list(sides) if round_no % 2 == 0 else list(sides)[::-1]
            for name in order:
                run = _run(sides[name], wav, args.chunk)
                if run["status"] != "completed":
                    raise SystemExit(f"{name}: pipeline {run['status']}")
                runs[name].append(run)
                print(f"round {round_no + 1} {name}: {run['wall_s']:.2f} s", flush=True)
    walls = {name: [r["wall_s"] for r in rs] for name, rs in runs.items()}
    medians = {name: statistics.median(w) for name, w in walls.items()}
    per_round = [p / t for t, p in zip(walls["this"], walls["peer"], strict=True)]
    report = {
        "chunk_duration_sec": args.chunk,
        "sentences": args.sentences,
        "wall_s": {name: [round(w, 2) for w in ws] for name, ws in walls.items()},
        "median_s": {name: round(m, 2) for name, m in medians.items()},
        "speedup": round(medians["peer"] / medians["this"], 2),
        "speedup_per_round": [round(x, 2) for x in per_round],
        "chunks": {name: rs[0]["chunks"] for name, rs in runs.items()},
        "wer_pct": {
            name: round(100 * talks.word_error_rate(reference, rs[0]["text"]), 2)
            for name, rs in runs.items()
        },
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(json.dumps(asyncio.run(_one(sys.argv[2], float(sys.argv[3])))))
    else:
        raise SystemExit(main())
