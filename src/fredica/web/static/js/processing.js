// 处理中心 /processing (seed 001 §9.1): counters, task queue with filters and actions, cluster
// nodes, recent pipelines. Rows are updated in place from server-sent events. Both lists load
// one page and follow the API's `next_cursor` on "load more".

import { get, post } from "./api.js";
import { t, typeName } from "./i18n.js";
import { onLive, state } from "./live.js";
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
  shortId,
  sourceLabel,
  statusBadge,
  toast,
  typeIcon,
} from "./dom.js";
import { actionButtons, progressBar, updateActions, updateProgress } from "./tasks.js";

const TASK_LIMIT = 200;
const TASK_COLUMNS = ["type", "material", "status", "progress", "node", "pipeline", "actions"];
const PIPELINE_COLUMNS = ["pipeline", "template", "material", "status", "tasks", "created", "actions"];
const PIPELINE_LIMIT = 20;
const FILTER_STATUSES = { all: null, running: ["running", "stale"], failed: ["failed"] };
const RANK = { running: 0, stale: 0, claimed: 1, pending: 2, reclaimed: 2 };

/** Name every cell after its column: narrow screens show rows as cards with these labels. */
function labelCells(tr, columns) {
  [...tr.children].forEach((td, i) => {
    td.dataset.label = t(`col.${columns[i]}`);
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
    taskCursor: null, // next_cursor of the last task page (null: nothing more)
    taskCap: TASK_LIMIT, // rows kept: one page per load
    pipelineCursor: null,
    pipelineCap: PIPELINE_LIMIT,
    pipelineToken: 0,
  };

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
    h("td", { colspan: 7, class: "muted" }, t("queue.empty")),
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
            ...PIPELINE_COLUMNS.map((c) => h("th", {}, t(`col.${c}`))),
          ),
        ),
        pipelineBody,
      ),
    ),
    morePipelines.el,
  );

  app.append(
    h(
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
    ),
  );

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
    const node = task.claimed_by;
    clear(c.node).append(
      node
        ? h(
            "span",
            { title: node },
            node === state.nodeId ? t("common.this_node") : middleEllipsis(node, 14),
          )
        : h("span", { class: "muted" }, "—"),
    );
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

  /** The first page of the chosen filters, or (`more`) the page after the last one. */
  async function loadTasks(more = false) {
    const token = more ? view.loadToken : ++view.loadToken;
    const params = new URLSearchParams({ limit: String(TASK_LIMIT) });
    const statuses = FILTER_STATUSES[view.filter];
    if (statuses) params.set("status", statuses.join(","));
    if (view.type) params.set("type", view.type);
    if (view.pipeline) params.set("pipeline_id", view.pipeline);
    if (more) params.set("cursor", view.taskCursor);
    try {
      const data = await get(`/api/v1/tasks?${params}`);
      if (token !== view.loadToken) return; // a newer filter was chosen meanwhile
      if (more) {
        view.taskCap += TASK_LIMIT;
      } else {
        view.tasks.clear();
        view.taskCap = TASK_LIMIT;
      }
      view.taskCursor = data.next_cursor ?? null;
      for (const task of data.tasks) upsertTask(task);
      renderTasks();
    } catch (err) {
      toast(err.message, "error");
    }
  }

  function loadMoreTasks() {
    return view.taskCursor ? loadTasks(true) : Promise.resolve();
  }

  function renderCluster() {
    const cluster = state.cluster || { nodes: [], online: 0 };
    clusterSummary.textContent = t("processing.cluster_online", { n: cluster.online || 0 });
    clear(clusterList);
    if (!cluster.nodes.length) clusterList.append(h("p", { class: "muted" }, t("cluster.empty")));
    for (const node of cluster.nodes) clusterList.append(nodeCard(node, refreshCluster));
  }

  async function refreshCluster() {
    state.cluster = await get("/api/v1/web/cluster");
    renderCluster();
  }

  function pipelineOption(p) {
    const name = sourceLabel(pipelineSource(p));
    return `${name ? `${middleEllipsis(name, 32)} · ` : ""}${p.template} · ${shortId(p.id)} · ${t(`status.${p.status}`)}`;
  }

  const renderPipelines = frameThrottle(() => {
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
        h("tr", { class: "empty" }, h("td", { colspan: 7, class: "muted" }, t("pipelines.empty"))),
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
      { dataset: { pipelineId: p.id, status: p.status } },
      h(
        "td",
        {},
        h("a", { href: `/pipelines/${p.id}`, "data-link": true, class: "mono" }, shortId(p.id)),
      ),
      h("td", {}, p.template),
      h(
        "td",
        { class: "col-material", title: pipelineSource(p) || p.material_id },
        middleEllipsis(sourceLabel(pipelineSource(p)) || p.material_id, 32),
      ),
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

  async function loadPipelines(more = false) {
    const token = more ? view.pipelineToken : ++view.pipelineToken;
    const params = new URLSearchParams({ limit: String(PIPELINE_LIMIT) });
    if (more) params.set("cursor", view.pipelineCursor);
    try {
      const data = await get(`/api/v1/pipelines?${params}`);
      if (token !== view.pipelineToken) return; // reloaded meanwhile
      if (more) {
        view.pipelineCap += PIPELINE_LIMIT;
      } else {
        view.pipelines.clear();
        view.pipelineCap = PIPELINE_LIMIT;
      }
      view.pipelineCursor = data.next_cursor ?? null;
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
    return view.pipelineCursor ? loadPipelines(true) : Promise.resolve();
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
      if (data.cluster) renderCluster();
    } else if (type === "cluster") {
      renderCluster();
    }
  });

  renderCounters();
  renderCluster();
  loadTypes();
  loadTasks();
  loadPipelines();
  return off;
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

function nodeCard(node, onChanged) {
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
  if (!node.is_self && node.last_seen_at)
    stats.push(t("cluster.last_seen", { ago: formatAgo(node.last_seen_at) }));
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
      ...functions.map((f) =>
        h(
          "span",
          { class: "chip", title: `${f.backends.join(", ")} (${f.accelerators.join(", ")})` },
          `${typeIcon(f.function)} ${f.function}`,
        ),
      ),
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
