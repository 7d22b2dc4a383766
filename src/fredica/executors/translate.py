"""TRANSLATE_TEXT: plain text or a subtitle file into another language (seed 001 §3.8).

A subtitle file is translated cue by cue and written back with every cue's times unchanged
(never merged into paragraphs). Backends, as the node chose; endpoints and keys come from the
node's config (`endpoint`, `api_key`, `model`):
- deepl-api: the DeepL v2 API (`POST {endpoint}/v2/translate`, `DeepL-Auth-Key`), up to 50
  texts per request; the free-plan host is used for keys ending in `:fx`;
- openai-translate-api / deepseek-translate-api: instruction translation over the OpenAI
  chat-completions protocol (any compatible server through `endpoint`);
- ollama-translate: the same instruction through Ollama's native chat API.
For subtitles the LLM backends receive numbered lines as JSON and must return every number;
a reply missing lines is a TRANSIENT error (models are not deterministic), so a retry may fix it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import analyze, httperrors, outputs, subtitles, usage
from fredica.executors import subtitle_format as sf
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

TRANSLATE_TEXT = "TRANSLATE_TEXT"
DEEPL = "deepl-api"
DEEPL_URL = "https://api.deepl.com"
DEEPL_FREE_URL = "https://api-free.deepl.com"
DEEPL_BATCH = 50
LLM_WIRE = {
    "openai-translate-api": "openai-api",
    "deepseek-translate-api": "deepseek-api",
    "ollama-translate": "ollama",
}
LLM_BATCH = 40
STYLES = {
    "subtitle": "Keep each line short and natural, as a subtitle.",
    "formal": "Use a formal register.",
    "casual": "Use a casual, conversational register.",
}
LANGUAGE_NAMES = {
    "zh": "Chinese", "en": "English", "ja": "Japanese", "ko": "Korean", "de": "German",
    "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese", "ru": "Russian",
}  # fmt: skip
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.lower().split("-")[0], code)


def llm_instruction(source: str, target: str, style: str) -> str:
    src = "the source language" if source == "auto" else language_name(source)
    return (
        f"You translate from {src} into {language_name(target)}. {STYLES[style]} "
        'You receive a JSON array of {"id": number, "text": string}. Reply with a JSON array '
        "of the same ids, each with its translated text, and nothing else."
    )


def parse_llm_lines(content: str, ids: list[int]) -> dict[int, str]:
    """The translated lines of a model reply; TransientError when lines are missing."""
    cleaned = _FENCE.sub("", content.strip())
    start, end = cleaned.find("["), cleaned.rfind("]")
    try:
        data = json.loads(cleaned[start : end + 1]) if start >= 0 < end else None
    except ValueError:
        data = None
    if not isinstance(data, list):
        raise errors.TransientError(f"the model did not reply with a JSON array: {content[:120]!r}")
    found = {
        int(item["id"]): str(item["text"])
        for item in data
        if isinstance(item, dict) and isinstance(item.get("id"), int) and "text" in item
    }
    missing = [i for i in ids if i not in found]
    if missing:
        raise errors.TransientError(
            f"the model returned {len(ids) - len(missing)} of {len(ids)} lines (missing ids "
            f"{missing[:10]})"
        )
    return found


async def deepl(ctx: TaskContext, texts: list[str], source: str, target: str) -> list[str]:
    cfg = ctx.backend_config
    key = str(cfg.get("api_key") or "")
    if not key:
        raise errors.AwaitingCredentialError(
            "deepl-api needs an API key: set api_key for it in this node's config, then retry"
        )
    base = str(cfg.get("endpoint") or cfg.get("base_url") or "")
    base = (base or (DEEPL_FREE_URL if key.endswith(":fx") else DEEPL_URL)).rstrip("/")
    out: list[str] = []
    for i in range(0, len(texts), DEEPL_BATCH):
        body: dict[str, Any] = {"text": texts[i : i + DEEPL_BATCH], "target_lang": target.upper()}
        if source != "auto":
            body["source_lang"] = source.upper()
        data = await httperrors.post_json(
            ctx, f"{base}/v2/translate", what="deepl-api", provider="deepl",
            headers={"Authorization": f"DeepL-Auth-Key {key}"}, json=body,
        )  # fmt: skip
        try:
            out += [str(t["text"]) for t in data["translations"]]
        except (KeyError, TypeError) as exc:
            raise errors.PermanentError(f"deepl-api: unexpected reply shape ({exc})") from exc
        usage.charge(ctx, sum(len(t) for t in body["text"]) / 1000, "1k_chars")
        ctx.progress(10 + 85 * len(out) / len(texts), f"{len(out)}/{len(texts)} lines")
    if len(out) != len(texts):
        raise errors.PermanentError(f"deepl-api returned {len(out)} texts for {len(texts)}")
    return out


async def llm(
    ctx: TaskContext, name: str, texts: list[str], source: str, target: str, style: str
) -> tuple[list[str], str]:
    backend = analyze.Backend(LLM_WIRE[name], ctx.backend_config)
    system = llm_instruction(source, target, style)
    timeout = float(ctx.backend_config.get("timeout_sec", analyze.DEFAULT_TIMEOUT))
    out: list[str] = []
    for i in range(0, len(texts), LLM_BATCH):
        batch = texts[i : i + LLM_BATCH]
        ids = list(range(i + 1, i + 1 + len(batch)))
        lines = [{"id": n, "text": t} for n, t in zip(ids, batch, strict=True)]
        url, headers, body = backend.request(system, json.dumps(lines, ensure_ascii=False))
        body.pop("format", None)  # Ollama: the reply is an array, not an object
        data = await httperrors.post_json(
            ctx, url, what=f"{name} {backend.model}", provider=name, timeout=timeout,
            headers=headers, json=body,
        )  # fmt: skip
        content, used = backend.reply(data)
        analyze.charge_tokens(ctx, used)
        found = parse_llm_lines(content, ids)
        out += [found[n] for n in ids]
        ctx.progress(10 + 85 * len(out) / len(texts), f"{len(out)}/{len(texts)} lines")
    return out, backend.model


class TranslateTextExecutor(TaskExecutor):
    """payload.text or payload.srt_path (any subtitle format) -> target_lang."""

    task_type = TRANSLATE_TEXT
    capability = "TRANSLATE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        target = outputs.payload_str(payload, "target_lang") or ""
        source = str(payload.get("source_lang") or "auto")
        style = str(payload.get("style") or "subtitle")
        if style not in STYLES:
            raise errors.PayloadError(f"payload.style must be one of {', '.join(STYLES)}")
        path = payload.get("srt_path") or payload.get("subtitle_path")
        cues: list[sf.Cue] | None = None
        fmt = sf.SubtitleFormat.SRT
        if path:
            source_file = await ctx.payload_input(payload, "srt_path", "subtitle_path")
            cues, fmt = subtitles.read_cues(source_file)
            texts = [c.text.replace("\n", " ") for c in cues]
        elif isinstance(payload.get("text"), str):
            texts = [p for p in str(payload["text"]).split("\n")]
        else:
            raise errors.PayloadError("payload needs text or srt_path")
        name = ctx.backend or str(ctx.backend_config.get("backend") or "")
        ctx.event("tool", name)
        await ctx.checkpoint()
        model: str | None = None
        todo = [i for i, t in enumerate(texts) if t.strip()]
        if not todo:
            translated: list[str] = list(texts)
        elif name == DEEPL:
            done = await deepl(ctx, [texts[i] for i in todo], source, target)
            translated = _place(texts, todo, done)
        elif name in LLM_WIRE:
            done, model = await llm(ctx, name, [texts[i] for i in todo], source, target, style)
            translated = _place(texts, todo, done)
        else:
            known = ", ".join([DEEPL, *LLM_WIRE])
            raise errors.PermanentError(f"TRANSLATE backend {name!r} is not supported ({known})")
        result: dict[str, Any] = {
            "text": "\n".join(translated),
            "source_lang": source,
            "target_lang": target,
            "backend": name,
            "model": model,
            "characters": sum(len(texts[i]) for i in todo),
        }
        if cues is not None:
            out = [sf.Cue(c.start, c.end, t) for c, t in zip(cues, translated, strict=True)]
            default = f"{Path(str(path)).stem}.{target}.{fmt.value}"
            dest = subtitles.output_file(ctx, payload, default)
            outputs.write_text_atomic(dest, sf.dumps(out, fmt))
            result.update({"srt_path": str(dest), "format": fmt.value, "cue_count": len(out)})
        ctx.progress(100, "translated")
        return ExecuteResult(result)


def _place(texts: list[str], todo: list[int], done: list[str]) -> list[str]:
    """Translations back at their positions (empty lines stay empty)."""
    out = list(texts)
    for i, text in zip(todo, done, strict=True):
        out[i] = text
    return out
