// The history: pipelines (or tasks) searched and filtered on the node (GET /api/v1/pipelines
// or /api/v1/tasks with q, template, status, node, since, until), one page at a time, with
// previous/next pages by the API's cursors. The filters live in the address (?q=…) so a
// search can be bookmarked or shared. Rows link to their pipeline's page.

import { get } from "./api.js";
import { t, typeName } from "./i18n.js";
import { onLive, state } from "./live.js";
import {
  clear,
  formatDateTime,
  h,
  middleEllipsis,
  shortId,
  pipelineTitle,
  statusBadge,
  toast,
  typeIcon,
} from "./dom.js";
import { executorCell, nodeName, ownerCell } from "./owners.js";
import { notificationButton } from "./notifications.js";
import { labelCells } from "./processing.js";

const PAGE_SIZE = 25;
const SEARCH_DELAY_MS = 300; // typing pauses this long before the list is asked again
const PIPELINE_STATUSES = [
  "pending",
  "running",
  "cancelling",
  "completed",
  "partial_failed",
  "failed",
  "cancelled",
];
const TASK_STATUSES = [
  "pending",
  "claimed",
  "running",
  "stale",
  "completed",
  "failed",
  "cancelled",
  "skipped",
];
const PIPELINE_COLUMNS = ["name", "template", "status", "tasks", "owner", "created"];
const TASK_COLUMNS = ["type", "pipeline", "status", "node", "created"];
const FILTER_KEYS = ["kind", "q", "template", "status", "node", "since", "until"];

/** A pipeline's name: the API's `title` (its title param, the downloader's title or the
 * source's file name), else its source's file name (or URL), else its material. */
export function pipelineName(p) {
  const params = p.params || {};
  if (typeof params.title === "string" && params.title.trim()) return params.title.trim();
  return pipelineTitle(p) || p.material_id || shortId(p.id);
}

/** A date input's day (YYYY-MM-DD, the browser's own time zone) as an ISO time: its start,
 * or with `end` the start of the next day. */
export function dayBoundary(day, end = false) {
  const [y, m, d] = day.split("-").map(Number);
  return new Date(y, m - 1, d + (end ? 1 : 0)).toISOString();
}

function readFilters() {
  const query = new URLSearchParams(location.search);
  const filters = {};
  for (const key of FILTER_KEYS) filters[key] = query.get(key) || "";
  if (filters.kind !== "tasks") filters.kind = "pipelines";
  return filters;
}

function select(name, options, value, anyLabel) {
  const el = h(
    "select",
    { name, "aria-label": t(`history.${name}`) },
    h("option", { value: "" }, anyLabel),
  );
  for (const [optionValue, label] of options) el.append(h("option", { value: optionValue }, label));
  el.value = value;
  return el;
}

export function renderHistory(app) {
  const filters = readFilters();
  const view = { cursors: [null], page: 0, next: null, token: 0 };

  const search = h("input", {
    type: "search",
    name: "q",
    id: "history-search",
    value: filters.q,
    maxlength: 200,
    placeholder: t("history.search_ph"),
    "aria-label": t("history.search"),
  });
  const kind = h(
    "div",
    { class: "seg-toggle", role: "group" },
    ...["pipelines", "tasks"].map((k) =>
      h(
        "button",
        {
          type: "button",
          class: `btn btn-sm${filters.kind === k ? " active" : ""}`,
          dataset: { kind: k },
        },
        t(`history.kind.${k}`),
      ),
    ),
  );
  const template = select("template", [], filters.template, t("history.any_template"));
  const statuses = () => (filters.kind === "tasks" ? TASK_STATUSES : PIPELINE_STATUSES);
  const status = select("status", [], "", t("history.any_status"));
  const node = select("node", [], filters.node, t("history.any_node"));
  const since = h("input", {
    type: "date",
    name: "since",
    value: filters.since,
    "aria-label": t("history.since"),
  });
  const until = h("input", {
    type: "date",
    name: "until",
    value: filters.until,
    "aria-label": t("history.until"),
  });
  const form = h(
    "form",
    { class: "history-filters", role: "search" },
    search,
    kind,
    template,
    status,
    node,
    h("label", { class: "inline" }, h("span", {}, t("history.since")), since),
    h("label", { class: "inline" }, h("span", {}, t("history.until")), until),
  );

  const head = h("tr");
  const body = h("tbody");
  const summary = h("span", { class: "muted small", id: "history-summary" });
  const prev = h(
    "button",
    { type: "button", class: "btn btn-sm", id: "history-prev" },
    `‹ ${t("history.prev")}`,
  );
  const next = h(
    "button",
    { type: "button", class: "btn btn-sm", id: "history-next" },
    `${t("history.next")} ›`,
  );
  const pageLabel = h("span", { class: "muted small", id: "history-page" });

  const page = h(
    "section",
    { class: "page page-history" },
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, t("history.title")),
      h("div", { class: "spacer" }),
      notificationButton(),
    ),
    h(
      "section",
      { class: "card" },
      form,
      h(
        "div",
        { class: "table-wrap" },
        h("table", { class: "table history-table" }, h("thead", {}, head), body),
      ),
      h("div", { class: "list-footer history-pager" }, prev, pageLabel, next, summary),
    ),
  );
  app.append(page);

  function fillStatuses() {
    const chosen = statuses().includes(filters.status) ? filters.status : "";
    clear(status).append(h("option", { value: "" }, t("history.any_status")));
    for (const s of statuses()) status.append(h("option", { value: s }, t(`status.${s}`)));
    status.value = chosen;
    filters.status = chosen;
  }

  function fillNodes() {
    const known = new Map((state.cluster?.nodes || []).map((n) => [n.id, nodeName(n.id)]));
    if (state.nodeId && !known.has(state.nodeId)) known.set(state.nodeId, nodeName(state.nodeId));
    if (filters.node && !known.has(filters.node)) known.set(filters.node, filters.node);
    clear(node).append(h("option", { value: "" }, t("history.any_node")));
    for (const [id, name] of known) node.append(h("option", { value: id }, name));
    node.value = filters.node;
  }

  async function fillTemplates() {
    try {
      const data = await get("/api/v1/templates");
      for (const tpl of data.templates) template.append(h("option", { value: tpl.name }, tpl.name));
      template.value = filters.template;
    } catch (err) {
      toast(err.message, "error");
    }
  }

  function query() {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    for (const key of ["q", "template", "status", "node"])
      if (filters[key]) params.set(key, filters[key]);
    if (filters.since) params.set("since", dayBoundary(filters.since));
    if (filters.until) params.set("until", dayBoundary(filters.until, true));
    const cursor = view.cursors[view.page];
    if (cursor) params.set("cursor", cursor);
    return params;
  }

  function remember() {
    const shown = new URLSearchParams();
    for (const key of FILTER_KEYS)
      if (filters[key] && !(key === "kind" && filters[key] === "pipelines"))
        shown.set(key, filters[key]);
    const url = `${location.pathname}${shown.toString() ? `?${shown}` : ""}`;
    if (url !== `${location.pathname}${location.search}`) history.replaceState(null, "", url);
  }

  function header() {
    const columns = filters.kind === "tasks" ? TASK_COLUMNS : PIPELINE_COLUMNS;
    clear(head).append(...columns.map((c) => h("th", {}, t(`history.col.${c}`))));
    return columns;
  }

  function pipelineRow(p) {
    const name = pipelineName(p);
    const row = h(
      "tr",
      { dataset: { pipelineId: p.id, status: p.status } },
      h(
        "td",
        { class: "col-name", title: p.params?.source || p.material_id },
        h(
          "span",
          {},
          h(
            "a",
            { href: `/pipelines/${p.id}`, "data-link": true, class: "history-link" },
            middleEllipsis(name, 48),
          ),
          h("span", { class: "muted small mono row-id" }, shortId(p.id)),
        ),
      ),
      h("td", {}, p.template),
      h("td", {}, statusBadge(p.status)),
      h("td", {}, `${p.done_tasks}/${p.total_tasks}`),
      h("td", {}, ownerCell(p)),
      h("td", { class: "muted" }, formatDateTime(p.created_at)),
    );
    return labelCells(row, PIPELINE_COLUMNS, "history.col.");
  }

  function taskRow(task) {
    const pipeline = task.pipeline_id
      ? h(
          "a",
          { href: `/pipelines/${task.pipeline_id}`, "data-link": true, class: "history-link mono" },
          shortId(task.pipeline_id),
        )
      : h("span", { class: "muted" }, "—");
    const row = h(
      "tr",
      { dataset: { taskId: task.id, status: task.status } },
      h(
        "td",
        { title: task.id },
        h(
          "span",
          {},
          `${typeIcon(task.type)} ${typeName(task.type)}`,
          h("span", { class: "muted small mono row-id" }, shortId(task.id)),
        ),
      ),
      h("td", {}, pipeline),
      h("td", {}, statusBadge(task.status)),
      h("td", {}, executorCell(task)),
      h("td", { class: "muted" }, formatDateTime(task.created_at)),
    );
    return labelCells(row, TASK_COLUMNS, "history.col.");
  }

  async function load() {
    const token = ++view.token;
    const columns = header();
    remember();
    const path = `/api/v1/${filters.kind}?${query()}`;
    let data;
    try {
      data = await get(path);
    } catch (err) {
      if (token !== view.token) return;
      clear(body).append(
        h(
          "tr",
          { class: "empty" },
          h("td", { colspan: columns.length, class: "error" }, err.message),
        ),
      );
      summary.textContent = "";
      return;
    }
    if (token !== view.token) return; // the filters changed meanwhile
    const rows = data[filters.kind];
    view.next = data.next_cursor;
    clear(body);
    if (!rows.length) {
      body.append(
        h(
          "tr",
          { class: "empty" },
          h("td", { colspan: columns.length, class: "muted" }, t("history.empty")),
        ),
      );
    }
    for (const row of rows) body.append(filters.kind === "tasks" ? taskRow(row) : pipelineRow(row));
    prev.disabled = view.page === 0;
    next.disabled = !view.next;
    pageLabel.textContent = t("history.page", { n: view.page + 1 });
    summary.textContent = t("history.shown", { n: rows.length });
    page.dataset.loaded = String(token); // for tests: this page's rows are in
  }

  function restart() {
    view.cursors = [null];
    view.page = 0;
    load();
  }

  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      filters.q = search.value.trim();
      restart();
    }, SEARCH_DELAY_MS);
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(typing);
    filters.q = search.value.trim();
    restart();
  });
  for (const [el, key] of [
    [template, "template"],
    [status, "status"],
    [node, "node"],
    [since, "since"],
    [until, "until"],
  ]) {
    el.addEventListener("change", () => {
      filters[key] = el.value;
      restart();
    });
  }
  kind.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-kind]");
    if (!button || button.dataset.kind === filters.kind) return;
    filters.kind = button.dataset.kind;
    for (const b of kind.querySelectorAll("button")) b.classList.toggle("active", b === button);
    fillStatuses();
    restart();
  });
  prev.addEventListener("click", () => {
    if (view.page === 0) return;
    view.page -= 1;
    load();
  });
  next.addEventListener("click", () => {
    if (!view.next) return;
    view.cursors[view.page + 1] = view.next;
    view.page += 1;
    load();
  });

  fillStatuses();
  status.value = statuses().includes(readFilters().status) ? readFilters().status : "";
  filters.status = status.value;
  fillNodes();
  fillTemplates();
  load();
  const stopLive = onLive(({ type }) => {
    if (type === "snapshot" || type === "cluster") fillNodes();
  });
  return () => {
    clearTimeout(typing);
    stopLive();
  };
}
