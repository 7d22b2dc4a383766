"""DETECT_SCENES (seed 001 §3.4): shot boundaries, a scene timeline JSON and a thumbnail per
scene, with one of the seed's two methods:

- `ffmpeg-scene` (built in): one ffmpeg pass, `select='eq(n,0)+gt(scene,T)'` with
  `metadata=print`, gives the first frame of every shot with its scene score and writes its
  thumbnail;
- `pyscenedetect` (when the `scenedetect` package is installed): PySceneDetect's
  ContentDetector in a child process, then one ffmpeg pass for the thumbnails of the shots it
  found.

`capabilities.ffmpeg.scene_detect.backend` picks the method ("" = pyscenedetect when installed,
else ffmpeg-scene; the payload's `method` wins) and `.threshold` (0-1, lower = more cuts) the
sensitivity. ContentDetector works on its own scale (default 27); the 0-1 threshold maps
linearly onto it (0.4 -> 27). The result records the method that ran.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import ffmpeg, outputs, video
from fredica.executors.base import ExecuteResult
from fredica.executors.context import TaskContext

DETECT_SCENES = "DETECT_SCENES"
DEFAULT_SCENE_THRESHOLD = 0.4
CONTENT_PER_UNIT = 67.5  # ContentDetector threshold per unit of the 0-1 threshold (0.4 -> 27)
METHODS = ("ffmpeg-scene", "pyscenedetect")
_PTS_TIME = re.compile(r"pts_time:\s*(-?\d+(?:\.\d+)?)")
_SCENE_SCORE = re.compile(r"lavfi\.scene_score=(\d+(?:\.\d+)?)")


def pyscenedetect_installed() -> bool:
    return importlib.util.find_spec("scenedetect") is not None


def choose_method(payload: dict[str, Any], config: dict[str, Any]) -> str:
    """The method to run: payload `method`, else the configured one, else auto."""
    wanted = payload.get("method") or config.get("scene_detect_backend") or ""
    if wanted and wanted not in METHODS:
        raise errors.PayloadError(f"payload.method must be one of {', '.join(METHODS)}")
    if wanted == "pyscenedetect" and not pyscenedetect_installed():
        raise errors.ResourceError(
            "pyscenedetect is configured but not installed here (pip install scenedetect-headless)",
            hint="NO_BACKEND",
        )
    if wanted:
        return str(wanted)
    return "pyscenedetect" if pyscenedetect_installed() else "ffmpeg-scene"


def parse_scene_log(lines: list[str]) -> list[tuple[float, float]]:
    """(pts_time, scene_score) of every frame `metadata=print` reported, in order."""
    found: list[tuple[float, float]] = []
    for line in lines:
        if m := _PTS_TIME.search(line):
            found.append((float(m.group(1)), 0.0))
        elif (m := _SCENE_SCORE.search(line)) and found:
            found[-1] = (found[-1][0], float(m.group(1)))
    return found


def scene_timeline(
    cuts: list[tuple[float, float]], duration: float, thumbs: list[Path]
) -> list[dict[str, Any]]:
    """Scenes from the first frame and the cut frames (pure; tested directly)."""
    starts = sorted({round(t, 3) for t, _ in cuts if 0 <= t < duration} | {0.0})
    scores = {round(t, 3): s for t, s in cuts}
    scenes: list[dict[str, Any]] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else round(duration, 3)
        scenes.append(
            {
                "index": i,
                "start_sec": start,
                "end_sec": end,
                "duration_sec": round(end - start, 3),
                "cut_score": round(scores.get(start, 0.0), 3) if i else None,
                "thumbnail_path": str(thumbs[i]) if i < len(thumbs) else None,
            }
        )
    return scenes


def pyscenedetect_cuts(reporter: Any, path: str, threshold: float) -> list[tuple[float, int]]:
    """Child-process entry: (start seconds, start frame) of every shot after the first."""
    from scenedetect import ContentDetector, detect

    reporter.progress(5, "pyscenedetect")
    found = detect(path, ContentDetector(threshold=threshold))
    return [(float(start.seconds), int(start.frame_num)) for start, _ in found[1:]]


class DetectScenesExecutor(video.CachedExecutor):
    """Shot boundaries -> scene timeline with a thumbnail per scene (see the module doc)."""

    task_type = DETECT_SCENES
    capability = "FFMPEG"
    pausable = True

    def _threshold(self, task: models.Task, ctx: TaskContext) -> float:
        configured = ctx.backend_config.get("scene_threshold", DEFAULT_SCENE_THRESHOLD)
        default = float(configured) if isinstance(configured, int | float) else 0.4
        return outputs.payload_number(task.payload, "threshold", default, low=0.01, high=1)

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out_dir = video.target(ctx, task.payload, "output_dir", "scenes")
        inputs = {
            "source": outputs.fingerprint_file(
                await ctx.payload_input(task.payload, "video_path", "input_path")
            ),
            "t": self._threshold(task, ctx),
            "method": choose_method(task.payload, ctx.backend_config),
        }
        return out_dir / "scenes.json", inputs

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = await ctx.payload_input(task.payload, "video_path", "input_path")
        index, inputs = await self.locate(task, ctx)
        threshold, method = inputs["t"], inputs["method"]
        info = await video.video_info(ctx, source)
        duration = float(info.duration_sec or 0)
        if method == "pyscenedetect":
            found = await ctx.run_in_subprocess(
                pyscenedetect_cuts, str(source), threshold * CONTENT_PER_UNIT
            )
            cuts = [(t, 0.0) for t, _ in found]
            expr = "+".join(["eq(n\\,0)"] + [f"eq(n\\,{n})" for _, n in found])
            chain, span = f"select='{expr}'", (50.0, 95.0)
        else:
            expr = f"eq(n\\,0)+gt(scene\\,{threshold:g})"
            chain, span = f"select='{expr}',metadata=print:key=lavfi.scene_score", (0.0, 95.0)
        lines = await self._thumbnails(ctx, source, index.parent, chain, duration, span)
        if method != "pyscenedetect":
            cuts = parse_scene_log(lines)
        thumbs = sorted(index.parent.glob("scene_*.jpg"))
        scenes = scene_timeline(cuts, duration, thumbs)
        result = {
            "scenes": scenes,
            "scene_count": len(scenes),
            "cuts_sec": [s["start_sec"] for s in scenes[1:]],
            "threshold": threshold,
            "method": method,
            "duration_sec": duration,
            "timeline_path": str(index),
            "source_path": str(source),
        }
        return self.done(ctx, index, inputs, result, f"{len(scenes)} scenes ({method})")

    async def _thumbnails(
        self,
        ctx: TaskContext,
        source: Path,
        out_dir: Path,
        chain: str,
        duration: float,
        span: tuple[float, float],
    ) -> list[str]:
        """One ffmpeg pass writing the selected frames as scene_NNNN.jpg; its log lines."""
        lines: list[str] = []
        tmp = video.fresh_dir(out_dir)
        try:
            await ffmpeg.run(
                ctx,
                ["-i", str(source), "-an", "-filter:v", f"{chain},scale=240:-2",
                 "-fps_mode", "vfr", "-q:v", "4", str(tmp / "scene_%04d.jpg")],
                what=f"detecting scenes in {source}",
                duration_sec=duration,
                span=span,
                note="scene thumbnails",
                on_stderr_line=lines.append,
            )  # fmt: skip
            video.swap_dir(tmp, out_dir)
        finally:
            video.discard_dir(tmp)
        return lines
