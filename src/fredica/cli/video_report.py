"""What `fredica process` prints for the video tasks of a pipeline: on-screen text by time,
objects by label and time, scenes, thumbnails, fingerprints and transcodes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _t(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    s = float(seconds)
    return f"{int(s) // 60:02d}:{s % 60:04.1f}"


def _result(by_type: dict[str, list[dict[str, Any]]], task_type: str) -> dict[str, Any] | None:
    task = next(iter(by_type.get(task_type, [])), None)
    return task.get("result") if task else None


def print_video_results(console: Console, by_type: dict[str, list[dict[str, Any]]]) -> None:
    """Print every video result present in `by_type` (tasks grouped by type)."""
    frames = _result(by_type, "EXTRACT_FRAMES")
    for batch_type in ("OCR_FRAME_BATCH", "DETECT_FRAME_BATCH"):
        if frames and by_type.get(batch_type):
            console.print(
                f"EXTRACT_FRAMES: {frames['frame_count']} frames at {frames['fps']:g} fps -> "
                f"{len(by_type[batch_type])} {batch_type} task(s)"
            )
    ocr = _result(by_type, "MERGE_OCR_RESULTS")
    if ocr:
        table = Table("start", "end", "on-screen text", title="OCR")
        for span in ocr["spans"]:
            table.add_row(_t(span["start_sec"]), _t(span["end_sec"]), span["text"])
        console.print(table)
        console.print(f"TXT  {ocr['text_path']}")
    detected = _result(by_type, "MERGE_DETECT_RESULTS")
    if detected:
        table = Table("label", "from", "to", "frames", "max conf", title="objects")
        for track in detected["tracks"]:
            table.add_row(
                track["label"],
                _t(track["start_sec"]),
                _t(track["end_sec"]),
                str(track["frames"]),
                f"{track['max_confidence']:.2f}",
            )
        console.print(table)
    scenes = _result(by_type, "DETECT_SCENES")
    if scenes:
        cuts = ", ".join(_t(c) for c in scenes["cuts_sec"]) or "none"
        console.print(
            f"scenes: {scenes['scene_count']} (cuts at {cuts}) -> {scenes['timeline_path']}"
        )
    thumbs = _result(by_type, "GENERATE_THUMBNAIL")
    if thumbs:
        console.print(
            f"cover  {thumbs['cover_path']}\nsprite {thumbs['sprite_path']} "
            f"({thumbs['sprite_columns']}x{thumbs['sprite_rows']})"
        )
    fingerprint = _result(by_type, "FINGERPRINT_VIDEO")
    if fingerprint:
        console.print(
            f"fingerprint: {fingerprint['hash_count']} frame hashes "
            f"({fingerprint['algorithm']}) -> {fingerprint['fingerprint_path']}"
        )
    encoded = _result(by_type, "TRANSCODE")
    if encoded:
        console.print(
            f"transcoded with {encoded['encoder']} ({encoded['backend']}): "
            f"{encoded['size_bytes']} bytes -> {encoded['output_path']}"
        )
    upscaled = _result(by_type, "UPSCALE_VIDEO")
    if upscaled:
        model = f", model {upscaled['model']}" if upscaled.get("model") else ""
        console.print(
            f"upscaled x{upscaled['scale']} ({upscaled['backend']}{model}): "
            f"{upscaled['source_width']}x{upscaled['source_height']} -> "
            f"{upscaled['width']}x{upscaled['height']} -> {upscaled['output_path']}"
        )
