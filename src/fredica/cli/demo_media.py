"""`fredica demo` (media) and `fredica process`: the media pipeline for real, offline.

The demo makes a short video with spoken English on this machine (espeak-ng when installed,
else the small speech sample shipped in `fredica/data/`), muxes it with an ffmpeg test pattern
into an MP4, runs `transcribe_long` on it in a node (started here, or `--node`) with chunks
small enough that the split and the per-chunk spawning are visible, and prints the
transcript, the analysis and where the subtitle files are.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fredica.cli import client as client_mod
from fredica.cli import demo, remote, video_report
from fredica.executors import ffmpeg

DEMO_SENTENCES: tuple[str, ...] = (
    "Welcome to the media demo. This short video was made on your own computer.",
    "The sound is split into pieces, and every piece is turned into text by a small model.",
    "At the end the pieces are joined into subtitles, and a summary is written without any "
    "cloud service.",
)
DEMO_CHUNK_SEC = 8.0
PAUSE_SEC = 0.9  # silence between sentences: where SPLIT_AUDIO prefers to cut
SHIPPED_SAMPLE = Path(__file__).parent.parent / "data" / "demo_speech.ogg"
SETUP_HINT = "run scripts/install-media-deps.sh (apt-get install espeak-ng)"


class MediaSetupError(RuntimeError):
    """A tool the media demo needs is missing."""


def espeak_binary() -> str | None:
    return shutil.which("espeak-ng") or shutil.which("espeak")


def speak(
    sentences: tuple[str, ...] | list[str],
    out: Path,
    pause_sec: float = PAUSE_SEC,
    voice: str = "en-us",
) -> Path:
    """Synthesise `sentences` with espeak-ng (`voice`, e.g. en-us or de) into one WAV, with
    `pause_sec` of silence after each sentence (MediaSetupError without espeak-ng)."""
    exe = espeak_binary()
    if exe is None:
        raise MediaSetupError(f"espeak-ng is not installed: {SETUP_HINT}")
    frames: list[bytes] = []
    params: Any = None
    with tempfile.TemporaryDirectory() as tmp:
        for i, sentence in enumerate(sentences):
            part = Path(tmp) / f"s{i}.wav"
            subprocess.run(
                [exe, "-v", voice, "-s", "150", "-w", str(part), sentence],
                check=True,
                capture_output=True,
            )
            with wave.open(str(part), "rb") as wav:
                params = wav.getparams()
                frames.append(wav.readframes(wav.getnframes()))
                silence = int(params.framerate * pause_sec) * params.sampwidth * params.nchannels
                frames.append(b"\0" * silence)
    out.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(out), "wb") as wav:
        wav.setparams(params)
        wav.writeframes(b"".join(frames))
    return out


def make_video(speech: Path, out: Path, ffmpeg_exe: str | None = None) -> Path:
    """Mux `speech` with a moving test pattern into an H.264/AAC MP4."""
    exe = ffmpeg_exe or ffmpeg.executable()
    subprocess.run(
        [exe, "-hide_banner", "-loglevel", "error", "-y",
         "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10",
         "-i", str(speech), "-shortest",
         "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
         "-c:a", "aac", "-b:a", "64k", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return out


def sample_video(workdir: Path, console: Console | None = None) -> Path:
    """The demo video: espeak-ng speech when available, else the shipped sample."""
    workdir.mkdir(parents=True, exist_ok=True)
    if espeak_binary() is not None:
        speech = speak(DEMO_SENTENCES, workdir / "speech.wav")
        origin = "espeak-ng"
    elif SHIPPED_SAMPLE.is_file():
        speech = SHIPPED_SAMPLE
        origin = f"the shipped sample {SHIPPED_SAMPLE.name} (espeak-ng not installed)"
    else:
        raise MediaSetupError(f"no speech source: {SETUP_HINT}")
    video = make_video(speech, workdir / "demo.mp4")
    if console is not None:
        console.print(
            f"made {video} ({video.stat().st_size // 1024} KiB) with speech from {origin}"
        )
    return video


DEFAULT_DATA_DIR = Path(".data") / "demo"  # relative to where the command runs


@contextlib.contextmanager
def _node(console: Console, data_dir: Path | None, node_url: str | None) -> Iterator[str]:
    if node_url is not None:
        yield node_url
        return
    with contextlib.ExitStack() as stack:
        # outputs (SRT, transcript, analysis) must outlive the command: keep them on disk
        data = (data_dir or DEFAULT_DATA_DIR).resolve()
        data.mkdir(parents=True, exist_ok=True)
        port = demo.free_port()
        console.print(f"starting a node on port {port} (data dir {data}) ...")
        yield stack.enter_context(demo.spawned_node(data, port, data / "media-node.log"))


def with_full_paths(client: Any, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results name files relative to the data dir of the node that ran the task: the ones of
    the node answering become full paths."""
    status = client.request("GET", "/api/v1/status")
    here, data_dir = status["node_id"], Path(status["data_dir"])
    return [
        {**t, "result": full_paths(t["result"], data_dir)}
        if t.get("result") and t.get("claimed_by") == here
        else t
        for t in tasks
    ]


def full_paths(result: Any, data_dir: Path, key: str = "") -> Any:
    """`result` with each relative file path (a `*_path` value, or a value under `files`)
    joined to `data_dir`."""
    if isinstance(result, dict):
        return {
            k: full_paths(v, data_dir, "files_path" if key == "files" else k)
            for k, v in result.items()
        }
    if isinstance(result, list):
        return [full_paths(v, data_dir, key) for v in result]
    if (
        isinstance(result, str)
        and key.endswith("_path")
        and result
        and not Path(result).is_absolute()
    ):
        return str(data_dir / result)
    return result


def _fmt_time(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60:02d}:{s % 60:02d}"


def report(console: Console, client: Any, pipeline_id: str) -> int:
    """Print the outcome of a media pipeline; 0 if it completed, else 1 with the reasons."""
    data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
    tasks = with_full_paths(client, data["tasks"])
    by_type: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        by_type.setdefault(task["type"], []).append(task)
    chunks = by_type.get("TRANSCRIBE_CHUNK", [])
    split = next(iter(by_type.get("SPLIT_AUDIO", [])), None)
    if split and split.get("result"):
        console.print(
            f"SPLIT_AUDIO cut the audio at {split['result']['cut_points']} s -> "
            f"{len(chunks)} TRANSCRIBE_CHUNK task(s)"
        )
    if data.get("detected_language"):
        console.print(f"detected language: [bold]{data['detected_language']}[/bold]")
    merged = next(iter(by_type.get("MERGE_TRANSCRIPTION", [])), None)
    if merged and merged.get("result"):
        result = merged["result"]
        table = Table("start", "end", "text", title="transcript")
        for seg in result["segments"]:
            table.add_row(_fmt_time(seg["start"]), _fmt_time(seg["end"]), seg["text"])
        console.print(table)
        for kind, path in result["files"].items():
            console.print(f"{kind.upper():4} {path}")
    analysis = next(iter(by_type.get("AI_ANALYZE", [])), None)
    if analysis and analysis.get("result"):
        res = analysis["result"]
        console.print(f"[bold]summary[/bold] ({res.get('backend')}): {res.get('summary')}")
        console.print(f"[bold]tags[/bold]: {', '.join(res.get('tags') or [])}")
        for chapter in res.get("chapters") or []:
            console.print(f"  chapter {_fmt_time(chapter['start_sec'])} {chapter['title']}")
    video_report.print_video_results(console, by_type)
    if data["status"] == "completed":
        console.print(f"pipeline {pipeline_id}: [bold green]completed[/bold green]")
        return 0
    console.print(f"pipeline {pipeline_id}: [bold red]{data['status']}[/bold red]")
    for task in tasks:
        if task["status"] in ("failed", "cancelled") and task.get("error"):
            error = client_mod.name_task_ids(task["error"], data)
            console.print(f"  {task['type']}: {task['error_type']}: {error}", highlight=False)
    return 1


def _run(console: Console, node_url: str, body: dict[str, Any], *, owned: bool = False) -> int:
    """Submit `body` to the node and follow it; `owned`: the node was started for this command."""
    client = remote.Client(node_url)
    try:
        return _submit(console, client, node_url, body, remote.follow, owned=owned)
    finally:
        client.http.close()


def _submit(
    console: Console,
    client: Any,
    node_url: str,
    body: dict[str, Any],
    follow: Any,
    *,
    owned: bool = False,
) -> int:
    names = {t["name"] for t in client.request("GET", "/api/v1/templates").get("templates", [])}
    if body["template"] not in names:
        console.print(
            f"[red]the node at {node_url} has no template {body['template']!r} "
            f"(known: {', '.join(sorted(names))}); is fredica.pipelines.media registered?[/red]"
        )
        return 2
    functions = {
        cap.get("function")
        for n in client.request("GET", "/api/v1/nodes").get("nodes", [])
        for cap in n.get("capabilities") or []
    }
    if "AI_ANALYZE" not in functions:
        # without an AI_ANALYZE backend the analysis task could never be claimed
        console.print("[yellow]no node declares AI_ANALYZE: running without the analysis[/yellow]")
        body = {**body, "params": {**body.get("params", {}), "analyze": False}}
    created = client.request("POST", "/api/v1/pipelines", json=body)
    pipeline_id = created["pipeline_id"]
    console.print(f"pipeline {pipeline_id}: {body['template']} on {body['source']}")
    try:
        follow(client, pipeline_id)
    except KeyboardInterrupt:
        return _interrupted(console, client, node_url, pipeline_id, owned)
    console.print()
    return report(console, client, pipeline_id)


INTERRUPTED = 130  # the shell's code for "ended by Ctrl-C"


def _interrupted(
    console: Console, client: Any, node_url: str, pipeline_id: str, owned: bool
) -> int:
    """Ctrl-C while following: say what happens to the pipeline, and return at once."""
    console.print()
    if not owned:
        console.print(
            f"interrupted: pipeline {pipeline_id} keeps running on {node_url}; "
            f"`fredica pipeline show {pipeline_id[:8]} -f --node {node_url}` follows it, "
            f"`fredica pipeline cancel {pipeline_id[:8]} --node {node_url}` stops it",
            soft_wrap=True,
        )
        return INTERRUPTED
    # the node was started for this command and stops with it: cancel the pipeline first so its
    # running tasks end now instead of holding the node's shutdown for the grace period
    client.request("POST", f"/api/v1/pipelines/{pipeline_id}/cancel")
    console.print(
        f"interrupted: pipeline {pipeline_id} was cancelled and the node started for this "
        "command is stopping; run the command again to start over",
        soft_wrap=True,
    )
    return INTERRUPTED


def run_media_demo(console: Console, data_dir: Path | None, node_url: str | None) -> int:
    """Make a sample video, transcribe it with transcribe_long in 2-3 chunks, print it all."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fredica-demo-")))
        try:
            video = sample_video(work, console)
        except (MediaSetupError, subprocess.CalledProcessError) as exc:
            console.print(f"[red]cannot make the demo video: {exc}[/red]")
            return 2
        url = stack.enter_context(_node(console, data_dir, node_url))
        body = {
            "template": "transcribe_long",
            "source": str(video.resolve()),
            "language": "auto",
            "params": {"chunk_duration_sec": DEMO_CHUNK_SEC},
        }
        return _run(console, url, body, owned=node_url is None)
    return 1


def run_process_command(
    console: Console,
    source: str,
    data_dir: Path | None,
    node_url: str | None,
    template: str = "full_process",
    params: dict[str, Any] | None = None,
    options: ProcessOptions | None = None,
) -> int:
    """`fredica process <url-or-file>`: run a media template on a source and print the result."""
    if not source.startswith(("http://", "https://", "file://")):
        path = Path(source).expanduser()
        problem = _source_problem(path)
        if problem:
            console.print(f"[red]error:[/red] {source}: {problem}", highlight=False)
            return 2
        source = str(path.resolve())
    body: dict[str, Any] = {"template": template, "source": source}
    fields = (options or ProcessOptions()).request_fields()
    body["params"] = {**(params or {}), **fields.pop("params", {})}
    if not body["params"]:
        del body["params"]
    body.update(fields)
    with _node(console, data_dir, node_url) as url:
        return _run(console, url, body, owned=node_url is None)


def _source_problem(path: Path) -> str | None:
    if path.is_dir():
        return "is a directory; give one media file (audio or video) or an http(s) URL"
    if not path.exists():
        return "no such file (give a media file path or an http(s) URL)"
    if not path.is_file():
        return "is not a regular file"
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None


@dataclass(frozen=True)
class ProcessOptions:
    """`fredica process --language --model --chunk`."""

    language: str | None = None
    model: str | None = None
    chunk_sec: float | None = None

    def request_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        params: dict[str, Any] = {}
        if self.language:
            fields["language"] = self.language
        if self.model:
            params["model_name"] = self.model
        if self.chunk_sec is not None:
            params["chunk_duration_sec"] = self.chunk_sec
        if params:
            fields["params"] = params
        return fields
