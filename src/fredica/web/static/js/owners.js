// Rows of a cluster (seed 001 §2.6, DESIGN §4): which node owns each row (a row of another
// owner is this node's read-only replica of it, as fresh as the last pull), which node runs
// a task, and where its output files are. Names and addresses come from the cluster panel.

import { t } from "./i18n.js";
import { noteReplicas, state } from "./live.js";
import { formatAge, formatSpan, h, middleEllipsis } from "./dom.js";

/** Whether this node knows other nodes (then the lists show the whole cluster). */
export function clustered() {
  return (state.cluster?.nodes || []).length > 1;
}

function findNode(id) {
  return (state.cluster?.nodes || []).find((node) => node.id === id) || null;
}

/** "this node", a peer's hostname, or its id when nothing else is known. */
export function nodeName(id) {
  if (!id) return "";
  if (id === state.nodeId) return t("common.this_node");
  return findNode(id)?.hostname || middleEllipsis(id, 14);
}

/** The node that owns `row` (a task or a pipeline). */
export function ownerOf(row) {
  return row.replica?.owner || row.owner_id || state.nodeId;
}

/** A row of another owner: this node holds a read-only copy of it. */
export function isReplica(row) {
  return Boolean(row && row.replica);
}

/** `path` in node `id`'s own UI (null when its address is unknown). */
export function nodeUrl(id, path) {
  const address = findNode(id)?.address;
  return address ? `${address.replace(/\/+$/, "")}${path}` : null;
}

/** Why an action on a replica cannot be taken here, naming the owner and its address. */
export function readOnlyReason(row) {
  const owner = ownerOf(row);
  const address = findNode(owner)?.address;
  return address
    ? t("replica.read_only_at", { node: nodeName(owner), address })
    : t("replica.read_only", { node: nodeName(owner) });
}

/** Disable `button` when `row` is a replica, saying why in its tooltip. */
export function lockForReplica(button, row) {
  if (!isReplica(row)) return false;
  button.disabled = true;
  button.title = readOnlyReason(row);
  button.classList.add("replica-locked");
  return true;
}

function badgeText(owner) {
  const mark = state.replicas[owner];
  if (!mark) return t("replica.badge");
  const age = mark.age_sec + (performance.now() - mark.received) / 1000;
  return t("replica.badge_age", { ago: formatAge(age) });
}

const ENDED = new Set(["completed", "failed", "partial_failed", "cancelled"]);

/** "waiting for owner · offline 3 min of 30 min" for an active row whose owner is not online
 * (the second figure: when a peer takes its pipelines over; absent with takeover off), or
 * null. */
function waitingText(owner, status) {
  const mark = state.replicas[owner];
  if (!mark || !mark.waiting || ENDED.has(status)) return null;
  const silent = mark.waiting.silent_sec + (performance.now() - mark.received) / 1000;
  const wait = mark.waiting.wait_sec;
  return wait == null
    ? t("owner.waiting", { silent: formatSpan(silent) })
    : t("owner.waiting_of", { silent: formatSpan(silent), wait: formatSpan(wait) });
}

function showWaiting(badge) {
  const text = waitingText(badge.dataset.owner, badge.dataset.status);
  badge.hidden = text == null;
  if (text != null && badge.textContent !== text) badge.textContent = text;
  const off = state.replicas[badge.dataset.owner]?.waiting?.wait_sec == null;
  badge.title = off ? t("owner.waiting_hint_off") : t("owner.waiting_hint");
}

/** The "waiting for owner" badge of a replica row (kept up to date by the timer below). */
function waitingBadge(row, owner) {
  const badge = h("span", {
    class: "badge waiting-badge",
    dataset: { owner, status: row.status || "" },
  });
  showWaiting(badge);
  return badge;
}

/** The owner of `row` ("this node" or a peer), and for a replica how fresh this copy is. */
export function ownerCell(row) {
  const owner = ownerOf(row);
  if (row.replica) noteReplicas({ [owner]: row.replica });
  const link = nodeUrl(owner, "/processing");
  const name = h(
    "span",
    { class: "owner-name", title: `${t("owner.owner")}: ${owner}`, dataset: { owner } },
    nodeName(owner),
  );
  return h(
    "span",
    { class: "owner" },
    isReplica(row) && link
      ? h("a", { href: link, target: "_blank", rel: "noopener" }, name)
      : name,
    isReplica(row)
      ? h(
          "span",
          {
            class: "badge replica-badge",
            title: t("replica.hint"),
            dataset: { owner },
          },
          badgeText(owner),
        )
      : null,
    isReplica(row) ? waitingBadge(row, owner) : null,
  );
}

/** The node that runs (or ran) `task`, or a dash. */
export function executorCell(task) {
  const node = task.claimed_by;
  if (!node) return h("span", { class: "muted executor" }, "—");
  return h(
    "span",
    { class: "executor", title: `${t("owner.executor")}: ${node}`, dataset: { node } },
    nodeName(node),
  );
}

/** The node that holds `task`'s output files (its executor) when that is not this node. */
export function filesElsewhere(task) {
  const node = task.claimed_by;
  return node && state.nodeId && node !== state.nodeId ? node : null;
}

/** "Output files are on node X" with a link to that node's page of the task. */
export function remoteFilesNote(task) {
  const node = filesElsewhere(task);
  const url = task.pipeline_id
    ? nodeUrl(node, `/pipelines/${task.pipeline_id}?task=${encodeURIComponent(task.id)}`)
    : null;
  return h(
    "p",
    { class: "files-remote", dataset: { node } },
    t("files.on_node", { node: nodeName(node) }),
    " ",
    url
      ? h(
          "a",
          { href: url, target: "_blank", rel: "noopener", class: "files-remote-link" },
          t("files.open_there", { node: nodeName(node) }),
        )
      : h("span", { class: "muted" }, t("files.no_address")),
  );
}

// Freshness badges count up between updates; "waiting for owner" shows while the owner is not
// online.
setInterval(() => {
  for (const badge of document.querySelectorAll(".replica-badge[data-owner]")) {
    const text = badgeText(badge.dataset.owner);
    if (badge.textContent !== text) badge.textContent = text;
  }
  for (const badge of document.querySelectorAll(".waiting-badge[data-owner]")) showWaiting(badge);
}, 1000);
