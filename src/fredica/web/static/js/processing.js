// 处理中心 /processing (seed 001 §9.1): counters, task queue with filters and actions, cluster
// nodes, recent pipelines. Rows are updated in place from server-sent events. Both lists load
// one page and follow the API's `next_cursor` on "load more".
//
// In a cluster (this node knows other nodes) both lists show the whole cluster
// (`scope=cluster`: this node's rows and its replicas of every other owner's, paged by offset),
// with each row's owner, the freshness of a replica, and the executor. Replica rows are
// read-only here; they are read again whenever this node pulled new rows of their owner.

import { get, post } from "./api.js";
import { t, typeName } from "./i18n.js";
import { onLive, setCluster, state } from "./live.js";
import { loadWebConfig, openNewPipeline } from "./dialogs.js";
import {
  PIPELINE_TERMINAL,
  clear,
  displayStatus,
  formatAgo,
  formatBytes,
  formatDateTime,
  frameThrottle,
  h,
  middleEllipsis,
  pipelineTitle,
  shortId,
  sourceLabel,
  statusBadge,
  toast,
  typeIcon,
} from "./dom.js";
import { actionButtons, progressBar, updateActions, updateProgress } from "./tasks.js";
import { clustered, executorCell, lockForReplica, ownerCell } from "./owners.js";

const TASK_LIMIT = 200;
const TASK_COLUMNS = [
  "type",
  "material",
  "status",
  "progress",
  "owner",
  "node",
  "pipeline",
  "actions",
];
const PIPELINE_COLUMNS = [
  "pipeline",
  "template",
  "material",
  "owner",
  "status",
  "tasks",
  "created",
  "actions",
];
const PIPELINE_LIMIT = 20;
const CLUSTER_DEPTH = 1000; // scope=cluster lists at most this deep (limit + offset)
const CLUSTER_REFRESH_MS = 1000; // replica rows are read again at most this often
const FILTER_STATUSES = { all: null, running: ["running", "stale"], failed: ["failed"] };
const RANK = { running: 0, stale: 0, claimed: 1, pending: 2, reclaimed: 2 };

/** Name every cell after its column: narrow screens show rows as cards with these labels. */
export function labelCells(tr, columns, prefix = "col.") {
  [...tr.children].forEach((td, i) => {
    td.dataset.label = t(`${prefix}${columns[i]}`);
  });
  return tr;
}

function counterValues(counts) {
  const c = (k) => counts[k] || 0;
  return {
    waiting: c("pending") + c("claimed") + c("reclaimed"),
    running: c("running") + c("stale"),
    completed: c("completed"),
    failed: c("failed"),
  };
}

function compareTasks(a, b) {
  const ra = RANK[a.status] ?? 3;
  const rb = RANK[b.status] ?? 3;
  if (ra !== rb) return ra - rb;
  if (ra === 2 && a.priority !== b.priority) return b.priority - a.priority;
  return ra === 3 ? b.updated_at - a.updated_at : a.created_at - b.created_at;
}

export function renderProcessing(app) {
  const view = {
    filter: "all",
    type: "",
    pipeline: "",
    tasks: new Map(),
    rows: new Map(),
    pipelines: new Map(),
    pipelineRows: new Map(),
    names: new Map(), // pipeline id -> the source it processes (file path or URL)
    loadToken: 0,
    // where the next task page starts: next_cursor of the last page (scope=local), or true
    // while an offset page may follow (scope=cluster); null: nothing more
    taskCursor: null,
    taskCap: TASK_LIMIT, // rows kept: one page per load
    pipelineCursor: null,
    pipelineCap: PIPELINE_LIMIT,
    pipelineToken: 0,
    cluster: false, // whether the lists show the whole cluster (scope=cluster)
  };
  let refreshTimer = null;

  function taskSource(task) {
    const payload = task.payload || {};
    const direct = task.source || payload.source || payload.url || payload.source_url;
    if (typeof direct === "string" && direct) {
      if (task.pipeline_id && !view.names.has(task.pipeline_id))
        view.names.set(task.pipeline_id, direct);
      return direct;
    }
    return view.names.get(task.pipeline_id) || "";
  }

  function pipelineSource(p) {
    const source = p.params?.source;
    if (typeof source === "string" && source) view.names.set(p.id, source);
    return view.names.get(p.id) || "";
  }

  // --- layout ------------------------------------------------------------------------------
  const clusterSummary = h("span", { class: "cluster-summary muted" });
  const newButton = h(
    "button",
    { type: "button", class: "btn btn-primary", id: "new-pipeline" },
    `＋ ${t("processing.new_pipeline")}`,
  );
  newButton.addEventListener("click", () => openNewPipeline());
  const counters = h("div", { class: "counters" });
  const counterEls = {};
  for (const key of ["waiting", "running", "completed", "failed"]) {
    counterEls[key] = h("span", { class: "counter-value" }, "0");
    counters.append(
      h(
        "div",
        { class: `counter counter-${key}`, dataset: { counter: key } },
        h("span", { class: "counter-label" }, t(`counter.${key}`)),
        counterEls[key],
      ),
    );
  }

  const filterButtons = h("div", { class: "segmented", role: "group" });
  for (const key of Object.keys(FILTER_STATUSES)) {
    const button = h(
      "button",
      { type: "button", class: "seg", dataset: { filter: key } },
      t(`filter.${key}`),
    );
    button.addEventListener("click", () => {
      view.filter = key;
      loadTasks();
    });
    filterButtons.append(button);
  }
  const typeSelect = h(
    "select",
    { class: "filter-type", "aria-label": t("filter.type") },
    h("option", { value: "" }, t("filter.any_type")),
  );
  typeSelect.addEventListener("change", () => {
    view.type = typeSelect.value;
    loadTasks();
  });
  const pipelineSelect = h(
    "select",
    { class: "filter-pipeline", "aria-label": t("filter.pipeline") },
    h("option", { value: "" }, t("filter.any_pipeline")),
  );
  pipelineSelect.addEventListener("change", () => {
    view.pipeline = pipelineSelect.value;
    loadTasks();
  });

  const tbody = h("tbody");
  const emptyRow = h(
    "tr",
    { class: "empty" },
    h("td", { colspan: TASK_COLUMNS.length, class: "muted" }, t("queue.empty")),
  );
  const moreTasks = loadMoreFooter("tasks", () => loadMoreTasks());
  const table = h(
    "table",
    { class: "table tasks-table" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ...TASK_COLUMNS.map((c) => h("th", { class: `col-${c}` }, t(`col.${c}`))),
      ),
    ),
    tbody,
  );
  const queueCard = h(
    "section",
    { class: "card queue" },
    h(
      "div",
      { class: "card-head" },
      h("h2", {}, t("queue.title")),
      h("div", { class: "filters" }, filterButtons, typeSelect, pipelineSelect),
    ),
    h("div", { class: "table-wrap" }, table),
    moreTasks.el,
  );

  const clusterList = h("div", { class: "node-list" });
  const clusterCard = h(
    "aside",
    { class: "card cluster" },
    h("div", { class: "card-head" }, h("h2", {}, t("cluster.title"))),
    clusterList,
  );

  const pipelineBody = h("tbody");
  const morePipelines = loadMoreFooter("pipelines", () => loadMorePipelines());
  const pipelinesCard = h(
    "section",
    { class: "card pipelines" },
    h("div", { class: "card-head" }, h("h2", {}, t("pipelines.title"))),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "table pipelines-table" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ...PIPELINE_COLUMNS.map((c) => h("th", { class: `col-${c}` }, t(`col.${c}`))),
          ),
        ),
        pipelineBody,
      ),
    ),
    morePipelines.el,
  );

  const pageEl = h(
    "section",
    { class: "page page-processing" },
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, t("processing.title")),
      clusterSummary,
      h("div", { class: "spacer" }),
      newButton,
    ),
    counters,
    h("div", { class: "layout-main" }, queueCard, clusterCard),
    pipelinesCard,
  );
  app.append(pageEl);

  // --- rendering ---------------------------------------------------------------------------
  function renderCounters() {
    const values = counterValues(state.counts || {});
    for (const [key, el] of Object.entries(counterEls)) el.textContent = String(values[key]);
  }

  function matches(task) {
    const statuses = FILTER_STATUSES[view.filter];
    if (statuses && !statuses.includes(task.status)) return false;
    if (view.type && task.type !== view.type) return false;
    if (view.pipeline && task.pipeline_id !== view.pipeline) return false;
    return true;
  }

  function buildRow(task) {
    const cells = {
      type: h("td", { class: "col-type" }),
      material: h("td", { class: "col-material" }),
      status: h("td", { class: "col-status" }),
      progress: progressBar(task),
      owner: h("td", { class: "col-owner" }),
      node: h("td", { class: "col-node" }),
      pipeline: h("td", { class: "col-pipeline" }),
      actions: actionButtons(task),
    };
    const tr = h(
      "tr",
      { dataset: { taskId: task.id } },
      cells.type,
      cells.material,
      cells.status,
      h("td", { class: "col-progress" }, cells.progress),
      cells.owner,
      cells.node,
      cells.pipeline,
      h("td", { class: "col-actions" }, cells.actions),
    );
    tr._cells = cells;
    return labelCells(tr, TASK_COLUMNS);
  }

  function updateRow(tr, task) {
    const c = tr._cells;
    tr.dataset.status = displayStatus(task);
    clear(c.type).append(
      h("span", { class: "type-icon", "aria-hidden": "true" }, typeIcon(task.type)),
      h("span", { class: "type-name", title: task.type }, typeName(task.type)),
    );
    const source = taskSource(task);
    const label = middleEllipsis(source ? sourceLabel(source) : task.material_id || "", 30);
    clear(c.material).append(
      task.pipeline_id
        ? h("a", { href: `/pipelines/${task.pipeline_id}`, "data-link": true }, label)
        : label,
    );
    c.material.title = source || task.material_id || "";
    clear(c.status).append(statusBadge(displayStatus(task)));
    if (task.error && task.status === "failed") c.status.title = task.error;
    updateProgress(c.progress, task);
    clear(c.owner).append(ownerCell(task));
    clear(c.node).append(executorCell(task));
    tr.classList.toggle("replica", Boolean(task.replica));
    clear(c.pipeline).append(
      task.pipeline_id
        ? h(
            "a",
            { href: `/pipelines/${task.pipeline_id}`, "data-link": true },
            shortId(task.pipeline_id),
          )
        : "—",
    );
    updateActions(c.actions, task);
  }

  const renderTasks = frameThrottle(() => {
    pageEl.classList.toggle("is-cluster", view.cluster); // shows the owner columns
    const sorted = [...view.tasks.values()].sort(compareTasks);
    for (const dropped of sorted.splice(view.taskCap)) view.tasks.delete(dropped.id);
    moreTasks.update(view.tasks.size, view.taskCursor);
    for (const [id, tr] of view.rows) {
      if (!view.tasks.has(id)) {
        tr.remove();
        view.rows.delete(id);
      }
    }
    let previous = null;
    for (const task of sorted) {
      let tr = view.rows.get(task.id);
      if (!tr) {
        tr = buildRow(task);
        view.rows.set(task.id, tr);
      }
      if (tr._seq !== task.change_seq) {
        updateRow(tr, task);
        tr._seq = task.change_seq;
      }
      // Move rows only when their place changed, so buttons under the pointer stay put.
      const expected = previous ? previous.nextSibling : tbody.firstChild;
      if (expected !== tr) tbody.insertBefore(tr, expected);
      previous = tr;
    }
    if (!sorted.length) tbody.append(emptyRow);
    else emptyRow.remove();
    for (const button of filterButtons.children) {
      button.classList.toggle("active", button.dataset.filter === view.filter);
    }
  });

  function upsertTask(task) {
    const known = view.tasks.get(task.id);
    if (known && known.change_seq > task.change_seq) return;
    if (matches(task)) view.tasks.set(task.id, task);
    else view.tasks.delete(task.id);
  }

  /** The first page of the chosen filters (`first`), the page after the last one (`more`),
   * or every row shown read again (`refresh`: replica rows changed; scope=cluster only). */
  async function loadTasks(mode = "first") {
    const more = mode === "more";
    const token = more ? view.loadToken : ++view.loadToken;
    const cap = mode === "first" ? TASK_LIMIT : view.taskCap + (more ? TASK_LIMIT : 0);
    const params = new URLSearchParams();
    const statuses = FILTER_STATUSES[view.filter];
    if (statuses) params.set("status", statuses.join(","));
    if (view.type) params.set("type", view.type);
    if (view.pipeline) params.set("pipeline_id", view.pipeline);
    const page = listPage(params, mode, view.taskCap, TASK_LIMIT, view.taskCursor);
    try {
      const data = await get(`/api/v1/tasks?${params}`);
      if (token !== view.loadToken) return; // a newer filter was chosen meanwhile
      if (!more) view.tasks.clear();
      view.taskCap = Math.min(cap, page.cluster ? CLUSTER_DEPTH : Infinity);
      view.taskCursor = page.next(data.tasks, data.next_cursor);
      for (const task of data.tasks) upsertTask(task);
      renderTasks();
    } catch (err) {
      toast(err.message, "error");
    }
  }

  /** Set the paging parameters of one request; `next(rows, next_cursor)` says where the page
   * after it starts (null: nothing more). */
  function listPage(params, mode, shown, pageSize, cursor) {
    const cluster = mode === "more" ? view.cluster : (view.cluster = clustered());
    if (!cluster) {
      params.set("limit", String(pageSize));
      if (mode === "more") params.set("cursor", cursor);
      return { cluster, next: (rows, nextCursor) => nextCursor ?? null };
    }
    // scope=cluster: offset paging, at most CLUSTER_DEPTH deep
    const offset = mode === "more" ? shown : 0;
    const limit = Math.min(mode === "refresh" ? shown : pageSize, CLUSTER_DEPTH - offset);
    params.set("scope", "cluster");
    params.set("limit", String(Math.max(1, limit)));
    if (offset) params.set("offset", String(offset));
    return {
      cluster,
      next: (rows) => (rows.length >= limit && offset + limit < CLUSTER_DEPTH ? true : null),
    };
  }

  /** Other owners' rows changed here: read the lists again (at most once a second). */
  function scheduleClusterRefresh() {
    if (refreshTimer || !view.cluster) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      loadTasks("refresh");
      loadPipelines("refresh");
    }, CLUSTER_REFRESH_MS);
  }

  function loadMoreTasks() {
    return view.taskCursor ? loadTasks("more") : Promise.resolve();
  }

  function renderCluster() {
    const cluster = state.cluster || { nodes: [], online: 0 };
    clusterSummary.textContent = t("processing.cluster_online", { n: cluster.online || 0 });
    clear(clusterList);
    if (!cluster.nodes.length) clusterList.append(h("p", { class: "muted" }, t("cluster.empty")));
    for (const node of cluster.nodes) {
      clusterList.append(nodeCard(node, refreshCluster, node.is_self ? cluster.outbox : null));
    }
  }

  async function refreshCluster() {
    setCluster(await get("/api/v1/web/cluster"));
    renderCluster();
  }

  function pipelineOption(p) {
    const name = pipelineTitle(p) || sourceLabel(pipelineSource(p));
    return `${name ? `${middleEllipsis(name, 32)} · ` : ""}${p.template} · ${shortId(p.id)} · ${t(`status.${p.status}`)}`;
  }

  const renderPipelines = frameThrottle(() => {
    pageEl.classList.toggle("is-cluster", view.cluster);
    const sorted = [...view.pipelines.values()].sort(
      (a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1),
    );
    for (const dropped of sorted.splice(view.pipelineCap)) {
      if (dropped.id !== view.pipeline) view.pipelines.delete(dropped.id);
    }
    morePipelines.update(Math.min(sorted.length, view.pipelineCap), view.pipelineCursor);
    clear(pipelineBody);
    if (!sorted.length) {
      pipelineBody.append(
        h(
          "tr",
          { class: "empty" },
          h("td", { colspan: PIPELINE_COLUMNS.length, class: "muted" }, t("pipelines.empty")),
        ),
      );
    }
    for (const p of sorted) pipelineBody.append(pipelineRow(p));
    // Keep the pipeline filter's options in step with the list.
    const chosen = pipelineSelect.value;
    clear(pipelineSelect).append(h("option", { value: "" }, t("filter.any_pipeline")));
    for (const p of sorted) pipelineSelect.append(h("option", { value: p.id }, pipelineOption(p)));
    pipelineSelect.value = chosen;
  });

  function pipelineRow(p) {
    const pct = p.total_tasks ? Math.round((100 * p.done_tasks) / p.total_tasks) : 0;
    const cancel = h(
      "button",
      {
        type: "button",
        class: "btn btn-sm btn-cancel",
        hidden: PIPELINE_TERMINAL.has(p.status) || p.status === "cancelling",
      },
      t("action.cancel"),
    );
    lockForReplica(cancel, p);
    cancel.addEventListener("click", async () => {
      if (!confirm(t("pipeline.cancel_confirm"))) return;
      try {
        await post(`/api/v1/pipelines/${p.id}/cancel`);
        toast(t("pipeline.cancelled"));
      } catch (err) {
        toast(err.message, "error");
      }
    });
    const row = h(
      "tr",
      { dataset: { pipelineId: p.id, status: p.status }, class: p.replica ? "replica" : null },
      h(
        "td",
        {},
        h("a", { href: `/pipelines/${p.id}`, "data-link": true, class: "mono" }, shortId(p.id)),
      ),
      h("td", {}, p.template),
      h(
        "td",
        { class: "col-material", title: pipelineSource(p) || p.material_id },
        middleEllipsis(pipelineTitle(p) || sourceLabel(pipelineSource(p)) || p.material_id, 32),
      ),
      h("td", { class: "col-owner" }, ownerCell(p)),
      h("td", {}, statusBadge(p.status)),
      h(
        "td",
        {},
        h(
          "div",
          { class: "progress" },
          h(
            "div",
            { class: `bar bar-${p.status}` },
            h("span", { class: "bar-fill", style: `width:${pct}%` }),
          ),
          h("span", { class: "bar-label" }, `${p.done_tasks}/${p.total_tasks}`),
        ),
      ),
      h("td", { class: "muted" }, formatDateTime(p.created_at)),
      h("td", { class: "col-actions" }, cancel),
    );
    return labelCells(row, PIPELINE_COLUMNS);
  }

  async function loadPipelines(mode = "first") {
    const more = mode === "more";
    const token = more ? view.pipelineToken : ++view.pipelineToken;
    const cap = mode === "first" ? PIPELINE_LIMIT : view.pipelineCap + (more ? PIPELINE_LIMIT : 0);
    const params = new URLSearchParams();
    const page = listPage(params, mode, view.pipelineCap, PIPELINE_LIMIT, view.pipelineCursor);
    try {
      const data = await get(`/api/v1/pipelines?${params}`);
      if (token !== view.pipelineToken) return; // reloaded meanwhile
      if (!more) view.pipelines.clear();
      view.pipelineCap = Math.min(cap, page.cluster ? CLUSTER_DEPTH : Infinity);
      view.pipelineCursor = page.next(data.pipelines, data.next_cursor);
      for (const p of data.pipelines) {
        view.pipelines.set(p.id, p);
        pipelineSource(p);
      }
      renderPipelines();
      for (const tr of view.rows.values()) tr._seq = -1; // names may be known now
      renderTasks();
    } catch (err) {
      toast(err.message, "error");
    }
  }

  function loadMorePipelines() {
    return view.pipelineCursor ? loadPipelines("more") : Promise.resolve();
  }

  async function loadTypes() {
    try {
      const config = await loadWebConfig();
      for (const type of config.task_types) {
        typeSelect.append(h("option", { value: type }, `${typeIcon(type)} ${type}`));
      }
    } catch {
      // the queue works without the type filter
    }
  }

  // --- live updates --------------------------------------------------------------------------
  const off = onLive(({ type, data }) => {
    if (type === "snapshot") {
      // (Re)connected: reload the lists, since events may have been missed meanwhile.
      renderCounters();
      renderCluster();
      loadTasks();
      loadPipelines();
    } else if (type === "change") {
      renderCounters();
      for (const task of data.tasks) upsertTask(task);
      for (const p of data.pipelines) {
        const known = view.pipelines.get(p.id);
        if (!known || known.change_seq <= p.change_seq) view.pipelines.set(p.id, p);
      }
      if (data.tasks.length) renderTasks();
      if (data.pipelines.length) renderPipelines();
      if (data.cluster) clusterChanged();
      if (data.replicas) scheduleClusterRefresh();
    } else if (type === "cluster") {
      clusterChanged();
    }
  });

  function clusterChanged() {
    renderCluster();
    if (clustered() === view.cluster) return;
    // a first peer appeared (or the last one was forgotten): list the rows in the other scope
    loadTasks();
    loadPipelines();
  }

  renderCounters();
  renderCluster();
  loadTypes();
  loadTasks();
  loadPipelines();
  return () => {
    off();
    clearTimeout(refreshTimer);
  };
}

/** "Showing n … [load more]" under a list; the button shows while the API has a next page. */
function loadMoreFooter(list, loadMore) {
  const count = h("span", { class: "muted small" });
  const button = h(
    "button",
    { type: "button", class: "btn btn-sm", dataset: { loadMore: list } },
    t("list.load_more"),
  );
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await loadMore();
    } finally {
      button.disabled = false;
    }
  });
  const el = h("div", { class: "list-more", dataset: { list }, hidden: true }, count, button);
  return {
    el,
    update(shown, cursor) {
      el.hidden = !cursor;
      count.textContent = t(`${list === "tasks" ? "queue" : "pipelines"}.shown`, { n: shown });
    },
  };
}

/** Drain (finish the running work, claim nothing new) or undrain this node. */
function drainButton(node, onChanged) {
  const action = node.status === "draining" ? "undrain" : "drain";
  const button = h(
    "button",
    {
      type: "button",
      class: "btn btn-sm node-drain",
      dataset: { action },
      title: t(`cluster.${action}_hint`),
    },
    t(`cluster.${action}`),
  );
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await post(`/api/v1/node/${action}`);
      await onChanged();
    } catch (err) {
      toast(err.message, "error");
      button.disabled = false;
    }
  });
  return button;
}

/** A capability chip: the function, its best base score, each backend's score on hover. */
function capabilityChip(f) {
  const options = (f.options || []).map(
    (o) => `${o.backend}${o.accelerator ? ` (${o.accelerator})` : ""}: ${o.score}`,
  );
  const title = options.length
    ? t("cluster.scores", { list: options.join(", ") })
    : `${f.backends.join(", ")} (${f.accelerators.join(", ")})`;
  return h(
    "span",
    { class: "chip", title, dataset: { function: f.function } },
    `${typeIcon(f.function)} ${f.function}`,
    f.score !== null && f.score !== undefined
      ? h("span", { class: "chip-score" }, String(f.score))
      : null,
  );
}

/** One node of the cluster panel; `outbox` (this node only): results waiting for their owner. */
function nodeCard(node, onChanged, outbox) {
  const info = node.info || {};
  const used = Math.min(node.running || 0, node.max_workers || 0);
  const slots = h("span", {
    class: "slots",
    title: t("cluster.slots", { used: node.running || 0, max: node.max_workers }),
  });
  for (let i = 0; i < (node.max_workers || 0); i += 1) {
    slots.append(h("span", { class: i < used ? "slot slot-used" : "slot" }));
  }
  slots.append(h("span", { class: "slot-text" }, `${node.running || 0}/${node.max_workers}`));
  const stats = [];
  if (info.cpu_count) {
    const load = info.load ? info.load[0] : "?";
    stats.push(t("cluster.cpu", { cores: info.cpu_count, load }));
  }
  stats.push(info.gpu ? t("cluster.gpu", { gpu: info.gpu }) : t("cluster.no_gpu"));
  if (info.mem_total) {
    stats.push(
      t("cluster.mem", {
        avail: formatBytes(info.mem_available),
        total: formatBytes(info.mem_total),
      }),
    );
  }
  if (info.disk_free !== undefined) {
    stats.push(
      t("cluster.disk", { free: formatBytes(info.disk_free), total: formatBytes(info.disk_total) }),
    );
  }
  if (info.disk_held && info.disk_held.length) {
    const min = formatBytes(info.disk_min_free || 0);
    stats.push(t("cluster.disk_held", { min, types: info.disk_held.join(", ") }));
  }
  if (!node.is_self && node.last_seen_at)
    stats.push(t("cluster.last_seen", { ago: formatAgo(node.last_seen_at) }));
  if (outbox !== null && outbox !== undefined) stats.push(t("cluster.outbox", { n: outbox }));
  const functions = node.functions || [];
  const types = node.task_types || [];
  return h(
    "div",
    { class: "node-card", dataset: { nodeId: node.id, status: node.status } },
    h(
      "div",
      { class: "node-head" },
      h("span", { class: `dot dot-${node.status}` }),
      h("strong", { class: "node-name", title: node.id }, node.hostname || node.id),
      node.is_self ? h("span", { class: "tag" }, t("common.this_node")) : null,
      h("span", { class: `badge node-${node.status}` }, t(`node.${node.status}`)),
      h("span", { class: "spacer" }),
      slots,
    ),
    h("ul", { class: "node-stats" }, ...stats.map((s) => h("li", {}, s))),
    node.is_self ? h("div", { class: "node-actions" }, drainButton(node, onChanged)) : null,
    h(
      "div",
      { class: "chips", title: t("cluster.capabilities") },
      ...functions.map(capabilityChip),
    ),
    types.length
      ? h(
          "details",
          { class: "node-types" },
          h("summary", {}, t("cluster.task_types", { n: types.length })),
          h(
            "div",
            { class: "chips" },
            ...types.map((type) =>
              h("span", { class: "chip", title: type }, `${typeIcon(type)} ${typeName(type)}`),
            ),
          ),
        )
      : null,
  );
}
