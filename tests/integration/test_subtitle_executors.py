"""The subtitle executors one by one on generated media: EXTRACT_SUBTITLE from a multi-track
MKV, FORMAT_SUBTITLE (convert, re-break, re-time), BURN_SUBTITLE styles, BLUR methods, and
DETECT_HARDCODED_SUBTITLE through a vision LLM (a local server speaking the OpenAI protocol)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fredica.domain import errors
from fredica.executors import hardsub, subtitles
from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.media_support import QuietServer, make_context

pytestmark = pytest.mark.slow


async def run(tmp_path: Path, executor: Any, payload: dict[str, Any], **kw: Any) -> dict:
    ctx = await make_context(tmp_path, executor.task_type, payload, **kw)
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ss.require("tesseract")
    return ss.make_video(tmp_path_factory.mktemp("exec") / "v.mp4", seconds=4)


async def test_extract_subtitle_picks_a_track_by_language(tmp_path: Path, video: Path) -> None:
    en, de = tmp_path / "en.srt", tmp_path / "de.srt"
    en.write_text(sf.write_srt([sf.Cue(0.5, 1.5, "Hello"), sf.Cue(2.0, 3.0, "World")]))
    de.write_text(sf.write_srt([sf.Cue(0.5, 1.5, "Hallo"), sf.Cue(2.0, 3.0, "Welt")]))
    mkv = tmp_path / "multi.mkv"
    ss.run_ffmpeg(
        "-i",
        str(video),
        "-i",
        str(en),
        "-i",
        str(de),
        "-map",
        "0",
        "-map",
        "1",
        "-map",
        "2",
        "-c",
        "copy",
        "-c:s",
        "srt",
        "-metadata:s:s:0",
        "language=eng",
        "-metadata:s:s:1",
        "language=ger",
        str(mkv),
    )
    ex = subtitles.ExtractSubtitleExecutor()
    result = await run(
        tmp_path, ex, {"video_path": str(mkv), "language": "ger", "output_format": "vtt"}
    )
    assert [t["language"] for t in result["tracks"]] == ["eng", "ger"]
    assert result["track"]["index"] == 1 and result["format"] == "vtt"
    cues = sf.parse(Path(result["subtitle_path"]).read_text())
    assert [(c.start, c.end, c.text) for c in cues] == [(0.5, 1.5, "Hallo"), (2.0, 3.0, "Welt")]
    first = await run(tmp_path, ex, {"video_path": str(mkv), "output_path": "subs/first.srt"})
    assert sf.parse(Path(first["subtitle_path"]).read_text())[0].text == "Hello"
    ctx = await make_context(tmp_path, "EXTRACT_SUBTITLE", {"video_path": str(video)})
    with pytest.raises(errors.PermanentError, match="no subtitle track"):
        await ex.execute(ctx.task, ctx)


async def test_format_subtitle_converts_rebreaks_and_retimes(tmp_path: Path) -> None:
    src = tmp_path / "raw.srt"
    src.write_text(
        sf.write_srt(
            [
                sf.Cue(
                    0.0, 4.0, "这是一个很长的中文字幕，用来测试断行算法是否正确地处理标点符号。"
                ),
                sf.Cue(3.5, 3.7, "Overlapping and very short cue"),
            ]
        )
    )
    result = await run(
        tmp_path,
        subtitles.FormatSubtitleExecutor(),
        {
            "subtitle_path": str(src),
            "output_format": "ass",
            "max_width": 20,
            "max_lines": 2,
            "min_duration_sec": 1.0,
            "font": "Noto Sans CJK SC",
        },
    )
    text = Path(result["subtitle_path"]).read_text()
    assert "Style: Default,Noto Sans CJK SC," in text
    cues = sf.parse(text)
    assert result["timing"]["overlaps_fixed"] == 1 and result["timing"]["extended"] == 1
    assert result["cue_count"] == len(cues) == 3  # the long CJK cue became two
    assert all(sf.text_width(line) <= 20 for c in cues for line in c.text.split("\n"))
    assert cues[1].end <= cues[2].start and cues[2].duration >= 1.0 - 0.01


async def test_burn_at_the_top_in_a_colour(tmp_path: Path, video: Path) -> None:
    srt = tmp_path / "s.srt"
    srt.write_text(sf.write_srt([sf.Cue(0.0, 4.0, "Top yellow words")]))
    result = await run(
        tmp_path,
        subtitles.BurnSubtitleExecutor(),
        {
            "video_path": str(video),
            "subtitle_path": str(srt),
            "position": "top",
            "colour": "#FFFF00",
            "font_size": 30,
        },
    )
    frame = tmp_path / "f.png"
    ss.run_ffmpeg(
        "-ss",
        "2",
        "-i",
        result["video_path"],
        "-frames:v",
        "1",
        "-vf",
        "crop=iw:ih*0.25:0:0",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        str(frame),
    )
    data = frame.read_bytes()
    pixels = [data[i : i + 3] for i in range(0, len(data), 3)]
    yellow = sum(1 for r, g, b in pixels if r > 200 and g > 200 and b < 80)
    assert yellow > 300  # the subtitle text is yellow and in the top quarter
    assert result["encoder"] == "libx264" and (result["width"], result["height"]) == (640, 360)


@pytest.mark.parametrize("method", ["gaussian", "pixelate", "solid_fill"])
async def test_blur_methods_hide_burned_text(tmp_path: Path, method: str) -> None:
    hard = ss.make_video(tmp_path / "hard.mp4", seconds=3, text="SECRET CAPTION HERE")
    assert "CAPTION" in ss.ocr_text(hard, 1.5, tmp_path)
    result = await run(
        tmp_path,
        subtitles.BlurSubtitleRegionExecutor(),
        {
            "video_path": str(hard),
            "y_top_pct": 0.82,
            "y_bottom_pct": 0.98,
            "blur_method": method,
            "blur_strength": 20,
        },
    )
    text = ss.ocr_text(Path(result["video_path"]), 1.5, tmp_path)
    assert "SECRE" not in text and "CAPTION" not in text, text


async def test_blur_rejects_an_empty_band(tmp_path: Path, video: Path) -> None:
    ctx = await make_context(
        tmp_path,
        "BLUR_SUBTITLE_REGION",
        {"video_path": str(video), "y_top_pct": 0.9, "y_bottom_pct": 0.8},
    )
    with pytest.raises(errors.PayloadError, match="greater than y_top_pct"):
        await subtitles.BlurSubtitleRegionExecutor().execute(ctx.task, ctx)


class VisionServer:
    """OpenAI chat completions: answers the hard-subtitle question with a fixed verdict."""

    def __init__(self, verdict: dict[str, Any]) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                outer.bodies.append(
                    json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                )
                raw = json.dumps(
                    {
                        "choices": [{"message": {"content": json.dumps(verdict)}}],
                        "usage": {"prompt_tokens": 900},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    server = VisionServer({"has_subtitle": True, "y_top_pct": 84, "y_bottom_pct": 96})
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


async def test_detection_asks_a_vision_model_with_the_sampled_frames(
    tmp_path: Path, video: Path, vision: VisionServer
) -> None:
    result = await run(
        tmp_path,
        hardsub.DetectHardcodedSubtitleExecutor(),
        {"video_path": str(video)},
        backend="openai-compatible",
        backend_config={"endpoint": vision.url, "model": "vision-model"},
    )
    assert result["detection_method"] == "vision_llm" and result["has_subtitle"] is True
    assert result["region"] == {"y_top_pct": 0.84, "y_bottom_pct": 0.96}  # percent -> fraction
    content = vision.bodies[0]["messages"][-1]["content"]
    images = [part for part in content if part["type"] == "image_url"]
    assert len(images) == 8 and content[0]["type"] == "text"
    assert "hard subtitle" in content[0]["text"] and "y_top_pct" in content[0]["text"]
    png = base64.b64decode(images[0]["image_url"]["url"].split(",", 1)[1])
    assert png.startswith(b"\x89PNG")
