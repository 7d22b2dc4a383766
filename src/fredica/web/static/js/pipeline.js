// Pipeline detail /pipelines/{id}: the DAG, and for the chosen task its timeline, result,
// error and output files. Updated live from server-sent events. `?task=<id>` chooses a task.
//
// In a cluster: the owner and executor of each task; another owner's pipeline is shown from
// this node's replica, read-only (its actions are taken on its owner, whose UI is linked), and
// read again whenever this node pulled that owner's rows. Output files stay on the node that
// ran the task: for a task run elsewhere the details link to that node instead.

import { del, get, post, withToken } from "./api.js";
import { t, typeName } from "./i18n.js";
import { onLive, state } from "./live.js";
import { drawDag } from "./dag.js";
import {
  PIPELINE_TERMINAL,
  clear,
  displayStatus,
  formatBytes,
  formatDateTime,
  formatTime,
  h,
  middleEllipsis,
  nameIds,
  prettyJson,
  put,
  shortId,
  pipelineTitle,
  statusBadge,
  toast,
  typeIcon,
} from "./dom.js";
import { actionButtons, progressBar, updateActions, updateProgress } from "./tasks.js";
import { findResults, renderResults } from "./results.js";
import { playerKey } from "./player.js";
import { emotionKey } from "./emotions.js";
import { logPanel } from "./tasklog.js";
import {
  clustered,
  executorCell,
  filesElsewhere,
  isReplica,
  lockForReplica,
  nodeName,
  nodeUrl,
  ownerCell,
  ownerOf,
  remoteFilesNote,
} from "./owners.js";

const DETAIL_REFRESH_MS = 400; // the chosen task's timeline is re-read at most this often
const REPLICA_REFRESH_MS = 1000; // a replica pipeline is read again at most this often

export function renderPipeline(app, pipelineId) {
  const view = {
    pipeline: null,
    tasks: new Map(),
    order: [],
    refs: new Map(), // task id -> the ref a custom pipeline gave it
    selected: new URLSearchParams(location.search).get("task"),
    detailSeq: -1,
    resultsKey: "", // which completed results the result view shows
    resultsDraw: 0, // counts draws of the result view: an older one that finishes later is dropped
  };
  let detailTimer = null;
  let replicaTimer = null;
  let closed = false;

  const title = h("h1", {}, `${t("pipeline.title")} ${shortId(pipelineId)}`);
  const status = h("span", { class: "pipeline-status" });
  const meta = h("div", { class: "pipeline-meta muted" });
  const ownerLine = h("div", { class: "pipeline-owner", hidden: true });
  const cancelButton = h(
    "button",
    { type: "button", class: "btn btn-danger", id: "cancel-pipeline", hidden: true },
    t("pipeline.cancel"),
  );
  cancelButton.addEventListener("click", async () => {
    if (!confirm(t("pipeline.cancel_confirm"))) return;
    cancelButton.disabled = true;
    try {
      view.pipeline = await post(`/api/v1/pipelines/${pipelineId}/cancel`);
      toast(t("pipeline.cancelled"));
      renderHead();
    } catch (err) {
      toast(err.message, "error");
    } finally {
      cancelButton.disabled = false;
    }
  });
  const retryButton = h(
    "button",
    { type: "button", class: "btn", id: "retry-pipeline", hidden: true },
    t("pipeline.retry"),
  );
  retryButton.addEventListener("click", async () => {
    retryButton.disabled = true;
    try {
      const { retried, ...pipeline } = await post(`/api/v1/pipelines/${pipelineId}/retry`);
      view.pipeline = { ...view.pipeline, ...pipeline };
      toast(t("pipeline.retried", { n: retried.length }));
      renderHead();
      load();
    } catch (err) {
      toast(err.message, "error");
    } finally {
      retryButton.disabled = false;
    }
  });
  const deleteButton = h(
    "button",
    { type: "button", class: "btn btn-danger", id: "delete-pipeline", hidden: true },
    t("pipeline.delete"),
  );
  const backLink = h("a", { href: "/processing", "data-link": true, class: "back" }, t("pipeline.back"));
  deleteButton.addEventListener("click", async () => {
    const n = view.pipeline?.total_tasks ?? view.order.length;
    if (!confirm(t("pipeline.delete_confirm", { n }))) return;
    deleteButton.disabled = true;
    try {
      await del(`/api/v1/pipelines/${pipelineId}`);
      toast(t("pipeline.deleted"));
      backLink.click();
    } catch (err) {
      toast(err.message, "error");
      deleteButton.disabled = false;
    }
  });
  const resultsBox = h("section", { class: "card results", id: "results", hidden: true });
  const dagBox = h("div", { class: "dag-wrap" }, h("p", { class: "muted" }, t("common.loading")));
  const detail = h(
    "div",
    { class: "task-detail" },
    h("p", { class: "muted" }, t("task.select_hint")),
  );

  app.append(
    h(
      "section",
      { class: "page page-pipeline", dataset: { pipelineId } },
      backLink,
      h(
        "div",
        { class: "page-head" },
        title,
        status,
        h("div", { class: "spacer" }),
        h("div", { class: "pipeline-actions" }, retryButton, cancelButton, deleteButton),
      ),
      meta,
      ownerLine,
      resultsBox,
      h(
        "section",
        { class: "card" },
        h("div", { class: "card-head" }, h("h2", {}, t("pipeline.dag")), legend()),
        dagBox,
      ),
      h(
        "section",
        { class: "card" },
        h("div", { class: "card-head" }, h("h2", {}, t("task.detail"))),
        detail,
      ),
    ),
  );

  function renderHead() {
    const p = view.pipeline;
    if (!p) return;
    clear(status).append(statusBadge(p.status));
    status.dataset.status = p.status;
    const name = pipelineTitle(p);
    title.textContent = name || `${t("pipeline.title")} ${shortId(pipelineId)}`;
    title.title = p.params?.source || "";
    meta.textContent = [
      p.template,
      name ? `${t("pipeline.title")} ${shortId(pipelineId)}` : middleEllipsis(p.material_id, 48),
      t("pipeline.tasks_done", { done: p.done_tasks, total: p.total_tasks }),
      formatDateTime(p.created_at),
    ].join(" · ");
    cancelButton.hidden = PIPELINE_TERMINAL.has(p.status) || p.status === "cancelling";
    retryButton.hidden = !(p.failed_tasks + p.cancelled_tasks > 0);
    deleteButton.hidden = !PIPELINE_TERMINAL.has(p.status);
    for (const button of [cancelButton, retryButton, deleteButton]) lockForReplica(button, p);
    renderOwner(p);
  }

  /** Who owns the pipeline; for a replica, how fresh it is and a link to the owner's page. */
  function renderOwner(p) {
    ownerLine.hidden = !clustered() && !isReplica(p);
    if (ownerLine.hidden) return;
    const there = isReplica(p) ? nodeUrl(ownerOf(p), `/pipelines/${pipelineId}`) : null;
    clear(ownerLine).append(
      h("span", { class: "muted" }, `${t("owner.owner")}: `),
      ownerCell(p),
      isReplica(p) ? h("span", { class: "muted replica-note" }, t("replica.read_only_note")) : null,
      there
        ? h(
            "a",
            { href: there, target: "_blank", rel: "noopener", class: "owner-link" },
            t("replica.open_on_owner", { node: nodeName(ownerOf(p)) }),
          )
        : null,
    );
  }

  /** A task as people know it: its ref in the pipeline, else its type and short id. */
  function taskName(id) {
    if (view.refs.get(id)) return view.refs.get(id);
    const task = view.tasks.get(id);
    return task ? `${typeName(task.type)} ${shortId(id)}` : null;
  }

  async function showResults(tasks) {
    const { transcript, analysis, vision } = findResults(tasks);
    const key = [transcript, analysis, ...vision].map((task) => task && `${task.id}:${task.change_seq}`);
    key.push(state.nodeId); // which files are here is known once the node said who it is
    key.push(playerKey(tasks)); // a dubbed video or a translation completing later
    key.push(emotionKey(tasks));
    if (key.join() === view.resultsKey) return;
    view.resultsKey = key.join();
    const name =
      pipelineTitle(view.pipeline) || shortId(pipelineId);
    // two draws can overlap (each waits for reads): only the newest one is put on the page
    const draw = ++view.resultsDraw;
    await renderResults(resultsBox, name, tasks, { current: () => draw === view.resultsDraw });
  }

  let resultsTimer = null;
  function refreshResults() {
    // change events carry tasks without their results: read the pipeline again, at most 2/s
    if (resultsTimer) return;
    resultsTimer = setTimeout(async () => {
      resultsTimer = null;
      try {
        const data = await get(`/api/v1/pipelines/${pipelineId}`);
        if (!closed) await showResults(data.tasks);
      } catch (err) {
        toast(err.message, "error");
      }
    }, 500);
  }

  function renderDag() {
    const tasks = view.order.map((id) => view.tasks.get(id)).filter(Boolean);
    if (!tasks.length) return;
    drawDag(dagBox, tasks, {
      selected: view.selected,
      onSelect: select,
      refs: view.refs,
      cluster: clustered() || isReplica(view.pipeline),
    });
  }

  function select(taskId) {
    view.selected = taskId;
    view.detailSeq = -1;
    renderDag();
    loadDetail();
  }

  function scheduleDetail() {
    if (detailTimer) return;
    detailTimer = setTimeout(() => {
      detailTimer = null;
      loadDetail();
    }, DETAIL_REFRESH_MS);
  }

  async function loadDetail() {
    const id = view.selected;
    if (!id) return;
    const known = view.tasks.get(id);
    try {
      // Another owner's task: its events as the owner has them (this node asks it), the
      // replica's mark kept; its files are listed by the node that ran it.
      const shown = await get(`/api/v1/tasks/${id}`);
      const task = isReplica(known) ? { ...shown, replica: known.replica } : shown;
      const files = filesElsewhere(task) ? null : await get(`/api/v1/tasks/${id}/files`);
      if (closed || id !== view.selected) return;
      view.detailSeq = task.change_seq;
      renderDetail(task, files && files.files);
    } catch (err) {
      toast(err.message, "error");
    }
  }

  /** The task's log: read by this node from wherever the attempt ran (this node, the owner
   * or another executor; the server asks the node that holds it). */
  function showLog(task) {
    const slot = detail.querySelector(".log-slot");
    if (!detail._log) {
      detail._log = logPanel(task.id);
      slot.replaceChildren(detail._log.element);
    }
    detail._log.update(task);
  }

  /** `key`'s text naming the owner of `task`, with a link to the owner's page of it. */
  function ownerNote(task, key) {
    const owner = ownerOf(task);
    const url = nodeUrl(owner, `/pipelines/${pipelineId}?task=${encodeURIComponent(task.id)}`);
    return h(
      "span",
      {},
      t(key, { node: nodeName(owner) }),
      url
        ? h(
            "a",
            { href: url, target: "_blank", rel: "noopener", class: "owner-link" },
            t("replica.open_on_owner", { node: nodeName(owner) }),
          )
        : null,
    );
  }

  function renderDetail(task, files) {
    let head = detail.querySelector(".detail-head");
    if (!head || head.dataset.taskId !== task.id) {
      clear(detail);
      head = h("div", { class: "detail-head", dataset: { taskId: task.id } });
      head._progress = progressBar(task);
      head._actions = actionButtons(task, () => scheduleDetail());
      put(
        head,
        h("span", { class: "type-icon" }, typeIcon(task.type)),
        h("strong", {}, typeName(task.type)),
        typeName(task.type) !== task.type ? h("code", { class: "muted" }, task.type) : null,
        view.refs.get(task.id) ? h("span", { class: "tag" }, view.refs.get(task.id)) : null,
        h("span", { class: "detail-status" }),
        head._progress,
        h("span", { class: "spacer" }),
        head._actions,
      );
      detail._log?.stop();
      detail._log = null;
      detail.append(head, h("div", { class: "detail-body" }), h("div", { class: "log-slot" }));
    }
    clear(head.querySelector(".detail-status")).append(statusBadge(displayStatus(task)));
    updateProgress(head._progress, task);
    updateActions(head._actions, task);
    showLog(task);

    const body = clear(detail.querySelector(".detail-body"));
    const field = (label, value) => [h("dt", {}, label), h("dd", {}, value ?? "—")];
    body.append(
      h(
        "dl",
        { class: "fields" },
        ...field(t("task.id"), h("code", {}, task.id)),
        ...field(t("owner.owner"), ownerCell(task)),
        ...field(t("owner.executor"), executorCell(task)),
        ...field(t("task.attempt"), String(task.attempt)),
        ...field(t("task.retries"), `${task.retry_count}/${task.max_retries}`),
        ...field(t("task.backend"), task.backend),
        ...field(t("col.created"), formatDateTime(task.created_at)),
      ),
    );

    const timeline = h("ol", { class: "timeline" });
    for (const event of task.events || []) {
      timeline.append(
        h(
          "li",
          { dataset: { event: event.event_type } },
          h("time", {}, formatTime(event.occurred_at)),
          h(
            "span",
            { class: `event event-${event.event_type}`, title: event.event_type },
            t(`event.${event.event_type}`, {}, event.event_type),
          ),
          h(
            "span",
            { class: "muted", title: event.node_id || "" },
            event.node_id === task.claimed_by ? "" : nodeName(event.node_id),
          ),
          h("span", { class: "event-msg" }, nameIds(event.message || "", taskName)),
        ),
      );
    }
    if (!timeline.children.length && isReplica(task)) {
      // events are not replicated: the owner keeps the timeline, and could not be asked now
      timeline.append(h("li", { class: "muted timeline-owner" }, ownerNote(task, "task.timeline_on_owner")));
    } else if (!timeline.children.length) {
      timeline.append(h("li", { class: "muted" }, t("task.no_events")));
    }
    body.append(h("h3", {}, t("task.timeline")), timeline);

    if (task.error) {
      body.append(
        h(
          "h3",
          {},
          t("task.error"),
          task.error_type ? h("code", { class: "err-type" }, task.error_type) : null,
        ),
        h("pre", { class: "json error-view" }, nameIds(task.error, taskName)),
      );
    }
    if (task.result) {
      body.append(
        h("h3", {}, t("task.result")),
        h("pre", { class: "json result-view" }, prettyJson(task.result)),
      );
    }
    // `files` is null when they are on the node that ran the task, not here
    body.append(h("h3", {}, t("task.files")), files ? fileList(files) : remoteFilesNote(task));
    body.append(
      h(
        "details",
        { class: "payload" },
        h("summary", {}, t("task.payload")),
        h("pre", { class: "json" }, prettyJson(task.payload)),
      ),
    );
  }

  async function load() {
    try {
      const data = await get(`/api/v1/pipelines/${pipelineId}`);
      if (closed) return;
      const { tasks, ...pipeline } = data;
      view.pipeline = pipeline;
      view.refs = new Map(
        Object.entries((pipeline.params && pipeline.params.refs) || {}).map(([ref, id]) => [
          id,
          ref,
        ]),
      );
      view.tasks = new Map(tasks.map((task) => [task.id, task]));
      view.order = tasks.map((task) => task.id);
      renderHead();
      if (!view.selected || !view.tasks.has(view.selected)) {
        const running = tasks.find((task) => task.status === "running");
        const { transcript, analysis } = findResults(tasks);
        view.selected = (running || transcript || analysis || tasks[0] || {}).id || null;
      }
      showResults(tasks);
      renderDag();
      loadDetail();
    } catch (err) {
      clear(dagBox).append(
        h(
          "p",
          { class: "dialog-error" },
          err.status === 404 ? t("pipeline.not_found") : err.message,
        ),
      );
    }
  }

  const off = onLive(({ type, data }) => {
    if (type === "snapshot") {
      load();
      return;
    }
    if (type !== "change") return;
    if (data.replicas && isReplica(view.pipeline)) {
      const mark = data.replicas[ownerOf(view.pipeline)];
      if (mark && mark.pulled_at > view.pipeline.replica.pulled_at) scheduleReplicaLoad();
    }
    let dagChanged = false;
    for (const task of data.tasks) {
      if (task.pipeline_id !== pipelineId) continue;
      const known = view.tasks.get(task.id);
      if (known && known.change_seq > task.change_seq) continue;
      if (!known) view.order.push(task.id); // spawned by a completion
      view.tasks.set(task.id, { ...known, ...task });
      dagChanged = true;
      if (task.id === view.selected && task.change_seq !== view.detailSeq) scheduleDetail();
      if (task.status === "completed" && task.has_result) refreshResults();
    }
    for (const p of data.pipelines) {
      if (p.id === pipelineId && (!view.pipeline || view.pipeline.change_seq <= p.change_seq)) {
        view.pipeline = { ...view.pipeline, ...p, params: view.pipeline?.params };
        renderHead();
      }
    }
    if (dagChanged) renderDag();
  });

  /** This node pulled new rows of the owner: read the replica pipeline again. */
  function scheduleReplicaLoad() {
    if (replicaTimer) return;
    replicaTimer = setTimeout(() => {
      replicaTimer = null;
      load();
    }, REPLICA_REFRESH_MS);
  }

  load();
  return () => {
    closed = true;
    off();
    clearTimeout(replicaTimer);
    detail._log?.stop();
    clearTimeout(detailTimer);
    clearTimeout(resultsTimer);
  };
}

/** The output files this node holds, as download links. */
function fileList(files) {
  const list = h("ul", { class: "files" });
  for (const file of files) {
    list.append(
      h(
        "li",
        {},
        h("a", { href: withToken(file.url), download: file.name.split("/").pop() }, `⬇ ${file.name}`),
        h("span", { class: "muted" }, ` ${formatBytes(file.size)}`),
      ),
    );
  }
  if (!files.length) list.append(h("li", { class: "muted" }, t("task.no_files")));
  return list;
}

function legend() {
  const items = ["waiting", "running", "paused", "completed", "failed", "cancelled", "skipped"];
  return h(
    "div",
    { class: "legend" },
    ...items.map((s) => h("span", { class: `legend-item st-${s}` }, h("i", {}), t(`status.${s}`))),
  );
}
