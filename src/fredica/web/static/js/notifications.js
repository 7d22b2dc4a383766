// Browser notifications: when the page is open and the user allowed them, a pipeline that
// ends (seen in the node's event stream) shows a system notification; clicking it opens the
// pipeline. The permission is asked for only from a click (browsers refuse it otherwise).

import { t } from "./i18n.js";
import { onLive } from "./live.js";
import { h } from "./dom.js";

const ENDS = {
  completed: "notify.completed",
  partial_failed: "notify.partial_failed",
  failed: "notify.failed",
  cancelled: "notify.cancelled",
};
const LATE_CHANGE_SEC = 5; // a row whose end is older than this changed for another reason
const REMEMBERED = 5000;
const seen = new Map(); // pipeline id -> the status last seen

export function supported() {
  return typeof window.Notification === "function";
}

/** Whether the change of pipeline row `p` is its end (and remember its status). */
export function justEnded(p) {
  const before = seen.get(p.id);
  seen.delete(p.id);
  seen.set(p.id, p.status);
  if (seen.size > REMEMBERED) seen.delete(seen.keys().next().value);
  if (!ENDS[p.status] || before === p.status) return false;
  // first seen already ended: only if that end is what changed the row
  return (
    before !== undefined || !p.completed_at || p.updated_at - p.completed_at <= LATE_CHANGE_SEC
  );
}

function open(path) {
  history.pushState(null, "", path);
  window.dispatchEvent(new PopStateEvent("popstate"));
}

function show(p) {
  if (!supported() || Notification.permission !== "granted") return;
  const name = p.title || p.material_id || p.id;
  const note = new Notification(t(ENDS[p.status], { name }), {
    body: `${name} · ${p.template}`,
    tag: `fredica-${p.id}`,
  });
  note.onclick = () => {
    window.focus();
    open(`/pipelines/${p.id}`);
    note.close();
  };
}

onLive(({ type, data }) => {
  if (type !== "change") return;
  for (const p of data.pipelines || []) if (justEnded(p)) show(p);
});

/** A button that asks for the permission (null where the browser has no notifications). */
export function notificationButton() {
  if (!supported()) return null;
  const button = h("button", { type: "button", class: "btn btn-sm", id: "notify-toggle" });
  const label = () => {
    const permission = Notification.permission;
    const key =
      permission === "granted"
        ? "notify.on"
        : permission === "denied"
          ? "notify.blocked"
          : "notify.enable";
    button.textContent = `🔔 ${t(key)}`;
    button.disabled = permission !== "default";
    button.dataset.permission = permission;
  };
  button.addEventListener("click", async () => {
    await Notification.requestPermission();
    label();
  });
  label();
  return button;
}
