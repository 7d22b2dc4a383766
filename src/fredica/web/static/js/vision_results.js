// The video and vision part of a pipeline's result view: the scene timeline with a thumbnail
// per scene, on-screen text (OCR) by time, detected objects by class and time, the cover and
// sprite sheet, and the upscaled size. Everything comes from the completed tasks' results;
// images are read through /files/outputs/<task>?path=<a path the result names>, served by the
// node that ran the task (a task that ran elsewhere links to that node instead).

import { withToken } from "./api.js";
import { t } from "./i18n.js";
import { h } from "./dom.js";
import { filesElsewhere, remoteFilesNote } from "./owners.js";
import { clock } from "./results.js";

const VISION_TYPES = [
  "DETECT_SCENES",
  "GENERATE_THUMBNAIL",
  "MERGE_OCR_RESULTS",
  "MERGE_DETECT_RESULTS",
  "UPSCALE_VIDEO",
];

/** The completed video tasks the view shows, one per type, in VISION_TYPES order. */
export function findVisionResults(done) {
  return VISION_TYPES.map((type) => done.find((task) => task.type === type && task.result)).filter(
    Boolean,
  );
}

/** The URL of a file that `task`'s result names. */
export function outputUrl(task, path) {
  return withToken(`/files/outputs/${encodeURIComponent(task.id)}?path=${encodeURIComponent(path)}`);
}

function span(start, end) {
  return `${clock(start)}–${clock(end)}`;
}

function image(task, path, alt, cls) {
  if (!path || filesElsewhere(task)) return null;
  return h("img", { class: cls, src: outputUrl(task, path), alt, loading: "lazy" });
}

function block(cls, title, ...children) {
  return h("section", { class: `result-block result-wide ${cls}` }, h("h3", {}, title), ...children);
}

function scenesSection(task) {
  const res = task.result;
  const scenes = res.scenes || [];
  const total = Number(res.duration_sec) || scenes.reduce((s, x) => Math.max(s, x.end_sec || 0), 0) || 1;
  const bar = h("div", { class: "scene-bar", role: "img", "aria-label": t("vision.timeline") });
  const list = h("ol", { class: "scene-list" });
  scenes.forEach((scene, i) => {
    const length = Math.max(0, (scene.end_sec || 0) - (scene.start_sec || 0));
    const label = t("vision.scene_n", { n: i + 1 });
    bar.append(
      h("span", {
        class: "scene-seg",
        style: `flex-grow: ${(length / total).toFixed(4)}`,
        title: `${label} ${span(scene.start_sec, scene.end_sec)}`,
      }),
    );
    list.append(
      h(
        "li",
        { class: "scene", dataset: { start: String(scene.start_sec) } },
        image(task, scene.thumbnail_path, label, "scene-thumb"),
        h("span", { class: "scene-name" }, label),
        h("time", { class: "seg-time" }, span(scene.start_sec, scene.end_sec)),
      ),
    );
  });
  const cuts = (res.cuts_sec || []).map(clock).join(", ") || "—";
  return block(
    "result-scenes",
    t("vision.scenes", { n: scenes.length }),
    bar,
    h("p", { class: "muted small" }, t("vision.cuts", { cuts, method: res.method || "?" })),
    list,
    filesElsewhere(task) ? remoteFilesNote(task) : null,
  );
}

function thumbnailsSection(task) {
  const res = task.result;
  return block(
    "result-thumbnails",
    t("vision.thumbnails"),
    h(
      "div",
      { class: "sprite-wrap" },
      image(task, res.cover_path, t("vision.cover"), "cover-img"),
      image(task, res.sprite_path, t("vision.sprite"), "sprite-img"),
    ),
    h(
      "p",
      { class: "muted small" },
      t("vision.sprite_note", {
        n: (res.thumbnails || []).length,
        grid: `${res.sprite_columns}×${res.sprite_rows}`,
        every: Number(res.interval_sec || 0).toFixed(1),
      }),
    ),
    filesElsewhere(task) ? remoteFilesNote(task) : null,
  );
}

function ocrSection(task) {
  const spans = task.result.spans || [];
  const list = h("ol", { class: "transcript ocr-spans", "aria-label": t("vision.ocr") });
  for (const s of spans) {
    list.append(
      h(
        "li",
        { class: "segment ocr-span" },
        h("time", { class: "seg-time", title: span(s.start_sec, s.end_sec) }, clock(s.start_sec)),
        h("span", { class: "seg-text" }, String(s.text).trim()),
      ),
    );
  }
  if (!spans.length) list.append(h("li", { class: "muted" }, t("vision.no_text")));
  return block("result-ocr", t("vision.ocr"), list);
}

function detectSection(task) {
  const res = task.result;
  const tracks = res.tracks || [];
  const end = tracks.reduce((m, tr) => Math.max(m, Number(tr.end_sec) || 0), 0) || 1;
  const labels = Object.keys(res.labels || {});
  const rows = labels.map((label) => {
    const own = tracks.filter((tr) => tr.label === label);
    const lane = h("div", { class: "det-lane" });
    for (const tr of own) {
      const left = ((Number(tr.start_sec) || 0) / end) * 100;
      const width = Math.max(0.5, (((Number(tr.end_sec) || 0) - (Number(tr.start_sec) || 0)) / end) * 100);
      lane.append(
        h("span", {
          class: "det-run",
          style: `left: ${left.toFixed(2)}%; width: ${width.toFixed(2)}%`,
          title: `${label} ${span(tr.start_sec, tr.end_sec)} · ${Number(tr.max_confidence).toFixed(2)}`,
        }),
      );
    }
    return h(
      "li",
      { class: "det-class", dataset: { label } },
      h("span", { class: "det-label" }, label),
      h("span", { class: "muted small" }, t("vision.frames", { n: res.labels[label] })),
      lane,
      h("span", { class: "det-times small" }, own.map((tr) => span(tr.start_sec, tr.end_sec)).join(", ")),
    );
  });
  return block(
    "result-detect",
    t("vision.objects"),
    rows.length ? h("ol", { class: "det-list" }, ...rows) : h("p", { class: "muted" }, t("vision.no_objects")),
  );
}

function upscaleSection(task) {
  const r = task.result;
  const model = r.model ? `, ${r.model}` : "";
  return block(
    "result-upscale",
    t("vision.upscaled"),
    h(
      "p",
      { class: "upscale-size" },
      `${r.source_width}×${r.source_height} → ${r.width}×${r.height} (×${r.scale}, ${r.backend}${model})`,
    ),
  );
}

const SECTIONS = {
  DETECT_SCENES: scenesSection,
  GENERATE_THUMBNAIL: thumbnailsSection,
  MERGE_OCR_RESULTS: ocrSection,
  MERGE_DETECT_RESULTS: detectSection,
  UPSCALE_VIDEO: upscaleSection,
};

/** The result blocks of the video tasks (see findVisionResults). */
export function visionSections(tasks) {
  return tasks.map((task) => SECTIONS[task.type](task));
}
