// 小工具 /tools (seed 001 Appendix A.6): the network latency test card. The test runs as a
// NETWORK_TEST task on the node; its status arrives over server-sent events.

import { get, post } from "./api.js";
import { t } from "./i18n.js";
import { onLive } from "./live.js";
import { loadWebConfig } from "./dialogs.js";
import { TERMINAL, clear, displayStatus, h, put, statusBadge, toast } from "./dom.js";

const URLS_KEY = "fredica.tools.network_test.urls";

export function renderTools(app) {
  const view = { taskId: null, seq: -1, done: false };
  let defaults = [];

  const urls = h("textarea", { name: "urls", rows: 6, spellcheck: "false", class: "mono" });
  const timeout = h("input", {
    name: "timeout_ms",
    type: "number",
    min: 100,
    step: 100,
    value: 5000,
  });
  const start = h(
    "button",
    { type: "submit", class: "btn btn-primary", id: "nettest-start" },
    t("tools.nettest.start"),
  );
  const reset = h("button", { type: "button", class: "btn" }, t("tools.nettest.reset"));
  const statusLine = h(
    "div",
    { class: "nettest-status muted", dataset: { status: "idle" } },
    t("tools.nettest.idle"),
  );
  const resultBody = h("tbody");
  const results = h(
    "table",
    { class: "table nettest-results", hidden: true },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", {}, t("tools.nettest.url")),
        h("th", { class: "num" }, t("tools.nettest.latency")),
        h("th", {}, t("tools.nettest.result")),
      ),
    ),
    resultBody,
  );
  const form = h(
    "form",
    { class: "tool-form" },
    h("label", {}, h("span", {}, t("tools.nettest.targets")), urls),
    h(
      "div",
      { class: "row" },
      h("label", { class: "inline" }, h("span", {}, t("tools.nettest.timeout")), timeout),
      h("div", { class: "spacer" }),
      reset,
      start,
    ),
  );

  app.append(
    h(
      "section",
      { class: "page page-tools" },
      h("div", { class: "page-head" }, h("h1", {}, t("tools.title"))),
      h(
        "div",
        { class: "tool-grid" },
        h(
          "section",
          { class: "card tool-card", id: "network-test" },
          h(
            "div",
            { class: "card-head" },
            h("h2", {}, h("span", { class: "tool-icon" }, "📶"), t("tools.nettest.title")),
          ),
          h("p", { class: "muted" }, t("tools.nettest.desc")),
          form,
          statusLine,
          results,
        ),
      ),
    ),
  );

  loadWebConfig()
    .then((config) => {
      defaults = config.network_test.default_urls;
      timeout.value = String(config.network_test.default_timeout_ms);
      if (!urls.value) urls.value = localStorage.getItem(URLS_KEY) || defaults.join("\n");
    })
    .catch((err) => toast(err.message, "error"));

  reset.addEventListener("click", () => {
    urls.value = defaults.join("\n");
    localStorage.removeItem(URLS_KEY);
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const list = urls.value
      .split(/\s+/)
      .map((u) => u.trim())
      .filter(Boolean);
    if (!list.length) {
      toast(t("tools.nettest.no_urls"), "error");
      return;
    }
    localStorage.setItem(URLS_KEY, list.join("\n"));
    start.disabled = true;
    results.hidden = true;
    clear(resultBody);
    try {
      const created = await post("/api/v1/NetworkTestRoute", {
        urls: list,
        timeout_ms: Number(timeout.value) || 5000,
      });
      view.taskId = created.task_id;
      view.seq = -1;
      view.done = false;
      showStatus({ status: "pending", progress: 0 });
      refresh();
    } catch (err) {
      toast(err.message, "error");
      start.disabled = false;
    }
  });

  function showStatus(task) {
    const status = displayStatus(task);
    statusLine.dataset.status = status;
    put(
      clear(statusLine),
      statusBadge(status),
      " ",
      h("span", {}, `${task.progress || 0}%`),
      task.progress_note ? h("span", { class: "muted" }, ` · ${task.progress_note}`) : null,
      task.error ? h("span", { class: "dialog-error" }, ` ${task.error}`) : null,
    );
  }

  function showResults(task) {
    clear(resultBody);
    for (const row of (task.result && task.result.results) || []) {
      const label =
        row.status === "ok"
          ? t("tools.nettest.ok")
          : row.status === "timeout"
            ? t("tools.nettest.timeout_status")
            : t("tools.nettest.error");
      resultBody.append(
        h(
          "tr",
          { dataset: { status: row.status } },
          h("td", { class: "mono" }, row.url),
          h("td", { class: "num" }, row.latency_ms === null ? "—" : `${row.latency_ms} ms`),
          h(
            "td",
            {},
            h("span", { class: `badge nt-${row.status}` }, label),
            row.error ? h("span", { class: "muted small" }, ` ${row.error}`) : null,
            row.http_status && !row.error
              ? h("span", { class: "muted small" }, ` HTTP ${row.http_status}`)
              : null,
          ),
        ),
      );
    }
    results.hidden = false;
  }

  async function refresh() {
    if (!view.taskId) return;
    try {
      const task = await get(`/api/v1/tasks/${view.taskId}`);
      if (task.change_seq < view.seq) return;
      view.seq = task.change_seq;
      showStatus(task);
      if (TERMINAL.has(task.status)) {
        view.done = true;
        start.disabled = false;
        if (task.result) showResults(task);
      }
    } catch (err) {
      toast(err.message, "error");
    }
  }

  return onLive(({ type, data }) => {
    if (!view.taskId || view.done) return;
    if (type === "snapshot") {
      refresh();
      return;
    }
    if (type !== "change") return;
    const task = data.tasks.find((row) => row.id === view.taskId);
    if (!task || task.change_seq <= view.seq) return;
    view.seq = task.change_seq;
    showStatus(task);
    if (TERMINAL.has(task.status) || task.has_result) {
      refresh(); // the result (the latency table) is not in the event: read the task once
    }
  });
}
