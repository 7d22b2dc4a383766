// Small DOM and formatting helpers shared by the pages.

import { t } from "./i18n.js";

/** Create an element: h("div", {class: "x", onclick: fn}, child, "text", ...). */
export function h(tag, attrs = {}, ...children) {
  const svg = tag.startsWith("svg:");
  const el = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "text") {
      el.textContent = value;
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Append children, skipping null/undefined/false (native append would print "null"). */
export function put(el, ...children) {
  el.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

/** The status a person sees: pending/claimed are "waiting", a paused running task "paused". */
export function displayStatus(task) {
  if (task.status === "running" || task.status === "stale") {
    if (task.cancel_requested) return "cancelling";
    if (task.is_paused) return "paused";
    return task.status;
  }
  if (task.status === "pending" || task.status === "claimed") return "waiting";
  return task.status;
}

export const TERMINAL = new Set(["completed", "failed", "cancelled", "skipped"]);
export const PIPELINE_TERMINAL = new Set(["completed", "failed", "cancelled", "partial_failed"]);

// One icon per task family, so a long queue can be scanned at a glance.
const ICONS = [
  [/^DOWNLOAD/, "⬇️"],
  [/^NETWORK_TEST/, "📶"],
  [/AUDIO$|^SPLIT_AUDIO|^DIARIZE/, "🎵"],
  [/^TRANSCRIBE|TRANSCRIPTION$/, "🎙️"],
  [/^DETECT_LANGUAGE/, "🌐"],
  [/^AI_|EMOTION/, "✨"],
  [/OCR/, "🔤"],
  [/SUBTITLE/, "💬"],
  [/FRAME|SCENE|THUMBNAIL/, "🖼️"],
  [/TRANSLATE/, "🈂️"],
  [/TTS/, "🗣️"],
  [/UPSCALE|RESOLUTION|TRANSCODE/, "🎞️"],
  [/FINGERPRINT/, "🧬"],
  [/^TEST_/, "🧪"],
  [/^FFMPEG/, "🎬"],
];

export function typeIcon(type) {
  for (const [re, icon] of ICONS) if (re.test(type)) return icon;
  return "⚙️";
}

/** What people recognise a source by: a file's name, or the URL without its scheme. */
export function sourceLabel(source) {
  const s = String(source ?? "").trim();
  if (!s) return "";
  if (/^https?:\/\//i.test(s)) return s.replace(/^https?:\/\//i, "");
  const path = s.replace(/^file:\/\//i, "").replace(/[\\/]+$/, "");
  return path.split(/[\\/]/).pop() || s;
}

/** A pipeline's title from the API (its title param, the downloader's title, the file name),
 * or its source's label while the title is only the source itself (a URL not yet downloaded). */
export function pipelineTitle(p) {
  const source = p?.params?.source;
  const title = typeof p?.title === "string" ? p.title.trim() : "";
  if (title && title !== source && title !== p?.material_id) return title;
  return sourceLabel(source);
}

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;

/** Replace task UUIDs in a message by what `name(id)` returns for them (a ref, a type). */
export function nameIds(text, name) {
  return String(text ?? "").replace(UUID, (id) => name(id.toLowerCase()) || id);
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : "";
}

/** Keep the start and end of a long string (material ids, URLs). */
export function middleEllipsis(text, max = 32) {
  const s = String(text ?? "");
  if (s.length <= max) return s;
  const keep = Math.floor((max - 1) / 2);
  return `${s.slice(0, keep)}…${s.slice(s.length - keep)}`;
}

export function formatBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

export function formatTime(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function formatDateTime(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getMonth() + 1}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function formatAgo(ts) {
  if (!ts) return "";
  return formatAge(Date.now() / 1000 - ts);
}

/** "3 s ago" for an age of `seconds`. */
export function formatAge(seconds) {
  const s = Math.max(0, seconds);
  if (s < 90) return t("time.seconds_ago", { n: Math.round(s) });
  if (s < 5400) return t("time.minutes_ago", { n: Math.round(s / 60) });
  return t("time.hours_ago", { n: Math.round(s / 3600) });
}

/** "3 min" for a span of `seconds` (a duration, not an age). */
export function formatSpan(seconds) {
  const s = Math.max(0, seconds);
  if (s < 90) return t("time.seconds", { n: Math.round(s) });
  if (s < 5400) return t("time.minutes", { n: Math.round(s / 60) });
  return t("time.hours", { n: Math.round(s / 3600) });
}

/** Pretty JSON for result / payload views. */
export function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function statusBadge(status) {
  return h("span", { class: `badge st-${status}`, dataset: { status } }, t(`status.${status}`));
}

/** A short message at the bottom of the page; errors stay longer. */
export function toast(message, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  const item = h("div", { class: `toast toast-${kind}` }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

/** Run `fn` at most once per animation frame, however often it is asked for. */
export function frameThrottle(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      fn();
    });
  };
}
