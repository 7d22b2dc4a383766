"""worker.yaml: schema defaults, precise errors, identity write-back, secrets, CLI."""

from __future__ import annotations

import re
import socket
import stat
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from fredica.capabilities import probes
from fredica.cli import config_cmd as cli_config
from fredica.config import schema as config
from fredica.domain import errors


def write(tmp_path: Path, text: str, name: str = "worker.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path) -> str:
    with pytest.raises(errors.ConfigError) as info:
        config.load_config(path)
    return info.value.message


# --- defaults --------------------------------------------------------------------------------


def test_defaults_match_the_seed_and_our_additions() -> None:
    cfg = config.WorkerConfig()
    assert (cfg.node.id, cfg.node.hostname, cfg.node.max_workers) == ("", "", 2)
    assert cfg.node.shutdown_grace_sec == 30.0
    assert (cfg.node.network_region, cfg.node.bandwidth_mbps) == ("UNKNOWN", 100)
    assert cfg.node.is_storage_node is False
    c = cfg.cluster
    assert (c.mode, c.seeds, c.cluster_secret) == ("auto", [], "")
    assert (c.heartbeat_interval_sec, c.stale_after_sec, c.reclaim_after_sec) == (30, 180, 900)
    assert (c.originator_wait_sec, c.prefer_window_sec) == (1800, 1800)
    assert c.api_rate_limits["deepseek-api"].cluster_max_concurrent == 5
    assert c.api_rate_limits["openai-api"].cluster_max_concurrent == 3
    s = cfg.scheduling
    assert (s.poll_interval_sec, s.idle_poll_interval_sec, s.defer_window_polls) == (1.0, 5.0, 3)
    assert (s.load_penalty.enabled, s.load_penalty.max_penalty) == (True, 20)
    assert s.quality_defaults["TRANSCRIBE_CHUNK"] == "quality"
    assert s.quality_defaults["FINGERPRINT_VIDEO"] == "speed"
    assert len(s.quality_defaults) == 19
    assert cfg.storage.data_dir == ".data" and cfg.storage.results_retain_days == 7
    assert cfg.storage.intermediate_cleanup == "on_pipeline_complete"
    assert (cfg.api.host, cfg.api.port, cfg.plugins) == ("127.0.0.1", 7631, [])
    assert cfg.auth.mode == "open" and cfg.auth.access_tokens == []
    assert cfg.hardware.gpu_score_override is None and cfg.hardware.hw_score_llm.enabled
    assert cfg.runtime.gpu_score_cached is None
    caps = cfg.capabilities
    enabled = {k: v.enabled for k, v in caps.provider_sections().items()}
    assert enabled == {
        "transcribe": True, "ai_analyze": True, "ocr": False, "object_detect": False,
        "translate": False, "super_resolution": False, "speech_enhance": False,
        "speaker_diarize": False, "emotion_detect": False, "subtitle_sync": False,
        "audio_fingerprint": True, "tts": True,
    }  # fmt: skip
    assert caps.download.bilibili.enabled and caps.download.youtube.enabled
    assert caps.download.disk_min_free_gb == 20 and caps.download.http.aria2c_connections == 16
    policy = cfg.cloud_policy
    assert policy.transcribe.cloud_allowed and not policy.ocr.cloud_allowed
    assert not policy.object_detect.cloud_allowed and not policy.speaker_diarize.cloud_allowed
    assert policy.audio_fingerprint.allowed_backends == ["acoustid-api"]


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert config.load_config(write(tmp_path, "")) == config.WorkerConfig()
    assert config.load_config(write(tmp_path, "# only a comment\n")) == config.WorkerConfig()


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    message = refused(tmp_path / "nope.yaml")
    assert message == f"{tmp_path / 'nope.yaml'}: file not found"


def test_default_template_loads_back_to_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "worker.yaml"
    config.write_default_config(path)
    assert config.load_config(path) == config.WorkerConfig()
    text = path.read_text()
    assert "# -- Node identity" in text and "quality_defaults:" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it will hold secrets
    path.write_text("node: {max_workers: 5}\n")
    with pytest.raises(errors.ConfigError, match="already exists"):
        config.write_default_config(path)
    assert config.load_config(path).node.max_workers == 5
    config.write_default_config(path, overwrite=True)
    assert config.load_config(path) == config.WorkerConfig()


def test_empty_sections_and_lists_mean_defaults(tmp_path: Path) -> None:
    cfg = config.load_config(write(tmp_path, "cluster:\nnode:\n  max_workers: 4\nplugins:\n"))
    assert cfg.cluster == config.ClusterConfig() and cfg.node.max_workers == 4


# --- refusals name the file and the key path ------------------------------------------------------


def test_unknown_key_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "node:\n  max_workrs: 4\n")
    assert refused(path) == f"{path}: node.max_workrs: unknown key (did you mean 'max_workers'?)"


def test_unknown_section_and_nested_key(tmp_path: Path) -> None:
    path = write(tmp_path, "schedulng: {}\ncapabilities:\n  transcribe:\n    modles: []\n")
    message = refused(path)
    assert f"{path}: schedulng: unknown key (did you mean 'scheduling'?)" in message
    assert f"{path}: capabilities.transcribe.modles: unknown key (did you mean 'models'?)" in (
        message
    )


def test_wrong_type_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "node:\n  max_workers: two\n")
    assert refused(path) == f"{path}: node.max_workers: expected an integer, got 'two'"
    path = write(tmp_path, "node:\n  is_storage_node: 'yes'\n")
    assert refused(path) == f"{path}: node.is_storage_node: expected true or false, got 'yes'"


def test_out_of_range_value_is_refused_with_its_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "capabilities:\n  transcribe:\n    backend: faster-whisper\n    models:\n"
        "      - name: large-v3\n        score: 95\n      - name: medium\n        score: 140\n",
    )
    assert refused(path) == (
        f"{path}: capabilities.transcribe.models[1].score: must be 0-100, got 140"
    )


def test_every_problem_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path, "node:\n  max_workers: 0\ncluster:\n  mode: automatic\napi:\n  port: 0\n"
    )
    lines = refused(path).splitlines()
    assert lines == [
        f"{path}: node.max_workers: must be >= 1, got 0",
        f"{path}: cluster.mode: must be 'auto' or 'manual', got 'automatic'",
        f"{path}: api.port: must be 1-65535, got 0",
    ]


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "node:\n  id: [unclosed\n")
    assert re.match(rf"{re.escape(str(path))}: invalid YAML: line \d+", refused(path))


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- node\n")
    assert refused(path) == f"{path}: (top level): expected a mapping of sections, got a list"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("capabilities:\n  ocr:\n    providers:\n      - backend: paddle-ocr\n",
         "capabilities.ocr.providers[0].backend: unknown OCR backend 'paddle-ocr' "
         "(did you mean 'paddleocr-gpu'?)"),
        ("capabilities:\n  ocr:\n    providers:\n      - backend: paddleocr-gpu\n"
         "        accelerator: cpu\n",
         "capabilities.ocr.providers[0].accelerator: 'cpu' does not fit backend "
         "'paddleocr-gpu' (runs on gpu)"),
        ("capabilities:\n  transcribe:\n    backend: faster-whisperr\n",
         "capabilities.transcribe.backend: unknown TRANSCRIBE backend 'faster-whisperr' "
         "(did you mean 'faster-whisper'?)"),
        ("cloud_policy:\n  super_resolution:\n    cloud_allowed: true\n",
         "cloud_policy.super_resolution.cloud_allowed: super_resolution has no cloud backend; "
         "cloud_allowed is fixed to false"),
        ("cloud_policy:\n  transcribe:\n    allowed_backends: [xunfei-iat]\n",
         "cloud_policy.transcribe.allowed_backends[0]: 'xunfei-iat' is not a cloud backend of "
         "transcribe (did you mean 'xunfei-iat-api'?)"),
        ("cluster:\n  heartbeat_interval_sec: 200\n",
         "cluster.stale_after_sec: must be greater than heartbeat_interval_sec (200), got 180"),
        ("cluster:\n  seeds: ['192.168.1.10']\n",
         "cluster.seeds[0]: must be host:port, got '192.168.1.10'"),
        ("cluster:\n  api_rate_limits:\n    deepseek:\n      cluster_max_concurrent: 2\n",
         "cluster.api_rate_limits.deepseek: unknown cloud backend (did you mean 'deepseek-api'?)"),
        ("scheduling:\n  quality_defaults:\n    TRANSCRIBE_CHUNKS: speed\n",
         "scheduling.quality_defaults.TRANSCRIBE_CHUNKS: unknown task type or capability "
         "function (did you mean 'TRANSCRIBE_CHUNK'?)"),
        ("scheduling:\n  quality_defaults:\n    AI_ANALYZE: fast\n",
         "scheduling.quality_defaults.AI_ANALYZE: must be 'quality', 'balanced' or 'speed', "
         "got 'fast'"),
        ("auth:\n  access_tokens:\n    - id: tok-a\n      token_hash: 'sha256:aabbcc...'\n",
         "auth.access_tokens[0].token_hash: must be 'sha256:' followed by 64 lowercase hex "
         "digits"),
        ("hardware:\n  gpu_score_override: 101\n",
         "hardware.gpu_score_override: must be 0-100, got 101"),
        ("plugins: ['my plugin']\n", "plugins[0]: must be an importable module name"),
        ("_runtime:\n  last_shutdown_type: DIRTY\n",
         "_runtime.last_shutdown_type: must be '', 'CLEAN' or 'CRASH', got 'DIRTY'"),
        ("capabilities:\n  download:\n    youtube:\n      proxy: 127.0.0.1:7890\n",
         "capabilities.download.youtube.proxy: must be a URL like socks5://127.0.0.1:7890"),
        ("store:\n  url: mysql://db/x\n",
         "store.url: must be empty (embedded SQLite) or a postgresql://user@host/db URL, "
         "got mysql://…"),
        ("store:\n  url: postgresql://pgbouncer/x\n  listen_url: db:5432\n",
         "store.listen_url: must be empty (embedded SQLite) or a postgresql://user@host/db "
         "URL, got 'db:5432'"),
        ("store:\n  listen_url: postgresql://db/x\n",
         "store.listen_url: is for a PostgreSQL store: set store.url as well"),
    ],
)  # fmt: skip
def test_semantic_checks_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    assert refused(path).startswith(f"{path}: {expected}")


def test_seed_example_values_are_accepted(tmp_path: Path) -> None:
    text = """
node:
  network_region: "GLOBAL"
  bandwidth_mbps: 500
cluster:
  seeds: ["192.168.1.10:7631", "[::1]:7631"]
capabilities:
  download:
    youtube: {enabled: true, backend: youtube-ytdlp, proxy: "socks5://127.0.0.1:7890"}
  ffmpeg: {backend: ffmpeg-nvenc, score: 90, scene_detect: {backend: pyscenedetect}}
  transcribe:
    backend: faster-whisper
    accelerator: gpu
    models: [{name: large-v3, score: 95}, {name: medium, score: 72}]
  ai_analyze:
    providers:
      - {backend: deepseek-api, api_key: sk-x, model: deepseek-v3, score: 75, max_concurrent: 2}
      - {backend: ollama, endpoint: "http://localhost:11434", model: "qwen2.5:72b",
         accelerator: gpu, score: 88, max_concurrent: 1}
  ocr: {enabled: true, providers: [{backend: paddleocr-gpu, accelerator: gpu,
                                    models: [PP-OCRv4], score: 90}]}
  object_detect:
    enabled: true
    providers:
      - backend: yolo-gpu
        models: [{name: yolov8n, score: 80}, {name: yolov8m, score: 88}]
        default_model: yolov8n
  super_resolution: {providers: [{backend: realesrgan-gpu, default_scale: 2, tile_size: 512}]}
  speaker_diarize: {hf_token: "hf_x", providers: [{backend: pyannote-gpu, score: 90}]}
  speech_enhance: {providers: [{backend: deepfilternet-gpu, default_mode: denoise}]}
  subtitle_sync: {providers: [{backend: alass, alass_path: ""}]}
  audio_fingerprint: {providers: [{backend: chromaprint, fpcalc_path: ""}]}
auth:
  mode: token
  access_tokens:
    - id: tok-alice
      name: "Alice"
      token_hash: "sha256:%s"
      expires_at: 2026-06-01
      permissions: {allow_cloud_transcribe: true, max_cloud_cost_per_day_usd: 2.0,
                    max_tasks_per_day: 200}
_runtime: {gpu_score_cached: 83, last_shutdown_type: CLEAN}
""" % ("ab" * 32)
    cfg = config.load_config(write(tmp_path, text))
    assert cfg.capabilities.transcribe.models[1].score == 72
    assert cfg.capabilities.ocr.providers[0].models[0].name == "PP-OCRv4"
    assert cfg.runtime.gpu_score_cached == 83 and cfg.has_proxy
    token = cfg.auth.access_tokens[0]
    assert token.expires_at is not None and token.expires_at.year == 2026
    assert token.permissions.allows_cloud("transcribe")
    assert not token.permissions.allows_cloud("ocr")


def test_quality_defaults_merge_over_the_seed_defaults(tmp_path: Path) -> None:
    cfg = config.load_config(
        write(tmp_path, "scheduling:\n  quality_defaults:\n    AI_ANALYZE: speed\n")
    )
    assert cfg.scheduling.quality_defaults["AI_ANALYZE"] == "speed"
    assert cfg.scheduling.quality_defaults["TRANSCRIBE_CHUNK"] == "quality"


# --- identity write-back ------------------------------------------------------------------------

COMMENTED = """\
# My home cluster node. Keep this comment!
node:
  id: ""            # leave empty: generated on first start
  hostname: ""
  max_workers: 3    # my own choice

cluster:
  # the NAS
  seeds: ["192.168.1.10:7631"]
"""


def test_identity_is_generated_and_comments_survive(tmp_path: Path) -> None:
    path = write(tmp_path, COMMENTED)
    cfg = config.ensure_node_identity(path)
    assert re.fullmatch(r"node-[0-9a-f]{12}", cfg.node.id)
    assert cfg.node.hostname == socket.gethostname()
    assert cfg.node.max_workers == 3
    text = path.read_text()
    for kept in ("# My home cluster node. Keep this comment!", "# leave empty: generated",
                 "# my own choice", "# the NAS", '"192.168.1.10:7631"'):  # fmt: skip
        assert kept in text
    assert re.search(rf'id: "?{cfg.node.id}"? +# leave empty', text)
    again = config.ensure_node_identity(path)
    assert again.node.id == cfg.node.id
    assert path.read_text() == text  # nothing to write the second time


def test_identity_on_a_missing_or_section_less_file(tmp_path: Path) -> None:
    fresh = config.ensure_node_identity(tmp_path / "new" / "worker.yaml")
    assert fresh.node.id.startswith("node-")
    assert "# -- Node identity" in (tmp_path / "new" / "worker.yaml").read_text()
    path = write(tmp_path, "# just a comment\napi:\n  port: 7700\n", "bare.yaml")
    cfg = config.ensure_node_identity(path)
    assert cfg.node.id.startswith("node-") and cfg.api.port == 7700
    assert "# just a comment" in path.read_text()


def test_identity_keeps_a_user_chosen_id_and_refuses_invalid_files(tmp_path: Path) -> None:
    path = write(tmp_path, "node:\n  id: nas-1\n")
    assert config.ensure_node_identity(path).node.id == "nas-1"
    bad = write(tmp_path, "node:\n  max_workers: -1\n", "bad.yaml")
    before = bad.read_text()
    with pytest.raises(errors.ConfigError):
        config.ensure_node_identity(bad)
    assert bad.read_text() == before


def test_write_runtime_updates_in_place(tmp_path: Path) -> None:
    path = write(tmp_path, COMMENTED)
    config.write_runtime(path, {"gpu_score_cached": 83, "last_shutdown_type": "CLEAN"})
    cfg = config.load_config(path)
    assert cfg.runtime.gpu_score_cached == 83 and cfg.runtime.last_shutdown_type == "CLEAN"
    assert "# my own choice" in path.read_text()
    with pytest.raises(errors.ConfigError):
        config.write_runtime(path, {"nope": 1})


# --- secrets ------------------------------------------------------------------------------------

SECRETS = """
cluster: {cluster_secret: s3cret}
capabilities:
  download:
    bilibili: {sessdata: cookie123}
    youtube: {proxy: "socks5://me:pa55@127.0.0.1:7890"}
  transcribe: {backend: xunfei-iat-api, api_key: sk-live, secret_key: sec}
  speaker_diarize: {hf_token: hf_abc}
  ai_analyze: {providers: [{backend: deepseek-api, api_key: sk-deep},
                           {backend: ollama, endpoint: "http://admin:hunter2@nas:11434"}]}
auth:
  access_tokens: [{id: tok-a, token_hash: "sha256:%s"}]
""" % ("cd" * 32)


def test_mask_secrets(tmp_path: Path) -> None:
    shown = config.mask_secrets(config.load_config(write(tmp_path, SECRETS)))
    caps = shown["capabilities"]
    assert shown["cluster"]["cluster_secret"] == config.MASK
    assert caps["download"]["bilibili"]["sessdata"] == config.MASK
    assert caps["download"]["youtube"]["proxy"] == f"socks5://me:{config.MASK}@127.0.0.1:7890"
    assert caps["transcribe"]["api_key"] == config.MASK
    assert caps["transcribe"]["secret_key"] == config.MASK
    assert caps["speaker_diarize"]["hf_token"] == config.MASK
    assert caps["ai_analyze"]["providers"][0]["api_key"] == config.MASK
    assert caps["ai_analyze"]["providers"][1]["endpoint"] == f"http://admin:{config.MASK}@nas:11434"
    assert shown["auth"]["access_tokens"][0]["token_hash"] == config.MASK
    assert caps["ocr"]["providers"] == []
    assert "_runtime" in shown
    flat = repr(shown)
    for secret in (
        "s3cret",
        "cookie123",
        "pa55",
        "sk-live",
        "hf_abc",
        "sk-deep",
        "cdcd",
        "hunter2",
    ):
        assert secret not in flat


# --- CLI ------------------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_check_ok_and_error(tmp_path: Path) -> None:
    good = write(tmp_path, "node:\n  max_workers: 4\n")
    result = runner.invoke(cli_config.config_app, ["check", str(good)])
    assert result.exit_code == 0 and result.output.strip() == f"{good}: OK"
    bad = write(tmp_path, "node:\n  max_workrs: 4\n", "bad.yaml")
    result = runner.invoke(cli_config.config_app, ["check", str(bad)])
    assert result.exit_code == 1
    assert "node.max_workrs: unknown key (did you mean 'max_workers'?)" in result.output


def test_cli_check_uses_fredica_config_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = write(tmp_path, "")
    monkeypatch.setenv("FREDICA_CONFIG", str(good))
    result = runner.invoke(cli_config.config_app, ["check"])
    assert result.exit_code == 0 and str(good) in result.output


def test_cli_show_masks_secrets(tmp_path: Path) -> None:
    path = write(tmp_path, SECRETS)
    result = runner.invoke(cli_config.config_app, ["show", str(path)])
    assert result.exit_code == 0
    assert "cluster_secret: '********'" in result.output
    assert "s3cret" not in result.output and "sk-live" not in result.output
    assert "max_workers: 2" in result.output  # defaults are filled in
    assert result.output.index("node:") < result.output.index("cluster:")


def test_capabilities_command_prints_reasons(tmp_path: Path) -> None:
    path = write(tmp_path, "capabilities:\n  ocr: {enabled: true}\n")
    env = probes.ProbeEnv(
        which=lambda name: f"/usr/bin/{name}" if name in ("curl", "tesseract") else None,
        find_spec=lambda name: name == "rapidocr",
        run=lambda argv, timeout: probes.RunResult(1, "", "unexpected"),
        imageio_ffmpeg=lambda: None,
        environ={},
        cpu_count=8,
        platform="linux",
    )
    console = Console(record=True, width=200)
    cli_config.capabilities_command(path, console=console, env=env)
    text = console.export_text()
    assert "cpu_score: 55 (cores; 8 logical cores)" in text
    assert "no GPU detected" in text
    assert re.search(r"OCR\s+│ rapidocr\s+│ cpu\s+│\s+│ 60\s+│ declared \(detected\)", text)
    assert "detected: python module rapidocr" in text
    assert "missing ffmpeg" in text and "missing aria2c on PATH" in text
    assert "capabilities declared" in text


def test_capabilities_command_refuses_an_invalid_file(tmp_path: Path) -> None:
    import typer

    path = write(tmp_path, "node: {max_workers: 0}\n")
    console = Console(record=True, width=200)
    with pytest.raises(typer.Exit):
        cli_config.capabilities_command(path, console=console)
    assert "node.max_workers: must be >= 1, got 0" in console.export_text()
