"""The media executors one at a time, for real: ffmpeg on generated speech, faster-whisper
tiny.en in a child process, downloads from a local HTTP server, and the error classes."""

from __future__ import annotations

import shutil
import wave
from pathlib import Path

import pytest
from bench.talks import word_error_rate

from fredica.domain import errors
from fredica.domain.models import CachePolicy
from fredica.executors import audio, download, merge, split, transcribe
from tests.media_support import (
    REFERENCE,
    make_context,
    make_media,
    serve_files,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_media(tmp_path_factory.mktemp("media"))


async def test_extract_audio_writes_16k_mono_wav_and_reuses_it(
    tmp_path: Path, media: tuple[Path, Path]
) -> None:
    speech, video = media
    payload = {"video_path": str(video), "output_path": "audio/m1/audio.wav"}
    ctx = await make_context(
        tmp_path, "EXTRACT_AUDIO", payload, cache_policy=CachePolicy.CHECK_EXISTING
    )
    executor = audio.ExtractAudioExecutor()
    assert await executor.can_skip(ctx.task, ctx) is None
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    with wave.open(result["audio_path"]) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
    with wave.open(str(speech)) as original:
        spoken = original.getnframes() / original.getframerate()
    assert result["duration_sec"] == pytest.approx(spoken, abs=0.1)
    # CHECK_EXISTING: a complete output from the same input is reused ...
    reused = await executor.can_skip(ctx.task, ctx)
    assert reused is not None and reused["reused"] and reused["audio_path"] == result["audio_path"]
    # ... a truncated one is not
    Path(result["audio_path"]).write_bytes(b"RIFF")
    assert await executor.can_skip(ctx.task, ctx) is None


async def test_split_cuts_in_pauses_with_exact_offsets(
    tmp_path: Path, media: tuple[Path, Path]
) -> None:
    speech, _ = media
    payload = {"audio_path": str(speech), "chunk_duration_sec": 5, "output_dir": "chunks/m1"}
    ctx = await make_context(tmp_path, "SPLIT_AUDIO", payload)
    result = (await split.SplitAudioExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    chunks = result["chunks"]
    assert len(chunks) == 3 and result["split_at"] == "vad pause"
    offset = 0.0
    for chunk in chunks:  # each owns <= 5 s, back to back; its file carries context around it
        assert chunk["own_start_sec"] == pytest.approx(offset, abs=0.002)
        assert 0 < chunk["own_end_sec"] - chunk["own_start_sec"] <= 5.0
        assert chunk["start_sec"] <= chunk["own_start_sec"] < chunk["own_end_sec"]
        assert chunk["own_end_sec"] <= chunk["end_sec"] + 0.001
        with wave.open(chunk["path"]) as wav:
            written = wav.getnframes() / wav.getframerate()
        assert written == pytest.approx(chunk["duration_sec"], abs=0.002)
        offset = chunk["own_end_sec"]
    assert offset == pytest.approx(result["total_duration_sec"], abs=0.05)
    # every cut lies in a pause: the audio around it is (near) silent
    with wave.open(str(speech)) as wav:
        rate = wav.getframerate()
        for cut in result["cut_points"]:
            wav.setpos(int((cut - 0.05) * rate))
            frames = wav.readframes(int(0.1 * rate))
            samples = [int.from_bytes(frames[i : i + 2], "little", signed=True)
                       for i in range(0, len(frames), 2)]  # fmt: skip
            assert max(abs(s) for s in samples) < 500, f"cut at {cut}s is not in a pause"


async def test_transcribe_chunk_shifts_timestamps_and_hears_the_words(
    tmp_path: Path, media: tuple[Path, Path]
) -> None:
    speech, _ = media
    ctx = await make_context(
        tmp_path,
        "TRANSCRIBE_CHUNK",
        {"audio_path": str(speech), "chunk_index": 4, "chunk_start_sec": 100.0, "language": "en"},
    )
    result = (await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    wer = word_error_rate(REFERENCE, result["text"])
    print(f"\ntiny.en on espeak-ng speech: WER {wer:.3f}, RTF {result['realtime_factor']}")
    assert wer < 0.25, result["text"]
    starts = [s["start"] for s in result["segments"]]
    assert starts == sorted(starts) and starts[0] >= 100.0
    assert result["segments"][-1]["end"] <= 100.0 + result["duration_sec"] + 0.01
    assert result["chunk_index"] == 4 and result["backend"] == "faster-whisper"


async def test_merge_writes_all_formats(tmp_path: Path) -> None:
    chunks = [
        {"index": 1, "segments": [{"start": 5.0, "end": 7.0, "text": "second part"}]},
        {"index": 0, "segments": [{"start": 0.0, "end": 5.5, "text": "first part"}]},
    ]
    ctx = await make_context(tmp_path, "MERGE_TRANSCRIPTION", {"chunks": chunks, "chunk_count": 3})
    result = (await merge.MergeTranscriptionExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    assert result["text"] == "first part second part" and result["missing_chunks"] == [2]
    assert Path(result["files"]["srt"]).read_text().startswith("1\n00:00:00,000 --> 00:00:05,500")
    assert Path(result["files"]["vtt"]).read_text().startswith("WEBVTT")
    assert "first part second part" in Path(result["files"]["txt"]).read_text()


# --- error classes -------------------------------------------------------------------------------
async def test_corrupt_media_is_permanent_with_ffmpegs_message(tmp_path: Path) -> None:
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 500)
    ctx = await make_context(tmp_path, "EXTRACT_AUDIO", {"video_path": str(bad)})
    with pytest.raises(errors.PermanentError) as info:
        await audio.ExtractAudioExecutor().execute(ctx.task, ctx)
    assert "broken.mp4" in info.value.message
    assert "Invalid data" in info.value.message or "moov atom" in info.value.message


async def test_missing_model_is_permanent_and_says_where_it_looked(
    tmp_path: Path, media: tuple[Path, Path]
) -> None:
    speech, _ = media
    payload = {"audio_path": str(speech), "model_name": "large-v9-nowhere"}
    ctx = await make_context(tmp_path, "TRANSCRIBE_CHUNK", payload)
    with pytest.raises(errors.PermanentError) as info:
        await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)
    message = info.value.message
    assert "'large-v9-nowhere' not found" in message
    assert str(ctx.data_dir / "models" / "whisper") in message and "Hugging Face cache" in message


async def test_language_detection_needs_a_multilingual_model(
    tmp_path: Path, media: tuple[Path, Path]
) -> None:
    speech, _ = media
    ctx = await make_context(tmp_path, "DETECT_LANGUAGE", {"audio_path": str(speech)})
    with pytest.raises(errors.PermanentError, match="English-only and cannot detect"):
        await transcribe.DetectLanguageExecutor().execute(ctx.task, ctx)


# --- downloads ---------------------------------------------------------------------------------
async def test_http_download_resumes_with_range(tmp_path: Path, media: tuple[Path, Path]) -> None:
    _, video = media
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(video, root / "talk.mp4")
    data = video.read_bytes()
    with serve_files(root) as server:
        url = f"{server.url}/talk.mp4"
        payload = {"source_url": url, "output_dir": "downloads/m1"}
        ctx = await make_context(tmp_path, "DOWNLOAD_VIDEO", payload, backend="http")
        out = ctx.data_dir / "downloads" / "m1"
        out.mkdir(parents=True)
        # a previous attempt stopped half-way
        (out / download.PART).write_bytes(data[: len(data) // 2])
        (out / download.PART_STATE).write_text(
            f'{{"url": "{url}", "validator": "\\"{len(data)}\\""}}'
        )
        result = (await download.DownloadVideoExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    assert Path(result["video_path"]).read_bytes() == data
    assert server.requests[-1]["Range"] == f"bytes={len(data) // 2}-"
    assert not (out / download.PART).exists()


@pytest.mark.parametrize(
    ("path", "error", "text"),
    [
        ("/status/404", errors.PermanentError, "HTTP 404 not found"),
        ("/status/503", errors.TransientError, "HTTP 503"),
        ("/status/429", errors.RateLimitedError, "HTTP 429"),
    ],
)
async def test_http_status_errors_are_classified(
    tmp_path: Path, path: str, error: type[errors.TaskError], text: str
) -> None:
    with serve_files(tmp_path) as server:
        ctx = await make_context(tmp_path, "DOWNLOAD_VIDEO", {"source_url": server.url + path})
        with pytest.raises(error) as info:
            await download.DownloadVideoExecutor().execute(ctx.task, ctx)
    assert text in info.value.message and server.url.split("//")[1] in info.value.message
    if error is errors.RateLimitedError:
        assert info.value.retry_after_sec == 42


async def test_unreachable_and_slow_servers_are_transient(tmp_path: Path) -> None:
    from fredica.cli.demo import free_port

    ctx = await make_context(
        tmp_path, "DOWNLOAD_VIDEO", {"source_url": f"http://127.0.0.1:{free_port()}/v.mp4"}
    )
    with pytest.raises(errors.TransientError, match="connection refused"):
        await download.DownloadVideoExecutor().execute(ctx.task, ctx)
    with serve_files(tmp_path) as server:
        server.slow_sec = 2.0
        (tmp_path / "v.mp4").write_bytes(b"x" * 100)
        ctx = await make_context(
            tmp_path,
            "DOWNLOAD_VIDEO",
            {"source_url": f"{server.url}/slow/v.mp4"},
            backend_config={"read_timeout_sec": 0.3},
        )
        with pytest.raises(errors.TransientError, match="timed out"):
            await download.DownloadVideoExecutor().execute(ctx.task, ctx)


@pytest.mark.parametrize("backend", ["http-curl", "http-aria2c"])
async def test_curl_and_aria2c_backends(
    tmp_path: Path, media: tuple[Path, Path], backend: str
) -> None:
    _, video = media
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(video, root / "talk.mp4")
    executor = download.DownloadVideoExecutor()
    with serve_files(root) as server:
        ctx = await make_context(
            tmp_path, "DOWNLOAD_VIDEO", {"source_url": f"{server.url}/talk.mp4"}, backend=backend
        )
        result = (await executor.execute(ctx.task, ctx)).result_json
        assert result is not None and result["backend"] == backend
        assert Path(result["video_path"]).read_bytes() == video.read_bytes()
        for path, error, text in [
            ("/nope.mp4", errors.PermanentError, "404"),
            ("/status/503", errors.TransientError, "503"),
        ]:
            url = server.url + path
            ctx = await make_context(
                tmp_path, "DOWNLOAD_VIDEO", {"source_url": url}, backend=backend
            )
            with pytest.raises(error, match=text):
                await executor.execute(ctx.task, ctx)


async def test_file_backend_links_a_local_source(tmp_path: Path, media: tuple[Path, Path]) -> None:
    _, video = media
    ctx = await make_context(tmp_path, "DOWNLOAD_VIDEO", {"source_url": f"file://{video}"})
    result = (await download.DownloadVideoExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["backend"] == "file"
    assert Path(result["video_path"]).read_bytes() == video.read_bytes()


async def test_ytdlp_and_hls_ffmpeg_backends(tmp_path: Path, media: tuple[Path, Path]) -> None:
    import subprocess

    from fredica.executors import ffmpeg

    _, video = media
    root = tmp_path / "www"
    root.mkdir()
    shutil.copy(video, root / "talk.mp4")
    subprocess.run(
        [ffmpeg.executable(), "-loglevel", "error", "-i", str(video), "-c", "copy", "-f", "hls",
         "-hls_time", "2", "-hls_list_size", "0", str(root / "live.m3u8")],
        check=True,
    )  # fmt: skip
    with serve_files(root) as server:
        ctx = await make_context(
            tmp_path,
            "DOWNLOAD_VIDEO",
            {"source_url": f"{server.url}/talk.mp4"},
            backend="http-ytdlp",
        )
        result = (await download.DownloadVideoExecutor().execute(ctx.task, ctx)).result_json
        assert result is not None and Path(result["video_path"]).stat().st_size > 1000
        assert result["material_title"] == "talk"  # yt-dlp's title (generic: the file)
        ctx = await make_context(
            tmp_path, "DOWNLOAD_VIDEO", {"source_url": f"{server.url}/live.m3u8"}
        )
        result = (await download.DownloadVideoExecutor().execute(ctx.task, ctx)).result_json
        assert result is not None and result["backend"] == "hls-ffmpeg"
        info = await ffmpeg.probe(ctx, result["video_path"])
        source = await ffmpeg.probe(ctx, str(video))  # the speech's length depends on the TTS
        assert info.has_audio and info.duration_sec == pytest.approx(source.duration_sec, abs=0.5)


async def test_bilibili_subtitles_without_login_await_credentials(tmp_path: Path) -> None:
    ctx = await make_context(
        tmp_path, "DOWNLOAD_SUBTITLE", {"source_url": "https://www.bilibili.com/video/BV1xx411c7mD"}
    )
    with pytest.raises(errors.AwaitingCredentialError, match="sessdata"):
        await download.DownloadSubtitleExecutor().execute(ctx.task, ctx)


async def test_shipped_demo_sample_is_the_demo_text(tmp_path: Path) -> None:
    """The fallback speech (used when espeak-ng is absent) really says the demo sentences."""
    from fredica.cli import demo_media
    from tests.media_support import require_media_tools

    require_media_tools()
    video = demo_media.make_video(demo_media.SHIPPED_SAMPLE, tmp_path / "demo.mp4")
    ctx = await make_context(tmp_path, "TRANSCRIBE_CHUNK", {"audio_path": str(video)})
    result = (await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    wer = word_error_rate(" ".join(demo_media.DEMO_SENTENCES), result["text"])
    print(f"\nshipped sample: WER {wer:.3f}: {result['text']}")
    assert wer < 0.3
