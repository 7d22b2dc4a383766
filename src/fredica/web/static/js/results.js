// The result view of a pipeline, shown above its task graph: the transcript with timestamps,
// the summary, tags and chapters, a download button for every output and a copy button.
// Everything comes from the completed tasks' results and their files on the node (files of a
// task that ran on another node are linked there).

import { get, withToken } from "./api.js";
import { t } from "./i18n.js";
import { clear, formatBytes, h, put, toast } from "./dom.js";
import { filesElsewhere, remoteFilesNote } from "./owners.js";
import { findVisionResults, visionSections } from "./vision_results.js";
import { playerBlock } from "./player.js";
import { tagEmotions } from "./emotions.js";

const TRANSCRIPT_TYPES = ["MERGE_TRANSCRIPTION", "TRANSCRIBE", "TRANSCRIBE_CHUNK"];
const HIDDEN_FILE = /\.meta\.json$/; // bookkeeping next to each output, not an output itself

/** The tasks whose results the view shows: {transcript, analysis} (either may be null) and
 * `vision`, the completed video tasks (vision_results.js). */
export function findResults(tasks) {
  const done = tasks.filter((task) => task.status === "completed" && task.result);
  const transcript =
    TRANSCRIPT_TYPES.map((type) =>
      done.find((task) => task.type === type && Array.isArray(task.result.segments)),
    ).find(Boolean) || null;
  const analysis = done.find((task) => typeof task.result.summary === "string") || null;
  return { transcript, analysis, vision: findVisionResults(done) };
}

/** 75.4 -> "01:15", 3725 -> "1:02:05". */
export function clock(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  const pad = (n) => String(n).padStart(2, "0");
  const hours = Math.floor(s / 3600);
  const rest = `${pad(Math.floor((s % 3600) / 60))}:${pad(s % 60)}`;
  return hours ? `${hours}:${rest}` : rest;
}

export function transcriptText(transcript) {
  const segments = transcript?.result?.segments || [];
  return segments.map((seg) => `[${clock(seg.start)}] ${String(seg.text).trim()}`).join("\n");
}

/** summary.md built from an AI_ANALYZE result. */
export function summaryMarkdown(title, result) {
  const lines = [`# ${title}`, "", "## Summary", "", String(result.summary || "").trim(), ""];
  if ((result.tags || []).length) lines.push("## Tags", "", result.tags.join(", "), "");
  if ((result.chapters || []).length) {
    lines.push("## Chapters", "");
    for (const c of result.chapters) lines.push(`- ${clock(c.start_sec)} ${c.title}`);
    lines.push("");
  }
  return lines.join("\n");
}

async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // plain http on a LAN address: the Clipboard API is not offered there
  const area = h("textarea", { class: "copy-buffer", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error(t("results.copy_failed"));
}

function downloadButton(href, name, label, size) {
  return h(
    "a",
    { class: "btn btn-download", href, download: name, dataset: { file: name } },
    h("span", { "aria-hidden": "true" }, "⬇ "),
    h("strong", {}, label),
    h("span", { class: "muted small" }, ` ${name}${size !== undefined ? ` · ${formatBytes(size)}` : ""}`),
  );
}

function blobDownload(name, label, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  return downloadButton(url, name, label, new Blob([text]).size);
}

async function outputFiles(tasks) {
  const lists = await Promise.all(
    tasks.map((task) =>
      get(`/api/v1/tasks/${task.id}/files`)
        .then((data) => data.files.map((file) => ({ ...file, task })))
        .catch(() => []),
    ),
  );
  return lists.flat().filter((file) => !HIDDEN_FILE.test(file.name));
}

// files named for what they hold rather than their format (AI_ANALYZE writes them)
const NAMED_FILES = {
  "summary.md": "results.file.summary",
  "analysis.json": "results.file.analysis",
};

function fileLabel(name) {
  if (NAMED_FILES[name]) return t(NAMED_FILES[name]);
  const ext = name.includes(".") ? name.split(".").pop().toUpperCase() : name;
  return t(`results.file.${ext.toLowerCase()}`, {}, ext);
}

function transcriptSection(transcript) {
  const segments = transcript.result.segments || [];
  const list = h("ol", { class: "transcript", "aria-label": t("results.transcript") });
  for (const seg of segments) {
    list.append(
      h(
        "li",
        { class: "segment", dataset: { start: String(seg.start), end: String(seg.end) } },
        h("time", { class: "seg-time", title: `${clock(seg.start)}–${clock(seg.end)}` }, clock(seg.start)),
        h("span", { class: "seg-text" }, String(seg.text).trim()),
      ),
    );
  }
  if (!segments.length) list.append(h("li", { class: "muted" }, t("results.no_speech")));
  const copy = h(
    "button",
    { type: "button", class: "btn btn-sm", id: "copy-transcript" },
    t("results.copy"),
  );
  copy.addEventListener("click", async () => {
    try {
      await copyText(transcriptText(transcript));
      toast(t("results.copied"));
    } catch (err) {
      toast(err.message, "error");
    }
  });
  const language = transcript.result.language;
  return h(
    "section",
    { class: "result-block result-transcript" },
    h(
      "div",
      { class: "block-head" },
      h("h3", {}, t("results.transcript")),
      language ? h("span", { class: "tag" }, language) : null,
      h("span", { class: "spacer" }),
      copy,
    ),
    list,
  );
}

function analysisSection(analysis) {
  const res = analysis.result;
  const block = h(
    "section",
    { class: "result-block result-analysis" },
    h("h3", {}, t("results.summary")),
    h("p", { class: "summary" }, String(res.summary || "").trim() || "—"),
  );
  if ((res.tags || []).length) {
    block.append(
      h("h3", {}, t("results.tags")),
      h("div", { class: "tags" }, ...res.tags.map((tag) => h("span", { class: "tag" }, tag))),
    );
  }
  if ((res.chapters || []).length) {
    block.append(
      h("h3", {}, t("results.chapters")),
      h(
        "ol",
        { class: "chapters" },
        ...res.chapters.map((c) =>
          h("li", {}, h("time", { class: "seg-time" }, clock(c.start_sec)), h("span", {}, c.title)),
        ),
      ),
    );
  }
  if (res.backend) block.append(h("p", { class: "muted small" }, t("results.by", { backend: res.backend })));
  return block;
}

/**
 * Fill `box` with the results of `tasks` (full task rows with results). Returns false (and
 * hides the box) when the pipeline has nothing to show yet, or leaves the box as it is when
 * `current()` says a newer draw has started while this one was reading.
 */
export async function renderResults(box, title, tasks, { current = () => true } = {}) {
  const { transcript, analysis, vision } = findResults(tasks);
  const player = await playerBlock(tasks, { hasTranscript: Boolean(transcript) });
  if (!current()) return false;
  if (!transcript && !analysis && !player && !vision.length) {
    box.hidden = true;
    return false;
  }
  const withFiles = tasks.filter(
    (task) => task.status === "completed" && task.result && task.result.files,
  );
  // Files stay on the node that ran their task: those of another node are linked there.
  const files = await outputFiles(withFiles.filter((task) => !filesElsewhere(task)));
  const downloads = h("div", { class: "downloads", id: "downloads" });
  for (const file of files) {
    downloads.append(
      downloadButton(
        withToken(file.url),
        file.name.split("/").pop(),
        fileLabel(file.name.split("/").pop()),
        file.size,
      ),
    );
  }
  const elsewhere = new Map();
  for (const task of withFiles) {
    const node = filesElsewhere(task);
    if (node && !elsewhere.has(node)) elsewhere.set(node, task);
  }
  for (const task of elsewhere.values()) downloads.append(remoteFilesNote(task));
  // Older analyses have no files on the node: their summary.md and analysis.json are made here.
  if (analysis && !analysis.result.files) {
    downloads.append(
      blobDownload("summary.md", t("results.file.summary"), summaryMarkdown(title, analysis.result), "text/markdown"),
      blobDownload("analysis.json", t("results.file.analysis"), JSON.stringify(analysis.result, null, 2), "application/json"),
    );
  }
  const transcriptBlock = transcript ? transcriptSection(transcript) : null;
  tagEmotions(transcriptBlock?.querySelector(".transcript"), tasks, transcript?.result.language);
  if (player && transcriptBlock) {
    player.bindTranscript(transcriptBlock.querySelector(".transcript"));
  }
  if (!current()) return false;
  player?.showPick(); // a pick made on the old player while this view was being read
  clear(box);
  box.hidden = false;
  put(
    box,
    h("div", { class: "card-head" }, h("h2", {}, t("results.title"))),
    h("div", { class: "downloads-wrap" }, h("h3", {}, t("results.downloads")), downloads),
    player ? player.section : null,
    h(
      "div",
      { class: "results-grid" },
      analysis ? analysisSection(analysis) : null,
      transcriptBlock,
      ...visionSections(vision),
    ),
  );
  return true;
}
