// Emotion labels on the transcript: when a DETECT_EMOTION task of the pipeline completed, each
// transcript line (data-start / data-end) gets the label of the emotion segment that overlaps
// it most, with the confidence in its tooltip.

import { t } from "./i18n.js";
import { h } from "./dom.js";

function emotionTask(tasks) {
  return tasks.find(
    (task) =>
      task.type === "DETECT_EMOTION" &&
      task.status === "completed" &&
      Array.isArray(task.result?.segments),
  );
}

/** Changes when the labels to show change (for the result view's refresh key). */
export function emotionKey(tasks) {
  const task = emotionTask(tasks);
  return task ? `${task.id}:${task.change_seq}` : "";
}

function overlap(a, b) {
  return Math.min(a.end, b.end) - Math.max(a.start, b.start);
}

/** Tag every line of the transcript `list` with its emotion; false when there is none. */
export function tagEmotions(list, tasks, language) {
  const task = emotionTask(tasks);
  if (!task || !list) return false;
  const segments = task.result.segments.map((seg) => ({
    start: Number(seg.start_sec),
    end: Number(seg.end_sec),
    emotion: seg.emotion,
    confidence: Number(seg.confidence) || 0,
  }));
  for (const li of list.querySelectorAll("[data-start]")) {
    const line = { start: Number(li.dataset.start), end: Number(li.dataset.end) };
    let best = null;
    for (const seg of segments) {
      if (overlap(seg, line) > (best ? overlap(best, line) : 0)) best = seg;
    }
    if (!best) continue;
    const label = t(`emotion.${best.emotion}`, {}, best.emotion);
    const pct = Math.round(best.confidence * 100);
    li.querySelector(".seg-text")?.append(
      " ",
      h(
        "span",
        {
          class: "tag emotion-tag",
          dataset: { emotion: best.emotion },
          title: t("emotion.tooltip", { label, pct, backend: task.result.backend || "" }),
        },
        label,
      ),
    );
  }
  if (String(language || "").startsWith("zh")) {
    list.after(h("p", { class: "muted small emotion-note" }, t("emotion.zh_note")));
  }
  return true;
}
