"""AI_ANALYZE: summary, tags and chapters of a transcript (seed 001 §3.3, §8.4).

Backends, chosen by the node (`ctx.backend`, else `backend_config["backend"]`), never by the
payload; endpoints and keys come from `ctx.backend_config`:
- openai-api / deepseek-api / openai-compatible / lm-studio: the OpenAI wire protocol,
  `POST {base_url}/chat/completions` (Ollama's and LM Studio's /v1 speak it too);
- anthropic-api: `POST {base_url}/v1/messages` (Anthropic Messages API);
- ollama: Ollama's native `POST {base_url}/api/chat`;
- local-extractive: the pure-Python summariser in `extractive.py`; needs nothing, so it is the
  default when no backend is configured.
A cloud backend without its key fails AWAITING_CREDENTIAL (configure it and retry, or skip).

The analysis is also written as files in the task's result dir, listed in the result's `files`
like the transcript's: `summary.md` (summary, tags and chapters as Markdown, headed by the
payload's `title`) and `analysis.json` (the result itself).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx

from fredica.domain import errors, models
from fredica.executors import extractive, httperrors, outputs
from fredica.executors import usage as cloud_usage
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

AI_ANALYZE = "AI_ANALYZE"
LOCAL = extractive.BACKEND
OPENAI_WIRE = {
    "openai-api": "https://api.openai.com/v1",
    "deepseek-api": "https://api.deepseek.com/v1",
    "openai-compatible": "",
    "lm-studio": "http://127.0.0.1:1234/v1",
}
NEEDS_KEY = frozenset({"openai-api", "deepseek-api", "anthropic-api"})
DEFAULT_MODELS = {
    "openai-api": "gpt-4o-mini",
    "deepseek-api": "deepseek-chat",
    "anthropic-api": "claude-3-5-haiku-latest",
    "ollama": "qwen2.5:7b",
}
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
OLLAMA_URL = "http://127.0.0.1:11434"
DEFAULT_TIMEOUT = 180.0  # seconds; local LLMs on a CPU are slow
DEFAULT_MAX_INPUT_CHARS = 60_000

SYSTEM_PROMPT = (
    "You analyse transcripts of videos. Reply with one JSON object and nothing else: "
    '{"summary": "3-5 sentences", "tags": ["up to 8 short keywords"], '
    '"chapters": [{"start_sec": <number>, "title": "short title"}]}. '
    "Chapters follow the [mm:ss] timestamps of the transcript. Write in the transcript's "
    "language."
)
SUMMARY_FILE = "summary.md"
ANALYSIS_FILE = "analysis.json"
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def prompt_hash(prompt: str | None) -> str:
    """The AI_ANALYZE idempotency part (seed §4.4): which instruction was used."""
    return hashlib.sha256((prompt or SYSTEM_PROMPT).encode()).hexdigest()[:16]


def render_transcript(text: str, segments: list[dict[str, Any]], limit: int) -> tuple[str, bool]:
    """The transcript as the model sees it ([mm:ss] per segment when timed), cut at `limit`."""
    if segments:
        lines = []
        for seg in segments:
            start = int(float(seg.get("start", 0)))
            who = f"{seg['speaker']}: " if seg.get("speaker") else ""
            lines.append(f"[{start // 60:02d}:{start % 60:02d}] {who}{seg.get('text', '')}")
        body = "\n".join(lines)
    else:
        body = text
    return (body, False) if len(body) <= limit else (body[:limit], True)


def parse_reply(content: str) -> dict[str, Any]:
    """The model's JSON reply as {summary, tags, chapters}; a reply that is not the asked
    JSON is kept as the summary with `format_error` saying so."""
    cleaned = _FENCE.sub("", content.strip())
    start, end = cleaned.find("{"), cleaned.rfind("}")
    try:
        data = json.loads(cleaned[start : end + 1]) if start >= 0 < end else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("summary"), str):
        return {
            "summary": content.strip(),
            "tags": [],
            "chapters": [],
            "format_error": "the reply was not the requested JSON object",
        }
    tags = [str(t) for t in data.get("tags", []) if isinstance(t, str | int | float)][:12]
    chapters = []
    for ch in data.get("chapters") or []:
        if isinstance(ch, dict) and isinstance(ch.get("title"), str):
            try:
                start_sec = float(ch.get("start_sec", 0) or 0)
            except (TypeError, ValueError):
                start_sec = 0.0
            chapters.append({"start_sec": start_sec, "title": ch["title"]})
    return {"summary": data["summary"], "tags": tags, "chapters": chapters}


def clock(seconds: float) -> str:
    """75.4 -> "01:15", 3725 -> "1:02:05" (as the web page shows chapter times)."""
    s = max(0, int(seconds))
    hours, rest = divmod(s, 3600)
    return (
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
        if hours
        else f"{rest // 60:02d}:{rest % 60:02d}"
    )


def summary_markdown(title: str, result: dict[str, Any]) -> str:
    """`summary.md`: the title, then the summary, tags and chapters (sections left out when
    empty)."""
    lines = [f"# {title}", "", "## Summary", "", str(result.get("summary") or "").strip(), ""]
    tags = [str(t) for t in result.get("tags") or []]
    if tags:
        lines += ["## Tags", "", ", ".join(tags), ""]
    chapters = [c for c in result.get("chapters") or [] if isinstance(c, dict)]
    if chapters:
        lines += ["## Chapters", ""]
        lines += [
            f"- {clock(float(c.get('start_sec') or 0))} {c.get('title', '')}" for c in chapters
        ]
        lines.append("")
    return "\n".join(lines)


def write_files(out: Path, title: str, result: dict[str, Any]) -> dict[str, str]:
    """Write `summary.md` and `analysis.json` of `result` into `out` (each atomically);
    returns {"summary_md": path, "analysis_json": path}."""
    files = {"summary_md": out / SUMMARY_FILE, "analysis_json": out / ANALYSIS_FILE}
    outputs.write_text_atomic(files["summary_md"], summary_markdown(title, result))
    document = json.dumps(result, ensure_ascii=False, indent=1)
    outputs.write_text_atomic(files["analysis_json"], document)
    return {key: str(path) for key, path in files.items()}


class Backend:
    """One chat-style HTTP backend: build the request, read the reply."""

    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.config = config
        self.key = config.get("api_key") or None
        self.base_url = str(config.get("base_url") or config.get("endpoint") or "")
        listed = config.get("models") or []
        first = listed[0] if listed else None
        first_name = first.get("name") if isinstance(first, dict) else first
        self.model = str(
            config.get("model")
            or config.get("default_model")
            or first_name
            or DEFAULT_MODELS.get(name, "")
        )
        if name in NEEDS_KEY and not self.key:
            raise errors.AwaitingCredentialError(
                f"AI_ANALYZE backend {name} needs an API key: set api_key for it in this "
                "node's config, then retry the task (or skip it)"
            )
        if not self.model:
            raise errors.PermanentError(f"AI_ANALYZE backend {name}: no model configured")

    def request(self, system: str, user: str) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(url, headers, json body)."""
        cfg = self.config
        temperature = float(cfg.get("temperature", 0.2))
        max_tokens = int(cfg.get("max_tokens", 1500))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        if self.name == "anthropic-api":
            base = (self.base_url or ANTHROPIC_URL).rstrip("/")
            headers = {"x-api-key": str(self.key), "anthropic-version": ANTHROPIC_VERSION}
            body: dict[str, Any] = {
                "model": self.model,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "system": system,
                "messages": [{"role": "user", "content": user}],
            }
            return f"{base}/v1/messages", headers, body
        if self.name == "ollama":
            base = (self.base_url or OLLAMA_URL).rstrip("/")
            body = {
                "model": self.model,
                "messages": messages,
                "stream": False,
                "format": "json",
                "options": {"temperature": temperature, "num_predict": max_tokens},
            }
            return f"{base}/api/chat", {}, body
        base = (self.base_url or OPENAI_WIRE.get(self.name) or "").rstrip("/")
        if not base:
            raise errors.PermanentError(
                f"AI_ANALYZE backend {self.name} needs base_url (or endpoint) in its config"
            )
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        return f"{base}/chat/completions", headers, body

    def reply(self, data: Any) -> tuple[str, dict[str, Any]]:
        """(text content, token usage) from a successful response body."""
        try:
            if self.name == "anthropic-api":
                text = "".join(
                    part.get("text", "") for part in data["content"] if part.get("type") == "text"
                )
                usage = data.get("usage") or {}
                return text, {
                    "input_tokens": usage.get("input_tokens"),
                    "output_tokens": usage.get("output_tokens"),
                }
            if self.name == "ollama":
                return str(data["message"]["content"]), {
                    "input_tokens": data.get("prompt_eval_count"),
                    "output_tokens": data.get("eval_count"),
                }
            usage = data.get("usage") or {}
            return str(data["choices"][0]["message"]["content"] or ""), {
                "input_tokens": usage.get("prompt_tokens"),
                "output_tokens": usage.get("completion_tokens"),
            }
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise errors.PermanentError(
                f"{self.name}: unexpected response shape ({type(exc).__name__}: {exc})"
            ) from exc


def charge_tokens(ctx: TaskContext, usage: dict[str, Any]) -> float | None:
    """Record what a chat call cost from the tokens the provider counted (input + output)."""
    counts = [usage.get("input_tokens"), usage.get("output_tokens")]
    tokens = sum(n for n in counts if isinstance(n, int) and n > 0)
    return cloud_usage.charge(ctx, tokens / 1000, "1k_tokens") if tokens else None


def choose_backend(ctx: TaskContext) -> str:
    name = ctx.backend or ctx.backend_config.get("backend") or LOCAL
    known = {LOCAL, "anthropic-api", "ollama", *OPENAI_WIRE}
    if name not in known:
        raise errors.PermanentError(
            f"unknown AI_ANALYZE backend {name!r}; known: {', '.join(sorted(known))}"
        )
    return str(name)


class AiAnalyzeExecutor(TaskExecutor):
    """Transcript text (payload.text, optional timed payload.segments) -> analysis."""

    task_type = AI_ANALYZE
    capability = "AI_ANALYZE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        text = payload.get("text")
        if not isinstance(text, str):
            raise errors.PayloadError("payload.text (the transcript) must be a string")
        segments = payload.get("segments") or []
        if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
            raise errors.PayloadError("payload.segments must be a list of {start, end, text}")
        backend = choose_backend(ctx)
        ctx.event("tool", backend)
        await ctx.checkpoint()
        if not text.strip():
            empty: dict[str, Any] = {
                "summary": "",
                "tags": [],
                "chapters": [],
                "backend": backend,
                "note": "the transcript is empty: nothing to analyse",
            }
            return ExecuteResult(self._with_files(task, ctx, empty))
        if backend == LOCAL:
            opts = {
                "max_sentences": int(payload.get("max_sentences", 5)),
                "max_tags": int(payload.get("max_tags", 8)),
            }
            ctx.progress(5, "local extractive analysis")
            result: dict[str, Any] = await ctx.run_in_subprocess(
                extractive.analyze_in_child, text, segments, opts
            )
        else:
            result = await self._remote(ctx, backend, payload, text, segments)
        result["language"] = payload.get("language")
        result = self._with_files(task, ctx, result)
        ctx.progress(100, "analysed")
        return ExecuteResult(result)

    @staticmethod
    def _with_files(task: models.Task, ctx: TaskContext, result: dict[str, Any]) -> dict[str, Any]:
        """`result` with `files`: the analysis written next to the task's other outputs."""
        title = task.payload.get("title")
        if not isinstance(title, str) or not title.strip():
            title = task.material_id or "Analysis"
        return {**result, "files": write_files(ctx.output_dir, title, result)}

    async def _remote(
        self,
        ctx: TaskContext,
        name: str,
        payload: dict[str, Any],
        text: str,
        segments: list[dict[str, Any]],
    ) -> dict[str, Any]:
        backend = Backend(name, ctx.backend_config)
        limit = int(ctx.backend_config.get("max_input_chars", DEFAULT_MAX_INPUT_CHARS))
        body_text, truncated = render_transcript(text, segments, limit)
        system = payload.get("prompt") if isinstance(payload.get("prompt"), str) else None
        url, headers, body = backend.request(system or SYSTEM_PROMPT, body_text)
        timeout = float(ctx.backend_config.get("timeout_sec", DEFAULT_TIMEOUT))
        what = f"{name} {backend.model}"
        ctx.progress(10, f"asking {what}")
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            try:
                response = await httperrors.cancellable(
                    ctx, client.post(url, headers=headers, json=body)
                )
            except httpx.HTTPError as exc:
                raise httperrors.for_transport(exc, url, what) from exc
        if response.status_code >= 400:
            raise httperrors.for_status(response, what, provider=name)
        try:
            data = response.json()
        except ValueError as exc:
            raise errors.TransientError(f"{what}: the reply was not JSON") from exc
        content, usage = backend.reply(data)
        result = parse_reply(content)
        result.update(
            {"backend": name, "model": backend.model, "usage": usage, "input_truncated": truncated}
        )
        cost = charge_tokens(ctx, usage)
        if cost is not None:
            result["cost_usd"] = round(cost, 6)
        return result
