// Task widgets shared by the queue and the pipeline page: progress bar and action buttons
// (disabled, with the reason, on a replica of another owner's task).

import { post } from "./api.js";
import { t, typeName } from "./i18n.js";
import { TERMINAL, h, toast } from "./dom.js";
import { lockForReplica } from "./owners.js";

const ACTIONS = ["pause", "resume", "retry", "skip", "cancel"];

/** Which actions the state machine allows for `task` (the server has the last word). */
export function allowedActions(task) {
  const s = task.status;
  const active = s === "running" || s === "stale";
  return {
    pause: active && !task.is_paused && !task.cancel_requested,
    resume: active && task.is_paused && !task.cancel_requested,
    retry: s === "failed" || s === "cancelled",
    skip: s === "pending" || s === "failed" || s === "cancelled" || s === "reclaimed",
    cancel: !TERMINAL.has(s) && !task.cancel_requested,
  };
}

export async function runAction(task, action) {
  try {
    const updated = await post(`/api/v1/tasks/${task.id}/${action}`);
    toast(t("action.done", { action: t(`action.${action}`), type: typeName(task.type) }));
    return updated;
  } catch (err) {
    toast(err.message, "error");
    return null;
  }
}

/** A cell of action buttons, updated in place by updateActions (no flicker under live data). */
export function actionButtons(task, onDone) {
  const box = h("div", { class: "actions" });
  for (const action of ACTIONS) {
    const button = h("button", {
      type: "button",
      class: `btn btn-sm btn-${action}`,
      dataset: { action },
    });
    button.addEventListener("click", async () => {
      button.disabled = true;
      const updated = await runAction(box._task, action);
      updateActions(box, updated || box._task);
      if (updated && onDone) onDone(updated);
    });
    box.append(button);
  }
  updateActions(box, task);
  return box;
}

export function updateActions(box, task) {
  box._task = task;
  const allowed = allowedActions(task);
  for (const button of box.querySelectorAll("button[data-action]")) {
    const action = button.dataset.action;
    button.textContent = t(`action.${action}`);
    button.hidden = !allowed[action];
    button.disabled = false;
    if (action === "pause") {
      // Not every executor can stop between steps; the button stays visible but disabled.
      button.disabled = !task.is_pausable;
      button.title = task.is_pausable ? "" : t("action.not_pausable");
    } else {
      button.title = "";
    }
    // Another owner's task: only its owner acts on it.
    lockForReplica(button, task);
  }
}

export function progressBar(task) {
  const fill = h("span", { class: "bar-fill" });
  const bar = h("div", { class: "bar" }, fill);
  const label = h("span", { class: "bar-label" });
  const box = h("div", { class: "progress" }, bar, label);
  updateProgress(box, task);
  return box;
}

export function updateProgress(box, task) {
  const pct = task.status === "completed" ? 100 : Math.max(0, Math.min(100, task.progress || 0));
  const bar = box.querySelector(".bar");
  bar.dataset.progress = String(pct);
  bar.className = `bar bar-${task.is_paused ? "paused" : task.status}`;
  box.querySelector(".bar-fill").style.width = `${pct}%`;
  box.querySelector(".bar-label").textContent = `${pct}%`;
  box.title = task.progress_note || "";
}
